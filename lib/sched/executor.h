// Runs one rank's Program over the transports: the progress engine.
//
// Execution runs one Program (one chunk of a collective) and is non-blocking:
// progress() posts the current Step's receives and sends, tests them, reduces
// what arrived and moves on, never waiting. A step ends when its receives are
// in: a send still out goes on alongside later steps ("Sends that outlive
// their step" in executor.cc). Operation (operation.h) runs the
// chunks of a collective through a window of Executions and does the waiting.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "blueconnect.h"
#include "core/timeline.h"
#include "plan/plan.h"
#include "reduce/reduce.h"
#include "transports/transport.h"

namespace bc {

class BufferPool;
class Liveness;

struct ExecContext {
  const std::vector<Transport *> *peer_transport = nullptr;  // per rank of the communicator
  bc_memtype_t mem = BC_MEM_HOST;  // of the work and scratch buffers
  BufferPool *scratch_pool = nullptr;  // where scratch comes from: the communicator's pool of memory type `mem`
  bc_dtype_t dtype = BC_FLOAT32;
  bc_op_t op = BC_SUM;
  int nranks = 1;
  int64_t timeout_ms = 0;  // 0: wait forever
  int64_t spin_count = 64;
  Transport *sleeper = nullptr;  // the one transport of every peer, if it can sleep
  // The communicator's peer checks (sched/liveness.h); null: none. Consulted
  // only while the operation waits without progress.
  Liveness *liveness = nullptr;
  uint32_t timeline_comm = timeline::kUnrecorded;  // the communicator's id in the timeline (core/timeline.h)
};

class Execution {
 public:
  // Idle until start().
  Execution() = default;
  ~Execution();
  // Runs `prog` from its first step. `work` has prog.count elements;
  // `scratch` at least prog.scratch_elems. `input` (host buffers only; null
  // when the input is already in `work`): the caller's input, read where the
  // work buffer does not hold its data yet (see "Lazy input" in executor.cc);
  // by the end `work` holds the result. An Execution that finished (or was
  // cancelled) may start again: its vectors keep their capacity, so a chunk
  // or a call after the first allocates nothing. `lane`: the pipeline slot
  // that runs it, for the timeline.
  void start(const Program &prog, const ExecContext &ctx, void *work, void *scratch, uint32_t seq,
             const void *input = nullptr, int lane = 0);
  Execution(const Execution &) = delete;
  Execution &operator=(const Execution &) = delete;

  Status progress(bool *done);
  // Abandons the posted requests (after a failure or timeout).
  void cancel_all();
  // Transfers completed so far: a waiter that sees this unchanged is idle.
  uint64_t completions() const { return completions_; }
  // Transport requests tested so far (the waiting policy's unit of idle work).
  uint64_t tests() const { return tests_; }
  // What the current step still waits for, for timeout messages.
  std::string pending() const;
  // Seconds spent in each hierarchy stage (index = stage), for bc_bench --stages.
  const std::vector<double> &stage_seconds() const { return stage_seconds_; }

 private:
  Status post_step();
  Status finish_step();
  Status reduce_in_member_order(const Step &st);
  // Timeline records (core/timeline.h), only when it is on.
  void note(timeline::Kind kind, size_t step, int peer, int64_t bytes) const;
  void note_transfer(size_t request) const;
  // Sends that outlive their step (executor.cc).
  Status test_lagging();
  bool send_reads(const Range &r) const;  // a send still out reads part of r (in work)
  bool writes_busy(const Step &st) const;  // st writes what a send still out reads
  // Lazy input: the ranges of `work` that still lack their input.
  bool untouched(const Range &r) const;       // all of r lacks it
  void materialize(const Range &r);           // copy what r lacks from the input
  void overwritten(const Range &r);           // r was received whole: nothing to copy

  const Program *prog_ = nullptr;
  ExecContext ctx_;
  Reducer reducer_;          // ctx_'s (dtype, op, mem), checked once per start()
  Status reducer_status_;    // why reducer_ is unusable (the API checks first, so never in practice)
  unsigned char *work_ = nullptr;
  unsigned char *scratch_ = nullptr;
  const unsigned char *input_ = nullptr;
  std::vector<Range> untouched_;  // disjoint, in no order
  std::vector<Range> untouched_next_;  // overwritten()'s result, copied back: no allocation per call
  size_t elem_ = 0;
  uint32_t seq_bits_ = 0;
  uint32_t seq_ = 0;  // for the timeline
  int lane_ = 0;
  size_t step_ = 0;
  bool posted_ = false;
  std::vector<TransportRequest> reqs_;  // the current step's: receives, then sends
  std::vector<char> req_done_;
  std::vector<Range> send_src_;  // per request: the range of work a send reads; empty for receives and sends from input
  size_t remaining_ = 0;
  size_t recvs_left_ = 0;
  struct LaggingSend {
    TransportRequest req;
    Range src;  // of work; empty when it reads the input
    size_t step;
    int peer;
    int64_t bytes;
  };
  std::vector<LaggingSend> lagging_;  // sends of finished steps still out, in posting order
  uint64_t completions_ = 0;
  uint64_t tests_ = 0;
  std::vector<double> stage_seconds_;
  std::chrono::steady_clock::time_point step_start_;
};

}  // namespace bc
