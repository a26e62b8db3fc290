// Late is not dead (docs/FAILURES.md, "Peer death and lateness"): a rank that
// arrives long after the others, while they check its liveness many times, is
// waited for under the default BC_TIMEOUT (30 min). Deaths themselves need a
// job that loses a rank, so they are tested outside Catch2:
// tests/liveness/kill_check.sh.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness.h"
#include "transport_comm.h"

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

// Issue 13, item 6: a rank 30 s late (a checkpoint being written, say) with
// every default (BC_TIMEOUT 30 min, liveness at its default interval) is
// waited for on every transport, and the result is exact. Hidden from the
// mpi_np* runs (it takes 30 s per transport); run by the late30_np4 test.
// BC_TEST_LATE_S shortens it by hand.
TEST_CASE("a rank 30 s late is waited for with the default settings", "[.late30]") {
  if (world_size() < 2) return;
  const char *env = std::getenv("BC_TEST_LATE_S");
  const int late_s = env ? std::atoi(env) : 30;
  for (const char *transport : {"auto", "mpi", "shm", "ucx"}) {
    INFO("BC_TRANSPORT=" << transport << ", rank " << world_size() - 1 << " " << late_s << " s late");
    bc_comm_t comm = create_on_transport(std::string("BC_TRANSPORT=") + transport, transport);
    if (!comm) continue;
    const int64_t n = 100003;  // prime, several chunks' worth of steps
    std::vector<int32_t> a(n), b(n, -7);
    for (int64_t i = 0; i < n; ++i) a[i] = static_cast<int32_t>((i % 13) + world_rank());
    const auto t0 = std::chrono::steady_clock::now();
    if (world_rank() == world_size() - 1) sleep(static_cast<unsigned>(late_s));
    const bc_status_t st = bc_allreduce(a.data(), b.data(), n, BC_INT32, BC_SUM, comm);
    const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(bc_last_error());
    REQUIRE(everywhere(st == BC_OK));
    const int p = world_size();
    bool exact = true;
    for (int64_t i = 0; i < n && exact; ++i)
      exact = b[i] == static_cast<int32_t>(p * (i % 13) + p * (p - 1) / 2);
    REQUIRE(everywhere(exact));
    // The others really waited (the sleeper's peers cannot finish without it).
    if (world_rank() == 0) CHECK(waited_s >= late_s * 0.9);
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
}
