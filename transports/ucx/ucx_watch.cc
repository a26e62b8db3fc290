// The TCP liveness watch; see ucx_watch.h.
#include "transports/ucx/ucx_watch.h"

#include <sched.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <string>

#include "core/log.h"

namespace bc {
namespace {

using Clock = std::chrono::steady_clock;

// Byes are the only messages on the watch worker: tag = marker << 32 | sender.
constexpr ucp_tag_t kByeTag = static_cast<ucp_tag_t>(0xB1E) << 32;
constexpr ucp_tag_t kByeMask = ~static_cast<ucp_tag_t>(0xFFFFFFFFu);
// How long the destructor lets byes and closes finish. A bye is 8 bytes handed
// to the kernel; this only bounds a close that waits for a slow peer.
constexpr int kCloseMs = 200;
const uint64_t kByeWord = 0xB1E;

Status watch_address(ucp_worker_h worker, std::vector<unsigned char> *out) {
  ucp_worker_attr_t attr;
  std::memset(&attr, 0, sizeof attr);
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
  attr.address_flags = UCP_WORKER_ADDRESS_FLAG_NET_ONLY;
  ucs_status_t s = ucp_worker_query(worker, &attr);
  if (s != UCS_OK) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: ucp_worker_query failed: %s", ucs_status_string(s));
  const auto *a = reinterpret_cast<const unsigned char *>(attr.address);
  out->assign(a, a + attr.address_length);
  ucp_worker_release_address(worker, attr.address);
  return BC_OK;
}

// A context and worker over TCP alone: the watch needs a connection whose
// close the kernel reports, which shared memory never gives.
Status start_worker(ucp_context_h *context, ucp_worker_h *worker) {
  ucp_config_t *config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: ucp_config_read failed: %s", ucs_status_string(s));
  s = ucp_config_modify(config, "TLS", "tcp");
  if (s != UCS_OK) {
    ucp_config_release(config);
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: cannot restrict UCX to tcp: %s", ucs_status_string(s));
  }
  ucp_params_t params;
  std::memset(&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG;
  params.mt_workers_shared = 0;
  s = ucp_init(&params, config, context);
  ucp_config_release(config);
  if (s != UCS_OK) {
    *context = nullptr;
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: ucp_init (tcp) failed: %s", ucs_status_string(s));
  }
  ucp_worker_params_t wp;
  std::memset(&wp, 0, sizeof wp);
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  s = ucp_worker_create(*context, &wp, worker);
  if (s != UCS_OK) {
    *worker = nullptr;
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: ucp_worker_create failed: %s", ucs_status_string(s));
  }
  return BC_OK;
}

}  // namespace

void UcxWatch::on_error(void *arg, ucp_ep_h, ucs_status_t status) {
  auto *p = static_cast<Peer *>(arg);
  if (p->failed != UCS_OK) return;
  p->failed = status;
  BC_DEBUGLOG(Transport, "ucx watch: rank %d: the connection to rank %d closed: %s", p->owner->rank_, p->rank,
              ucs_status_string(status));
}

Status UcxWatch::create(const TransportSetup &setup, const std::vector<char> &watched,
                        std::unique_ptr<UcxWatch> *out) {
  std::unique_ptr<UcxWatch> w(new UcxWatch);
  w->rank_ = setup.rank;
  w->size_ = setup.size;
  Status local = start_worker(&w->context_, &w->worker_);
  std::vector<unsigned char> mine;
  if (local == BC_OK) local = watch_address(w->worker_, &mine);
  if (mine.size() > INT_MAX / 2) local = BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: address of %zu bytes", mine.size());
  int failed = local == BC_OK ? 0 : 1, any = 0;
  BC_MPI_CHECK(MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, setup.bootstrap));
  if (any) {
    if (local != BC_OK) {
      trail(local, __FILE__, __LINE__);
      return BC_ERR_NOT_SUPPORTED;
    }
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: UCX over tcp could not start on another rank");
  }
  const int n = setup.size;
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(n), displs(n);
  BC_MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, setup.bootstrap));
  int64_t total = 0;
  for (int r = 0; r < n; ++r) {
    displs[r] = static_cast<int>(total);
    total += lens[r];
    if (total > INT_MAX) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: addresses too large to exchange");
  }
  std::vector<unsigned char> all(total ? static_cast<size_t>(total) : 1);
  BC_MPI_CHECK(MPI_Allgatherv(mine.data(), len, MPI_BYTE, all.data(), lens.data(), displs.data(), MPI_BYTE,
                              setup.bootstrap));
  w->peers_.reset(new Peer[n]);
  Status st = BC_OK;
  for (int r = 0; r < n; ++r) {
    Peer &p = w->peers_[r];
    p.owner = w.get();
    p.rank = r;
    if (r == setup.rank || !watched[r] || st != BC_OK) continue;
    ucp_ep_params_t ep;
    std::memset(&ep, 0, sizeof ep);
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t *>(all.data() + displs[r]);
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_error;
    ep.err_handler.arg = &p;
    ucs_status_t s = ucp_ep_create(w->worker_, &ep, &p.ep);
    if (s != UCS_OK) {
      p.ep = nullptr;
      st = BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: cannot connect to rank %d over tcp: %s", r, ucs_status_string(s));
    }
  }
  // The connections are made in the background; a first poll starts them.
  for (int i = 0; i < 16 && ucp_worker_progress(w->worker_) != 0; ++i) {
  }
  int bad = st == BC_OK ? 0 : 1;
  BC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, setup.bootstrap));
  if (bad) {
    if (st != BC_OK) return st;
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: another rank could not connect over tcp");
  }
  *out = std::move(w);
  return BC_OK;
}

void UcxWatch::take_byes() {
  for (;;) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, kByeTag, kByeMask, 1, &info);
    if (!msg) return;
    const int from = static_cast<int>(info.sender_tag & 0xFFFFFFFFu);
    if (from >= 0 && from < size_ && peers_) peers_[from].left = true;
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof param);
    void *r = ucp_tag_msg_recv_nbx(worker_, &bye_sink_, sizeof bye_sink_, msg, &param);
    if (UCS_PTR_IS_PTR(r)) {
      // Eager and 8 bytes: already copied in practice; never leave it unfreed.
      const auto deadline = Clock::now() + std::chrono::milliseconds(10);
      while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < deadline) ucp_worker_progress(worker_);
      ucp_request_free(r);
    }
  }
}

void UcxWatch::poll(std::vector<int> *gone) {
  if (!worker_ || !peers_) return;
  for (int i = 0; i < 16 && ucp_worker_progress(worker_) != 0; ++i) {
  }
  take_byes();
  for (int r = 0; r < size_; ++r) {
    Peer &p = peers_[r];
    if (p.failed == UCS_OK || p.left || p.reported) continue;
    p.reported = true;
    p.dead = true;
    gone->push_back(r);
  }
}

void UcxWatch::forget(int rank) {
  if (peers_ && rank >= 0 && rank < size_) peers_[rank].dead = true;
}

UcxWatch::~UcxWatch() {
  if (worker_ && peers_) {
    closing_ = true;
    std::vector<void *> pending;
    for (int r = 0; r < size_; ++r) {
      Peer &p = peers_[r];
      if (!p.ep) continue;
      const bool alive = p.failed == UCS_OK && !p.dead;
      ucp_request_param_t param;
      std::memset(&param, 0, sizeof param);
      if (alive) {
        void *s = ucp_tag_send_nbx(p.ep, &kByeWord, sizeof kByeWord, kByeTag | static_cast<uint32_t>(rank_), &param);
        if (UCS_PTR_IS_PTR(s)) pending.push_back(s);
      }
      // Flush to the living (the bye goes first); drop the dead.
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = alive ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
      void *c = ucp_ep_close_nbx(p.ep, &param);
      p.ep = nullptr;
      if (UCS_PTR_IS_PTR(c)) pending.push_back(c);
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(kCloseMs);
    for (;;) {
      size_t open = 0;
      for (void *req : pending)
        if (ucp_request_check_status(req) == UCS_INPROGRESS) ++open;
      if (open == 0 || Clock::now() >= deadline) break;
      if (ucp_worker_progress(worker_) == 0) sched_yield();
    }
    for (void *req : pending) ucp_request_free(req);
  }
  if (worker_) ucp_worker_destroy(worker_);
  if (context_) ucp_cleanup(context_);
}

}  // namespace bc
