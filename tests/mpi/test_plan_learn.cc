// The learned plans (BC_PLAN_LEARN, lib/api/plan_learn.h), through the C API:
//   - on any rank layout: every call exact (bit for bit, guards intact) while
//     the candidates take turns, the same verdict on every rank, errors for a
//     bad BC_PLAN_CANDIDATES, and nothing learned where the user pinned a plan;
//   - across a shaped link ([.][plans_sim], run by
//     tests/simcluster/plans_on_simcluster.sh on 2 hosts x 2 ranks at
//     100 Mbit/s): two candidates whose speeds differ by physics, not by
//     chance: the split carries S per host link each way, the flat direct
//     exchange 2 S. The faster wins whichever is listed first; its verdict is
//     kept in the per-user cache, the next communicator starts from it and never
//     runs the loser; a corrupt cache file is not trusted and is learned again.
// On one machine the two speeds are too close and too noisy (2 cores) to say
// which must win: there only the sameness of the verdict is asked.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "harness.h"

using namespace bctest;

namespace {

constexpr int64_t kCount = 262144;  // int32: 1 MiB, bucket 1048576-2097151 B
const char *const kBucket = "1048576-2097151 B: ";
// The learning's calls for that bucket: 2 candidates x (1 untimed + 3 timed).
constexpr int kLearnCalls = 8;
const char *const kSlow = "shape=flat,algo=direct,chunk=0";  // every rank's blocks straight to every other rank
const char *const kFast = "chunk=256K,depth=4";              // BlueConnect's split

// One all-reduce of exact data, in place on odd calls: true when it succeeds,
// every element is right and the guards are intact.
bool exact_call(bc_comm_t comm, int k) {
  const int r = world_rank(), p = world_size();
  Case c{BC_INT32, BC_SUM, kCount, nullptr};
  c.fill(r, p);
  if (k % 2) return bc_allreduce(BC_IN_PLACE, c.buf->data(), kCount, BC_INT32, BC_SUM, comm) == BC_OK && c.right(p);
  std::unique_ptr<Guarded> in = c.take_input();
  return bc_allreduce(in->data(), c.buf->data(), kCount, BC_INT32, BC_SUM, comm) == BC_OK && c.right(p) &&
         in->guards_intact();
}

bool exact_calls(bc_comm_t comm, int from, int to) {
  bool ok = true;
  for (int k = from; k < to; ++k) ok = exact_call(comm, k) && ok;
  return ok;
}

// The bucket's line of bc_comm_describe's "plan learning" part ("winner [1]", "learning (3 of 8 calls)").
std::string verdict(bc_comm_t comm) {
  const std::string d = describe(comm);
  const size_t at = d.find(kBucket);
  if (at == std::string::npos) return "(no line for the bucket in: " + d.substr(0, 300) + ")";
  const size_t from = at + std::string(kBucket).size();
  return d.substr(from, d.find('\n', from) - from);
}

// The "N calls" count of candidate i in the bucket's description (-1: none).
long calls_of(bc_comm_t comm, int i) {
  const std::string d = describe(comm);
  const size_t at = d.find(kBucket);
  const std::string tag = "    [" + std::to_string(i) + "] ";
  const size_t line = at == std::string::npos ? at : d.find(tag, at);
  if (line == std::string::npos) return -1;
  const size_t end = d.find('\n', line);
  const size_t comma = d.rfind(", ", end);
  return std::strtol(d.c_str() + comma + 2, nullptr, 10);
}

// Every rank's verdict starts with `want`, and all are the same; a report of all of them otherwise.
void every_rank_says(bc_comm_t comm, const std::string &want) {
  const std::string mine = verdict(comm);
  const std::string all = gather_lines(mine, 200);
  std::string first = mine;
  first.resize(200, '\0');
  MPI_Bcast(&first[0], 200, MPI_CHAR, 0, MPI_COMM_WORLD);
  INFO("verdicts:" << all);
  CHECK(everywhere(mine.compare(0, want.size(), want) == 0 && mine == std::string(first.c_str())));
}

bc_comm_t create(const std::string &options) {
  bc_comm_t comm = nullptr;
  const bc_status_t st = bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &comm);
  INFO(bc_last_error());
  REQUIRE(everywhere(st == BC_OK));
  return comm;
}

std::string shared_temp_dir() {
  char path[64] = "/tmp/bc-plans-XXXXXX";
  if (world_rank() == 0 && !mkdtemp(path)) path[0] = '\0';
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

// The one plans-*.txt in dir ("" if none).
std::string plans_file(const std::string &dir) {
  std::string found;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (std::string(e->d_name).rfind("plans-", 0) == 0) found = dir + "/" + e->d_name;
    closedir(d);
  }
  return found;
}

}  // namespace

TEST_CASE("plan learning: exact while the candidates take turns, and one verdict on every rank", "[plans]") {
  for (int slow_first = 1; slow_first >= 0; --slow_first) {
    const std::string cands = slow_first ? std::string(kSlow) + "|" + kFast : std::string(kFast) + "|" + kSlow;
    const std::string options = "BC_TIMEOUT=60s;BC_MODEL_CACHE=off;BC_PLAN_CANDIDATES=" + cands;
    INFO("options " << options);
    bc_comm_t comm = create(options);
    CHECK(everywhere(exact_call(comm, 0)));
    every_rank_says(comm, "learning (1 of 8 calls)");
    CHECK(everywhere(exact_calls(comm, 1, kLearnCalls + 4)));
    every_rank_says(comm, "winner [");
    // After the learning every call runs the winner: the loser keeps its probes' count.
    const long loser = calls_of(comm, verdict(comm).find("winner [0]") == 0 ? 1 : 0);
    CHECK(everywhere(loser == kLearnCalls / 2));
    bc_comm_destroy(&comm);
  }
}

TEST_CASE("plan learning: a bad BC_PLAN_CANDIDATES fails creation with a message; a pinned plan learns nothing",
          "[plans]") {
  bc_comm_t comm = nullptr;
  CHECK(everywhere(bc_comm_create_with(MPI_COMM_WORLD, "BC_PLAN_CANDIDATES=chunk=lots", &comm) == BC_ERR_PARAM));
  CHECK_THAT(bc_last_error(), Catch::Matchers::Contains("BC_PLAN_CANDIDATES"));
  CHECK(comm == nullptr);
  comm = create(std::string("BC_CHUNK=64K;BC_PLAN_CANDIDATES=") + kSlow + "|" + kFast);
  CHECK(everywhere(exact_call(comm, 0)));
  CHECK(everywhere(describe(comm).find("plan learning: off") != std::string::npos));
  bc_comm_destroy(&comm);
}

TEST_CASE("plan learning across a shaped link: the faster wins, is cached, and a corrupt cache is learned again",
          "[.][plans_sim]") {
  REQUIRE(world_size() >= 2);
  for (int slow_first = 1; slow_first >= 0; --slow_first) {
    const std::string cands = slow_first ? std::string(kSlow) + "|" + kFast : std::string(kFast) + "|" + kSlow;
    bc_comm_t comm = create("BC_TIMEOUT=60s;BC_MODEL_CACHE=off;BC_PLAN_CANDIDATES=" + cands);
    CHECK(everywhere(exact_calls(comm, 0, kLearnCalls)));
    every_rank_says(comm, slow_first ? "winner [1]" : "winner [0]");
    bc_comm_destroy(&comm);
  }
  const std::string dir = shared_temp_dir();
  REQUIRE(everywhere(!dir.empty()));
  const std::string options = "BC_TIMEOUT=60s;BC_MODEL_CACHE=on;BC_CACHE_DIR=" + dir + ";BC_PLAN_CANDIDATES=" +
                              kSlow + "|" + kFast;
  INFO("options " << options);
  bc_comm_t comm = create(options);  // learns; rank 0 stores the verdict
  CHECK(everywhere(exact_calls(comm, 0, kLearnCalls)));
  every_rank_says(comm, "winner [1]");
  bc_comm_destroy(&comm);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string file = world_rank() == 0 ? plans_file(dir) : "";
  if (world_rank() == 0) CHECK(!file.empty());
  comm = create(options);  // starts from the verdict: 1 + 3 calls confirm it; the loser never runs
  CHECK(everywhere(exact_call(comm, 0)));
  every_rank_says(comm, "winner [1] from the cache, confirming");
  CHECK(everywhere(exact_calls(comm, 1, 6)));
  every_rank_says(comm, "winner [1] from the cache");
  CHECK(everywhere(calls_of(comm, 0) == 0));
  bc_comm_destroy(&comm);
  // One byte of the stored verdict changed: its checksum no longer matches.
  if (world_rank() == 0 && !file.empty()) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-3, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-3, std::ios::end);
    f.put(c == '1' ? '2' : '1');
  }
  MPI_Barrier(MPI_COMM_WORLD);
  comm = create(options);  // learns again, exact meanwhile, and stores a good file again
  CHECK(everywhere(exact_call(comm, 0)));
  every_rank_says(comm, "learning (1 of 8 calls)");
  CHECK(everywhere(exact_calls(comm, 1, kLearnCalls)));
  every_rank_says(comm, "winner [1]");
  bc_comm_destroy(&comm);
  comm = create(options);  // and that file is trusted again
  CHECK(everywhere(exact_call(comm, 0)));
  every_rank_says(comm, "winner [1] from the cache");
  bc_comm_destroy(&comm);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) CHECK(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
}
