// Argument agreement (BC_CHECK_ARGS, issue 13 item 2) and what a mismatch does
// without it (item 6). docs/FAILURES.md, "Argument mismatch", says what to
// expect; docs/TESTING.md how these run.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"
#include "transport_comm.h"

using namespace bctest;

namespace {

using Clock = std::chrono::steady_clock;

// Every transport, or the forced one (harness.h).
const std::vector<std::string> kAllTransports = {"auto", "mpi", "shm", "ucx"};

// What one rank saw.
struct Outcome {
  bc_status_t st = BC_OK;
  bool right = false;   // BC_OK with the exact result
  bool guards = true;   // nothing written outside the buffers
  double seconds = 0;   // from the call to its return
  std::string msg;
};

// Every rank's line, for rank 0's report (and BC_TEST_REPORT=1's table).
std::string all_ranks(const Outcome &o) {
  constexpr int kLine = 600;
  char head[128];
  std::snprintf(head, sizeof head, "rank %d: %s after %.3f s", world_rank(), bc_strerror(o.st), o.seconds);
  std::string line = head;
  if (o.st == BC_OK) line += o.right ? " (right)" : " (WRONG DATA)";
  if (!o.guards) line += " (GUARDS BROKEN)";
  if (!o.msg.empty()) line += ": " + o.msg.substr(0, o.msg.find('\n'));
  return gather_lines(line, kLine);
}

void report(const std::string &title, const std::string &lines) {
  const char *want = std::getenv("BC_TEST_REPORT");
  if (world_rank() == 0 && want && *want == '1') std::printf("%s:%s\n", title.c_str(), lines.c_str());
}

// One collective call as a rank makes it: kind, count, dtype, op.
struct Call {
  enum Kind { Allreduce, ReduceScatter, Allgather, Iallreduce } kind = Allreduce;
  int64_t count = 1000;
  bc_dtype_t dtype = BC_INT32;
  bc_op_t op = BC_SUM;
  bool null_recv = false;  // a rank whose own arguments are refused
};

// Runs `c` on exact data in guarded buffers and checks the result.
Outcome run_call(bc_comm_t comm, const Call &c) {
  const int r = world_rank(), p = world_size();
  const size_t es = bc_dtype_size(c.dtype);
  const int64_t in_elems = c.kind == Call::ReduceScatter ? c.count * p : c.count;
  const int64_t out_elems = c.kind == Call::Allgather ? c.count * p : c.kind == Call::ReduceScatter ? c.count : c.count;
  Guarded in(static_cast<size_t>(in_elems) * es), out(static_cast<size_t>(out_elems) * es);
  const bc_op_t fill_op = c.kind == Call::Allgather ? BC_SUM : c.op;
  for (int64_t i = 0; i < in_elems; ++i) put(in.data(), c.dtype, i, input_value(fill_op, c.dtype, r, p, i));
  void *recv = c.null_recv ? nullptr : out.data();
  Outcome o;
  const auto t0 = Clock::now();
  switch (c.kind) {
    case Call::Allreduce: o.st = bc_allreduce(in.data(), recv, c.count, c.dtype, c.op, comm); break;
    case Call::ReduceScatter: o.st = bc_reduce_scatter(in.data(), recv, c.count, c.dtype, c.op, comm); break;
    case Call::Allgather: o.st = bc_allgather(in.data(), recv, c.count, c.dtype, comm); break;
    case Call::Iallreduce: {
      bc_request_t req = nullptr;
      o.st = bc_iallreduce(in.data(), recv, c.count, c.dtype, c.op, comm, &req);
      if (o.st == BC_OK && req) o.st = bc_wait(&req);
      break;
    }
  }
  o.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (o.st != BC_OK) o.msg = bc_last_error();
  o.guards = in.guards_intact() && out.guards_intact();
  if (o.st == BC_OK) {
    o.right = true;
    std::vector<unsigned char> want(es);
    for (int64_t i = 0; i < out_elems && o.right; ++i) {
      int64_t v;
      if (c.kind == Call::Allgather) v = input_value(BC_SUM, c.dtype, static_cast<int>(i / c.count), p, i % c.count);
      else if (c.kind == Call::ReduceScatter) v = expected_value(c.op, c.dtype, p, r * c.count + i);
      else v = expected_value(c.op, c.dtype, p, i);
      put(want.data(), c.dtype, 0, v);
      o.right = std::memcmp(want.data(), static_cast<unsigned char *>(out.data()) + i * es, es) == 0;
    }
  }
  return o;
}

std::string others(int from) {
  const int p = world_size();
  return from == p - 1 ? "rank " + std::to_string(from) : "ranks " + std::to_string(from) + "-" + std::to_string(p - 1);
}

bool has(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

}  // namespace

// With the check on, a disagreement is BC_ERR_MISMATCH on every rank, within a
// few seconds (BC_TIMEOUT is 60 s here, so a timeout could not pass for it),
// naming who passed what; nothing is sent and the communicator still works.
TEST_CASE("with BC_CHECK_ARGS=1 every rank reports a mismatch at once, naming the ranks", "[mismatch]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) return;
  struct Fault {
    const char *what;
    Call odd;     // rank 0's call (or the last rank's, with `last`)
    Call common;  // everyone else's
    bool last;
    bc_status_t want;
    std::string odd_text, common_text;  // what the message must say
  };
  Call half, base, i64, maxop, zero, gather, rs_half, rs, ag_half, ag, iall_half, iall, refuse, irefuse;
  half.count = 500;
  i64.dtype = BC_INT64;
  maxop.op = BC_MAX;
  zero.count = 0;
  gather.kind = Call::Allgather;
  rs_half.kind = rs.kind = Call::ReduceScatter;
  rs_half.count = 50;
  rs.count = 100;
  ag_half.kind = ag.kind = Call::Allgather;
  ag_half.count = 50;
  ag.count = 100;
  iall_half.kind = iall.kind = Call::Iallreduce;
  iall_half.count = 500;
  refuse.null_recv = true;
  irefuse = iall;
  irefuse.null_recv = true;
  const std::string last = std::to_string(p - 1);
  const Fault faults[] = {
      {"half the count", half, base, false, BC_ERR_MISMATCH, "rank 0 passed allreduce count 500 int32 sum",
       others(1) + " passed allreduce count 1000 int32 sum"},
      {"int64 against int32", i64, base, false, BC_ERR_MISMATCH, "rank 0 passed allreduce count 1000 int64 sum",
       others(1) + " passed allreduce count 1000 int32 sum"},
      {"max against sum", maxop, base, false, BC_ERR_MISMATCH, "rank 0 passed allreduce count 1000 int32 max",
       others(1) + " passed allreduce count 1000 int32 sum"},
      {"count 0 against 1000", zero, base, false, BC_ERR_MISMATCH, "rank 0 passed allreduce count 0 int32 sum",
       others(1) + " passed allreduce count 1000 int32 sum"},
      {"allgather against allreduce", gather, base, false, BC_ERR_MISMATCH, "rank 0 passed allgather count 1000 int32",
       others(1) + " passed allreduce count 1000 int32 sum"},
      {"reduce_scatter, half the recvcount", rs_half, rs, false, BC_ERR_MISMATCH,
       "rank 0 passed reduce_scatter recvcount 50 int32 sum", others(1) + " passed reduce_scatter recvcount 100"},
      {"allgather, half the count", ag_half, ag, false, BC_ERR_MISMATCH, "rank 0 passed allgather count 50 int32",
       others(1) + " passed allgather count 100 int32"},
      {"iallreduce, the last rank half the count", iall_half, iall, true, BC_ERR_MISMATCH,
       "rank " + last + " passed allreduce count 500 int32 sum", "passed allreduce count 1000 int32 sum"},
      {"the last rank's recvbuf is NULL", refuse, base, true, BC_ERR_INVALID_ARG,
       "rank " + last + " refused its own arguments", ""},
      {"iallreduce, the last rank's recvbuf is NULL", irefuse, iall, true, BC_ERR_INVALID_ARG,
       "rank " + last + " refused its own arguments", ""},
  };
  for (const std::string &transport : transports_to_try(kAllTransports)) {
    const std::string options = "BC_TRANSPORT=" + transport + ";BC_CHECK_ARGS=1;BC_TIMEOUT=60s";
    bc_comm_t comm = create_on_transport(options, transport);
    if (!comm) continue;
    INFO(options);
    for (const Fault &f : faults) {
      const bool odd = f.last ? r == p - 1 : r == 0;
      const Outcome o = run_call(comm, odd ? f.odd : f.common);
      const std::string lines = all_ranks(o);
      report("BC_CHECK_ARGS=1 BC_TRANSPORT=" + transport + " np " + std::to_string(p) + ", " + f.what, lines);
      INFO("BC_TRANSPORT=" << transport << ", " << f.what << ", np " << p << ":" << lines);
      REQUIRE(everywhere(o.guards));
      REQUIRE(everywhere(o.st == f.want));
      REQUIRE(everywhere(o.seconds < 5.0));
      // The refusing rank keeps its own message; every other rank names it.
      const bool own = f.want == BC_ERR_INVALID_ARG && odd;
      REQUIRE(everywhere(own ? has(o.msg, "recvbuf is NULL") : has(o.msg, f.odd_text) && has(o.msg, f.common_text)));
      REQUIRE(everywhere(has(o.msg, "Nothing was sent") || own));
      REQUIRE(everywhere(!has(o.msg, "invalid argument: invalid argument")));  // raised again once, not nested
      // Nothing was sent: the next collective works and is right on every rank.
      const Outcome after = run_call(comm, base);
      INFO("the call after:" << all_ranks(after));
      REQUIRE(everywhere(after.right));
    }
    REQUIRE(everywhere(bc_comm_destroy(&comm) == BC_OK));
  }
}

// The agreement of a later call must not stall a request in flight that a
// peer waits for: rank 0 starts two requests before waiting for the first,
// the others wait for the first before starting the second (legal in MPI).
TEST_CASE("BC_CHECK_ARGS=1 keeps earlier requests moving while it agrees", "[mismatch]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) return;
  bc_comm_t comm = nullptr;
  REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, "BC_CHECK_ARGS=1;BC_TIMEOUT=20s", &comm) == BC_OK));
  Case a{BC_INT32, BC_SUM, 300000, nullptr}, b{BC_FLOAT32, BC_MAX, 1000, nullptr};
  a.fill(r, p);
  b.fill(r, p);
  bc_request_t ra = nullptr, rb = nullptr;
  bc_status_t s1 = bc_iallreduce(BC_IN_PLACE, a.buf->data(), a.count, a.dtype, a.op, comm, &ra), s2 = BC_OK,
              s3 = BC_OK, s4 = BC_OK;
  if (r == 0) {
    s2 = bc_iallreduce(BC_IN_PLACE, b.buf->data(), b.count, b.dtype, b.op, comm, &rb);
    s3 = bc_wait(&ra);
  } else {
    s3 = bc_wait(&ra);
    s2 = bc_iallreduce(BC_IN_PLACE, b.buf->data(), b.count, b.dtype, b.op, comm, &rb);
  }
  s4 = bc_wait(&rb);
  INFO(bc_last_error());
  REQUIRE(everywhere(s1 == BC_OK && s2 == BC_OK && s3 == BC_OK && s4 == BC_OK));
  REQUIRE(everywhere(a.right(p) && b.right(p)));
  REQUIRE(everywhere(bc_comm_destroy(&comm) == BC_OK));
}

// Without the check (the release default) a mismatch must stay memory-safe
// and never report wrong data as BC_OK: each rank gets the right result, a
// size error or BC_ERR_TIMEOUT (1 s here). Hidden from the full runs (each
// fault waits out the timeout); tests/meson.build runs "[mismatch]" at np 4.
TEST_CASE("with BC_CHECK_ARGS=0 a mismatch is a size error or a timeout, never wrong data", "[.][mismatch][off]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) return;
  Call half, base, i64, zero;
  half.count = 500;
  i64.dtype = BC_INT64;
  zero.count = 0;
  struct Fault {
    const char *what;
    Call odd;
  };
  const Fault faults[] = {{"rank 0 passes half the count", half},
                          {"rank 0 passes int64, the others int32", i64},
                          {"rank 0 passes count 0, the others 1000", zero}};
  for (const std::string &transport : transports_to_try(kAllTransports)) {
    const std::string options = "BC_TRANSPORT=" + transport + ";BC_CHECK_ARGS=0;BC_TIMEOUT=1s";
    for (const Fault &f : faults) {
      bc_comm_t comm = create_on_transport(options, transport);
      if (!comm) break;
      const Outcome o = run_call(comm, r == 0 ? f.odd : base);
      const std::string lines = all_ranks(o);
      report("BC_CHECK_ARGS=0 BC_TRANSPORT=" + transport + " np " + std::to_string(p) + ", " + f.what, lines);
      INFO("BC_TRANSPORT=" << transport << ", " << f.what << ", np " << p << ":" << lines);
      REQUIRE(everywhere(o.guards));
      REQUIRE(everywhere(o.st != BC_OK || o.right));  // never BC_OK with wrong data
      // Rank 0's count-0 call returns at once (it has nothing to send), right.
      REQUIRE(everywhere(o.st == BC_OK || o.st == BC_ERR_TRANSPORT || o.st == BC_ERR_TIMEOUT));
      REQUIRE(everywhere(bc_comm_destroy(&comm) == BC_OK));
    }
  }
}

// With the check, a rank that never calls is noticed by the agreement: the
// others get BC_ERR_TIMEOUT after BC_TIMEOUT, from the call itself or, for
// bc_iallreduce (whose agreement is its request's first phase), from bc_wait;
// the communicator is broken, as after any timeout.
TEST_CASE("with BC_CHECK_ARGS=1 a rank that never calls is a timeout of the agreement", "[mismatch][timeout]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) return;
  for (const bool nonblocking : {false, true}) {
    bc_comm_t comm = nullptr;
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, "BC_CHECK_ARGS=1;BC_TIMEOUT=300ms", &comm) == BC_OK));
    float a[8] = {0};
    Outcome o;
    if (r != p - 1) {
      const auto t0 = Clock::now();
      bc_request_t req = nullptr;
      bc_status_t started = BC_OK;
      if (nonblocking) {
        started = bc_iallreduce(BC_IN_PLACE, a, 8, BC_FLOAT32, BC_SUM, comm, &req);
        o.st = started == BC_OK ? bc_wait(&req) : started;
      } else {
        o.st = bc_allreduce(BC_IN_PLACE, a, 8, BC_FLOAT32, BC_SUM, comm);
      }
      o.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      o.msg = bc_last_error();
      o.right = started == BC_OK && req == nullptr;  // the call returned a request; bc_wait freed it
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const std::string lines = all_ranks(o);
    INFO((nonblocking ? "bc_iallreduce" : "bc_allreduce") << ", the last rank never calls:" << lines);
    if (r != p - 1) {
      REQUIRE(o.st == BC_ERR_TIMEOUT);
      REQUIRE(has(o.msg, "argument agreement (BC_CHECK_ARGS)"));
      REQUIRE(o.right);
      REQUIRE(o.seconds < 10.0);
      REQUIRE(bc_allreduce(BC_IN_PLACE, a, 8, BC_FLOAT32, BC_SUM, comm) == BC_ERR_INVALID_COMM);  // broken
    }
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
}
