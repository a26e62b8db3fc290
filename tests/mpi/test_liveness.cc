// Late is not dead (docs/FAILURES.md, "Peer death and lateness"): a rank that
// arrives long after the others, while they check its liveness many times, is
// waited for under the default BC_TIMEOUT (30 min). Deaths themselves need a
// job that loses a rank, so they are tested outside Catch2:
// tests/liveness/kill_check.sh.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <string>
#include <vector>

#include "harness.h"

using namespace bctest;

TEST_CASE("a late rank is waited for, not declared dead", "[liveness][late]") {
  if (world_size() < 2) return;  // needs a peer to be late
  // The interval is short so that the waiters check the sleeper some 35
  // times; net: through the TCP watch as well as through /proc.
  for (const char *opts : {"BC_LIVENESS_INTERVAL=20ms", "BC_LIVENESS=net;BC_LIVENESS_INTERVAL=20ms"}) {
    INFO(opts);
    bc_comm_t comm = nullptr;
    REQUIRE(bc_comm_create_with(MPI_COMM_WORLD, opts, &comm) == BC_OK);
    std::vector<float> a(4096, 1.0f), b(4096, 0.0f);
    if (world_rank() == world_size() - 1) usleep(700 * 1000);
    const bc_status_t st = bc_allreduce(a.data(), b.data(), 4096, BC_FLOAT32, BC_SUM, comm);
    INFO(bc_last_error());
    REQUIRE(everywhere(st == BC_OK));
    REQUIRE(everywhere(b[0] == static_cast<float>(world_size()) && b[4095] == static_cast<float>(world_size())));
    // And it stays usable.
    REQUIRE(everywhere(bc_allreduce(a.data(), b.data(), 4096, BC_FLOAT32, BC_SUM, comm) == BC_OK));
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
}
