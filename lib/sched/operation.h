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
// into lock step. progress() never blocks; wait() drives it, yields the core
// when nothing moved for BC_SPIN_COUNT polls, checks the peers' liveness every
// BC_LIVENESS_INTERVAL while nothing moves (BC_ERR_PEER_DEAD names a dead one;
// sched/liveness.h), and fails with BC_ERR_TIMEOUT when nothing moved for
// BC_TIMEOUT although every peer lives.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sched/executor.h"

namespace bc {

// The waiting policy of everything that polls operations (Operation::wait and
// the progress thread, lib/api/progress_thread.cc): did anything move since
// the last poll, is it time to rest the core, and has nothing moved for longer
// than BC_TIMEOUT.
class IdleTracker {
 public:
  IdleTracker(int64_t spin_count, int64_t timeout_ms)
      : spin_count_(spin_count), timeout_ms_(timeout_ms), last_move_(std::chrono::steady_clock::now()) {}
  // After a poll that saw `completions` in total: true when that is more than before.
  bool moved(uint64_t completions);
  // After a poll where nothing moved: true once every spin_count such polls
  // (then rest: yield or sleep, and check timed_out()).
  bool should_rest() {
    if (++idle_polls_ < spin_count_) return false;
    idle_polls_ = 0;
    return true;
  }
  // How long a rest may sleep: at most cap_ms, and not past the timeout.
  int64_t rest_ms(int64_t cap_ms) const;
  bool timed_out() const;
  // After a poll where nothing moved: true once nothing has moved for
  // interval_ms and the last check was at least interval_ms ago (then check
  // the peers). Never true on the fast path: it takes interval_ms of stillness.
  bool liveness_due(int64_t interval_ms);

 private:
  int64_t since_move_ms() const;
  int64_t spin_count_;
  int64_t timeout_ms_;  // 0: never
  int64_t idle_polls_ = 0;
  uint64_t last_seen_ = UINT64_MAX;
  std::chrono::steady_clock::time_point last_move_;
  std::chrono::steady_clock::time_point last_check_{};
};

class Operation {
 public:
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

  Status progress(bool *done);
  Status wait();
  void cancel();
  // Transfers completed so far (finished chunks and those in flight): grows
  // whenever anything moved.
  uint64_t completions() const;
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
  // After a poll where nothing moved: the peers' liveness when due, then the
  // timeout. The one policy of wait() and the progress thread.
  Status check_still(IdleTracker *idle);
  const ExecContext &context() const { return ctx_; }
  // Seconds per stage, summed over chunks (chunks overlap, so the sum can
  // exceed the wall time).
  std::vector<double> stage_seconds() const { return stage_seconds_; }

 private:
  struct Slot {
    std::unique_ptr<Execution> exec;
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
  unsigned char *work_;
  const unsigned char *input_;
  int64_t count_;
  int64_t nchunks_;
  std::shared_ptr<const Program> big_, small_;
  uint32_t seq_base_;
  size_t elem_;
  std::vector<Slot> slots_;
  int64_t next_chunk_ = 0;
  int64_t finished_chunks_ = 0;
  uint64_t retired_completions_ = 0;
  std::vector<double> stage_seconds_;
};

}  // namespace bc
