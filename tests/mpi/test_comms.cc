// Many communicators: created and destroyed in a loop, several alive at once
// over the same ranks, their operations in flight together. The ucx
// transport shares one worker and one endpoint per peer between them
// (transports/ucx/ucx_transport.h): only the communicator id in the tag keeps
// their messages apart, and their tags are otherwise the same (every
// communicator's sequence starts at 0).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "harness.h"

using namespace bctest;

namespace {

// Rank r's input for communicator k: element i is (r + 1) * (k + 1) + i.
std::vector<int32_t> input(int r, int k, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((r + 1) * (k + 1) + i);
  return v;
}

bool right(const std::vector<int32_t> &v, int p, int k) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != static_cast<int32_t>((k + 1) * p * (p + 1) / 2 + p * static_cast<int64_t>(i))) return false;
  return true;
}

}  // namespace

TEST_CASE("communicators alive at once keep their messages apart, and many come and go", "[comms]") {
  const int p = world_size(), r = world_rank();
  // With and without the argument check: the operations below are started
  // in different orders on odd and even ranks, which the check's agreement
  // (a non-blocking collective per call, the request's first phase) must not
  // turn into a wait for each other.
  for (const char *check : {"0", "1"})
  for (const std::string &t : transports_to_try()) {
    const std::string options = "BC_TRANSPORT=" + t + ";BC_TIMEOUT=20s;BC_CHECK_ARGS=" + check;
    INFO("options " << options);
    // Three at once, each with an operation in flight started in a different
    // order on odd and even ranks; all of them wait in the same order.
    constexpr int kAlive = 3;
    bc_comm_t comms[kAlive] = {nullptr, nullptr, nullptr};
    bc_status_t created = BC_OK;
    for (int k = 0; k < kAlive; ++k) {
      bc_status_t st = bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &comms[k]);
      if (st != BC_OK) created = st;
    }
    if (everywhere(created == BC_ERR_NOT_SUPPORTED)) {
      WARN("BC_TRANSPORT=" << t << " is not available here: skipped");
      for (bc_comm_t &c : comms)
        if (c) bc_comm_destroy(&c);
      continue;
    }
    INFO(bc_last_error());
    REQUIRE(everywhere(created == BC_OK));
    for (int64_t n : {int64_t{1}, int64_t{1009}, int64_t{300000}}) {
      INFO("count " << n);
      std::vector<std::vector<int32_t>> bufs(kAlive);
      bc_request_t reqs[kAlive] = {nullptr, nullptr, nullptr};
      bool ok = true;
      for (int j = 0; j < kAlive; ++j) {
        const int k = r % 2 ? kAlive - 1 - j : j;
        bufs[k] = input(r, k, n);
        ok = bc_iallreduce(BC_IN_PLACE, bufs[k].data(), n, BC_INT32, BC_SUM, comms[k], &reqs[k]) == BC_OK && ok;
      }
      // A few tests each, in the ranks' own order: every operation posts its
      // first messages before any completes (the same tags on every
      // communicator), then the waits finish them.
      for (int round = 0; round < 3; ++round)
        for (int j = 0; j < kAlive; ++j) {
          const int k = r % 2 ? kAlive - 1 - j : j;
          int done = 0;
          if (reqs[k]) ok = bc_test(&reqs[k], &done) == BC_OK && ok;
        }
      for (int k = 0; k < kAlive; ++k)
        if (reqs[k]) ok = bc_wait(&reqs[k]) == BC_OK && ok;
      INFO(bc_last_error());
      REQUIRE(everywhere(ok));
      for (int k = 0; k < kAlive; ++k) REQUIRE(everywhere(right(bufs[k], p, k)));
    }
    // Destroyed out of creation order.
    REQUIRE(everywhere(bc_comm_destroy(&comms[1]) == BC_OK));
    REQUIRE(everywhere(bc_comm_destroy(&comms[0]) == BC_OK));
    REQUIRE(everywhere(bc_comm_destroy(&comms[2]) == BC_OK));
    // Create, use, destroy, many times (ids and connections are reused),
    // with one long-lived communicator alongside.
    bc_comm_t keep = nullptr;
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &keep) == BC_OK));
    for (int round = 0; round < 40; ++round) {
      bc_comm_t c = nullptr;
      bool ok = bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &c) == BC_OK;
      std::vector<int32_t> a = input(r, round % 5, 257), b = input(r, 7, 257);
      ok = ok && bc_allreduce(BC_IN_PLACE, a.data(), 257, BC_INT32, BC_SUM, c) == BC_OK;
      ok = ok && bc_allreduce(BC_IN_PLACE, b.data(), 257, BC_INT32, BC_SUM, keep) == BC_OK;
      ok = ok && bc_comm_destroy(&c) == BC_OK;
      INFO("round " << round << ": " << bc_last_error());
      REQUIRE(everywhere(ok && right(a, p, round % 5) && right(b, p, 7)));
    }
    REQUIRE(everywhere(bc_comm_destroy(&keep) == BC_OK));
  }
}
