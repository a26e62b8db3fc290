// One collective in flight: its chunks, pipelined.
//
// The buffer is cut into chunks (BC_CHUNK); each chunk runs the same plan on its
// own slice, as its own Execution with its own tags. Up to BC_PIPELINE_DEPTH
// chunks are in flight at once, so while chunk c is in stage i+1 (the slow
// network), chunk c+1 is already in stage i (inside the node):
//
//   time ->     t0      t1      t2      t3      t4
//   chunk 0   RS1     RS2     AG2     AG1
//   chunk 1           RS1     RS2     AG2     AG1
//   chunk 2                   RS1     RS2     AG2 ...
//
// The chunks advance on their own as their messages arrive; nothing forces them
// into lock step. progress() never blocks; wait() drives it under the one
// waiting policy (core/wait_policy.h): it spins, rests the core when nothing
// moved for BC_SPIN_COUNT polls, checks the peers' liveness every
// BC_LIVENESS_INTERVAL while nothing moves (BC_ERR_PEER_DEAD names a dead one;
// sched/liveness.h), and fails with BC_ERR_TIMEOUT when nothing moved for
// BC_TIMEOUT although every peer lives.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/wait_policy.h"
#include "sched/executor.h"

namespace bc {

class Operation {
 public:
  // Idle until start(); a finished Operation may start again (comm_run keeps
  // one per communicator), so that a blocking call allocates nothing.
  Operation() = default;
  // `big` serves chunks of big->count elements and `small` (may equal big) the
  // chunks one element shorter: cutting n into k chunks gives at most two sizes.
  // `input`: host buffers, out of place: the caller's input, which is not
  // copied into `work` first but read where it is needed (executor.cc, "Lazy
  // input"); null when `work` already holds it.
  Operation(const ExecContext &ctx, unsigned char *work, int64_t count, int64_t nchunks, int depth,
            std::shared_ptr<const Program> big, std::shared_ptr<const Program> small, uint32_t seq_base,
            const unsigned char *input = nullptr);
  ~Operation();
  Operation(const Operation &) = delete;
  Operation &operator=(const Operation &) = delete;

  // As the constructor, on an idle Operation (a new one, or one after finish()).
  void start(const ExecContext &ctx, unsigned char *work, int64_t count, int64_t nchunks, int depth,
             std::shared_ptr<const Program> big, std::shared_ptr<const Program> small, uint32_t seq_base,
             const unsigned char *input = nullptr);
  // Cancels what is in flight and gives the scratch back to its pool and the
  // programs to the plan cache: idle again, its Executions kept for reuse.
  void finish();

  Status progress(bool *done);
  Status wait();
  void cancel();
  // Transfers completed so far (finished chunks and those in flight): grows
  // whenever anything moved.
  uint64_t completions() const;
  // Transport requests tested so far, over every chunk (WaitPolicy::idle's work).
  uint64_t tests() const;
  // Cancels and fails with BC_ERR_TIMEOUT, saying where the operation waits.
  Status fail_timeout();
  // Checks the peers (ctx.liveness); when one is dead, cancels and fails with
  // BC_ERR_PEER_DEAD naming the dead and, separately, what this rank waited
  // for. `cause`: the transport error that led here, or null.
  Status check_peers(const char *cause = nullptr);
  // After a transport or MPI failure `st` (its message in last_error()):
  // cancels, and when a peer turns out dead (it may take the watch a moment
  // after the transport noticed) fails with BC_ERR_PEER_DEAD instead.
  Status explain_failure(Status st);
  // This operation's waiting policy: BC_SPIN_COUNT, BC_TIMEOUT, and
  // BC_LIVENESS_INTERVAL when the liveness checks are on. For wait() and the
  // progress thread; bc_test takes only the spin count.
  WaitPolicy wait_policy() const;
  // After a rest (nothing moved): the peers' liveness when due, then the
  // timeout, as `wait` (from wait_policy()) decides. For wait() and the
  // progress thread.
  Status check_still(WaitPolicy *wait);
  const ExecContext &context() const { return ctx_; }
  // Seconds per stage, summed over chunks (chunks overlap, so the sum can
  // exceed the wall time).
  const std::vector<double> &stage_seconds() const { return stage_seconds_; }

 private:
  struct Slot {
    // Kept across chunks and calls; `running` while it runs a chunk.
    std::unique_ptr<Execution> exec;
    bool running = false;
    // From the communicator's pool (ctx.scratch_pool), returned at the end:
    // never zeroed (it is always written before it is read) and never
    // allocated per call (cuda/cuda_rt.h, BufferPool, says why).
    void *scratch = nullptr;
    size_t scratch_bytes = 0;
  };
  Status slot_scratch(Slot *slot, size_t need, unsigned char **out);
  Status start_chunk(Slot *slot);
  Status fail_dead(const char *cause);

  ExecContext ctx_;
  unsigned char *work_ = nullptr;
  const unsigned char *input_ = nullptr;
  int64_t count_ = 0;
  int64_t nchunks_ = 0;
  std::shared_ptr<const Program> big_, small_;
  uint32_t seq_base_ = 0;
  size_t elem_ = 0;
  std::vector<Slot> slots_;
  int64_t next_chunk_ = 0;
  int64_t finished_chunks_ = 0;
  uint64_t retired_completions_ = 0;
  uint64_t retired_tests_ = 0;
  std::vector<double> stage_seconds_;
};

}  // namespace bc
