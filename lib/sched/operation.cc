#include "sched/operation.h"

#include "core/blocks.h"
#include "core/log.h"
#include "core/timeline.h"
#include "cuda/cuda_rt.h"
#include "sched/liveness.h"

namespace bc {

Operation::Operation(const ExecContext &ctx, unsigned char *work, int64_t count, int64_t nchunks, int depth,
                     std::shared_ptr<const Program> big, std::shared_ptr<const Program> small, uint32_t seq_base,
                     const unsigned char *input) {
  start(ctx, work, count, nchunks, depth, std::move(big), std::move(small), seq_base, input);
}

Operation::~Operation() { finish(); }

void Operation::start(const ExecContext &ctx, unsigned char *work, int64_t count, int64_t nchunks, int depth,
                      std::shared_ptr<const Program> big, std::shared_ptr<const Program> small, uint32_t seq_base,
                      const unsigned char *input) {
  finish();  // idle already, unless the caller skipped it
  ctx_ = ctx;
  work_ = work;
  input_ = input;
  count_ = count;
  nchunks_ = nchunks;
  big_ = std::move(big);
  small_ = std::move(small);
  seq_base_ = seq_base;
  elem_ = bc_dtype_size(ctx.dtype);
  slots_.resize(static_cast<size_t>(std::max<int64_t>(1, std::min<int64_t>(depth, nchunks))));
  next_chunk_ = 0;
  finished_chunks_ = 0;
  retired_completions_ = 0;
  retired_tests_ = 0;
  stage_seconds_.assign(big_->stage_algos.size(), 0.0);
  if (timeline::on())
    timeline::record(timeline::Kind::CallBegin, ctx.timeline_comm, seq_base, 0, -1, static_cast<int>(big_->kind),
                     static_cast<int>(nchunks), static_cast<uint64_t>(count) * elem_, 0);
}

void Operation::finish() {
  cancel();
  for (Slot &s : slots_)
    if (s.scratch) {
      ctx_.scratch_pool->release(s.scratch);
      s.scratch = nullptr;
      s.scratch_bytes = 0;
    }
  big_.reset();
  small_.reset();
}

Status Operation::slot_scratch(Slot *slot, size_t need, unsigned char **out) {
  if (!slot->scratch || slot->scratch_bytes < need) {
    if (slot->scratch) ctx_.scratch_pool->release(slot->scratch);
    slot->scratch = nullptr;
    BC_CHECK(ctx_.scratch_pool->acquire(std::max<size_t>(need, 1), &slot->scratch));
    slot->scratch_bytes = need;
  }
  *out = static_cast<unsigned char *>(slot->scratch);
  return BC_OK;
}

void Operation::cancel() {
  for (Slot &s : slots_)
    if (s.running) {
      s.exec->cancel_all();
      s.running = false;
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
  const int64_t at = block_offset(count_, nchunks_, j) * static_cast<int64_t>(elem_);
  if (!slot->exec) slot->exec.reset(new Execution);
  slot->exec->start(*prog, ctx_, work_ + at, scratch, seq_base_ + static_cast<uint32_t>(j),
                    input_ ? input_ + at : nullptr, static_cast<int>(slot - slots_.data()));
  slot->running = true;
  return BC_OK;
}

Status Operation::progress(bool *done) {
  for (Slot &s : slots_) {
    // A slot runs chunk after chunk: as soon as one finishes the next starts.
    for (;;) {
      if (!s.running) {
        if (next_chunk_ >= nchunks_) break;
        BC_CHECK(start_chunk(&s));
      }
      bool chunk_done = false;
      BC_CHECK(s.exec->progress(&chunk_done));
      if (!chunk_done) break;
      const std::vector<double> &t = s.exec->stage_seconds();
      for (size_t i = 0; i < t.size() && i < stage_seconds_.size(); ++i) stage_seconds_[i] += t[i];
      retired_completions_ += s.exec->completions() + 1;
      retired_tests_ += s.exec->tests();
      s.running = false;
      if (++finished_chunks_ == nchunks_ && timeline::on())
        timeline::record(timeline::Kind::CallEnd, ctx_.timeline_comm, seq_base_, 0, -1, 0, 0, 0, 0);
    }
  }
  *done = finished_chunks_ == nchunks_;
  return BC_OK;
}

uint64_t Operation::completions() const {
  uint64_t seen = retired_completions_;
  for (const Slot &s : slots_)
    if (s.running) seen += s.exec->completions();
  return seen;
}

uint64_t Operation::tests() const {
  uint64_t seen = retired_tests_;
  for (const Slot &s : slots_)
    if (s.running) seen += s.exec->tests();
  return seen;
}

Status Operation::fail_timeout() {
  std::string what;
  for (const Slot &s : slots_)
    if (s.running) { what = s.exec->pending(); break; }
  cancel();
  return BC_FAIL(BC_ERR_TIMEOUT, "no progress for %lld ms (BC_TIMEOUT); chunk %lld of %lld waits in%s",
                 static_cast<long long>(ctx_.timeout_ms), static_cast<long long>(finished_chunks_ + 1),
                 static_cast<long long>(nchunks_), what.c_str());
}

namespace {

const char *kind_name(CollKind k) {
  switch (k) {
    case CollKind::ReduceScatter: return "reduce-scatter";
    case CollKind::Allgather: return "all-gather";
    default: return "all-reduce";
  }
}

}  // namespace

Status Operation::fail_dead(const char *cause) {
  std::string what;
  int64_t chunk = finished_chunks_ + 1;
  // The first chunk in flight that still waits for something.
  for (const Slot &s : slots_) {
    if (!s.running) continue;
    const std::string p = s.exec->pending();
    if (p == " nothing") continue;
    what = p;
    break;
  }
  const Liveness &l = *ctx_.liveness;
  const std::vector<int> dead = l.dead();  // a copy: another thread may add to it
  // Nobody will answer the dead: their transports need not wait in cancel().
  for (int r : dead)
    if (r >= 0 && r < static_cast<int>(ctx_.peer_transport->size()) && (*ctx_.peer_transport)[r])
      (*ctx_.peer_transport)[r]->peer_died(r);
  cancel();
  // Who died, then (separately) what this rank was waiting for: the two differ
  // whenever this rank waits on a living neighbour that waits on the dead.
  const std::string who = l.who_list(dead);
  return BC_FAIL(BC_ERR_PEER_DEAD, "%s %s during %s (%s). Rank %d was waiting in chunk %lld of %lld:%s%s%s%s",
                 who.c_str(), dead.size() > 1 ? "have died" : "died", kind_name(big_->kind), l.how(dead[0]),
                 l.rank(), static_cast<long long>(chunk), static_cast<long long>(nchunks_),
                 what.empty() ? " nothing" : what.c_str(), cause ? " [the transport said: " : "", cause ? cause : "",
                 cause ? "]" : "");
}

Status Operation::check_peers(const char *cause) {
  if (!ctx_.liveness || !ctx_.liveness->check()) return BC_OK;
  return fail_dead(cause);
}

WaitPolicy Operation::wait_policy() const {
  const bool checks = ctx_.liveness && ctx_.liveness->enabled();
  return WaitPolicy(ctx_.spin_count, ctx_.timeout_ms, checks ? ctx_.liveness->interval_ms() : 0);
}

Status Operation::check_still(WaitPolicy *wait) {
  Status st = BC_OK;
  if (wait->liveness_due()) st = check_peers();
  if (st == BC_OK && wait->timed_out()) st = fail_timeout();
  return st;
}

Status Operation::explain_failure(Status st) {
  const std::string cause = last_error();
  cancel();
  if (ctx_.liveness && ctx_.liveness->enabled()) {
    // The transport may notice before the watch does (both see the same
    // closed socket, one poll apart): look for up to one interval, every 5 ms
    // (a check reads /proc or polls the UCX watch: too costly to repeat at once).
    Liveness *l = ctx_.liveness;
    const bool dead = WaitPolicy::poll_for(
        std::min<int64_t>(500, l->interval_ms()), [l] { return l->check(); }, [] { return false; }, 5);
    if (dead) return fail_dead(cause.c_str());
  }
  trail(st, __FILE__, __LINE__);
  return st;
}

Status Operation::wait() {
  WaitPolicy wait = wait_policy();
  uint64_t last_tested = tests();
  for (;;) {
    bool done = false;
    Status st = progress(&done);
    if (st != BC_OK) return explain_failure(st);
    if (done) return BC_OK;
    const uint64_t tested = tests();
    const uint64_t work = 1 + (tested - last_tested);  // the poll, and each request it tested
    last_tested = tested;
    if (wait.moved(completions()) || !wait.idle(work)) continue;
    // Bounded: the timeout and the liveness checks below still get their turn.
    Status ws = wait.rest(ctx_.sleeper);
    if (ws != BC_OK) return explain_failure(ws);
    const Status still = check_still(&wait);
    if (still != BC_OK) return still;
  }
}

}  // namespace bc
