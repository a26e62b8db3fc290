// Levels above the node from the scheduler's address (BC_TOPO_ADDR, Slurm's
// SLURM_TOPOLOGY_ADDR) and the topology dump (bc_comm_write_topology).
//
// The cases in the main suite give each rank its own BC_TOPO_ADDR through
// bc_comm_create_with options, so they run at every p. The hidden ones
// ([.topo_env_*]) read the addresses from the environment that an MPMD mpirun
// gives each group of ranks (tests/meson.build, topo_sched_*); they check what
// that launch set up, at p = 4.
//
// Every rank of a run is on one machine: MPI_COMM_TYPE_SHARED makes one node
// of them all, so ranks "under different switches" split that node into one
// unit per switch (topo_from_keys keys a node by its whole path), and levels
// where every unit has one child are dropped.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "harness.h"

using namespace bctest;

namespace {

// The topology part of describe(), without its first line (where it came from).
std::string levels_of(const std::string &text) {
  const size_t nl = text.find('\n');
  const size_t end = text.find("choice for ");
  if (nl == std::string::npos || end == std::string::npos || end < nl) return "";
  return text.substr(nl + 1, end - nl - 1);
}

// Exact all-reduces on `comm` over a few dtypes, ops and counts; "" when all right.
std::string exact(bc_comm_t comm) {
  const int r = world_rank(), p = world_size();
  for (bc_dtype_t t : {BC_FLOAT32, BC_FLOAT64, BC_INT32, BC_BFLOAT16})
    for (bc_op_t op : {BC_SUM, BC_MAX, BC_AVG})
      for (int64_t n : {int64_t{1}, int64_t{p + 1}, int64_t{1009}, int64_t{70001}}) {
        if (!op_valid_for(op, t)) continue;
        Case c{t, op, n, nullptr};
        c.fill(r, p);
        bc_status_t st = bc_allreduce(BC_IN_PLACE, c.buf->data(), n, t, op, comm);
        if (st != BC_OK) return std::string(bc_strerror(st)) + ": " + bc_last_error();
        if (!c.right(p))
          return std::string("wrong result: ") + bc_dtype_name(t) + " " + bc_op_name(op) + " count " +
                 std::to_string(n);
      }
  return "";
}

// A communicator over the world with `options`, checked to have come from
// `source`, with `want_levels` as its levels (describe's lines), and exact.
void check_levels(const std::string &options, const std::string &source, const std::string &want_levels) {
  bc_comm_t comm = nullptr;
  bc_status_t st = bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &comm);
  INFO("rank " << world_rank() << " options '" << options << "': " << bc_last_error());
  REQUIRE(everywhere(st == BC_OK));
  const std::string text = describe(comm);
  INFO(text);
  CHECK(everywhere(text.find("from MPI_COMM_TYPE_SHARED + " + source) != std::string::npos));
  CHECK(everywhere(levels_of(text) == want_levels));
  const std::string err = exact(comm);
  INFO(err);
  CHECK(everywhere(err.empty()));
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
}

// Every rank fails to create a communicator with `options` (its own per rank),
// with BC_ERR_TOPOLOGY, and this rank's message holds `words`.
void check_refused(const std::string &options, const std::string &words) {
  bc_comm_t comm = nullptr;
  bc_status_t st = bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &comm);
  const std::string err = bc_last_error();
  const std::string each = gather_lines("options '" + options + "': " + bc_strerror(st) + ": " + err);
  INFO("every rank's error:" << each);
  CHECK(everywhere(st == BC_ERR_TOPOLOGY && comm == nullptr));
  CHECK(everywhere(err.find(words) != std::string::npos));
  if (comm) bc_comm_destroy(&comm);
}

// describe's level lines for units that each hold a run of ranks.
std::string unit_line(int level, const std::string &name, const std::vector<std::vector<int>> &units) {
  std::string s = "  level " + std::to_string(level) + " (" + name + "): " + std::to_string(units.size()) +
                  " unit(s):";
  for (auto &u : units) {
    s += " {";
    for (size_t i = 0; i < u.size(); ++i) s += (i ? "," : "") + std::to_string(u[i]);
    s += "}";
  }
  return s + "\n";
}

std::vector<int> range(int from, int to) {
  std::vector<int> v;
  for (int r = from; r < to; ++r) v.push_back(r);
  return v;
}

std::string host_name() {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace

TEST_CASE("BC_TOPO_ADDR: the ranks under each switch form a group; exact results", "[topo][sched]") {
  const int r = world_rank(), p = world_size();
  if (p < 2) return;
  // Two switches: ranks [0, p/2) under sw0, the rest under sw1, one spine
  // above (the root, named for its level). At p = 2 each switch holds one
  // rank and only the spine's level is left.
  const int half = p / 2;
  check_levels("BC_TOPO_ADDR=spine.sw" + std::to_string(r < half ? 0 : 1) + ".host", "BC_TOPO_ADDR",
               p == 2 ? unit_line(1, "level3", {{0, 1}})
                      : unit_line(1, "node", {range(0, half), range(half, p)}) + unit_line(2, "level3", {range(0, p)}));
  // The node name is not used: ranks that name different nodes under one switch stay one node.
  check_levels("BC_TOPO_ADDR=sw0.host" + std::to_string(r), "BC_TOPO_ADDR",
               unit_line(1, "node", {range(0, p)}));
}

TEST_CASE("BC_TOPO_ADDR: an uneven tree of racks and spines; exact results", "[topo][sched]") {
  const int r = world_rank(), p = world_size();
  if (p < 4) return;
  // Spine s0 holds racks r0 (ranks 0, 1) and r1 (rank 2); spine s1 holds r2 (the rest).
  const std::string rack = r < 2 ? "r0" : r == 2 ? "r1" : "r2";
  const std::string spine = r < 3 ? "s0" : "s1";
  // The node level splits by rack; the rack level has one child per rack and is dropped.
  check_levels("BC_TOPO_ADDR=" + spine + "." + rack + ".host", "BC_TOPO_ADDR",
               unit_line(1, "node", {{0, 1}, {2}, range(3, p)}) + unit_line(2, "level3", {{0, 1, 2}, range(3, p)}) +
                   unit_line(3, "top", {range(0, p)}));
}

TEST_CASE("BC_TOPO_ADDR: some ranks with an address and some without fail on every rank", "[topo][sched]") {
  const int r = world_rank(), p = world_size();
  if (p < 2) return;
  check_refused(r == 0 ? "BC_TOPO_ADDR=sw0.host" : "", "the same kind of address");
  check_refused(r == p - 1 ? "" : "BC_TOPO_ADDR=sw0.host", "the same kind of address");
  // As many switches on every rank.
  check_refused(r == 0 ? "BC_TOPO_ADDR=s0.sw0.host" : "BC_TOPO_ADDR=sw0.host", "topology levels");
  // A bad address on one rank: its own message there, the rank named elsewhere.
  check_refused(r == 1 ? "BC_TOPO_ADDR=sw0..host" : "BC_TOPO_ADDR=sw0.host",
                r == 1 ? "BC_TOPO_ADDR='sw0..host': field 2 is empty" : "failed on rank 1");
  // And the communicator after them works.
  check_levels("BC_TOPO_ADDR=sw0.host", "BC_TOPO_ADDR", unit_line(1, "node", {range(0, p)}));
}

TEST_CASE("BC_TOPO and BC_TOPO_FILE take precedence over BC_TOPO_ADDR", "[topo][sched]") {
  const int r = world_rank(), p = world_size();
  if (p < 2) return;
  const std::string addr = "BC_TOPO_ADDR=sw" + std::to_string(r % 2) + ".host;";
  bc_comm_t comm = nullptr;
  REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, (addr + "BC_TOPO=1").c_str(), &comm) == BC_OK));
  CHECK(everywhere(describe(comm).find("from BC_TOPO=1") != std::string::npos));
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  // A file that puts this host in one rack: the file wins, the switches are not read.
  const std::string path = "topo_sched_precedence.txt";
  if (r == 0) std::ofstream(path) << host_name() << " rackA\n";
  MPI_Barrier(MPI_COMM_WORLD);
  REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, (addr + "BC_TOPO_FILE=" + path).c_str(), &comm) == BC_OK));
  const std::string text = describe(comm);
  INFO(text);
  CHECK(everywhere(text.find("from MPI_COMM_TYPE_SHARED + BC_TOPO_FILE") != std::string::npos));
  CHECK(everywhere(levels_of(text) == unit_line(1, "node", {range(0, p)})));
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0) std::remove(path.c_str());
}

TEST_CASE("the topology written by bc_comm_write_topology loads back as the same", "[topo][sched]") {
  const int r = world_rank(), p = world_size();
  const std::string path = "topo_sched_dump.txt";
  for (const std::string &options : {std::string(""), std::string("BC_TOPO_ADDR=sw0.host")}) {
    bc_comm_t comm = nullptr;
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &comm) == BC_OK));
    const std::string before = levels_of(describe(comm));
    REQUIRE(everywhere(bc_comm_write_topology(comm, path.c_str()) == BC_OK));
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
    bc_comm_t back = nullptr;
    bc_status_t st = bc_comm_create_with(MPI_COMM_WORLD, ("BC_TOPO_FILE=" + path).c_str(), &back);
    INFO("options '" << options << "': " << bc_last_error());
    REQUIRE(everywhere(st == BC_OK));
    const std::string text = describe(back);
    INFO(text << "before:\n" << before);
    CHECK(everywhere(text.find("+ BC_TOPO_FILE") != std::string::npos));
    CHECK(everywhere(levels_of(text) == before));
    REQUIRE(bc_comm_destroy(&back) == BC_OK);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // Ranks of this host under different switches: no host file can hold that;
  // every rank is told, and nothing is written.
  if (p >= 3) {  // at p = 2 each switch would hold one rank: no level to split the host
    if (r == 0) std::remove(path.c_str());
    bc_comm_t comm = nullptr;
    const std::string opt = "BC_TOPO_ADDR=sw" + std::to_string(r < p / 2 ? 0 : 1) + ".host";
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, opt.c_str(), &comm) == BC_OK));
    const bc_status_t st = bc_comm_write_topology(comm, path.c_str());
    const std::string err = bc_last_error();
    INFO(err);
    CHECK(everywhere(st == BC_ERR_TOPOLOGY));
    CHECK(everywhere(r != 0 || err.find("in different groups") != std::string::npos));
    CHECK(everywhere(std::ifstream(path).good() == false));
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0) std::remove(path.c_str());
}

// The MPMD launches of tests/meson.build: 4 ranks, ranks 0-1 and 2-3 given
// different addresses in the environment.
TEST_CASE("BC_TOPO_ADDR from the environment, per rank", "[.topo_env_addr]") {
  const int p = world_size();
  REQUIRE(p == 4);
  REQUIRE(std::getenv("BC_TOPO_ADDR") != nullptr);
  check_levels("", "BC_TOPO_ADDR", unit_line(1, "node", {{0, 1}, {2, 3}}) + unit_line(2, "level3", {range(0, 4)}));
}

TEST_CASE("Slurm's SLURM_TOPOLOGY_ADDR from the environment, per rank", "[.topo_env_slurm]") {
  const int p = world_size();
  REQUIRE(p == 4);
  REQUIRE(std::getenv("SLURM_TOPOLOGY_ADDR") != nullptr);
  check_levels("", "Slurm SLURM_TOPOLOGY_ADDR",
               unit_line(1, "node", {{0, 1}, {2, 3}}) + unit_line(2, "level3", {range(0, 4)}));
  // BC_TOPO_ADDR is used instead of Slurm's variables.
  check_levels("BC_TOPO_ADDR=sw.host", "BC_TOPO_ADDR", unit_line(1, "node", {range(0, 4)}));
  // BC_TOPO_SCHEDULER=off: not read; the one node of this machine.
  bc_comm_t comm = nullptr;
  REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, "BC_TOPO_SCHEDULER=off", &comm) == BC_OK));
  const std::string text = describe(comm);
  INFO(text);
  CHECK(everywhere(text.find("from MPI_COMM_TYPE_SHARED\n") != std::string::npos));
  CHECK(everywhere(levels_of(text) == unit_line(1, "node", {range(0, 4)})));
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
}

TEST_CASE("Slurm's variables on some ranks only: every rank fails clearly", "[.topo_env_slurm_mismatch]") {
  const int r = world_rank(), p = world_size();
  REQUIRE(p == 4);
  REQUIRE((std::getenv("SLURM_TOPOLOGY_ADDR") != nullptr) == (r < 2));
  check_refused("", "the same kind of address");
  check_refused("", "BC_TOPO_SCHEDULER=off");
  // Turned off, the job goes on.
  bc_comm_t comm = nullptr;
  REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, "BC_TOPO_SCHEDULER=off", &comm) == BC_OK));
  const std::string err = exact(comm);
  INFO(err);
  CHECK(everywhere(err.empty()));
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
}

TEST_CASE("a bad Slurm pattern fails on every rank, naming the variables", "[.topo_env_slurm_bad]") {
  REQUIRE(world_size() == 4);
  // Every rank has the bad pattern, so each gives its own message.
  check_refused("", "SLURM_TOPOLOGY_ADDR_PATTERN='node.switch': the last field is 'switch', expected 'node'");
}
