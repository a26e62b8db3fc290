#include "sched/executor.h"

#include <cstring>
#include <sstream>

#include "core/log.h"
#include "core/timeline.h"
#include "cuda/cuda_rt.h"
#include "reduce/reduce.h"

namespace bc {

using Clock = std::chrono::steady_clock;

// Lazy input. An out-of-place all-reduce used to copy the whole input into the
// output before the first step: 25% of rank 0's time at 1 MiB on one node
// (perf, np 2). Instead, the input is read where it is used: a send of a range
// that work does not hold yet goes out from the input; the first reduction
// into such a range copies it just before (so it is in cache); a range
// received whole (all-gather) is never copied; whatever is left at the end
// (one rank: everything) is copied then. The arithmetic and its order are
// unchanged, so the results are the same bits.
void Execution::start(const Program &prog, const ExecContext &ctx, void *work, void *scratch, uint32_t seq,
                      const void *input, int lane) {
  cancel_all();  // nothing in flight after a finish; after a failure, what was left
  prog_ = &prog;
  ctx_ = ctx;
  work_ = static_cast<unsigned char *>(work);
  scratch_ = static_cast<unsigned char *>(scratch);
  input_ = static_cast<const unsigned char *>(input);
  elem_ = bc_dtype_size(ctx.dtype);
  // Programs use tags below 2^20; the sequence number keeps back-to-back
  // collectives apart (the layout: transports/transport.h).
  seq_bits_ = (seq & kSeqTagMask) << kProgramTagBits;
  seq_ = seq;
  lane_ = lane;
  step_ = 0;
  posted_ = false;
  req_done_.clear();
  remaining_ = 0;
  completions_ = 0;
  tests_ = 0;
  stage_seconds_.assign(prog.stage_algos.size(), 0.0);
  // Room for every send to outlive its step, so that a warm call allocates nothing.
  if (lagging_.capacity() < prog.sends) lagging_.reserve(prog.sends);
  untouched_.clear();
  if (input_ && prog.count > 0) untouched_.push_back(Range{0, prog.count});
  reducer_status_ = reducer_for(ctx.dtype, ctx.op, ctx.mem, &reducer_);
}

Execution::~Execution() { cancel_all(); }

// Sends that outlive their step. A step used to end when all its transfers
// had: its receives and its sends. But a send completes only when the peer has
// taken the data (shm: the peer copied it; UCX: the socket or the peer's get
// took it), so a rank whose receives were in still waited for a peer to be
// scheduled. On layout d (4 nodes x 2 ranks, 1 Gbit/s, 4 MiB) the node's
// reduce-scatter steps waited 3.4 ms on average after their receives, and a
// node's link idled while its first chunk did (the timeline, BC_TIMELINE_FILE).
// Now a step ends when its receives are in; its sends still out move to
// lagging_, are tested on every pass, and hold back only
//   - a step that writes what one of them reads (a copying step's receives
//     land in work at posting; a reducing step writes its ranges at the end),
//   - the end of the chunk: the buffer is the caller's once every send is out.
// Sends read work (or the caller's input, which nothing writes), so this is
// the whole hazard; scratch is only received into.
Status Execution::test_lagging() {
  // Compacted whatever happens: after a failure cancel_all() must see each
  // request once.
  Status st = BC_OK;
  size_t kept = 0;
  for (size_t i = 0; i < lagging_.size(); ++i) {
    LaggingSend &l = lagging_[i];
    bool d = false;
    if (st == BC_OK) {
      ++tests_;
      st = l.req.transport->test(&l.req, &d);
    }
    if (d) {
      ++completions_;
      if (timeline::on()) note(timeline::Kind::SendDone, l.step, l.peer, l.bytes);
      continue;
    }
    if (kept != i) lagging_[kept] = l;
    ++kept;
  }
  lagging_.resize(kept);
  if (st != BC_OK) trail(st, __FILE__, __LINE__);
  return st;
}

bool Execution::send_reads(const Range &r) const {
  for (const LaggingSend &l : lagging_)
    if (intersect(l.src, r).count > 0) return true;
  for (size_t i = 0; i < reqs_.size(); ++i)
    if (!req_done_[i] && intersect(send_src_[i], r).count > 0) return true;
  return false;
}

bool Execution::writes_busy(const Step &st) const {
  for (const Xfer &x : st.recvs)
    if (send_reads(x.range)) return true;
  return st.finish_avg && send_reads(st.avg_range);
}

void Execution::note(timeline::Kind kind, size_t step, int peer, int64_t bytes) const {
  const Step &st = prog_->steps[step];
  timeline::record(kind, ctx_.timeline_comm, seq_, static_cast<int>(step), st.stage,
                   st.combine == Combine::Reduce ? 1 : 0, peer, static_cast<uint64_t>(bytes), lane_);
}

// Requests are the step's receives, then its sends (post_step's order).
void Execution::note_transfer(size_t request) const {
  const Step &st = prog_->steps[step_];
  const bool recv = request < st.recvs.size();
  const Xfer &x = recv ? st.recvs[request] : st.sends[request - st.recvs.size()];
  note(recv ? timeline::Kind::RecvDone : timeline::Kind::SendDone, step_, x.peer,
       x.range.count * static_cast<int64_t>(elem_));
}

bool Execution::untouched(const Range &r) const {
  for (const Range &u : untouched_)
    if (u.offset <= r.offset && r.end() <= u.end()) return true;
  return false;
}

void Execution::overwritten(const Range &r) {
  std::vector<Range> &left = untouched_next_;
  left.clear();
  for (const Range &u : untouched_) {
    const Range both = intersect(u, r);
    if (both.count == 0) {
      left.push_back(u);
      continue;
    }
    if (u.offset < both.offset) left.push_back(Range{u.offset, both.offset - u.offset});
    if (both.end() < u.end()) left.push_back(Range{both.end(), u.end() - both.end()});
  }
  // Copied, not swapped: a swap would hand untouched_ the other's capacity,
  // possibly none, and the next start() would allocate again.
  untouched_.assign(left.begin(), left.end());
}

void Execution::materialize(const Range &r) {
  for (const Range &u : untouched_) {
    const Range both = intersect(u, r);
    if (both.count > 0)
      std::memcpy(work_ + both.offset * elem_, input_ + both.offset * elem_, static_cast<size_t>(both.count) * elem_);
  }
  overwritten(r);
}

void Execution::cancel_all() {
  for (size_t i = 0; i < reqs_.size(); ++i)
    if (reqs_[i].active && !req_done_[i]) reqs_[i].transport->cancel(&reqs_[i]);
  reqs_.clear();
  for (LaggingSend &l : lagging_)
    if (l.req.active) l.req.transport->cancel(&l.req);
  lagging_.clear();
}

Status Execution::post_step() {
  const Step &st = prog_->steps[step_];
  reqs_.assign(st.recvs.size() + st.sends.size(), TransportRequest{});
  req_done_.assign(reqs_.size(), 0);
  send_src_.assign(reqs_.size(), Range{});
  remaining_ = reqs_.size();
  recvs_left_ = st.recvs.size();
  size_t i = 0;
  int64_t scratch_off = 0;
  // Receives first, so that a peer's eager send finds its buffer.
  for (const Xfer &x : st.recvs) {
    unsigned char *dst;
    if (st.combine == Combine::Reduce) {
      dst = scratch_ + scratch_off * elem_;
      scratch_off += x.range.count;
    } else {
      dst = work_ + x.range.offset * elem_;
    }
    Transport *t = (*ctx_.peer_transport)[x.peer];
    BC_CHECK(t->post_recv(x.peer, dst, x.range.count * elem_, ctx_.mem, st.tag | seq_bits_, &reqs_[i++]));
  }
  for (const Xfer &x : st.sends) {
    const unsigned char *src = work_ + x.range.offset * elem_;
    send_src_[i] = x.range;
    if (!untouched_.empty()) {
      if (untouched(x.range)) {
        src = input_ + x.range.offset * elem_;  // as given: no copy
        send_src_[i] = Range{};                // nothing of work to keep unwritten
      } else {
        materialize(x.range);  // partly in work already: complete it there
      }
    }
    Transport *t = (*ctx_.peer_transport)[x.peer];
    BC_CHECK(t->post_send(x.peer, src, x.range.count * elem_, ctx_.mem, st.tag | seq_bits_, &reqs_[i++]));
  }
  // Received whole into work (copy steps): what was there never matters.
  if (st.combine == Combine::Copy && !untouched_.empty())
    for (const Xfer &x : st.recvs) overwritten(x.range);
  posted_ = true;
  step_start_ = Clock::now();
  if (timeline::on()) note(timeline::Kind::StepPost, step_, -1, 0);
  return BC_OK;
}

// x_0 op x_1 op ... op x_(q-1) in member order, mine at st.self_order: the
// first copy received accumulates (in scratch), mine joins at its place, and
// the sum is copied into work. Every member gets the same bits whatever its
// position (the ops are commutative, so acc op mine == mine op acc).
Status Execution::reduce_in_member_order(const Step &st) {
  const Range r = st.recvs.front().range;
  if (!untouched_.empty()) materialize(r);
  const size_t bytes = static_cast<size_t>(r.count) * elem_;
  unsigned char *acc = scratch_;
  unsigned char *mine = work_ + r.offset * elem_;
  for (size_t k = 1; k <= st.recvs.size(); ++k) {
    const unsigned char *next = k == static_cast<size_t>(st.self_order) ? mine
                                : scratch_ + (k < static_cast<size_t>(st.self_order) ? k : k - 1) * bytes;
    BC_CHECK(reducer_.apply(acc, next, r.count));
  }
  if (ctx_.mem == BC_MEM_CUDA) return cuda_copy(mine, acc, bytes);
  std::memcpy(mine, acc, bytes);
  return BC_OK;
}

Status Execution::finish_step() {
  const Step &st = prog_->steps[step_];
  if (st.combine == Combine::Reduce) {
    // Checked once, in start(); checked again only to report why.
    if (reducer_status_ != BC_OK) return reducer_for(ctx_.dtype, ctx_.op, ctx_.mem, &reducer_);
    // In the order the plan lists them: a fixed order, so every run and every
    // rank combines each element the same way.
    if (st.self_order > 0) {
      BC_CHECK(reduce_in_member_order(st));
    } else {
      int64_t scratch_off = 0;
      for (const Xfer &x : st.recvs) {
        if (!untouched_.empty()) materialize(x.range);
        BC_CHECK(reducer_.apply(work_ + x.range.offset * elem_, scratch_ + scratch_off * elem_, x.range.count));
        scratch_off += x.range.count;
      }
    }
  }
  if (st.finish_avg && !untouched_.empty()) materialize(st.avg_range);
  if (st.finish_avg)
    BC_CHECK(reduce_finish_avg(work_ + st.avg_range.offset * elem_, st.avg_range.count, ctx_.dtype,
                               ctx_.nranks, ctx_.mem));
  if (timeline::on()) note(timeline::Kind::StepDone, step_, -1, 0);
  if (st.stage >= 0)
    stage_seconds_[st.stage] += std::chrono::duration<double>(Clock::now() - step_start_).count();
  reqs_.clear();
  posted_ = false;
  ++step_;
  return BC_OK;
}

Status Execution::progress(bool *done) {
  *done = false;
  if (!lagging_.empty()) BC_CHECK(test_lagging());
  while (step_ < prog_->steps.size()) {
    const Step &st = prog_->steps[step_];
    if (!posted_) {
      // A copying step's receives land in work at once: not where a send still reads.
      if (st.combine == Combine::Copy && !lagging_.empty() && writes_busy(st)) return BC_OK;
      BC_CHECK(post_step());
    }
    for (size_t i = 0; i < reqs_.size() && remaining_ > 0; ++i) {
      if (req_done_[i]) continue;
      bool d = false;
      ++tests_;
      BC_CHECK(reqs_[i].transport->test(&reqs_[i], &d));
      if (d) {
        if (timeline::on()) note_transfer(i);
        req_done_[i] = 1;
        --remaining_;
        if (i < st.recvs.size()) --recvs_left_;
        ++completions_;
      }
    }
    if (recvs_left_ > 0) return BC_OK;
    // Every receive is in. Sends still out hold the step back only where its
    // reduction (or average) writes what they read.
    if ((remaining_ > 0 || !lagging_.empty()) && writes_busy(st)) return BC_OK;
    for (size_t i = st.recvs.size(); i < reqs_.size(); ++i)
      if (!req_done_[i]) {
        const Xfer &x = st.sends[i - st.recvs.size()];
        lagging_.push_back(LaggingSend{reqs_[i], send_src_[i], step_, x.peer, x.range.count * static_cast<int64_t>(elem_)});
      }
    BC_CHECK(finish_step());
    ++completions_;
  }
  if (!lagging_.empty()) return BC_OK;  // the chunk's buffer is the caller's once every send is out
  if (!untouched_.empty()) materialize(Range{0, prog_->count});  // what no step touched
  *done = true;
  return BC_OK;
}

std::string Execution::pending() const {
  std::ostringstream os;
  if (step_ < prog_->steps.size()) {
    const Step &st = prog_->steps[step_];
    os << " step " << step_ << " of " << prog_->steps.size();
    if (st.stage >= 0) os << " (stage " << st.stage + 1 << ")";
    os << ":";
    // Not posted yet: its receives would overwrite what a send still out reads.
    if (!posted_) os << " not posted until the sends below are taken";
    size_t i = 0;
    for (const Xfer &x : st.recvs) {
      if (posted_ && i < req_done_.size() && !req_done_[i]) os << " recv from rank " << x.peer << " (" << x.range.count * elem_ << " B)";
      ++i;
    }
    for (const Xfer &x : st.sends) {
      if (posted_ && i < req_done_.size() && !req_done_[i]) os << " send to rank " << x.peer << " (" << x.range.count * elem_ << " B)";
      ++i;
    }
  }
  if (!lagging_.empty()) {
    os << " [sends of earlier steps still out:";
    for (const LaggingSend &l : lagging_) os << " to rank " << l.peer << " (" << l.bytes << " B, step " << l.step << ")";
    os << "]";
  }
  const std::string what = os.str();
  return what.empty() ? " nothing" : what;
}

}  // namespace bc
