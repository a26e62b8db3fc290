#include "sched/operation.h"

#include <sched.h>

#include <chrono>

#include "core/blocks.h"
#include "core/log.h"
#include "cuda/cuda_rt.h"

namespace bc {

using Clock = std::chrono::steady_clock;

Operation::Operation(const ExecContext &ctx, unsigned char *work, int64_t count, int64_t nchunks, int depth,
                     std::shared_ptr<const Program> big, std::shared_ptr<const Program> small, uint32_t seq_base)
    : ctx_(ctx),
      work_(work),
      count_(count),
      nchunks_(nchunks),
      big_(std::move(big)),
      small_(std::move(small)),
      seq_base_(seq_base),
      elem_(bc_dtype_size(ctx.dtype)),
      slots_(static_cast<size_t>(std::max<int64_t>(1, std::min<int64_t>(depth, nchunks)))),
      stage_seconds_(big_->stage_algos.size(), 0.0) {}

Operation::~Operation() {
  cancel();
  for (Slot &s : slots_)
    if (s.dev_scratch) ctx_.dev_pool->release(s.dev_scratch);
}

Status Operation::slot_scratch(Slot *slot, size_t need, unsigned char **out) {
  if (ctx_.mem == BC_MEM_CUDA) {
    if (!slot->dev_scratch || slot->scratch_bytes < need) {
      if (slot->dev_scratch) ctx_.dev_pool->release(slot->dev_scratch);
      slot->dev_scratch = nullptr;
      BC_CHECK(ctx_.dev_pool->acquire(std::max<size_t>(need, 1), &slot->dev_scratch));
      slot->scratch_bytes = need;
    }
    *out = static_cast<unsigned char *>(slot->dev_scratch);
    return BC_OK;
  }
  if (slot->scratch_bytes < need) {
    slot->scratch.reset(new unsigned char[need]);
    slot->scratch_bytes = need;
  }
  *out = slot->scratch.get();
  return BC_OK;
}

void Operation::cancel() {
  for (Slot &s : slots_)
    if (s.exec) {
      s.exec->cancel_all();
      s.exec.reset();
    }
}

Status Operation::start_chunk(Slot *slot) {
  const int64_t j = next_chunk_++;
  const int64_t n = block_count(count_, nchunks_, j);
  const Program *prog = n == big_->count ? big_.get() : small_.get();
  if (prog->count != n) return BC_FAIL(BC_ERR_INTERNAL, "no plan for a chunk of %lld elements", static_cast<long long>(n));
  const size_t need = static_cast<size_t>(prog->scratch_elems) * elem_;
  unsigned char *scratch = nullptr;
  BC_CHECK(slot_scratch(slot, need, &scratch));
  slot->exec.reset(new Execution(*prog, ctx_, work_ + block_offset(count_, nchunks_, j) * elem_, scratch,
                                 seq_base_ + static_cast<uint32_t>(j)));
  return BC_OK;
}

Status Operation::progress(bool *done) {
  for (Slot &s : slots_) {
    // A slot runs chunk after chunk: as soon as one finishes the next starts.
    for (;;) {
      if (!s.exec) {
        if (next_chunk_ >= nchunks_) break;
        BC_CHECK(start_chunk(&s));
      }
      bool chunk_done = false;
      BC_CHECK(s.exec->progress(&chunk_done));
      if (!chunk_done) break;
      const std::vector<double> &t = s.exec->stage_seconds();
      for (size_t i = 0; i < t.size() && i < stage_seconds_.size(); ++i) stage_seconds_[i] += t[i];
      retired_completions_ += s.exec->completions() + 1;
      s.exec.reset();
      ++finished_chunks_;
    }
  }
  *done = finished_chunks_ == nchunks_;
  return BC_OK;
}

Status Operation::wait() {
  int64_t idle_polls = 0;
  uint64_t last_seen = UINT64_MAX;
  Clock::time_point last_move = Clock::now();
  for (;;) {
    bool done = false;
    Status st = progress(&done);
    if (st != BC_OK) {
      cancel();
      BC_CHECK(st);
    }
    if (done) return BC_OK;
    uint64_t seen = retired_completions_;
    for (const Slot &s : slots_)
      if (s.exec) seen += s.exec->completions();
    if (seen != last_seen) {
      last_seen = seen;
      last_move = Clock::now();
      idle_polls = 0;
      continue;
    }
    if (++idle_polls < ctx_.spin_count) continue;
    idle_polls = 0;
    if (ctx_.sleeper) {
      int64_t ms = 100;  // bounded: the timeout below still gets checked
      if (ctx_.timeout_ms > 0) {
        int64_t left = ctx_.timeout_ms -
                       std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_move).count();
        ms = std::max<int64_t>(1, std::min<int64_t>(ms, left + 1));
      }
      Status ws = ctx_.sleeper->idle_wait(static_cast<int>(ms));
      if (ws != BC_OK) {
        cancel();
        BC_CHECK(ws);
      }
    } else {
      sched_yield();
    }
    if (ctx_.timeout_ms > 0 &&
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_move).count() > ctx_.timeout_ms) {
      std::string what;
      for (const Slot &s : slots_)
        if (s.exec) { what = s.exec->pending(); break; }
      cancel();
      return BC_FAIL(BC_ERR_TIMEOUT, "no progress for %lld ms (BC_TIMEOUT); chunk %lld of %lld waits in%s",
                     static_cast<long long>(ctx_.timeout_ms), static_cast<long long>(finished_chunks_ + 1),
                     static_cast<long long>(nchunks_), what.c_str());
    }
  }
}

}  // namespace bc
