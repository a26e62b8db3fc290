// Flooding consensus on the dead set (dead_agreement.h says what and why).
#include "sched/dead_agreement.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "core/log.h"
#include "core/wait_policy.h"

namespace bc {
namespace {

using Bits = std::vector<uint8_t>;  // one bit per rank
using Clock = std::chrono::steady_clock;

bool bit(const Bits &b, int r) { return (b[static_cast<size_t>(r) >> 3] >> (r & 7)) & 1; }
void set_bit(Bits *b, int r) { (*b)[static_cast<size_t>(r) >> 3] |= static_cast<uint8_t>(1u << (r & 7)); }

// Tags (program bits; dead_agreement.h): instance << 2 | kind, the round in
// the sequence bits. One ABORT tag serves every instance.
enum Kind : uint32_t { kProposal = 0, kDecided = 1 };
constexpr uint32_t kAbortTag = kAgreeTagBase | 3;
constexpr int kMaxInstances = 1023;
uint32_t make_tag(int instance, Kind kind, int round) {
  return kAgreeTagBase | (static_cast<uint32_t>(instance) << 2) | kind |
         ((static_cast<uint32_t>(round) & kSeqTagMask) << kProgramTagBits);
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
// How long the sends still in flight at the end may take (finish_sends).
constexpr int64_t kSendsGraceMs = 200;
// A transport can see a peer's death before the liveness checks do; a failure
// is taken for a death if they confirm it within this (or the interval).
constexpr int64_t kConfirmDeathMs = 500;
// After this long without a message, an idle wait sleeps 1 ms per rest
// instead of yielding: a survivor may be waited for up to BC_TIMEOUT.
constexpr int64_t kSleepAfterMs = 20;

// One message of the agreement, sent or received.
struct Msg {
  int peer = -1;
  uint32_t tag = 0;
  bool is_send = false;
  bool active = false;  // posted and not yet complete, failed or cancelled
  bool done = false;    // complete: a receive's buffer holds the peer's set
  bool copy = false;    // a send made again (resend_if_due): never copied itself
  int reopens = 0;
  Bits buf;
  TransportRequest req;
};

// UCX sends still in flight after the grace: cancelling one to an off-node
// peer would close that peer's connection by force (UcxTransport::cancel),
// which the new communicator shares. They are left to UCX, and their few
// bytes and request slots kept for the life of the process.
std::mutex g_abandoned_mutex;
std::list<Msg> g_abandoned;

class DeadAgreement {
 public:
  DeadAgreement(const DeadAgreementSetup &s, int instance, const Bits &start)
      : s_(s), instance_(instance), bytes_((static_cast<size_t>(s.size) + 7) / 8), dead_(s.size, 0),
        got_(s.size, 1), seen_(start), proposals_in_(s.size), decided_in_(s.size), aborts_in_(s.size) {}
  ~DeadAgreement() { cancel_all(); }
  Status run(Bits *decision, int *rounds, bool *relayed, int *resends);

 private:
  Transport *transport(int peer) const { return s_.peer_transport[static_cast<size_t>(peer)]; }
  // UCX, not shm, may lose a message it called sent, and cancelling a UCX
  // send can close its connection by force (kResendFirstMs, g_abandoned).
  bool over_ucx(int peer) const { return std::strcmp(transport(peer)->name(), "ucx") == 0; }
  Msg *receive(std::unique_ptr<Msg> *slot, int peer, uint32_t tag);
  Status post(Msg *m);
  Status poll(Msg *m);
  bool died_after_failure(int peer);
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
  void finish_sends();
  void send_abort(Status code);

  const DeadAgreementSetup &s_;
  const int instance_;
  const size_t bytes_;
  std::vector<char> dead_;  // detected here (the failure detector's word)
  int round_ = 0;
  std::vector<char> got_, got_prev_;  // whose round-r (and r-1) message came
  Bits seen_;                         // the union of this round's sets
  std::vector<std::unique_ptr<Msg>> proposals_in_, decided_in_, aborts_in_;  // per peer
  std::list<Msg> sends_;  // every send, at stable addresses until the end
  bool decided_ = false, relayed_ = false;
  Bits decision_;
  // What the waits count as movement: messages received and deaths seen. Not
  // send completions: resends complete at once, and would restart BC_TIMEOUT.
  uint64_t progress_ = 0;
  uint64_t still_progress_ = 0;
  Clock::time_point still_since_ = Clock::now();
  int64_t resend_ms_ = kResendFirstMs;
  int resends_ = 0;
};

Msg *DeadAgreement::receive(std::unique_ptr<Msg> *slot, int peer, uint32_t tag) {
  slot->reset(new Msg);
  Msg *m = slot->get();
  m->peer = peer;
  m->tag = tag;
  m->buf.assign(bytes_, 0);
  return m;
}

// Whether a failure with `peer` is its death: asks the failure detector for
// up to kConfirmDeathMs (or the liveness interval, if shorter), since a
// transport can notice first (a refused connection to a host whose watch has
// not yet seen the close).
bool DeadAgreement::died_after_failure(int peer) {
  detect();
  if (dead_[peer]) return true;
  const int64_t ms = std::min<int64_t>(kConfirmDeathMs, s_.liveness_interval_ms);
  WaitPolicy::poll_for(ms, [&] { detect(); return dead_[peer] != 0; }, [] { return false; }, 5);
  return dead_[peer] != 0;
}

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
    if (died_after_failure(m->peer)) {  // no longer needed
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
      if (!m->is_send) ++progress_;
    }
    return BC_OK;
  }
  const std::string why = last_error();
  // Confirmed first: a dead peer's request is cancelled without a wait.
  const bool died = died_after_failure(m->peer);
  cancel(m);
  clear_error();
  if (died) return BC_OK;
  if (++m->reopens > kMaxReopens) {
    return BC_FAIL(BC_ERR_TRANSPORT, "bc_comm_shrink: the survivors' agreement could not reach rank %d, which is "
                   "alive: %s", m->peer, why.c_str());
  }
  BC_DEBUGLOG(Transport, "shrink: rank %d's %s rank %d failed (%s); reopening", s_.rank,
              m->is_send ? "message to" : "message from", m->peer, why.c_str());
  BC_CHECK(transport(m->peer)->reopen(m->peer));
  return post(m);
}

void DeadAgreement::cancel(Msg *m) {
  if (!m->active) return;
  transport(m->peer)->cancel(&m->req);
  m->active = false;
}

void DeadAgreement::cancel_all() {
  for (auto *list : {&proposals_in_, &decided_in_, &aborts_in_})
    for (auto &m : *list)
      if (m) cancel(m.get());
  for (Msg &m : sends_) cancel(&m);
}

// Asks the failure detector; a new death ends every wait for that rank.
void DeadAgreement::detect() {
  for (int r : s_.dead_now()) {
    if (r < 0 || r >= s_.size || r == s_.rank || dead_[r]) continue;
    dead_[r] = 1;
    ++progress_;
    transport(r)->peer_died(r);
    for (auto *list : {&proposals_in_, &decided_in_, &aborts_in_})
      if ((*list)[r]) cancel((*list)[r].get());
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
  for (int r = 0; r < s_.size; ++r)
    if (dead_[r]) set_bit(&seen_, r);
  const uint32_t tag = make_tag(instance_, kProposal, round_);
  for (int p = 0; p < s_.size; ++p)
    if (p != s_.rank && !dead_[p]) BC_CHECK(post(receive(&proposals_in_[p], p, tag)));
  return send_to_all(tag, seen_);
}

Status DeadAgreement::decide(const Bits &value, bool relayed) {
  decided_ = true;
  relayed_ = relayed;
  decision_ = value;
  for (auto &m : proposals_in_)  // no round is waited for any more
    if (m) cancel(m.get());
  return send_to_all(make_tag(instance_, kDecided, 0), decision_);
}

// One pass over every message; moves the rounds on.
Status DeadAgreement::advance() {
  for (int p = 0; p < s_.size; ++p) {
    Msg *a = aborts_in_[p].get();
    if (!a) continue;
    BC_CHECK(poll(a));
    if (!a->done) continue;
    // Its status rides in the first byte, so that every rank fails alike.
    const Status code = a->buf[0] != 0 ? static_cast<Status>(a->buf[0]) : BC_ERR_TRANSPORT;
    return BC_FAIL(code, "bc_comm_shrink: rank %d's part of the survivors' agreement failed (%s; its own error says "
                   "more), so this rank's fails too", p, bc_strerror(code));
  }
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

// Decided, and every living rank's DECIDED is in: nobody needs a message of
// this instance any more.
bool DeadAgreement::finished() const {
  if (!decided_) return false;
  for (int p = 0; p < s_.size; ++p)
    if (waiting_for(p)) return false;
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
  const auto now = Clock::now();
  if (progress_ != still_progress_) {
    still_progress_ = progress_;
    still_since_ = now;
    resend_ms_ = kResendFirstMs;
    return BC_OK;
  }
  if (now - still_since_ < std::chrono::milliseconds(resend_ms_)) return BC_OK;
  std::vector<Msg> again;
  for (const Msg &m : sends_)
    if (!m.copy && waiting_for(m.peer) && over_ucx(m.peer)) again.push_back(m);
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
    BC_DEBUGLOG(Transport, "shrink: rank %d still waits for rank(s) %s; sent its %zu message(s) to them again",
                s_.rank, missing().c_str(), again.size());
  }
  still_since_ = now;
  resend_ms_ = std::min(resend_ms_ * 2, kResendMaxMs);
  return BC_OK;
}

// Gives the sends still in flight a moment, then cancels those over shm and
// leaves those over UCX to it (g_abandoned says why).
void DeadAgreement::finish_sends() {
  WaitPolicy::poll_for(
      kSendsGraceMs,
      [this] {
        for (const Msg &m : sends_)
          if (m.active && !dead_[m.peer]) return false;
        return true;
      },
      [this] {
        bool moved = false;
        for (Msg &m : sends_) {
          const bool was = m.active;
          if (poll(&m) != BC_OK) clear_error();
          moved = moved || (was && !m.active);
        }
        return moved;
      });
  for (auto it = sends_.begin(); it != sends_.end();) {
    auto next = std::next(it);
    if (it->active && !dead_[it->peer] && over_ucx(it->peer)) {
      std::lock_guard<std::mutex> lock(g_abandoned_mutex);
      g_abandoned.splice(g_abandoned.end(), sends_, it);
    }
    it = next;
  }
}

// A failed rank tells every living one, so that they fail at once instead of
// waiting BC_TIMEOUT for it; each that hears it fails and tells the others
// (a failed channel to one rank does not keep the news from it).
void DeadAgreement::send_abort(Status code) {
  for (auto &m : proposals_in_)
    if (m) cancel(m.get());
  Bits news(bytes_, 0);
  news[0] = static_cast<uint8_t>(code);
  if (send_to_all(kAbortTag, news) != BC_OK) clear_error();
  finish_sends();
}

Status DeadAgreement::run(Bits *decision, int *rounds, bool *relayed, int *resends) {
  detect();
  for (int p = 0; p < s_.size; ++p) {
    if (p == s_.rank || dead_[p]) continue;
    Status st = transport(p)->reopen(p);
    if (st != BC_OK) {
      if (!died_after_failure(p)) {
        trail(st, __FILE__, __LINE__);
        const std::string why = last_error();
        send_abort(st);
        return BC_FAIL(st, "bc_comm_shrink: rank %d cannot reach rank %d, which is alive, for the survivors' "
                       "agreement: %s", s_.rank, p, why.c_str());
      }
      clear_error();
      continue;
    }
    Status posted = post(receive(&decided_in_[p], p, make_tag(instance_, kDecided, 0)));
    if (posted == BC_OK) posted = post(receive(&aborts_in_[p], p, kAbortTag));
    if (posted != BC_OK) {
      send_abort(posted);
      return posted;
    }
  }
  Status st = start_round();
  WaitPolicy wait(s_.spin_count, s_.timeout_ms, s_.liveness_interval_ms);
  while (st == BC_OK) {
    st = advance();
    if (st != BC_OK || finished()) break;
    if (wait.moved(progress_) || !wait.idle()) continue;
    if (Clock::now() - still_since_ > std::chrono::milliseconds(kSleepAfterMs)) {
      const struct timespec ms = {0, 1000000L};
      nanosleep(&ms, nullptr);
    } else {
      wait.rest();
    }
    if (wait.timed_out()) {
      st = BC_FAIL(BC_ERR_TIMEOUT, "bc_comm_shrink: rank %d waited BC_TIMEOUT (%lld ms) for rank(s) %s, alive but "
                   "not in the survivors' agreement (round %d%s)", s_.rank, static_cast<long long>(s_.timeout_ms),
                   missing().c_str(), round_, decided_ ? ", decided" : "");
      break;
    }
    if (wait.liveness_due()) detect();
    st = resend_if_due();
  }
  if (st != BC_OK) {
    const std::string why = last_error();
    send_abort(st);
    return BC_FAIL(st, "%s", why.c_str());
  }
  finish_sends();
  *decision = decision_;
  *rounds = round_;
  *relayed = relayed_;
  *resends = resends_;
  return BC_OK;
}

}  // namespace

// Instance after instance, each starting from the last one's decision, until
// one decides what the last did. A decision can miss a rank that died as the
// instance ended (it sent its last message, then died), which some survivor
// may already know; every survivor proposes what it knows in the next
// instance, so the last decision holds every death a survivor knew of before
// its last message. Whether to go on is read from two agreed decisions, so
// every rank stops after the same instance.
Status agree_on_dead(const DeadAgreementSetup &setup, DeadAgreementResult *out) {
  if (!setup.dead_now || static_cast<int>(setup.peer_transport.size()) != setup.size)
    return BC_FAIL(BC_ERR_INTERNAL, "agree_on_dead: no failure detector, or %zu transports for %d ranks",
                   setup.peer_transport.size(), setup.size);
  *out = DeadAgreementResult();
  Bits last((static_cast<size_t>(setup.size) + 7) / 8, 0);
  for (int instance = 0;; ++instance) {
    if (instance > kMaxInstances)
      return BC_FAIL(BC_ERR_INTERNAL, "shrink: the survivors' agreement took more than %d instances", kMaxInstances);
    Bits decided;
    int rounds = 0, resends = 0;
    bool relayed = false;
    DeadAgreement agreement(setup, instance, last);
    BC_CHECK(agreement.run(&decided, &rounds, &relayed, &resends));
    out->rounds += rounds;
    out->relayed = out->relayed || relayed;
    out->resends += resends;
    out->instances = instance + 1;
    const bool settled = instance > 0 && decided == last;
    last = decided;
    if (settled) break;
  }
  if (bit(last, setup.rank))
    return BC_FAIL(BC_ERR_INTERNAL, "bc_comm_shrink: the survivors agreed that rank %d, which is alive, is dead",
                   setup.rank);
  for (int r = 0; r < setup.size; ++r)
    if (bit(last, r)) out->dead.push_back(r);
  return BC_OK;
}

}  // namespace bc
