// Rack discovery's failure path (topo/discover.h), driven directly: every
// rank is its own "node" on this host and the leaders measure over loopback;
// one leader's pass is made to fail (discover_fail_pass_for_testing). A
// leader that failed used to return before the broadcast of the result, or
// skip the pass's broadcast, and leave the others waiting (issue 43); and a
// failure of this advisory measurement failed the communicator's creation.
// Now every rank must come back with BC_OK, no rack level and how "failed",
// and nothing may be cached.
#include <catch2/catch.hpp>
#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/params.h"
#include "harness.h"
#include "topo/discover.h"

using namespace bctest;

namespace {

// A fresh directory made by rank 0, its path on every rank.
std::string shared_temp_dir() {
  char path[256] = "/tmp/bc-discover-test-XXXXXX";
  if (world_rank() == 0 && !mkdtemp(path)) path[0] = '\0';
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

int files_in(const std::string &dir) {
  int n = 0;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

}  // namespace

TEST_CASE("rack discovery: a leader's failed pass leaves no rank waiting and fails no creation", "[discover]") {
  const int p = world_size();
  const std::string dir = shared_temp_dir();
  REQUIRE_FALSE(dir.empty());
  bc::ParamSet params;
  REQUIRE(params.apply_overrides(("BC_TOPO_DISCOVER=always;BC_CACHE_DIR=" + dir).c_str()) == BC_OK);
  std::vector<int64_t> node_of(static_cast<size_t>(p));
  std::vector<uint64_t> host_hash(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    node_of[static_cast<size_t>(r)] = r;
    host_hash[static_cast<size_t>(r)] = 1000 + static_cast<uint64_t>(r);
  }
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  // The last leader, then leader 0 (which broadcasts the result); pass 1,
  // then pass 2 where the first pass cannot decide alone.
  for (int pass : {1, 2}) {
    for (int failing : {p - 1, 0}) {
      bc::discover_fail_pass_for_testing(failing, pass);
      std::vector<int> rack_of_node = {7};
      std::string how;
      bool flat = true;
      const bc::Status st = bc::discover_racks(comm, params, node_of, host_hash, &rack_of_node, &how, &flat);
      bc::discover_fail_pass_for_testing(-1, 0);
      INFO("leader " << failing << " failing pass " << pass << " of p = " << p << ": how '" << how << "'");
      REQUIRE(everywhere(st == BC_OK, comm));
      const bool failed = how == "failed";
      // The same verdict on every rank.
      REQUIRE((everywhere(failed, comm) || everywhere(!failed, comm)));
      // Pass 2 runs only where pass 1 did not decide; at p <= 2 it may
      // (nothing to tell apart): then the verdict was measured.
      REQUIRE(everywhere(failed || (pass == 2 && how == "measured"), comm));
      REQUIRE(everywhere(!failed || (rack_of_node.empty() && !flat), comm));
    }
    if (pass == 1) {
      // Failed discoveries are not cached: the next communicator looks again.
      MPI_Barrier(comm);
      REQUIRE(everywhere(world_rank() != 0 || files_in(dir) == 0, comm));
    }
  }
  MPI_Barrier(comm);
  if (world_rank() == 0) {
    const std::string cmd = "rm -rf '" + dir + "'";
    CHECK(std::system(cmd.c_str()) == 0);
  }
  MPI_Comm_free(&comm);
}
