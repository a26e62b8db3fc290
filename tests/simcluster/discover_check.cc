// Rack discovery across simulated hosts (tests/simcluster/discover_on_simcluster.sh):
// `creations` communicators in a row, each measuring anew
// (BC_TOPO_DISCOVER=always), must find the expected levels above the host
// (but see below); an exact all-reduce runs on each. Then one with the default
// (BC_TOPO_DISCOVER=auto) must take the result from the per-user cache.
// Usage: discover_check EXPECTED_TOPO_FILE CREATIONS [ALSO_ACCEPTED_FILE]
// EXPECTED_TOPO_FILE: what bc_comm_write_topology writes, comments aside;
// ALSO_ACCEPTED_FILE: another acceptable result (e.g. no level where the
// layout is at the limit of what discovery can tell).
// Where racks are expected, at most one creation in ten may end with no rack
// level: discovery's safe answer when its passes do not agree, or agree on
// one rack (docs/TOPOLOGY.md), which a stalled 2-core CI host can force (CI,
// 2026-12-04: 1 of 10 creations on the racks of 3 + 1 missed them; the log
// kept no reason, which the script now prints). Other levels fail at once.
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "blueconnect.h"

namespace {

std::string without_comments(const std::string &path) {
  std::ifstream in(path);
  std::string line, out;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') out += line + "\n";
  return out;
}

// True when the topology file's lines ("HOST GROUP") name one group for all
// hosts: no level above the host.
bool one_group(const std::string &topo) {
  std::istringstream in(topo);
  std::string host, group, first;
  int hosts = 0;
  while (in >> host >> group) {
    if (hosts++ == 0) first = group;
    if (group != first) return false;
  }
  return hosts >= 2;
}

// One creation: its time (rank 0), the levels it found, an exact all-reduce.
// *which (rank 0): 1 the expected levels, 2 the also accepted ones, 3 no rack
// level (every host in one group) where racks were expected, 0 another.
bool one(int index, const char *options, const std::string &expected, const std::string &also, int rank, int size,
         double *ms, std::string *desc, int *which) {
  bc_comm_t c = nullptr;
  *which = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  bc_status_t st = bc_comm_create_with(MPI_COMM_WORLD, options, &c);
  *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (st != BC_OK) {
    std::fprintf(stderr, "rank %d: bc_comm_create_with: %s\n", rank, bc_last_error());
    return false;
  }
  char buf[8192];
  size_t needed = 0;
  bc_comm_describe(c, 1 << 20, BC_INT32, buf, sizeof buf, &needed);
  *desc = buf;
  const std::string path = "/tmp/bc-discover-check." + std::to_string(getpid()) + ".txt";
  bool ok = bc_comm_write_topology(c, path.c_str()) == BC_OK;
  if (ok && rank == 0 && !expected.empty()) {
    const std::string got = without_comments(path);
    *which = got == expected ? 1 : !also.empty() && got == also ? 2 : one_group(got) ? 3 : 0;
    if (*which == 3) std::printf("creation %d: no rack level (rank 0's decisions follow the run)\n", index);
    if (!*which) {
      std::printf("creation %d: other levels than expected (details on stderr)\n", index);
      std::fprintf(stderr, "levels differ: expected\n%sgot\n%s%s\n", expected.c_str(), got.c_str(), buf);
      ok = false;
    }
  }
  if (rank == 0) std::remove(path.c_str());
  // Exact in any order: small integers.
  const int64_t n = 1 << 20;
  std::vector<int32_t> in(n), out(n, -1);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>((i % 1000) + rank);
  st = bc_allreduce(in.data(), out.data(), n, BC_INT32, BC_SUM, c);
  if (st != BC_OK) {
    std::fprintf(stderr, "rank %d: bc_allreduce: %s\n", rank, bc_last_error());
    ok = false;
  }
  for (int64_t i = 0; i < n && st == BC_OK; ++i)
    if (out[i] != static_cast<int32_t>((i % 1000) * size + size * (size - 1) / 2)) {
      std::fprintf(stderr, "rank %d: element %lld is %d\n", rank, static_cast<long long>(i), out[i]);
      ok = false;
      break;
    }
  bc_comm_destroy(&c);
  int all = ok ? 1 : 0, every = 0;
  MPI_Allreduce(&all, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return every == 1;
}

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 3 && argc != 4) {
    if (rank == 0) std::fprintf(stderr, "usage: discover_check EXPECTED_TOPO_FILE CREATIONS [ALSO_ACCEPTED_FILE]\n");
    MPI_Finalize();
    return 2;
  }
  const std::string expected = without_comments(argv[1]);
  const int creations = std::atoi(argv[2]);
  const std::string also = argc == 4 ? without_comments(argv[3]) : "";
  if (bc_init() != BC_OK) {
    std::fprintf(stderr, "bc_init: %s\n", bc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  bool ok = true;
  double ms = 0, lo = 1e9, hi = 0, sum = 0;
  std::string desc;
  // The cost of creation without discovery, for comparison.
  int which = 0, found[4] = {0, 0, 0, 0};
  ok = one(0, "BC_TOPO_DISCOVER=off;BC_MODEL=off", "", "", rank, size, &ms, &desc, &which);
  const double off_ms = ms;
  int done = 0;
  for (int i = 0; i < creations && ok; ++i, ++done) {
    ok = one(i + 1, "BC_TOPO_DISCOVER=always;BC_MODEL=off", expected, also, rank, size, &ms, &desc, &which);
    ++found[which];
    lo = std::min(lo, ms), hi = std::max(hi, ms), sum += ms;
  }
  if (rank == 0) {
    std::printf("%d creations measuring: %.0f / %.0f / %.0f ms (min / mean / max); without discovery %.0f ms\n",
                done, lo, sum / std::max(done, 1), hi, off_ms);
    std::printf("%d found the expected levels, %d the also accepted ones, %d no rack level (at most %d allowed)\n",
                found[1], found[2], found[3], creations / 10);
    std::printf("%s", desc.substr(0, desc.find('\n') + 1).c_str());
  }
  int too_many = rank == 0 && found[3] > creations / 10 ? 1 : 0;
  MPI_Bcast(&too_many, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (too_many) {
    if (rank == 0) std::printf("too many creations ended with no rack level\n");
    ok = false;
  }
  // The default: the per-user cache the measurements wrote (after a creation
  // with no level, that result: both are what was measured last).
  if (ok) {
    ok = one(creations + 1, "BC_MODEL=off", expected, also, rank, size, &ms, &desc, &which);
    // A result without a level leaves no trace in the description.
    const bool cached = desc.find("cached in") != std::string::npos || desc.find("measured") == std::string::npos;
    if (rank == 0) std::printf("default creation %.0f ms: %s", ms, desc.substr(0, desc.find('\n') + 1).c_str());
    if (!cached) {
      if (rank == 0) std::fprintf(stderr, "the default creation did not take the cached racks\n");
      ok = false;
    }
  }
  bc_finalize();
  MPI_Finalize();
  if (rank == 0) std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
