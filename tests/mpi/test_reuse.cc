// A communicator's blocking collectives reuse one Operation and its
// Executions (api/comm.h, spare_op): whatever one call leaves behind (lazy
// input ranges, chunk slots, a failed call's state) must not reach the next,
// and once warm a blocking all-reduce allocates nothing.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "harness.h"

using namespace bctest;

namespace {

// Every operator new in this process, the library's included (its calls
// resolve to this executable's definition). C malloc is not counted: the
// library's C++ code allocates through new.
std::atomic<uint64_t> g_news{0};

// An all-reduce of `c` (filled), in place or out of place (Case::take_input).
bc_status_t run(Case &c, bool in_place, bc_comm_t comm) {
  if (in_place) return bc_allreduce(BC_IN_PLACE, c.buf->data(), c.count, c.dtype, c.op, comm);
  const std::unique_ptr<Guarded> input = c.take_input();
  return bc_allreduce(input->data(), c.buf->data(), c.count, c.dtype, c.op, comm);
}

}  // namespace

// Every unaligned form, so that no pointer from another allocator (an
// AddressSanitizer build has its own) reaches these deletes: std::stable_sort
// takes its buffer with the nothrow form and gives it back with the sized one.
void *operator new(std::size_t n, const std::nothrow_t &) noexcept {
  g_news.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void *operator new(std::size_t n) {
  if (void *p = operator new(n, std::nothrow)) return p;
  throw std::bad_alloc();
}
void *operator new[](std::size_t n) { return operator new(n); }
void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return operator new(n, std::nothrow); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
void operator delete[](void *p, const std::nothrow_t &) noexcept { std::free(p); }

TEST_CASE("a reused operation carries nothing from one call to the next", "[reuse][pipeline]") {
  const int p = world_size(), r = world_rank();
  bc_comm_t comm = nullptr;
  // 4 KiB chunks, 3 in flight: the large calls run many chunks through the
  // slots; the small ones one chunk in one slot.
  REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, "BC_CHUNK=4K;BC_PIPELINE_DEPTH=3", &comm) == BC_OK));
  struct Call {
    bc_dtype_t dtype;
    bc_op_t op;
    int64_t count;
    bool in_place;
  };
  const Call calls[] = {
      {BC_FLOAT32, BC_SUM, 70001, false},  // lazy input over 18 chunks
      {BC_INT8, BC_MAX, 1, true},
      {BC_FLOAT64, BC_AVG, 13, false},
      {BC_UINT64, BC_BXOR, 20011, true},
      {BC_BFLOAT16, BC_SUM, 1009, false},
  };
  for (int round = 0; round < 3; ++round) {
    for (const Call &k : calls) {
      Case c{k.dtype, k.op, k.count, nullptr};
      c.fill(r, p);
      const bc_status_t st = run(c, k.in_place, comm);
      INFO("round " << round << ", " << bc_dtype_name(k.dtype) << " " << bc_op_name(k.op) << " count " << k.count
                    << (k.in_place ? " in place" : " out of place") << ": " << bc_last_error());
      REQUIRE(everywhere(st == BC_OK && c.right(p)));
    }
    // A refused call and a call of nothing between them: neither may leave
    // anything for the next.
    float x = 1.0f;
    REQUIRE(everywhere(bc_allreduce(&x, &x, 1, static_cast<bc_dtype_t>(999), BC_SUM, comm) == BC_ERR_INVALID_ARG));
    REQUIRE(everywhere(bc_allreduce(&x, &x, 0, BC_FLOAT32, BC_SUM, comm) == BC_OK));
    // A non-blocking call takes the idle operation and gives it back when
    // bc_wait completes it (with a progress thread: drops it).
    Case nb{BC_INT32, BC_SUM, 5000, nullptr};
    nb.fill(r, p);
    bc_request_t req = nullptr;
    bc_status_t st = bc_iallreduce(BC_IN_PLACE, nb.buf->data(), nb.count, nb.dtype, nb.op, comm, &req);
    if (st == BC_OK) st = bc_wait(&req);
    INFO("round " << round << ", non-blocking int32 sum count 5000: " << bc_last_error());
    REQUIRE(everywhere(st == BC_OK && nb.right(p)));
  }
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
}

// The loop of small all-reduces a training step makes (loss, gradient norm,
// metrics): before the reuse, each call allocated its Operation, Execution and
// their vectors (nine malloc/free pairs, a tenth of an 8-byte call's time).
TEST_CASE("a warm blocking all-reduce allocates nothing", "[reuse]") {
  const int p = world_size(), r = world_rank();
  bc_comm_t comm = nullptr;
  // Without the argument agreement (a debug build's default, BC_CHECK_ARGS):
  // its MPI round allocates its own state per call. Whole: nothing at all.
  // Pipelined (4 KiB chunks, 3 in flight, several receives per peer waiting
  // at once): each slot's Execution sizes its vectors (8 allocations with the
  // Execution itself) the first time it runs a chunk, and timing decides when
  // that is (a slot whose chunk completes at once takes the next chunk too),
  // so up to 3 x 8 may fall in the counted calls; never one per call (before
  // the reuse: 5 Executions and their vectors per call).
  struct Setting {
    const char *options;
    uint64_t most;
  };
  for (const Setting &set : {Setting{"BC_CHECK_ARGS=0", 0},
                             Setting{"BC_CHECK_ARGS=0;BC_CHUNK=4K;BC_PIPELINE_DEPTH=3", 3 * 8}}) {
    const char *options = set.options;
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, options, &comm) == BC_OK));
    for (int64_t n : {int64_t{2}, int64_t{4099}}) {
      Case small{BC_FLOAT32, BC_SUM, n, nullptr};
      small.fill(r, p);
      const std::unique_ptr<Guarded> input = small.take_input();
      bc_status_t st = BC_OK;
      // Warm: the plan, the scratch and the operation are made by the first
      // call; across nodes the size's plan is learned first (its candidates
      // take turns, each building its own: docs/PLANS.md, Learning).
      int learning = 0;
      REQUIRE(bc_comm_learning_calls(comm, n * 4, &learning) == BC_OK);
      for (int k = 0; k < 3 + learning && st == BC_OK; ++k)
        st = bc_allreduce(input->data(), small.buf->data(), n, BC_FLOAT32, BC_SUM, comm);
      const uint64_t before = g_news.load();
      for (int k = 0; k < 50 && st == BC_OK; ++k)
        st = bc_allreduce(input->data(), small.buf->data(), n, BC_FLOAT32, BC_SUM, comm);
      const uint64_t made = g_news.load() - before;
      INFO(options << ", count " << n << ": " << made << " allocation(s) in 50 calls on rank " << r << "; "
                   << bc_last_error());
      REQUIRE(everywhere(st == BC_OK && small.right(p)));
      CHECK(everywhere(made <= set.most));
    }
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
}

// bc_iallreduce + bc_wait without a progress thread: the request is the one
// allocation; its operation is the communicator's idle one, given back.
TEST_CASE("a warm non-blocking all-reduce allocates its request only", "[reuse]") {
  const int p = world_size(), r = world_rank();
  bc_comm_t comm = nullptr;
  REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, "BC_PROGRESS_THREAD=0;BC_CHECK_ARGS=0", &comm) == BC_OK));
  Case c{BC_FLOAT32, BC_SUM, 2, nullptr};
  c.fill(r, p);
  const std::unique_ptr<Guarded> input = c.take_input();
  auto call = [&]() {
    bc_request_t req = nullptr;
    bc_status_t st = bc_iallreduce(input->data(), c.buf->data(), 2, BC_FLOAT32, BC_SUM, comm, &req);
    return st == BC_OK ? bc_wait(&req) : st;
  };
  bc_status_t st = BC_OK;
  for (int k = 0; k < 3 && st == BC_OK; ++k) st = call();
  const uint64_t before = g_news.load();
  for (int k = 0; k < 50 && st == BC_OK; ++k) st = call();
  const uint64_t made = g_news.load() - before;
  INFO(made << " allocation(s) in 50 calls on rank " << r << "; " << bc_last_error());
  REQUIRE(everywhere(st == BC_OK && c.right(p)));
  CHECK(everywhere(made <= 50));
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
}
