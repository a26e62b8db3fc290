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
// when nothing moved for BC_SPIN_COUNT polls, and fails with BC_ERR_TIMEOUT
// when nothing moved for BC_TIMEOUT.
#pragma once

#include <memory>
#include <vector>

#include "sched/executor.h"

namespace bc {

class Operation {
 public:
  // `big` serves chunks of big->count elements and `small` (may equal big) the
  // chunks one element shorter: cutting n into k chunks gives at most two sizes.
  Operation(const ExecContext &ctx, unsigned char *work, int64_t count, int64_t nchunks, int depth,
            std::shared_ptr<const Program> big, std::shared_ptr<const Program> small, uint32_t seq_base);
  ~Operation();
  Operation(const Operation &) = delete;
  Operation &operator=(const Operation &) = delete;

  Status progress(bool *done);
  Status wait();
  void cancel();
  // Seconds per stage, summed over chunks (chunks overlap, so the sum can
  // exceed the wall time).
  std::vector<double> stage_seconds() const { return stage_seconds_; }

 private:
  struct Slot {
    std::unique_ptr<Execution> exec;
    // Not a vector: scratch is always written before it is read, and zeroing
    // it cost about 4% of a 1 MB all-reduce.
    std::unique_ptr<unsigned char[]> scratch;
    size_t scratch_bytes = 0;
    // Device buffers: scratch from the communicator's pool, returned at the end.
    void *dev_scratch = nullptr;
  };
  Status slot_scratch(Slot *slot, size_t need, unsigned char **out);
  Status start_chunk(Slot *slot);

  ExecContext ctx_;
  unsigned char *work_;
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
