// The TCP liveness watch; see ucx_watch.h.
#include "transports/ucx/ucx_watch.h"

#include <sched.h>
#include <ucp/api/ucp.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/log.h"
#include "transports/ucx/ucx_transport.h"

namespace bc {

// One endpoint to one peer process; lives as long as the hub (views and the
// error callback hold pointers).
struct WatchEp {
  ucp_ep_h ep = nullptr;
  ucs_status_t failed = UCS_OK;  // set by the error callback
  bool left = false;             // its bye arrived
  bool dead = false;             // told by forget(): closed without a flush
  uint64_t key = 0;              // the process's identity
  int first_rank = -1;           // its rank in the communicator that connected first (for logs)
};

namespace {

using Clock = std::chrono::steady_clock;

// Byes are the only messages on the watch worker; the payload is the
// sender's process identity.
constexpr ucp_tag_t kByeTag = static_cast<ucp_tag_t>(0xB1E) << 32;
constexpr ucp_tag_t kByeMask = ~static_cast<ucp_tag_t>(0);
// How long the release lets byes and closes finish. A bye is 8 bytes handed
// to the kernel; this only bounds a close that waits for a slow peer.
constexpr int kCloseMs = 200;

// The process's watch. Every field is guarded by `mutex`; `users` and the
// hub's existence by g_hub_mutex.
struct Hub {
  std::recursive_mutex mutex;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<unsigned char> address;  // network-only
  uint64_t my_key = 0;
  std::map<uint64_t, WatchEp *> eps;    // live endpoints by process identity
  std::vector<std::unique_ptr<WatchEp>> all_eps;
  uint64_t bye_sink = 0;
  int users = 0;
};

std::mutex g_hub_mutex;
Hub *g_hub = nullptr;

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
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // every call holds Hub::mutex
  s = ucp_worker_create(*context, &wp, worker);
  if (s != UCS_OK) {
    *worker = nullptr;
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: ucp_worker_create failed: %s", ucs_status_string(s));
  }
  return BC_OK;
}

void on_error(void *arg, ucp_ep_h, ucs_status_t status) {
  auto *e = static_cast<WatchEp *>(arg);
  if (e->failed != UCS_OK) return;
  e->failed = status;
  BC_DEBUGLOG(Transport, "ucx watch: the connection to the process of rank %d (as first connected) closed: %s",
              e->first_rank, ucs_status_string(status));
}

// Byes that arrived: their senders left. Their endpoints leave the map, so
// that a later communicator with a restarted watch there connects anew.
// Under hub->mutex.
void take_byes(Hub *hub) {
  for (;;) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = ucp_tag_probe_nb(hub->worker, kByeTag, kByeMask, 1, &info);
    if (!msg) return;
    hub->bye_sink = 0;
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof param);
    void *r = ucp_tag_msg_recv_nbx(hub->worker, &hub->bye_sink, sizeof hub->bye_sink, msg, &param);
    if (UCS_PTR_IS_PTR(r)) {
      // Eager and 8 bytes: already copied in practice; never leave it unfreed.
      std::vector<void *> one{r};
      ucx_finish_requests(hub->worker, &one, 10);
    }
    auto it = hub->eps.find(hub->bye_sink);
    if (it == hub->eps.end()) continue;
    it->second->left = true;
    hub->eps.erase(it);
  }
}

// The process's hub, started on first use; counts a user. Local status.
Status hub_acquire(Hub **out) {
  std::lock_guard<std::mutex> lock(g_hub_mutex);
  if (!g_hub) {
    std::unique_ptr<Hub> hub(new Hub);
    Status st = start_worker(&hub->context, &hub->worker);
    if (st == BC_OK) st = watch_address(hub->worker, &hub->address);
    if (st == BC_OK && hub->address.size() > INT_MAX / 2)
      st = BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: address of %zu bytes", hub->address.size());
    if (st != BC_OK) {
      if (hub->worker) ucp_worker_destroy(hub->worker);
      if (hub->context) ucp_cleanup(hub->context);
      *out = nullptr;
      return st;
    }
    g_hub = hub.release();
  }
  ++g_hub->users;
  *out = g_hub;
  return BC_OK;
}

void hub_release_user() {
  std::lock_guard<std::mutex> lock(g_hub_mutex);
  if (g_hub && g_hub->users > 0) --g_hub->users;
}

}  // namespace

Status UcxWatch::create(const TransportSetup &setup, const std::vector<char> &watched,
                        const std::vector<uint64_t> &process_key, std::unique_ptr<UcxWatch> *out) {
  const int n = setup.size;
  Hub *hub = nullptr;
  Status local = hub_acquire(&hub);
  // Whether this rank watches a process it has no endpoint to yet.
  int need = 0;
  if (hub) {
    std::lock_guard<std::recursive_mutex> lock(hub->mutex);
    hub->my_key = process_key[setup.rank];
    for (int r = 0; r < n && !need; ++r)
      need = r != setup.rank && watched[r] && hub->eps.count(process_key[r]) == 0;
  }
  int flags[2] = {local == BC_OK ? 0 : 1, need};
  BC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, setup.bootstrap));
  if (flags[0]) {
    if (hub) hub_release_user();
    if (local != BC_OK) {
      trail(local, __FILE__, __LINE__);
      return BC_ERR_NOT_SUPPORTED;
    }
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: UCX over tcp could not start on another rank");
  }
  std::unique_ptr<UcxWatch> w(new UcxWatch);
  w->eps_.assign(static_cast<size_t>(n), nullptr);
  w->reported_.assign(static_cast<size_t>(n), 0);
  Status st = BC_OK;
  if (flags[1]) {
    // Somebody watches a process it has not connected to: exchange addresses.
    int len = static_cast<int>(hub->address.size());
    std::vector<int> lens(n), displs(n);
    int64_t total = 0;
    int rc = MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, setup.bootstrap);
    for (int r = 0; r < n; ++r) {
      displs[r] = static_cast<int>(total);
      total += lens[r];
    }
    std::vector<unsigned char> all(total ? static_cast<size_t>(total) : 1);
    if (rc == MPI_SUCCESS && total > INT_MAX)
      st = BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: addresses too large to exchange");
    else if (rc == MPI_SUCCESS)
      rc = MPI_Allgatherv(hub->address.data(), len, MPI_BYTE, all.data(), lens.data(), displs.data(), MPI_BYTE,
                          setup.bootstrap);
    if (rc != MPI_SUCCESS) hub_release_user();
    BC_MPI_CHECK(rc);
    std::lock_guard<std::recursive_mutex> lock(hub->mutex);
    for (int r = 0; r < n && st == BC_OK; ++r) {
      if (r == setup.rank || !watched[r] || hub->eps.count(process_key[r])) continue;
      std::unique_ptr<WatchEp> e(new WatchEp);
      e->key = process_key[r];
      e->first_rank = r;
      ucp_ep_params_t ep;
      std::memset(&ep, 0, sizeof ep);
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t *>(all.data() + displs[r]);
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = on_error;
      ep.err_handler.arg = e.get();
      ucs_status_t s = ucp_ep_create(hub->worker, &ep, &e->ep);
      if (s != UCS_OK) {
        st = BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: cannot connect to rank %d over tcp: %s", r,
                     ucs_status_string(s));
        break;
      }
      hub->eps[e->key] = e.get();
      hub->all_eps.push_back(std::move(e));
    }
    // The connections are made in the background; a first poll starts them.
    for (int i = 0; i < 16 && ucp_worker_progress(hub->worker) != 0; ++i) {
    }
  }
  if (flags[1]) {
    int bad = st == BC_OK ? 0 : 1;
    const int rc = MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, setup.bootstrap);
    if (rc != MPI_SUCCESS || bad) hub_release_user();
    BC_MPI_CHECK(rc);
    if (bad) {
      if (st != BC_OK) return st;
      return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx watch: another rank could not connect over tcp");
    }
  }
  std::lock_guard<std::recursive_mutex> lock(hub->mutex);
  for (int r = 0; r < n; ++r) {
    if (r == setup.rank || !watched[r]) continue;
    auto it = hub->eps.find(process_key[r]);
    if (it != hub->eps.end()) {
      w->eps_[r] = it->second;
      continue;
    }
    // Its bye arrived meanwhile (another thread polled): it left, it is not dead.
    for (auto &e : hub->all_eps)
      if (e->key == process_key[r]) w->eps_[r] = e.get();
  }
  *out = std::move(w);
  return BC_OK;
}

void UcxWatch::poll(std::vector<int> *gone) {
  Hub *hub = g_hub;  // alive while this view is (it counts as a user)
  if (!hub) return;
  std::lock_guard<std::recursive_mutex> lock(hub->mutex);
  for (int i = 0; i < 16 && ucp_worker_progress(hub->worker) != 0; ++i) {
  }
  take_byes(hub);
  for (size_t r = 0; r < eps_.size(); ++r) {
    const WatchEp *e = eps_[r];
    if (!e || e->failed == UCS_OK || e->left || reported_[r]) continue;
    reported_[r] = 1;
    gone->push_back(static_cast<int>(r));
  }
}

void UcxWatch::forget(int rank) {
  Hub *hub = g_hub;
  if (!hub || rank < 0 || rank >= static_cast<int>(eps_.size()) || !eps_[rank]) return;
  std::lock_guard<std::recursive_mutex> lock(hub->mutex);
  eps_[rank]->dead = true;
}

UcxWatch::~UcxWatch() { hub_release_user(); }

void ucx_watch_release() {
  std::lock_guard<std::mutex> glock(g_hub_mutex);
  Hub *hub = g_hub;
  if (!hub || hub->users > 0) return;
  {
    std::lock_guard<std::recursive_mutex> lock(hub->mutex);
    take_byes(hub);  // peers that left already get no bye and no flush
    std::vector<void *> pending;
    for (auto &e : hub->all_eps) {
      if (!e->ep) continue;
      const bool alive = e->failed == UCS_OK && !e->dead && !e->left;
      ucp_request_param_t param;
      std::memset(&param, 0, sizeof param);
      if (alive) {
        void *s = ucp_tag_send_nbx(e->ep, &hub->my_key, sizeof hub->my_key, kByeTag, &param);
        if (UCS_PTR_IS_PTR(s)) pending.push_back(s);
      }
      // Flush to the living (the bye goes first); drop the rest.
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = alive ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
      void *c = ucp_ep_close_nbx(e->ep, &param);
      e->ep = nullptr;
      if (UCS_PTR_IS_PTR(c)) pending.push_back(c);
    }
    ucx_finish_requests(hub->worker, &pending, kCloseMs);
    // Byes that came meanwhile: taken, or ucp_worker_destroy warns of each.
    take_byes(hub);
    ucp_worker_destroy(hub->worker);
    ucp_cleanup(hub->context);
  }
  delete hub;
  g_hub = nullptr;
}

}  // namespace bc
