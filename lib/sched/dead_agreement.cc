// Flooding consensus on the dead set (dead_agreement.h says what and why).
#include "sched/dead_agreement.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <list>
#include <memory>
#include <string>

#include "core/log.h"
#include "core/wait_policy.h"
#include "sched/liveness.h"

namespace bc {
namespace {

using Bits = std::vector<uint8_t>;  // one bit per rank

bool bit(const Bits &b, int r) { return (b[static_cast<size_t>(r) >> 3] >> (r & 7)) & 1; }
void set_bit(Bits *b, int r) { (*b)[static_cast<size_t>(r) >> 3] |= static_cast<uint8_t>(1u << (r & 7)); }

uint32_t round_tag(uint32_t base, int round) {
  return base | ((static_cast<uint32_t>(round) & kSeqTagMask) << kProgramTagBits);
}

// A transport that failed once may fail again as the peer's side of a closed
// connection reports the close late; more than this is not a passing state.
constexpr int kMaxReopens = 3;

// UCX may report a send complete whose bytes the peer's side then throws
// away: a message that crossed the connection the failure closed by force
// (UcxTransport::abort_peer) as it closed. shm never loses one. So a wait for
// a living ucx peer that stays still this long sends that peer everything
// sent it so far again, over a reopened connection, and waits twice as long
// before the next time, up to kResendMaxMs. The copies are harmless: each
// (sender, tag) is received once, and the rest stay unmatched until the old
// communicator is destroyed.
constexpr int64_t kResendFirstMs = 250;
constexpr int64_t kResendMaxMs = 8000;
// How long the sends still in flight after the decision may take (run()).
constexpr int64_t kSendsGraceMs = 200;

// One message of the agreement, sent or received.
struct Msg {
  int peer = -1;
  uint32_t tag = 0;
  bool is_send = false;
  bool active = false;  // posted and not yet complete, failed or cancelled
  bool done = false;    // complete: a receive's buffer holds the peer's set
  int reopens = 0;
  bool copy = false;  // a send made again (resend_if_due): never copied itself
  Bits buf;
  TransportRequest req;
};

class DeadAgreement {
 public:
  explicit DeadAgreement(const DeadAgreementSetup &s)
      : s_(s), bytes_((static_cast<size_t>(s.size) + 7) / 8), dead_(s.size, 0), got_(s.size, 1),
        proposals_in_(s.size), decided_in_(s.size) {}
  ~DeadAgreement() { cancel_all(); }
  Status run(DeadAgreementResult *out);

 private:
  Transport *transport(int peer) const { return s_.peer_transport[static_cast<size_t>(peer)]; }
  Status post(Msg *m);
  Status poll(Msg *m);
  void cancel(Msg *m);
  void cancel_all();
  void detect();
  Status send_to_all(uint32_t tag, const Bits &bits);
  Status start_round();
  Status decide(const Bits &value, bool relayed);
  Status advance();
  bool finished() const;
  bool waiting_for(int peer) const;
  std::string missing() const;
  Status resend_if_due();

  const DeadAgreementSetup &s_;
  const size_t bytes_;
  std::vector<char> dead_;  // detected here (the failure detector's word)
  int round_ = 0;
  std::vector<char> got_, got_prev_;  // whose round-r (and r-1) message came
  Bits seen_;                         // the union of this round's sets
  std::vector<std::unique_ptr<Msg>> proposals_in_, decided_in_;  // per peer
  std::list<Msg> sends_;  // every send, at stable addresses until the end
  bool decided_ = false, relayed_ = false;
  Bits decision_;
  uint64_t events_ = 0;  // completions and deaths: the wait's progress count
  std::chrono::steady_clock::time_point still_since_ = std::chrono::steady_clock::now();
  uint64_t still_events_ = 0;
  int64_t resend_ms_ = kResendFirstMs;
  int resends_ = 0;
};

Status DeadAgreement::post(Msg *m) {
  for (;;) {
    m->req = TransportRequest();
    Transport *t = transport(m->peer);
    Status st = m->is_send ? t->post_send(m->peer, m->buf.data(), m->buf.size(), BC_MEM_HOST, m->tag, &m->req)
                           : t->post_recv(m->peer, m->buf.data(), m->buf.size(), BC_MEM_HOST, m->tag, &m->req);
    if (st == BC_OK) {
      m->active = true;
      return BC_OK;
    }
    detect();
    if (dead_[m->peer]) {  // no longer needed
      clear_error();
      return BC_OK;
    }
    if (++m->reopens > kMaxReopens) {
      trail(st, __FILE__, __LINE__);
      return st;
    }
    clear_error();
    BC_CHECK(t->reopen(m->peer));
  }
}

// Tests an active message; a failure with a peer that is alive is mended
// (Transport::reopen) and the message posted again.
Status DeadAgreement::poll(Msg *m) {
  if (!m->active) return BC_OK;
  bool done = false;
  Status st = transport(m->peer)->test(&m->req, &done);
  if (st == BC_OK) {
    if (done) {
      m->active = false;
      m->done = true;
      ++events_;
    }
    return BC_OK;
  }
  cancel(m);
  detect();
  if (dead_[m->peer]) {
    clear_error();
    return BC_OK;
  }
  if (++m->reopens > kMaxReopens) {
    trail(st, __FILE__, __LINE__);
    return st;
  }
  BC_DEBUGLOG(Transport, "shrink: rank %d's %s rank %d failed (%s); reopening", s_.rank,
              m->is_send ? "message to" : "message from", m->peer, last_error());
  clear_error();
  BC_CHECK(transport(m->peer)->reopen(m->peer));
  return post(m);
}

void DeadAgreement::cancel(Msg *m) {
  if (!m->active) return;
  transport(m->peer)->cancel(&m->req);
  m->active = false;
}

void DeadAgreement::cancel_all() {
  for (auto &m : proposals_in_)
    if (m) cancel(m.get());
  for (auto &m : decided_in_)
    if (m) cancel(m.get());
  for (Msg &m : sends_) cancel(&m);
}

// Asks the failure detector; a new death ends every wait for that rank.
void DeadAgreement::detect() {
  if (!s_.liveness->check()) return;
  for (int r : s_.liveness->dead()) {
    if (dead_[r]) continue;
    dead_[r] = 1;
    ++events_;
    transport(r)->peer_died(r);
    if (proposals_in_[r]) cancel(proposals_in_[r].get());
    if (decided_in_[r]) cancel(decided_in_[r].get());
    for (Msg &m : sends_)
      if (m.peer == r) cancel(&m);
  }
}

Status DeadAgreement::send_to_all(uint32_t tag, const Bits &bits) {
  for (int p = 0; p < s_.size; ++p) {
    if (p == s_.rank || dead_[p]) continue;
    sends_.emplace_back();
    Msg &m = sends_.back();
    m.peer = p;
    m.tag = tag;
    m.is_send = true;
    m.buf = bits;
    BC_CHECK(post(&m));
  }
  return BC_OK;
}

Status DeadAgreement::start_round() {
  ++round_;
  if (round_ > static_cast<int>(kSeqTagMask))
    return BC_FAIL(BC_ERR_INTERNAL, "shrink: the survivors' agreement took more than %u rounds", kSeqTagMask);
  got_prev_ = got_;
  got_.assign(s_.size, 0);
  got_[s_.rank] = 1;
  // What this rank sends: what it saw last round, and every death it detected.
  if (seen_.empty()) seen_.assign(bytes_, 0);
  for (int r = 0; r < s_.size; ++r)
    if (dead_[r]) set_bit(&seen_, r);
  for (int p = 0; p < s_.size; ++p) {
    if (p == s_.rank || dead_[p]) continue;
    proposals_in_[p].reset(new Msg);
    Msg &m = *proposals_in_[p];
    m.peer = p;
    m.tag = round_tag(kAgreeProposalTag, round_);
    m.buf.assign(bytes_, 0);
    BC_CHECK(post(&m));
  }
  return send_to_all(round_tag(kAgreeProposalTag, round_), seen_);
}

Status DeadAgreement::decide(const Bits &value, bool relayed) {
  decided_ = true;
  relayed_ = relayed;
  decision_ = value;
  for (auto &m : proposals_in_)  // no round is waited for any more
    if (m) cancel(m.get());
  return send_to_all(kAgreeDecidedTag, decision_);
}

// One pass over every message; moves the rounds on.
Status DeadAgreement::advance() {
  for (int p = 0; p < s_.size; ++p) {
    Msg *d = decided_in_[p].get();
    if (!d) continue;
    const bool was_done = d->done;
    BC_CHECK(poll(d));
    if (d->done && !was_done && !decided_) BC_CHECK(decide(d->buf, true));
  }
  for (Msg &m : sends_) BC_CHECK(poll(&m));
  if (decided_) return BC_OK;
  for (int p = 0; p < s_.size; ++p) {
    Msg *m = proposals_in_[p].get();
    if (!m || got_[p]) continue;
    BC_CHECK(poll(m));
    if (!m->done) continue;
    got_[p] = 1;
    for (size_t i = 0; i < bytes_; ++i) seen_[i] |= m->buf[i];
  }
  for (int p = 0; p < s_.size; ++p)
    if (!got_[p] && !dead_[p]) return BC_OK;  // round not complete
  if (got_ == got_prev_) return decide(seen_, false);  // no death between the last two rounds
  return start_round();
}

bool DeadAgreement::finished() const {
  if (!decided_) return false;
  for (int p = 0; p < s_.size; ++p)
    if (p != s_.rank && !dead_[p] && !(decided_in_[p] && decided_in_[p]->done)) return false;
  for (const Msg &m : sends_)
    if (m.active && m.tag == kAgreeDecidedTag) return false;
  return true;
}

bool DeadAgreement::waiting_for(int p) const {
  if (p == s_.rank || dead_[p]) return false;
  return decided_ ? !(decided_in_[p] && decided_in_[p]->done) : !got_[p];
}

std::string DeadAgreement::missing() const {
  std::string out;
  for (int p = 0; p < s_.size; ++p)
    if (waiting_for(p)) out += (out.empty() ? "" : ", ") + std::to_string(p);
  return out;
}

Status DeadAgreement::resend_if_due() {
  const auto now = std::chrono::steady_clock::now();
  if (events_ != still_events_) {
    still_events_ = events_;
    still_since_ = now;
    return BC_OK;
  }
  if (now - still_since_ < std::chrono::milliseconds(resend_ms_)) return BC_OK;
  std::vector<Msg> again;
  for (const Msg &m : sends_)
    if (!m.copy && waiting_for(m.peer) && std::strcmp(transport(m.peer)->name(), "ucx") == 0) again.push_back(m);
  for (const Msg &m : again) {
    sends_.emplace_back();
    Msg &copy = sends_.back();
    copy.peer = m.peer;
    copy.tag = m.tag;
    copy.is_send = true;
    copy.copy = true;
    copy.buf = m.buf;
    BC_CHECK(post(&copy));
  }
  if (!again.empty()) {
    ++resends_;
    BC_DEBUGLOG(Transport, "shrink: rank %d still waits for rank(s) %s after %lld ms; sent its %zu message(s) to them "
                "again", s_.rank, missing().c_str(), static_cast<long long>(resend_ms_), again.size());
  }
  still_since_ = now;
  resend_ms_ = std::min(resend_ms_ * 2, kResendMaxMs);
  return BC_OK;
}

Status DeadAgreement::run(DeadAgreementResult *out) {
  detect();
  for (int p = 0; p < s_.size; ++p) {
    if (p == s_.rank || dead_[p]) continue;
    Status st = transport(p)->reopen(p);
    if (st != BC_OK) {
      detect();
      if (!dead_[p]) {
        trail(st, __FILE__, __LINE__);
        return st;
      }
      clear_error();
      continue;
    }
    decided_in_[p].reset(new Msg);
    Msg &m = *decided_in_[p];
    m.peer = p;
    m.tag = kAgreeDecidedTag;
    m.buf.assign(bytes_, 0);
    BC_CHECK(post(&m));
  }
  BC_CHECK(start_round());
  WaitPolicy wait(s_.spin_count, s_.timeout_ms, s_.liveness->interval_ms());
  for (;;) {
    BC_CHECK(advance());
    if (finished()) break;
    if (wait.moved(events_) || !wait.idle()) continue;
    wait.rest();
    if (wait.timed_out())
      return BC_FAIL(BC_ERR_TIMEOUT, "bc_comm_shrink: rank %d waited BC_TIMEOUT (%lld ms) for rank(s) %s, alive but "
                     "not in the survivors' agreement (round %d%s)", s_.rank, static_cast<long long>(s_.timeout_ms),
                     missing().c_str(), round_, decided_ ? ", decided" : "");
    if (wait.liveness_due()) detect();
    BC_CHECK(resend_if_due());
  }
  // Every living rank has decided, so no one needs a proposal any more. Sends
  // still in flight are given a moment before they are cancelled: cancelling
  // a UCX send to an off-node peer closes its connection by force
  // (UcxTransport::cancel), which the new communicator would then find
  // broken. These are a few bytes each and normally complete at once.
  WaitPolicy::poll_for(
      kSendsGraceMs,
      [this] {
        for (const Msg &m : sends_)
          if (m.active && !dead_[m.peer]) return false;
        return true;
      },
      [this] {
        const uint64_t before = events_;
        for (Msg &m : sends_) poll(&m);
        return events_ != before;
      });
  clear_error();
  cancel_all();
  if (bit(decision_, s_.rank))
    return BC_FAIL(BC_ERR_INTERNAL, "bc_comm_shrink: the survivors agreed that rank %d, which is alive, is dead",
                   s_.rank);
  out->dead.clear();
  for (int r = 0; r < s_.size; ++r)
    if (bit(decision_, r)) out->dead.push_back(r);
  out->rounds = round_;
  out->relayed = relayed_;
  out->resends = resends_;
  return BC_OK;
}

}  // namespace

Status agree_on_dead(const DeadAgreementSetup &setup, DeadAgreementResult *out) {
  if (!setup.liveness || static_cast<int>(setup.peer_transport.size()) != setup.size)
    return BC_FAIL(BC_ERR_INTERNAL, "agree_on_dead: no failure detector, or %zu transports for %d ranks",
                   setup.peer_transport.size(), setup.size);
  DeadAgreement agreement(setup);
  return agreement.run(out);
}

}  // namespace bc
