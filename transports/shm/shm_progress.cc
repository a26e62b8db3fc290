// The shared-memory protocol engine (see the diagram in shm_layout.h): publish
// offers, match them to receives, move the bytes, and cancel. Every function
// here returns after a bounded amount of work, whatever the peer does.
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "transports/shm/shm_transport.h"

namespace bc {
namespace shm {
namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr auto kAcquire = std::memory_order_acquire;
constexpr auto kRelease = std::memory_order_release;
constexpr auto kAcqRel = std::memory_order_acq_rel;

// Passes of progress() per look for a refused eager message
// (check_eager_refusals): a failure is noticed a few microseconds later.
constexpr uint32_t kRefusalCheckEvery = 16;

void erase_id(std::vector<uint32_t> &v, uint32_t id) { v.erase(std::remove(v.begin(), v.end(), id), v.end()); }
}  // namespace

void ShmTransport::complete(Peer &p, Op &op) {
  op.done = true;
  if (op.is_send) {
    p.bytes_sent += op.size;
    ++p.msgs_sent;
  } else {
    p.bytes_received += op.size;
    ++p.msgs_received;
  }
}

void ShmTransport::fail(Op &op, Status code, const std::string &why) {
  op.err = code;
  op.why = why;
}

std::string ShmTransport::describe(const Peer &p, const Op &op) const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "shm transport: %s rank %d (tag %#x, %zu bytes)",
                op.is_send ? "send to" : "receive from", p.rank, op.tag, op.size);
  return buf;
}

void ShmTransport::progress(Peer &p) {
  if (!p.queued.empty()) publish(p);
  if (!p.sending.empty()) advance_sends(p);
  // A refusal is a failure path: looked for once every kRefusalCheckEvery
  // passes, not on each (8 lines the peer writes, per peer and poll).
  if (p.out_eager && (!p.unmatched.empty() || !p.streaming.empty()) && ++p.passes % kRefusalCheckEvery == 0)
    check_eager_refusals(p);
  if (!p.broken.empty()) {
    fail_receives(p);
    return;
  }
  if (!p.unmatched.empty()) {
    scan_offers(p);
    if (!p.offers.empty()) match(p);
  }
  if (!p.streaming.empty()) drain(p);
}

// ---- sender side ----

// Frees slot `slot` when the receiver gave up on a message whose send had
// already completed here (copy mode, eager): nobody else frees it. A refusal
// (a size mismatch) also marks the channel: that peer failed and sends
// nothing more, so the receives waiting on it fail now, naming the cause,
// instead of at BC_TIMEOUT. A send still in flight there is advance_sends'.
bool ShmTransport::reclaim_given_up(Peer &p, uint32_t slot) {
  std::atomic<uint64_t> &state = p.out->desc[slot].state;
  const uint64_t st = desc_state(state.load(kAcquire));  // the receiver's last reads of this slot are done
  if (st != kRecvCancel && st != kRefused) return false;
  if (std::any_of(p.sending.begin(), p.sending.end(), [&](uint32_t id) { return ops_[id].slot == static_cast<int>(slot); }))
    return false;
  state.store(kFree, kRelaxed);
  if (st == kRefused && p.broken.empty()) {
    p.broken = "shm transport: rank " + std::to_string(p.rank) +
               " refused a message of this rank's (its size; the receiver refused it, see its error)";
  }
  return true;
}

// A free desc slot, or -1. Eager messages need one of the first kEagerSlots
// (those have an inline area); other messages take the rest first, so that a
// burst of large offers leaves the eager slots to the small ones.
int ShmTransport::free_slot(Peer &p, bool eager) {
  constexpr uint32_t kPlain = kDescSlots - kEagerSlots;
  const uint32_t count = eager ? kEagerSlots : kDescSlots;
  for (uint32_t k = 0; k < count; ++k) {
    const uint32_t slot = eager ? k : k < kPlain ? kEagerSlots + (p.free_hint + k) % kPlain : k - kPlain;
    if (p.out->desc[slot].state.load(kAcquire) == kFree || reclaim_given_up(p, slot)) {
      if (slot >= kEagerSlots) p.free_hint = (slot - kEagerSlots + 1) % kPlain;
      return static_cast<int>(slot);
    }
  }
  return -1;
}

void ShmTransport::publish(Peer &p) {
  while (!p.queued.empty()) {
    Op &op = ops_[p.queued.front()];
    const bool fits = p.out_eager && op.size > 0 && op.size <= node_->eager_bytes();
    int slot = fits ? free_slot(p, true) : -1;
    const bool eager = slot >= 0;
    if (!eager) slot = free_slot(p, false);
    if (slot < 0) return;  // 64 offers outstanding: the rest wait here, in order
    const uint32_t id = p.queued.front();
    p.queued.erase(p.queued.begin());
    Desc &d = p.out->desc[slot];
    if (eager) std::memcpy(p.out_eager + static_cast<size_t>(slot) * node_->eager_bytes(), op.buf, op.size);
    d.size.store(op.size, kRelaxed);
    d.addr.store(reinterpret_cast<uintptr_t>(op.buf), kRelaxed);
    d.tag.store(op.tag, kRelaxed);
    d.eager.store(eager ? 1u : 0u, kRelaxed);
    op.seq = ++p.next_seq;
    op.slot = slot;
    d.state.store(desc_word(op.seq, kPosted), kRelease);
    p.out->slot_of_seq[op.seq % kDescSlots].store(static_cast<uint8_t>(slot), kRelaxed);
    p.out->published.store(op.seq, kRelease);
    // Nothing to move, or moved already: the receiver frees the slot.
    if (op.size == 0 || eager) complete(p, op);
    else p.sending.push_back(id);
  }
}

void ShmTransport::stream_out(Peer &p, Op &op) {
  const size_t chunk = node_->chunk();
  const uint32_t slots = node_->ring_slots();
  uint64_t tail = p.out->tail.load(kAcquire);  // the receiver has copied those chunks out
  while (op.off < op.size) {
    if (p.out_head - tail >= slots) {
      tail = p.out->tail.load(kAcquire);
      if (p.out_head - tail >= slots) return;  // ring full: later
    }
    const size_t n = std::min(chunk, op.size - op.off);
    std::memcpy(p.out_ring + (p.out_head % slots) * chunk, op.buf + op.off, n);
    op.off += n;
    p.out->head.store(++p.out_head, kRelease);
  }
}

void ShmTransport::advance_sends(Peer &p) {
  const uint64_t grant = node_->cma() ? 0 : p.out->grant.load(kAcquire);
  for (size_t i = 0; i < p.sending.size();) {
    const uint32_t id = p.sending[i];
    Op &op = ops_[id];
    std::atomic<uint64_t> &state = p.out->desc[op.slot].state;
    const uint64_t w = state.load(kAcquire);
    bool finished = false;
    if (desc_state(w) == kRecvCancel) {
      // As if never received: the send stays pending, out of every list, until
      // its own timeout cancels it.
      state.store(kFree, kRelease);
      finished = true;
    } else if (desc_state(w) == kRefused) {
      state.store(kFree, kRelease);
      fail(op, BC_ERR_TRANSPORT, describe(p, op) + ": the receiver refused it (see its error)");
      finished = true;
    } else if (node_->cma()) {
      if (desc_state(w) == kDone) {  // the receiver has read my buffer
        state.store(kFree, kRelease);
        complete(p, op);
        finished = true;
      }
    } else if (grant == op.seq) {
      stream_out(p, op);
      if (op.off == op.size) {  // all in the ring: my buffer is free; the receiver frees the slot
        complete(p, op);
        finished = true;
      }
    }
    if (finished) {
      p.sending[i] = p.sending.back();
      p.sending.pop_back();
    } else {
      ++i;
    }
  }
}

// An eager send completed when it was published, so a receiver that refuses
// it cannot fail it: while this rank waits for the peer, it looks for such a
// refusal in its eager slots (reclaim_given_up). Eight loads of lines the peer
// rarely writes.
void ShmTransport::check_eager_refusals(Peer &p) {
  for (uint32_t i = 0; i < kEagerSlots; ++i) reclaim_given_up(p, i);
}

// ---- receiver side ----

void ShmTransport::scan_offers(Peer &p) {
  const uint64_t published = p.in->published.load(kAcquire);
  if (published == p.seen) return;
  // Drop offers the sender has withdrawn since (their slot moved on).
  p.offers.erase(std::remove_if(p.offers.begin(), p.offers.end(),
                                [&](const Offer &o) {
                                  return p.in->desc[o.slot].state.load(kRelaxed) != desc_word(o.seq, kPosted);
                                }),
                 p.offers.end());
  // Every desc with seq in (seen, published] was POSTED before `published` moved:
  // all of them are visible now, unless already withdrawn. First through the
  // sender's slot hints, in seq order (at np 8 a full scan read 7 x 64 desc
  // lines a call); any hint that does not hold its seq POSTED sends it to the
  // full scan, which is right whatever happened.
  const size_t old = p.offers.size();
  bool hinted = published - p.seen <= kDescSlots;
  for (uint64_t seq = p.seen + 1; hinted && seq <= published; ++seq) {
    const uint32_t i = p.in->slot_of_seq[seq % kDescSlots].load(kRelaxed);
    const Desc &d = p.in->desc[i < kDescSlots ? i : 0];
    hinted = i < kDescSlots && d.state.load(kAcquire) == desc_word(seq, kPosted);
    if (hinted) p.offers.push_back(Offer{seq, d.tag.load(kRelaxed), static_cast<int>(i)});
  }
  if (hinted) {
    p.seen = published;
    return;
  }
  p.offers.resize(old);
  for (uint32_t i = 0; i < kDescSlots; ++i) {
    const Desc &d = p.in->desc[i];
    const uint64_t w = d.state.load(kAcquire);
    const uint64_t seq = desc_seq(w);
    if (desc_state(w) != kPosted || seq <= p.seen || seq > published) continue;
    p.offers.push_back(Offer{seq, d.tag.load(kRelaxed), static_cast<int>(i)});
  }
  std::sort(p.offers.begin() + old, p.offers.end(), [](const Offer &a, const Offer &b) { return a.seq < b.seq; });
  p.seen = published;
}

void ShmTransport::match(Peer &p) {
  for (size_t i = 0; i < p.unmatched.size() && !p.offers.empty();) {
    const uint32_t id = p.unmatched[i];
    Op &r = ops_[id];
    bool matched = false;
    for (size_t k = 0; k < p.offers.size() && !matched;) {
      if (p.offers[k].tag != r.tag) {
        ++k;
        continue;
      }
      const Offer o = p.offers[k];
      p.offers.erase(p.offers.begin() + static_cast<std::ptrdiff_t>(k));
      uint64_t expect = desc_word(o.seq, kPosted);
      // Fails only when the sender withdrew it meanwhile; then try its next offer.
      if (p.in->desc[o.slot].state.compare_exchange_strong(expect, desc_word(o.seq, kMatched), kAcqRel, kAcquire)) {
        r.seq = o.seq;
        r.slot = o.slot;
        matched = true;
      }
    }
    if (!matched) {
      ++i;
      continue;
    }
    p.unmatched.erase(p.unmatched.begin() + static_cast<std::ptrdiff_t>(i));
    start_recv(p, id);
  }
}

void ShmTransport::start_recv(Peer &p, uint32_t id) {
  Op &r = ops_[id];
  Desc &d = p.in->desc[r.slot];
  const size_t size = d.size.load(kRelaxed);  // stable now: MATCHED (acquired by the CAS)
  const uint64_t addr = d.addr.load(kRelaxed);
  if (size != r.size) {
    refuse(p, id, ": the sender offers " + std::to_string(size) + " bytes");
    return;
  }
  if (size == 0) {
    d.state.store(kFree, kRelease);
    complete(p, r);
  } else if (d.eager.load(kRelaxed)) {
    if (size > node_->eager_bytes() || r.slot >= static_cast<int>(kEagerSlots)) {
      refuse(p, id, ": an eager offer that does not fit its inline area");
      return;
    }
    std::memcpy(r.buf, p.in_eager + static_cast<size_t>(r.slot) * node_->eager_bytes(), size);
    d.state.store(kFree, kRelease);  // after the copy: the sender may reuse the area
    complete(p, r);
  } else if (node_->cma()) {
    read_cma(p, id, addr);
  } else {
    p.streaming.push_back(id);
    if (p.streaming.size() == 1) p.in->grant.store(r.seq, kRelease);
  }
}

void ShmTransport::read_cma(Peer &p, uint32_t id, uint64_t addr) {
  Op &r = ops_[id];
  size_t got = 0;
  while (got < r.size) {
    struct iovec local = {r.buf + got, r.size - got};
    struct iovec remote = {reinterpret_cast<void *>(addr + got), r.size - got};
    const ssize_t n = process_vm_readv(p.pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      char why[200];
      std::snprintf(why, sizeof why, ": process_vm_readv from pid %d failed after %zu bytes: %s",
                    static_cast<int>(p.pid), got, n < 0 ? std::strerror(errno) : "no progress");
      refuse(p, id, why);
      return;
    }
    got += static_cast<size_t>(n);
  }
  std::atomic<uint64_t> &state = p.in->desc[r.slot].state;
  uint64_t expect = desc_word(r.seq, kMatched);
  if (state.compare_exchange_strong(expect, desc_word(r.seq, kDone), kAcqRel, kAcquire)) complete(p, r);
  else rematch(p, id);  // the sender cancelled while I read: what I read may be torn
}

// Fails receive `id` and its matched message on both sides.
void ShmTransport::refuse(Peer &p, uint32_t id, const std::string &why) {
  Op &r = ops_[id];
  std::atomic<uint64_t> &state = p.in->desc[r.slot].state;
  uint64_t expect = desc_word(r.seq, kMatched);
  if (state.compare_exchange_strong(expect, desc_word(r.seq, kRefused), kAcqRel, kAcquire))
    fail(r, BC_ERR_TRANSPORT, describe(p, r) + why);
  else
    rematch(p, id);  // the sender had cancelled it anyway
}

// The sender cancelled the message matched to receive `id`: free its slot and
// match the receive again, in its posting order, as if that message never came.
void ShmTransport::rematch(Peer &p, uint32_t id) {
  Op &r = ops_[id];
  p.in->desc[r.slot].state.store(kFree, kRelease);
  r.seq = 0;
  r.slot = -1;
  r.off = 0;
  auto at = std::find_if(p.unmatched.begin(), p.unmatched.end(),
                         [&](uint32_t other) { return ops_[other].order > r.order; });
  p.unmatched.insert(at, id);
}

void ShmTransport::drain(Peer &p) {
  const size_t chunk = node_->chunk();
  const uint32_t slots = node_->ring_slots();
  while (!p.streaming.empty()) {
    const uint32_t id = p.streaming.front();
    Op &r = ops_[id];
    std::atomic<uint64_t> &state = p.in->desc[r.slot].state;
    const uint64_t head = p.in->head.load(kAcquire);
    while (p.in_tail < head && r.off < r.size) {
      const size_t n = std::min(chunk, r.size - r.off);
      std::memcpy(r.buf + r.off, p.in_ring + (p.in_tail % slots) * chunk, n);
      r.off += n;
      p.in->tail.store(++p.in_tail, kRelease);
    }
    if (r.off == r.size) {
      state.store(kFree, kRelease);  // the sender's op completed when it wrote the last chunk
      complete(p, r);
    } else if (desc_state(state.load(kAcquire)) == kSendCancel) {
      // The sender gave up; the chunks it wrote before saying so are all in: skip them.
      p.in_tail = p.in->head.load(kAcquire);
      p.in->tail.store(p.in_tail, kRelease);
      rematch(p, id);
    } else {
      return;  // more to come
    }
    p.streaming.erase(p.streaming.begin());
    p.in->grant.store(p.streaming.empty() ? 0 : ops_[p.streaming.front()].seq, kRelease);
  }
}

void ShmTransport::fail_receives(Peer &p) {
  for (uint32_t id : p.unmatched) fail(ops_[id], BC_ERR_TRANSPORT, p.broken);
  for (uint32_t id : p.streaming) fail(ops_[id], BC_ERR_TRANSPORT, p.broken);
  p.unmatched.clear();
  p.streaming.clear();
}

// ---- cancellation (best effort, after a failure or a timeout) ----

void ShmTransport::cancel_send(Peer &p, uint32_t id) {
  Op &op = ops_[id];
  auto q = std::find(p.queued.begin(), p.queued.end(), id);
  if (q != p.queued.end()) {  // never offered
    p.queued.erase(q);
    return;
  }
  if (std::find(p.sending.begin(), p.sending.end(), id) == p.sending.end()) return;
  erase_id(p.sending, id);
  std::atomic<uint64_t> &state = p.out->desc[op.slot].state;
  for (;;) {
    uint64_t w = state.load(kAcquire);
    switch (desc_state(w)) {
      case kPosted:  // not taken yet: withdraw it
        if (state.compare_exchange_strong(w, kFree, kAcqRel, kAcquire)) return;
        break;
      case kMatched:  // taken: tell the receiver, which frees the slot
        if (state.compare_exchange_strong(w, desc_word(op.seq, kSendCancel), kAcqRel, kAcquire)) return;
        break;
      case kDone:  // read already, or given up by the receiver: the slot is mine to free
      case kRecvCancel:
      case kRefused:
        state.store(kFree, kRelease);
        return;
      default:
        return;
    }
  }
}

void ShmTransport::cancel_recv(Peer &p, uint32_t id) {
  Op &r = ops_[id];
  if (std::find(p.unmatched.begin(), p.unmatched.end(), id) != p.unmatched.end()) {
    erase_id(p.unmatched, id);
    return;
  }
  auto s = std::find(p.streaming.begin(), p.streaming.end(), id);
  if (s == p.streaming.end()) return;
  const bool granted = s == p.streaming.begin();
  p.streaming.erase(s);
  std::atomic<uint64_t> &state = p.in->desc[r.slot].state;
  uint64_t expect = desc_word(r.seq, kMatched);
  if (!state.compare_exchange_strong(expect, desc_word(r.seq, kRecvCancel), kAcqRel, kAcquire))
    state.store(kFree, kRelease);  // the sender had cancelled too
  if (granted) {
    // The sender may still be writing this message's chunks into the ring, and
    // nothing says when it stops: nothing more from this peer can be trusted.
    p.in->grant.store(0, kRelease);
    p.broken = "shm transport: the channel from rank " + std::to_string(p.rank) +
               " is unusable after a receive from it was cancelled mid-stream";
    fail_receives(p);
  }
}

}  // namespace shm
}  // namespace bc
