// The UCX transport's data path: tagged sends and receives, progress, cancel and
// the event wait. See ucx_transport.h for the design.
#include "transports/ucx/ucx_transport.h"

#include <poll.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "core/wait_policy.h"
#include "transports/ucx/ucx_drain.h"

namespace bc {
namespace {

// How long cancel() waits for UCX to give a request up before it closes the
// endpoint to force it.
constexpr int kCancelWaitMs = 50;

// What a TransportRequest's slot holds for this transport.
struct UcxSlot {
  void *ucx_req;    // UCX's request while in flight; nullptr once released
  size_t expected;  // receives: the bytes the plan expects
  uint32_t tag;     // the plan's tag, for messages
  int32_t status;   // ucs_status_t once complete
  uint8_t is_recv;
  uint8_t complete;
};
static_assert(sizeof(UcxSlot) <= sizeof(TransportRequest::slot), "UcxSlot fits the request slot");

UcxSlot *slot_of(TransportRequest *req) { return reinterpret_cast<UcxSlot *>(req->slot); }

constexpr ucp_tag_t kFullMask = ~static_cast<ucp_tag_t>(0);

// Completion status of an in-flight request; for a receive also checks that
// the whole expected message arrived.
ucs_status_t request_status(const UcxSlot &s, size_t *got) {
  if (!s.is_recv) return ucp_request_check_status(s.ucx_req);
  ucp_tag_recv_info_t info;
  std::memset(&info, 0, sizeof info);
  ucs_status_t st = ucp_tag_recv_request_test(s.ucx_req, &info);
  *got = info.length;
  return st;
}

}  // namespace

// UCX's 64-bit tag: the plan's 32-bit tag, then the communicator's id, then
// the sender's rank (ucx_transport.h); receives match all 64 bits.
ucp_tag_t UcxTransport::make_tag(uint32_t tag, int source) const {
  return (static_cast<uint64_t>(tag) << 32) | (static_cast<uint64_t>(comm_id_) << kRankBits) |
         static_cast<uint32_t>(source);
}

// ucp_worker_progress calls per burst: enough to drain a burst of completions,
// bounded so that one call never spins for long.
constexpr int kProgressBurst = 16;

bool ucx_progress_burst(UcxWorker *w) {
  bool any = false;
  for (int i = 0; i < kProgressBurst && ucp_worker_progress(w->worker) != 0; ++i) any = true;
  // Measured without this wake-up (layout c, torch all-reduce alone, 1-8 MiB):
  // the drainer's progress every 2 ms took the event a sleeper waited for, and
  // the sleeper woke only at its rest cap; 1 MiB took 135-137 ms against 88
  // with yields (and 88-89 with this wake-up).
  if (any && w->sleepers.load(std::memory_order_acquire) > 0) ucp_worker_signal(w->worker);
  return any;
}

bool UcxTransport::progress() { return ucx_progress_burst(w_); }

bool UcxTransport::wait_request(void *ucx_req, int ms) {
  return WaitPolicy::poll_for(ms, [&] { return ucp_request_check_status(ucx_req) != UCS_INPROGRESS; },
                              [&] { return progress(); });
}

Status UcxTransport::post_send(int peer, const void *buf, size_t bytes, bc_memtype_t mem, uint32_t tag,
                               TransportRequest *req) {
  if (mem == BC_MEM_CUDA) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx: this UCX build has no CUDA support");
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  BC_CHECK(ensure_ep(peer));
  req->transport = this;
  req->peer = peer;
  UcxSlot *s = slot_of(req);
  *s = UcxSlot{nullptr, bytes, tag, UCS_OK, 0, 0};
  ucp_request_param_t param;
  std::memset(&param, 0, sizeof param);  // no callback: test() polls the request
  void *r = ucp_tag_send_nbx(peers_[peer].shared->ep, buf, bytes, make_tag(tag, rank_), &param);
  drain_note_send(w_);
  if (UCS_PTR_IS_ERR(r))
    return BC_FAIL(BC_ERR_TRANSPORT, "ucx: send of %zu bytes to rank %d failed: %s", bytes, peer,
                   ucs_status_string(UCS_PTR_STATUS(r)));
  req->active = true;
  if (r == nullptr) s->complete = 1;  // done already (eager, buffered)
  else s->ucx_req = r;
  return BC_OK;
}

Status UcxTransport::post_recv(int peer, void *buf, size_t bytes, bc_memtype_t mem, uint32_t tag,
                               TransportRequest *req) {
  if (mem == BC_MEM_CUDA) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx: this UCX build has no CUDA support");
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  // The endpoint is not needed to receive, but with it UCX watches the peer,
  // so that a peer that dies while we wait for it is reported.
  BC_CHECK(ensure_ep(peer));
  req->transport = this;
  req->peer = peer;
  UcxSlot *s = slot_of(req);
  *s = UcxSlot{nullptr, bytes, tag, UCS_OK, 1, 0};
  ucp_request_param_t param;
  std::memset(&param, 0, sizeof param);
  // Always a request, so that test() can check the received length with
  // ucp_tag_recv_request_test (UCX 1.13 does not fill recv_info when a
  // receive completes at once).
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  void *r = ucp_tag_recv_nbx(worker_, buf, bytes, make_tag(tag, peer), kFullMask, &param);
  if (UCS_PTR_IS_ERR(r))
    return BC_FAIL(BC_ERR_TRANSPORT, "ucx: receive of %zu bytes from rank %d failed: %s", bytes, peer,
                   ucs_status_string(UCS_PTR_STATUS(r)));
  req->active = true;
  if (r == nullptr) s->complete = 1;
  else s->ucx_req = r;
  return BC_OK;
}

Status UcxTransport::test(TransportRequest *req, bool *done) {
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  Status st = test_request(req, done);
  if (st != BC_OK) had_failure_ = true;
  return st;
}

Status UcxTransport::test_request(TransportRequest *req, bool *done) {
  UcxSlot *s = slot_of(req);
  *done = false;
  if (!s->complete) {
    size_t got = 0;
    ucs_status_t us = request_status(*s, &got);
    if (us == UCS_INPROGRESS) {
      progress();
      us = request_status(*s, &got);
    }
    if (us == UCS_INPROGRESS) {
      // A receive from a dead peer never completes by itself: ask the peer.
      if (peer_failed(req->peer) != UCS_OK) return peer_error(req->peer);
      return BC_OK;
    }
    ucp_request_free(s->ucx_req);
    s->ucx_req = nullptr;
    s->complete = 1;
    s->status = us;
    // Size mismatches in the words the shm and mpi transports use. UCX never
    // writes past the receive buffer: a longer message is truncated.
    if (us == UCS_OK && s->is_recv && got != s->expected) {
      req->active = false;
      return BC_FAIL(BC_ERR_TRANSPORT, "ucx transport: receive from rank %d (tag %#x, %zu bytes): the sender offers %zu bytes",
                     req->peer, s->tag, s->expected, got);
    }
  }
  req->active = false;
  if (s->status != UCS_OK) {
    if (peer_failed(req->peer) != UCS_OK) return peer_error(req->peer);
    if (s->is_recv && s->status == UCS_ERR_MESSAGE_TRUNCATED)
      return BC_FAIL(BC_ERR_TRANSPORT,
                     "ucx transport: receive from rank %d (tag %#x, %zu bytes): the sender offers more bytes (UCX: %s)",
                     req->peer, s->tag, s->expected, ucs_status_string(UCS_ERR_MESSAGE_TRUNCATED));
    return BC_FAIL(BC_ERR_TRANSPORT, "ucx: %s %zu bytes %s rank %d failed: %s", s->is_recv ? "receive of" : "send of",
                   s->expected, s->is_recv ? "from" : "to", req->peer,
                   ucs_status_string(static_cast<ucs_status_t>(s->status)));
  }
  *done = true;
  return BC_OK;
}

void UcxTransport::cancel(TransportRequest *req) {
  if (!req->active) return;
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  had_failure_ = true;
  UcxSlot *s = slot_of(req);
  if (s->ucx_req) {
    if (ucp_request_check_status(s->ucx_req) == UCS_INPROGRESS) {
      // UCX cancels only receives that are not yet matched.
      ucp_request_cancel(worker_, s->ucx_req);
      const UcxPeer &p = peers_[req->peer];
      const bool dead = p.dead || (p.shared && p.shared->dead);
      if (!wait_request(s->ucx_req, dead ? 0 : kCancelWaitMs)) {
        if (p.off_node) {
          // A send, or a receive already inside a rendezvous: UCX may still touch
          // the buffer. Closing the endpoint by force completes everything queued
          // on it (UCS_ERR_CANCELED); the peer is unusable afterwards, as is the
          // communicator after the failure that led here.
          abort_peer(req->peer, UCS_ERR_CANCELED);
          if (!wait_request(s->ucx_req, kCancelWaitMs))
            BC_WARN(Transport, "ucx: a %s rank %d could not be cancelled; UCX may still use its buffer",
                    s->is_recv ? "receive from" : "send to", req->peer);
        } else {
          // A same-node endpoint has no peer-failure handling (ucx_transport.h),
          // and UCX 1.13 cannot close such an endpoint by force: the requests
          // never completed, and ucp_worker_destroy later died on an assertion
          // in cma's endpoint cleanup (seen after a peer was killed). Leave the
          // request to UCX; worker_stop gives it a moment and otherwise
          // leaves the worker to process exit.
          w_->abandoned.push_back(s->ucx_req);
          s->ucx_req = nullptr;
        }
      }
    }
    if (s->ucx_req) ucp_request_free(s->ucx_req);
    s->ucx_req = nullptr;
  }
  s->complete = 1;
  req->active = false;
}

void UcxTransport::peer_died(int peer) {
  if (peer < 0 || peer >= size_ || !peers_) return;
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  peers_[peer].dead = true;
  if (peers_[peer].shared) peers_[peer].shared->dead = true;  // for every communicator, and worker_stop
}

Status UcxTransport::reopen(int peer) {
  if (peer < 0 || peer >= size_ || !peers_)
    return BC_FAIL(BC_ERR_INTERNAL, "ucx: rank %d is outside the communicator of %d ranks", peer, size_);
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  UcxPeer &p = peers_[peer];
  if (p.dead || (p.shared && p.shared->dead))
    return BC_FAIL(BC_ERR_PEER_DEAD, "ucx: rank %d is dead; it cannot be reopened", peer);
  // The agreement leaves copies of its messages unmatched: the id is
  // quarantined and its unexpected messages drained at destroy, so that a
  // later communicator with this id never matches them.
  had_failure_ = true;
  p.failed = UCS_OK;
  if (p.shared && p.shared->failed != UCS_OK) {
    // on_ep_error or abort_peer took it out of w_->eps already: ensure_ep
    // makes a new one. The failed one stays in all_eps until the worker goes.
    if (p.shared->users > 0) --p.shared->users;
    p.shared = nullptr;
  }
  return ensure_ep(peer);
}

Status UcxTransport::idle_wait(int timeout_ms) {
  // Nothing to sleep on (can_sleep() is false, so no waiter calls this): the
  // waiter rests itself (core/wait_policy.h).
  if (efd_ < 0) return BC_OK;
  {
    // ucp_worker_arm succeeds only once nothing is left to progress. The poll
    // below runs without the lock, so that other communicators' threads and
    // the drainer go on; counted as a sleeper from before the arm, any
    // progress they make from then on wakes this thread (ucx_progress_burst),
    // since the event it would wait for may be what they consumed.
    std::lock_guard<std::recursive_mutex> lock(w_->mutex);
    if (progress()) return BC_OK;
    w_->sleepers.fetch_add(1, std::memory_order_acq_rel);
    ucs_status_t s = ucp_worker_arm(worker_);
    if (s != UCS_OK) {
      w_->sleepers.fetch_sub(1, std::memory_order_acq_rel);
      if (s == UCS_ERR_BUSY) return BC_OK;  // events arrived meanwhile: progress them
      return BC_FAIL(BC_ERR_TRANSPORT, "ucx: ucp_worker_arm failed: %s", ucs_status_string(s));
    }
  }
  struct pollfd pfd;
  pfd.fd = efd_;
  pfd.events = POLLIN;
  pfd.revents = 0;
  int rc = poll(&pfd, 1, timeout_ms < 0 ? -1 : timeout_ms);
  const int poll_errno = errno;
  w_->sleepers.fetch_sub(1, std::memory_order_acq_rel);
  if (rc < 0 && poll_errno != EINTR)
    return BC_FAIL(BC_ERR_TRANSPORT, "ucx: poll on the worker's event fd failed: %s", std::strerror(poll_errno));
  return BC_OK;
}

}  // namespace bc
