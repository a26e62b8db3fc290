// A destroyed communicator's shm node setup taken back by the next one over
// the same processes (transports/shm/shm_reuse.cc): results stay exact
// whether it is reused or set up anew, in single-copy and copy mode, when
// communicators over other orders and subsets come in between, when one over
// the same ranks is still alive (its setup is not idle), and when one rank no
// longer holds the setup the others kept (all set up anew).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "harness.h"

using namespace bctest;

namespace {

constexpr int32_t kPoison = -0x5a5a5a5b;

// Rank r's input for round k: element i is (r + 1) * (k + 1) + i.
std::vector<int32_t> input(int r, int k, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((r + 1) * (k + 1) + i);
  return v;
}

// One all-reduce on `comm` (p ranks, this one r) checked exactly; false on any
// error or wrong element. Output poisoned, with a guard element after it.
bool exact_allreduce(bc_comm_t comm, int r, int p, int k, int64_t n) {
  std::vector<int32_t> in = input(r, k, n), out(static_cast<size_t>(n) + 1, kPoison);
  if (bc_allreduce(in.data(), out.data(), n, BC_INT32, BC_SUM, comm) != BC_OK) return false;
  for (int64_t i = 0; i < n; ++i)
    if (out[i] != static_cast<int32_t>((k + 1) * p * (p + 1) / 2 + p * i)) return false;
  return out[n] == kPoison;
}

bool exact_rounds(bc_comm_t comm, MPI_Comm parent, int k, bool large) {
  int r = 0, p = 1;
  MPI_Comm_rank(parent, &r);
  MPI_Comm_size(parent, &p);
  bool ok = true;
  for (int64_t n : {0, 1, 13, 1009}) ok = exact_allreduce(comm, r, p, k, n) && ok;
  if (large) ok = exact_allreduce(comm, r, p, k, 300007) && ok;
  return ok;
}

}  // namespace

TEST_CASE("a communicator reuses the shm setup of an earlier one over the same ranks, exactly", "[comms][shm_reuse]") {
  const int p = world_size(), r = world_rank();
  MPI_Comm reversed = MPI_COMM_NULL, half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, 0, p - 1 - r, &reversed);
  MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &half);
  const MPI_Comm parents[3] = {MPI_COMM_WORLD, reversed, half};
  for (const char *mode : {"auto", "copy"}) {
    const std::string options = std::string("BC_SHM_MODE=") + mode + ";BC_TIMEOUT=20s";
    INFO("options " << options);
    // Rounds over world, reversed world and halves, in turn: each kind of
    // communicator finds the setup its predecessor of the same kind left.
    for (int k = 0; k < 18; ++k) {
      INFO("round " << k);
      const MPI_Comm parent = parents[k % 3];
      bc_comm_t comm = nullptr;
      REQUIRE(everywhere(bc_comm_create_with(parent, options.c_str(), &comm) == BC_OK));
      CHECK(everywhere(exact_rounds(comm, parent, k, k % 6 == 0)));
      REQUIRE(bc_comm_destroy(&comm) == BC_OK);
    }
    // Two alive over the same ranks: the second cannot take the first's
    // setup; a third, after the first is gone, may. Operations interleaved.
    bc_comm_t a = nullptr, b = nullptr, c = nullptr;
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &a) == BC_OK));
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &b) == BC_OK));
    {
      std::vector<int32_t> in = input(r, 100, 1009), out(1009, kPoison);
      bc_request_t req = nullptr;
      const bool posted = bc_iallreduce(in.data(), out.data(), 1009, BC_INT32, BC_SUM, a, &req) == BC_OK;
      const bool b_ok = exact_rounds(b, MPI_COMM_WORLD, 101, false);
      const bool waited = posted && bc_wait(&req) == BC_OK;
      bool a_ok = waited;
      for (int i = 0; i < 1009 && a_ok; ++i) a_ok = out[i] == static_cast<int32_t>(101 * p * (p + 1) / 2 + p * i);
      CHECK(everywhere(a_ok && b_ok));
    }
    REQUIRE(bc_comm_destroy(&a) == BC_OK);
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &c) == BC_OK));
    CHECK(everywhere(exact_rounds(c, MPI_COMM_WORLD, 102, true) && exact_rounds(b, MPI_COMM_WORLD, 103, true)));
    REQUIRE(bc_comm_destroy(&b) == BC_OK);
    REQUIRE(bc_comm_destroy(&c) == BC_OK);
    // Rank 0 alone churns communicators of its own (MPI_COMM_SELF) until the
    // world setup it kept is evicted, while the others keep theirs: the next
    // world communicator must set up anew everywhere, not half reuse.
    if (r == 0) {
      for (int i = 0; i < 6; ++i) {
        bc_comm_t self = nullptr;
        REQUIRE(bc_comm_create_with(MPI_COMM_SELF, options.c_str(), &self) == BC_OK);
        REQUIRE(bc_comm_destroy(&self) == BC_OK);
      }
    }
    bc_comm_t d = nullptr;
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &d) == BC_OK));
    CHECK(everywhere(exact_rounds(d, MPI_COMM_WORLD, 104, true)));
    REQUIRE(bc_comm_destroy(&d) == BC_OK);
  }
  MPI_Comm_free(&reversed);
  MPI_Comm_free(&half);
}
