// Several threads of one process, each with communicators of its own, calling
// the library at the same time (MPI_THREAD_MULTIPLE, threads_main.cc). The
// communicators of a process share the UCX worker and its endpoints
// (transports/ucx/ucx_transport.h), the node's shared-memory setup and the
// liveness watch, so operations of different threads meet there; MPI allows
// this as long as one communicator's calls come from one thread at a time.
//
// Every thread's data depends on its communicator, so a message delivered to
// the wrong operation shows as a wrong element, not only as a hang. Each
// thread records its first failure; the ranks agree on them after the join
// (threads never call MPI collectives on MPI_COMM_WORLD).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness.h"

using namespace bctest;

namespace {

constexpr int kThreads = 3;

// The MPI communicators the threads use, made on the main thread in the same
// order on every rank: the world, the world in reverse rank order, and halves
// (odd and even world ranks: uneven sizes when p is odd; one rank at p = 2).
MPI_Comm parent(int k) {
  const int p = world_size(), r = world_rank();
  MPI_Comm c = MPI_COMM_NULL;
  if (k == 0) MPI_Comm_dup(MPI_COMM_WORLD, &c);
  if (k == 1) MPI_Comm_split(MPI_COMM_WORLD, 0, p - 1 - r, &c);
  if (k == 2) MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &c);
  return c;
}

// Element i of rank r's input in thread k's `round`-th call: small integers,
// so every sum is exact in float32, and different in every thread and round.
int64_t value(int k, int r, int64_t i, int round) { return (i * 37 + r * 101 + k * 17 + round * 3) % 200 - 100; }

struct Kind {
  bc_dtype_t dtype;
  bc_op_t op;
};
constexpr Kind kKinds[] = {{BC_INT32, BC_SUM}, {BC_FLOAT32, BC_SUM}, {BC_FLOAT64, BC_MAX}, {BC_FLOAT32, BC_SUM}};

int64_t expected(const Kind &kind, int k, int p, int64_t i, int round) {
  int64_t acc = value(k, 0, i, round);
  for (int r = 1; r < p; ++r)
    acc = kind.op == BC_MAX ? std::max(acc, value(k, r, i, round)) : acc + value(k, r, i, round);
  return acc;
}

// One thread's work: `rounds` passes over counts of every shape (0, 1, a
// prime, p ± 1, a count not divisible by p, and one large enough to be cut
// into pipelined chunks), blocking and non-blocking, in place and not, with
// poisoned outputs and guard bytes. Returns "" or the first failure.
std::string run_thread(int k, bc_comm_t comm, int rounds) {
  int r = 0, p = 0;
  if (bc_comm_rank(comm, &r) != BC_OK || bc_comm_size(comm, &p) != BC_OK) return bc_last_error();
  const int64_t counts[] = {0, 1, 7, p + 1, 1031, 65537, 600001};
  int call = 0;
  for (int round = 0; round < rounds; ++round) {
    for (int64_t n : counts) {
      const Kind &kind = kKinds[call % 4];
      const bool in_place = call % 2 == 0, nonblocking = call % 3 == 1;
      ++call;
      const size_t es = bc_dtype_size(kind.dtype), bytes = es * static_cast<size_t>(n);
      Guarded in(bytes), out(bytes);
      for (int64_t i = 0; i < n; ++i) put(in_place ? out.data() : in.data(), kind.dtype, i, value(k, r, i, round));
      const void *send = in_place ? BC_IN_PLACE : in.data();
      bc_status_t st;
      if (nonblocking) {
        bc_request_t req = nullptr;
        st = bc_iallreduce(send, out.data(), n, kind.dtype, kind.op, comm, &req);
        if (st == BC_OK) st = bc_wait(&req);
      } else {
        st = bc_allreduce(send, out.data(), n, kind.dtype, kind.op, comm);
      }
      const std::string what = "thread " + std::to_string(k) + " round " + std::to_string(round) + " count " +
                               std::to_string(n) + " " + bc_dtype_name(kind.dtype) + " " + bc_op_name(kind.op) +
                               (in_place ? " in place" : "") + (nonblocking ? " bc_iallreduce" : "");
      if (st != BC_OK) return what + ": " + bc_strerror(st) + ": " + bc_last_error();
      std::vector<unsigned char> want(es);
      for (int64_t i = 0; i < n; ++i) {
        put(want.data(), kind.dtype, 0, expected(kind, k, p, i, round));
        if (std::memcmp(want.data(), static_cast<unsigned char *>(out.data()) + i * es, es) != 0)
          return what + ": element " + std::to_string(i) + " wrong";
      }
      if (!out.guards_intact() || !in.guards_intact()) return what + ": guard bytes damaged";
      if (!in_place)
        for (int64_t i = 0; i < n; ++i) {
          put(want.data(), kind.dtype, 0, value(k, r, i, round));
          if (std::memcmp(want.data(), static_cast<unsigned char *>(in.data()) + i * es, es) != 0)
            return what + ": input element " + std::to_string(i) + " changed";
        }
    }
  }
  return "";
}

// Each rank's failures, one line per thread that failed, for rank 0's report.
std::string failures(const std::vector<std::string> &errors) {
  std::string line;
  for (const std::string &e : errors)
    if (!e.empty()) line += (line.empty() ? "" : " | ") + e;
  return "rank " + std::to_string(world_rank()) + ": " + (line.empty() ? "ok" : line);
}

}  // namespace

TEST_CASE("threads: each thread all-reduces on communicators of its own, all at once", "[threads]") {
  // Over UCX also with waits that sleep on the shared worker's event fd: a
  // thread's progress there may take the event another thread sleeps on, and
  // must wake it (UcxWorker::sleepers).
  std::vector<std::pair<std::string, std::string>> setups;  // (transport, options)
  for (const std::string &t : transports_to_try())
    for (const char *progress : {"0", "1"}) {
      const std::string options = "BC_TRANSPORT=" + t + ";BC_TIMEOUT=60s;BC_PROGRESS_THREAD=" + progress;
      setups.emplace_back(t, options);
      if (t == "ucx") setups.emplace_back(t, options + ";BC_UCX_WAIT=event");
    }
  for (const auto &[t, options] : setups) {
    INFO("options " << options);
    MPI_Comm parents[kThreads];
    bc_comm_t comms[kThreads] = {nullptr, nullptr, nullptr};
    bc_status_t created = BC_OK;
    std::string create_error;
    for (int k = 0; k < kThreads; ++k) {
      parents[k] = parent(k);
      const bc_status_t st = bc_comm_create_with(parents[k], options.c_str(), &comms[k]);
      if (st != BC_OK && created == BC_OK) {
        created = st;
        create_error = bc_last_error();
      }
    }
    if (everywhere(created == BC_ERR_NOT_SUPPORTED)) {
      WARN("BC_TRANSPORT=" << t << " is not available here: skipped (" << create_error << ")");
    } else {
      INFO(create_error);
      REQUIRE(everywhere(created == BC_OK));
      std::vector<std::string> errors(kThreads);
      std::vector<std::thread> threads;
      for (int k = 0; k < kThreads; ++k)
        threads.emplace_back([&errors, &comms, k] { errors[k] = run_thread(k, comms[k], 3); });
      for (std::thread &th : threads) th.join();
      const bool ok = std::all_of(errors.begin(), errors.end(), [](const std::string &e) { return e.empty(); });
      const std::string report = gather_lines(failures(errors), 1500);
      INFO(report);
      CHECK(everywhere(ok));
    }
    for (int k = 0; k < kThreads; ++k) {
      if (comms[k]) CHECK(everywhere(bc_comm_destroy(&comms[k]) == BC_OK));
      MPI_Comm_free(&parents[k]);
    }
  }
}

TEST_CASE("threads: communicators created, used and destroyed in threads at once", "[threads]") {
  for (const std::string &t : transports_to_try()) {
    const std::string options = "BC_TRANSPORT=" + t + ";BC_TIMEOUT=60s";
    INFO("options " << options);
    MPI_Comm parents[kThreads];
    for (int k = 0; k < kThreads; ++k) parents[k] = parent(k);
    // Each thread makes its communicator from its own parent five times over:
    // the creations of different threads (collective over different MPI
    // communicators) overlap with each other and with the other threads'
    // all-reduces.
    std::vector<std::string> errors(kThreads);
    std::vector<char> unsupported(kThreads, 0);  // not vector<bool>: each thread writes its own
    std::vector<std::thread> threads;
    for (int k = 0; k < kThreads; ++k)
      threads.emplace_back([&, k] {
        for (int life = 0; life < 5 && errors[k].empty() && !unsupported[k]; ++life) {
          bc_comm_t comm = nullptr;
          const bc_status_t st = bc_comm_create_with(parents[k], options.c_str(), &comm);
          if (st == BC_ERR_NOT_SUPPORTED) {
            unsupported[k] = 1;
            break;
          }
          if (st != BC_OK) {
            errors[k] = "thread " + std::to_string(k) + " creation " + std::to_string(life) + ": " +
                        bc_strerror(st) + ": " + bc_last_error();
            break;
          }
          errors[k] = run_thread(k, comm, 1);
          if (bc_comm_destroy(&comm) != BC_OK && errors[k].empty())
            errors[k] = "thread " + std::to_string(k) + " destroy " + std::to_string(life) + ": " + bc_last_error();
        }
      });
    for (std::thread &th : threads) th.join();
    for (int k = 0; k < kThreads; ++k) MPI_Comm_free(&parents[k]);
    const bool skip = std::any_of(unsupported.begin(), unsupported.end(), [](char u) { return u != 0; });
    if (everywhere(skip)) {
      WARN("BC_TRANSPORT=" << t << " is not available here: skipped");
      continue;
    }
    const bool ok = !skip && std::all_of(errors.begin(), errors.end(), [](const std::string &e) { return e.empty(); });
    const std::string report = gather_lines(failures(errors), 1500);
    INFO(report);
    CHECK(everywhere(ok));
  }
}
