// The shared-memory transport: host buffers between ranks of one node, either
// read directly from the sender's memory (cma) or streamed in chunks through a
// ring in the node's segment (copy). The protocol and the segment layout are
// drawn in shm_layout.h; the collective setup is in shm_node.cc; the protocol
// engine in shm_progress.cc.
//
// Everything is non-blocking: post_send publishes the offer; test() advances the
// two channels to the request's peer (publish queued offers, match, copy what
// can be copied) and returns, without spinning or yielding: whoever polls it
// waits under the one waiting policy (core/wait_policy.h). A peer that stops
// answering leaves requests pending; the executor's BC_TIMEOUT then cancels them.
#include "transports/shm/shm_transport.h"

#include <algorithm>

#include "core/log.h"

namespace bc {
namespace shm {

ShmTransport::ShmTransport(const TransportSetup &s, std::unique_ptr<Node> node)
    : rank_(s.rank),
      size_(s.size),
      node_(std::move(node)) {
  peers_.resize(node_->nlocal());
  const int me = node_->me();
  for (int l = 0; l < node_->nlocal(); ++l) {
    if (l == me) continue;
    Peer &p = peers_[l];
    p.rank = node_->rank_of(l);
    p.pid = node_->pid_of(l);
    p.out = node_->channel(me, l);
    p.in = node_->channel(l, me);
    p.out_eager = node_->eager(me, l);
    p.in_eager = node_->eager(l, me);
    if (!node_->cma()) {
      p.out_ring = node_->ring(me, l);
      p.in_ring = node_->ring(l, me);
    }
    // As many as the channel has desc slots: how far a peer runs ahead (its
    // offers) or how many sends are out never makes them grow mid-run.
    p.offers.reserve(kDescSlots);
    p.sending.reserve(kDescSlots);
    p.streaming.reserve(kDescSlots);
  }
}

ShmTransport::~ShmTransport() {
  for (const Peer &p : peers_) {
    if (p.rank < 0 || (p.msgs_sent == 0 && p.msgs_received == 0)) continue;
    BC_DEBUGLOG(Transport, "shm %s: rank %d -> %d: %llu B in %llu messages; rank %d -> %d: %llu B in %llu messages",
                node_->cma() ? "cma" : "copy", rank_, p.rank, static_cast<unsigned long long>(p.bytes_sent),
                static_cast<unsigned long long>(p.msgs_sent), p.rank, rank_,
                static_cast<unsigned long long>(p.bytes_received), static_cast<unsigned long long>(p.msgs_received));
  }
  // node_ unmaps the segment; it was unlinked at creation.
}

bool ShmTransport::locally_idle() const {
  if (free_ops_.size() != ops_.size()) return false;
  for (size_t l = 0; l < peers_.size(); ++l) {
    if (static_cast<int>(l) == node_->me()) continue;
    const Peer &p = peers_[l];
    if (!p.broken.empty() || !p.queued.empty() || !p.sending.empty() || !p.unmatched.empty() ||
        !p.streaming.empty() || !p.offers.empty())
      return false;
  }
  return true;
}

bool ShmTransport::quiet() const {
  if (!locally_idle()) return false;
  for (size_t l = 0; l < peers_.size(); ++l) {
    if (static_cast<int>(l) == node_->me()) continue;
    const Peer &p = peers_[l];
    if (p.in->published.load(std::memory_order_acquire) != p.seen) return false;
    for (const Channel *ch : {p.out, p.in}) {
      if (ch->head.load(std::memory_order_acquire) != ch->tail.load(std::memory_order_acquire)) return false;
      for (const Desc &d : ch->desc)
        if (desc_state(d.state.load(std::memory_order_acquire)) != kFree) return false;
    }
  }
  return true;
}

bool ShmTransport::can_connect(int peer, bc_memtype_t mem) const {
  return (mem == BC_MEM_HOST || mem == BC_MEM_AUTO) && peer >= 0 && peer < size_ && peer != rank_ &&
         node_->local_of(peer) >= 0;
}

Status ShmTransport::connect(int peer) {
  if (!can_connect(peer, BC_MEM_HOST))
    return BC_FAIL(BC_ERR_INVALID_ARG, "shm transport: rank %d is not on the node of rank %d", peer, rank_);
  return BC_OK;
}

Status ShmTransport::check(int peer, const void *buf, size_t bytes, bc_memtype_t mem, const char *what) const {
  if (peer < 0 || peer >= size_ || peer == rank_ || node_->local_of(peer) < 0)
    return BC_FAIL(BC_ERR_INVALID_ARG, "shm transport: cannot %s rank %d from rank %d (not another rank of its node)",
                   what, peer, rank_);
  if (mem != BC_MEM_HOST && mem != BC_MEM_AUTO)
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "shm transport: host buffers only (memory type %d)", static_cast<int>(mem));
  if (!buf && bytes > 0) return BC_FAIL(BC_ERR_INVALID_ARG, "shm transport: NULL buffer of %zu bytes", bytes);
  return BC_OK;
}

Status ShmTransport::post_send(int peer, const void *buf, size_t bytes, bc_memtype_t mem, uint32_t tag,
                               TransportRequest *req) {
  BC_CHECK(check(peer, buf, bytes, mem, "send to"));
  Peer &p = peers_[node_->local_of(peer)];
  p.queued.push_back(new_op(req, peer, true, const_cast<void *>(buf), bytes, tag));
  publish(p);  // cheap: the peer may start reading at once
  return BC_OK;
}

Status ShmTransport::post_recv(int peer, void *buf, size_t bytes, bc_memtype_t mem, uint32_t tag,
                               TransportRequest *req) {
  BC_CHECK(check(peer, buf, bytes, mem, "receive from"));
  Peer &p = peers_[node_->local_of(peer)];
  if (!p.broken.empty()) return BC_FAIL(BC_ERR_TRANSPORT, "%s", p.broken.c_str());
  const uint32_t id = new_op(req, peer, false, buf, bytes, tag);
  ops_[id].order = p.recvs_posted++;
  p.unmatched.push_back(id);
  // No progress here: a single-copy read would run before this step's sends are
  // posted, and the peer would wait for them (the executor posts receives first).
  return BC_OK;
}

Status ShmTransport::test(TransportRequest *req, bool *done) {
  *done = false;
  Op *op = lookup(req);
  if (!op) return BC_FAIL(BC_ERR_INTERNAL, "shm transport: test() of a request it does not hold");
  if (!op->done && op->err == BC_OK) progress(peers_[op->local]);  // adds no ops: op stays valid
  if (op->err != BC_OK) {
    const Status code = op->err;
    const std::string why = op->why;
    release(req);
    return BC_FAIL(code, "%s", why.c_str());
  }
  if (op->done) {
    release(req);
    *done = true;
  }
  return BC_OK;
}

void ShmTransport::cancel(TransportRequest *req) {
  Op *op = lookup(req);
  if (!op) {
    req->active = false;
    return;
  }
  if (!op->done && op->err == BC_OK) {
    const uint32_t id = reinterpret_cast<ReqSlot *>(req->slot)->op;
    if (op->is_send) cancel_send(peers_[op->local], id);
    else cancel_recv(peers_[op->local], id);
  }
  release(req);
}

// Nothing to mend: a cancelled message is as if never posted (shm_layout.h),
// so a channel serves new tags after a failure, unless a receive from the peer
// was cancelled mid-stream (copy mode): then the ring holds unknown chunks.
Status ShmTransport::reopen(int peer) {
  if (!can_connect(peer, BC_MEM_HOST)) return BC_FAIL(BC_ERR_INTERNAL, "shm transport: rank %d is not on this node", peer);
  const Peer &p = peers_[node_->local_of(peer)];
  if (!p.broken.empty()) return BC_FAIL(BC_ERR_TRANSPORT, "%s", p.broken.c_str());
  return BC_OK;
}

uint32_t ShmTransport::new_op(TransportRequest *req, int peer, bool is_send, void *buf, size_t bytes,
                              uint32_t tag) {
  uint32_t id;
  if (!free_ops_.empty()) {
    id = free_ops_.back();
    free_ops_.pop_back();
  } else {
    id = static_cast<uint32_t>(ops_.size());
    ops_.emplace_back();
  }
  Op &op = ops_[id];
  const uint32_t gen = op.gen + 1;
  op = Op();
  op.gen = gen;
  op.in_use = true;
  op.is_send = is_send;
  op.local = node_->local_of(peer);
  op.buf = static_cast<unsigned char *>(buf);
  op.size = bytes;
  op.tag = tag;
  static_assert(sizeof(ReqSlot) <= sizeof(req->slot), "the request slot holds an op reference");
  req->transport = this;
  req->peer = peer;
  req->active = true;
  *reinterpret_cast<ReqSlot *>(req->slot) = ReqSlot{id, gen};
  return id;
}

Op *ShmTransport::lookup(TransportRequest *req) {
  const ReqSlot rs = *reinterpret_cast<const ReqSlot *>(req->slot);
  if (req->transport != this || rs.op >= ops_.size()) return nullptr;
  Op &op = ops_[rs.op];
  return op.in_use && op.gen == rs.gen ? &op : nullptr;
}

void ShmTransport::release(TransportRequest *req) {
  const uint32_t id = reinterpret_cast<const ReqSlot *>(req->slot)->op;
  ops_[id].in_use = false;
  ops_[id].why.clear();
  free_ops_.push_back(id);
  req->active = false;
}

}  // namespace shm

}  // namespace bc
