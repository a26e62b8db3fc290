// A UCX communicator's teardown: the endpoint flushes of a clean destroy
// (run as a quiesce while every rank polls), the drain of a broken
// communicator's unexpected messages, and the destructor, which gives the id
// back (or quarantines it) and the worker's use (ucx_worker.cc stops it at
// bc_finalize).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/log.h"
#include "transports/ucx/ucx_transport.h"

namespace bc {
namespace {

using Clock = std::chrono::steady_clock;

// Ids a process reports busy after releasing them, so that a new communicator
// takes an id no recent one had.
constexpr size_t kRecentIds = 64;

}  // namespace

// After a clean last collective: our last eager sends may still wait in UCX's
// queues, which only progress moves; flush the endpoints this communicator
// used, so that they reach their peers even if this process stops calling
// UCX. A flush can need the peer's progress (the last rank to finish its
// collective found its peers already in MPI, in the next communicator's
// creation, and waited out the bound on every destroy: 100 ms of a later
// communicator's 135 ms on layout a). So comm_destroy runs the flushes as a
// quiesce: every rank progresses its worker until every rank's flushes are
// done (quiesce_start, quiesce_poll). The destructor flushes only what that
// did not finish (a peer died or the wait was given up), within one short
// bound (kCleanFlushMs): a peer still waiting for our data is progressing, so
// its flush completes well inside it, and the worker lives on until
// bc_finalize, whose progress finishes the rest. Under w_->mutex.
constexpr int kCleanFlushMs = 100;

std::vector<void *> UcxTransport::post_flushes() {
  std::vector<void *> pending;
  for (int r = 0; r < size_; ++r) {
    UcxPeer &p = peers_[r];
    if (r == rank_ || !p.shared || !p.shared->ep || peer_failed(r) != UCS_OK) continue;
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof param);
    void *req = ucp_ep_flush_nbx(p.shared->ep, &param);
    if (UCS_PTR_IS_PTR(req)) pending.push_back(req);
  }
  return pending;
}

void UcxTransport::quiesce_start() {
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  if (quiesce_started_ || !peers_ || comm_id_ < 0) return;
  quiesce_started_ = true;
  // From here until the destructor this communicator is closing: a peer that
  // sees the closing barrier complete first may destroy its endpoints (or its
  // worker, at bc_finalize) while this rank still waits to see it, and that
  // disconnect is no news (it was logged as a failed connection, at the end
  // of some clean torch runs on the simulated 2 x 4 cluster).
  ++w_->closing;
  quiesce_t0_ = Clock::now();
  if (!had_failure_) quiesce_reqs_ = post_flushes();
}

bool UcxTransport::quiesce_poll() {
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  ucp_worker_progress(worker_);  // also after our own part: a peer's flush may need it
  if (quiesced_ || !quiesce_started_) return true;  // done, or nothing was started to wait for
  size_t kept = 0;
  for (void *r : quiesce_reqs_) {
    if (ucp_request_check_status(r) == UCS_INPROGRESS) quiesce_reqs_[kept++] = r;
    else ucp_request_free(r);
  }
  quiesce_reqs_.resize(kept);
  if (kept > 0) return false;
  quiesced_ = true;
  BC_DEBUGLOG(Transport, "ucx: rank %d: endpoint flushes done in %.1f ms", rank_,
              std::chrono::duration<double, std::milli>(Clock::now() - quiesce_t0_).count());
  return true;
}

void UcxTransport::flush_endpoints() {
  if (quiesced_) return;
  std::vector<void *> pending = quiesce_started_ ? std::move(quiesce_reqs_) : post_flushes();
  quiesce_reqs_.clear();
  const auto t0 = Clock::now();
  const size_t n = pending.size();
  ucx_finish_requests(w_->worker, &pending, std::min(kCleanFlushMs, close_timeout_ms_));
  BC_DEBUGLOG(Transport, "ucx: rank %d: %zu endpoint flushes took %.1f ms (at destroy)", rank_, n,
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
}

// After a failure, messages for the receives we cancelled, and for ones never
// posted, wait in the unexpected queue under this communicator's id; take them
// into scratch buffers. Messages still on their way stay in UCX's queue: the
// id is never used again in this process. No progress here: that would let
// UCX retry connections to peers that have already gone. Under w_->mutex.
void UcxTransport::drain_unexpected() {
  const ucp_tag_t tag = static_cast<ucp_tag_t>(comm_id_) << kRankBits;
  const ucp_tag_t mask = static_cast<ucp_tag_t>(kCommIds - 1) << kRankBits;
  for (int n = 0; n < 4096; ++n) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, tag, mask, 1, &info);
    if (!msg) break;
    w_->sinks.emplace_back(info.length ? info.length : 1);
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof param);
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    void *r = ucp_tag_msg_recv_nbx(worker_, w_->sinks.back().data(), info.length, msg, &param);
    if (!UCS_PTR_IS_PTR(r)) continue;
    // An eager message is copied at once; a rendezvous one needs the network,
    // so its sink and request stay until the worker finishes them (worker_stop).
    if (ucp_request_check_status(r) != UCS_INPROGRESS) {
      w_->sinks.pop_back();
      ucp_request_free(r);
    } else {
      w_->drains.push_back(r);
    }
  }
}

UcxTransport::~UcxTransport() {
  if (!w_) return;
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  if (peers_ && comm_id_ >= 0) {
    if (!quiesce_started_) ++w_->closing;  // else held since quiesce_start
    if (had_failure_) drain_unexpected();
    else flush_endpoints();
    for (int r = 0; r < size_; ++r)
      if (peers_[r].shared && peers_[r].shared->users > 0) --peers_[r].shared->users;
    --w_->closing;
  }
  if (comm_id_ >= 0) {
    w_->in_use.reset(static_cast<size_t>(comm_id_));
    if (had_failure_) {
      w_->quarantined.set(static_cast<size_t>(comm_id_));
    } else {
      w_->recent.push_back(comm_id_);
      if (w_->recent.size() > kRecentIds) w_->recent.pop_front();
    }
  }
  --w_->users;  // the worker itself stays until bc_finalize (ucx_release_idle)
}

}  // namespace bc
