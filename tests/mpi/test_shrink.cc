// bc_comm_shrink where nobody died: the survivors' agreement over the
// communicator's own transports decides an empty set, and the new
// communicator has every rank, in the old order, on reordered and partial
// communicators too. What it refuses, and that the old communicator then only
// serves bc_comm_destroy. Shrinking after a real death is killed-rank work:
// tests/liveness (liveness_shrink_*).
#include <catch2/catch.hpp>
#include <unistd.h>

#include <string>
#include <vector>

#include "harness.h"

using namespace bctest;

namespace {

// Shrinks a communicator over `mpi` made with `options`; checks the new one
// rank by rank and with exact all-reduces, and the old one's refusals.
void shrink_and_check(MPI_Comm mpi, const std::string &options) {
  int r = 0, p = 0;
  MPI_Comm_rank(mpi, &r);
  MPI_Comm_size(mpi, &p);
  bc_comm_t comm = nullptr;
  REQUIRE(everywhere(bc_comm_create_with(mpi, options.c_str(), &comm) == BC_OK, mpi));
  bc_comm_t shrunk = nullptr;
  const bc_status_t st = bc_comm_shrink(comm, &shrunk);
  INFO(bc_last_error());
  REQUIRE(everywhere(st == BC_OK, mpi));
  int nr = -1, np = -1;
  REQUIRE(bc_comm_rank(shrunk, &nr) == BC_OK);
  REQUIRE(bc_comm_size(shrunk, &np) == BC_OK);
  CHECK(everywhere(nr == r && np == p, mpi));
  for (bc_dtype_t dtype : {BC_INT32, BC_FLOAT32})
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{4099}, int64_t{262147}}) {
      INFO("dtype " << dtype << " count " << n);
      CHECK(everywhere(allreduce_right(shrunk, dtype, n, r, p), mpi));
    }
  // The old one refuses every call now, saying why, and cannot be shrunk twice.
  std::vector<float> v(16, 1.0f);
  const bc_status_t again = bc_allreduce(BC_IN_PLACE, v.data(), 16, BC_FLOAT32, BC_SUM, comm);
  CHECK(again == BC_ERR_INVALID_COMM);
  CHECK(std::string(bc_last_error()).find("bc_comm_shrink") != std::string::npos);
  bc_comm_t twice = nullptr;
  CHECK(bc_comm_shrink(comm, &twice) == BC_ERR_INVALID_ARG);
  CHECK(twice == nullptr);
  CHECK(everywhere(bc_comm_destroy(&comm) == BC_OK, mpi));
  CHECK(everywhere(bc_comm_destroy(&shrunk) == BC_OK, mpi));
}

// A communicator of the world with `options` (transport t), or false where
// that transport is not available here (said with a WARN).
bool create_or_skip(const std::string &t, const std::string &options, bc_comm_t *comm) {
  const bc_status_t created = bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), comm);
  if (everywhere(created == BC_ERR_NOT_SUPPORTED)) {
    WARN("BC_TRANSPORT=" << t << " is not available here: skipped");
    return false;
  }
  REQUIRE(everywhere(created == BC_OK));
  return true;
}

// Runs `body` with a communicator of the world with BC_TIMEOUT=`timeout` on
// each transport shrink serves (the mpi transport is refused: above); `body`
// destroys it.
template <class Body>
void on_shrinkable_transports(const std::string &timeout, Body body) {
  for (const std::string &t : transports_to_try({"auto", "ucx"})) {
    if (t == "mpi") continue;
    const std::string options = "BC_TRANSPORT=" + t + ";BC_TIMEOUT=" + timeout;
    INFO("options " << options);
    bc_comm_t comm = nullptr;
    if (create_or_skip(t, options, &comm)) body(comm);
  }
}

}  // namespace

TEST_CASE("shrink without a death keeps every rank, in order", "[shrink]") {
  const int p = world_size(), r = world_rank();
  for (const std::string &t : transports_to_try({"auto", "shm", "ucx"})) {
    const std::string options = "BC_TRANSPORT=" + t + ";BC_TIMEOUT=30s";
    INFO("options " << options);
    bc_comm_t probe = nullptr;
    if (!create_or_skip(t, options, &probe)) continue;
    if (t == "mpi" && p > 1) {
      // The agreement cannot run over Open MPI after a death (comm_shrink.cc).
      bc_comm_t shrunk = nullptr;
      CHECK(bc_comm_shrink(probe, &shrunk) == BC_ERR_NOT_SUPPORTED);
      CHECK(std::string(bc_last_error()).find("mpi transport") != std::string::npos);
      CHECK(shrunk == nullptr);
      CHECK(everywhere(allreduce_right(probe, BC_INT32, 1000, r, p)));  // refused before it touched anything
      CHECK(everywhere(bc_comm_destroy(&probe) == BC_OK));
      continue;
    }
    CHECK(everywhere(bc_comm_destroy(&probe) == BC_OK));
    shrink_and_check(MPI_COMM_WORLD, options);
    // Reordered: rank r of the world is rank p - 1 - r here.
    MPI_Comm reversed = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, 0, p - r, &reversed);
    shrink_and_check(reversed, options);
    MPI_Comm_free(&reversed);
    // A part of the world: the even ranks and the odd ones, each on its own.
    MPI_Comm half = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &half);
    shrink_and_check(half, options);
    MPI_Comm_free(&half);
  }
}

TEST_CASE("shrink refuses what it cannot do, clearly", "[shrink][errors]") {
  const int p = world_size(), r = world_rank();
  bc_comm_t out = nullptr;
  CHECK(bc_comm_shrink(nullptr, &out) == BC_ERR_INVALID_COMM);
  bc_comm_t comm = nullptr;
  REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, "BC_LIVENESS=off", &comm) == BC_OK));
  CHECK(bc_comm_shrink(comm, nullptr) == BC_ERR_INVALID_ARG);
  // No failure detector: nothing would tell the survivors who is dead (or,
  // in a run with the mpi transport forced, that is refused first).
  CHECK(bc_comm_shrink(comm, &out) == BC_ERR_NOT_SUPPORTED);
  const std::string why = bc_last_error();
  CHECK((why.find("BC_LIVENESS=off") != std::string::npos || why.find("mpi transport") != std::string::npos));
  CHECK(out == nullptr);
  // Refused before anything was sent: the communicator still works.
  CHECK(everywhere(allreduce_right(comm, BC_INT32, 4099, r, p)));
  CHECK(everywhere(bc_comm_destroy(&comm) == BC_OK));
}

TEST_CASE("shrink waits for a late survivor", "[shrink]") {
  const int p = world_size(), r = world_rank();
  on_shrinkable_transports("30s", [&](bc_comm_t comm) {
    // The last rank comes 0.7 s late: the others wait in their first round,
    // long enough that their messages to ucx peers are sent again
    // (dead_agreement.cc, kResendFirstMs); the copies must not matter.
    if (r == p - 1) usleep(700 * 1000);
    bc_comm_t shrunk = nullptr;
    const bc_status_t st = bc_comm_shrink(comm, &shrunk);
    INFO(bc_last_error());
    REQUIRE(everywhere(st == BC_OK));
    int np = 0;
    bc_comm_size(shrunk, &np);
    CHECK(np == p);
    for (int64_t n : {int64_t{13}, int64_t{65537}}) CHECK(everywhere(allreduce_right(shrunk, BC_INT32, n, r, p)));
    CHECK(everywhere(bc_comm_destroy(&shrunk) == BC_OK));
    CHECK(everywhere(bc_comm_destroy(&comm) == BC_OK));
  });
}

TEST_CASE("shrink gives up on a survivor that never comes, after BC_TIMEOUT, naming it", "[shrink]") {
  const int p = world_size(), r = world_rank();
  if (p == 1) return;  // nobody to wait for
  // 1 s: the ucx waiters send their messages again at 0.25 and 0.75 s, which
  // must not count as movement and put the timeout off.
  on_shrinkable_transports("1s", [&](bc_comm_t comm) {
    if (r != p - 1) {
      bc_comm_t shrunk = nullptr;
      const bc_status_t st = bc_comm_shrink(comm, &shrunk);
      const std::string why = bc_last_error();
      INFO(why);
      CHECK(st == BC_ERR_TIMEOUT);
      CHECK(shrunk == nullptr);
      // Its own timeout names the missing rank; or another waiter's came
      // first, whose ABORT fails this one at once, naming that waiter.
      CHECK((why.find("rank(s) " + std::to_string(p - 1)) != std::string::npos ||
             why.find("part of the survivors' agreement failed (timeout") != std::string::npos));
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the last rank stays out until the others gave up
    CHECK(everywhere(bc_comm_destroy(&comm) == BC_OK));
  });
}
