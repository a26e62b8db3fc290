// The process's shared UCX context and worker (UcxWorker, ucx_transport.h):
// started on the first transport's creation for a set of settings, probed once
// for which peers it can reach, shared by every later communicator, and
// stopped by bc_finalize once no communicator uses it (ucx_release_idle).
// Separate from a communicator's own setup (ucx_setup.cc), which only takes
// one.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "core/log.h"
#include "core/wait_policy.h"
#include "transports/ucx/ucx_drain.h"
#include "transports/ucx/ucx_setup_internal.h"
#include "transports/ucx/ucx_transport.h"

namespace bc {
namespace {

// After a failure: how long same-node endpoints get to flush at close.
constexpr int kFailedCloseMs = 100;

// A copy of an address from ucp_worker_query, released at once.
Status query_address(ucp_worker_h worker, bool net_only, std::vector<unsigned char> *out) {
  ucp_worker_attr_t attr;
  std::memset(&attr, 0, sizeof attr);
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
  attr.address_flags = net_only ? UCP_WORKER_ADDRESS_FLAG_NET_ONLY : 0;
  ucs_status_t s = ucp_worker_query(worker, &attr);
  if (s != UCS_OK)
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucp_worker_query(%s address) failed: %s", net_only ? "network-only" : "full",
                   ucs_status_string(s));
  const auto *a = reinterpret_cast<const unsigned char *>(attr.address);
  out->assign(a, a + attr.address_length);
  ucp_worker_release_address(worker, attr.address);
  return BC_OK;
}

// Every worker this process made, by settings; never freed at exit (UCX's own
// destructors may already have run): bc_finalize releases them.
std::mutex g_workers_mutex;
std::vector<UcxWorker *> *g_workers = new std::vector<UcxWorker *>;

// At exit, the drainers of the workers a program never released (no
// bc_finalize) stop before UCX's own destructors run under them.
void stop_drainers_at_exit() {
  std::lock_guard<std::mutex> lock(g_workers_mutex);
  for (UcxWorker *w : *g_workers) drain_stop(w);
}
// The context and worker of `w`, whose settings are filled in.
Status worker_start(UcxWorker *w) {
  unsigned maj = 0, min = 0, rel = 0;
  ucp_get_version(&maj, &min, &rel);
  if (maj != UCP_API_MAJOR || min < UCP_API_MINOR)
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "libucp %u.%u.%u does not match the UCX %d.%d headers this library was built with",
                   maj, min, rel, UCP_API_MAJOR, UCP_API_MINOR);
  BC_DEBUGLOG(Transport, "ucx: libucp %u.%u.%u (headers %d.%d)", maj, min, rel, UCP_API_MAJOR, UCP_API_MINOR);

  ucp_config_t *config = nullptr;
  // UCX reads its own UCX_* variables (UCX_TLS, UCX_NET_DEVICES ...) here.
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucp_config_read failed: %s", ucs_status_string(s));
  if (w->network_only) {
    // BC_TRANSPORT=auto: same-node peers belong to the shm transport, so this
    // worker need not open UCX's shared-memory interfaces (posix, sysv, cma):
    // that halved the UCX share of a first communicator across the simulated
    // nodes (165 -> 85 ms at np 8, 2 cores). A same-node peer that shm cannot
    // serve still goes over tcp loopback. Only without the user's UCX_TLS.
    s = ucp_config_modify(config, "TLS", "^sm");
    if (s != UCS_OK) {
      ucp_config_release(config);
      return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx: cannot leave out shared memory (UCX_TLS=^sm): %s",
                     ucs_status_string(s));
    }
  }
  Status copy_sends = avoid_tcp_zcopy(config);
  if (copy_sends != BC_OK) {
    ucp_config_release(config);
    return copy_sends;
  }
  if (!std::getenv("UCX_RNDV_THRESH")) {  // the user's UCX setting wins (docs: BC_UCX_RNDV_THRESH)
    const std::string thresh = std::to_string(static_cast<long long>(w->rndv_thresh));
    s = ucp_config_modify(config, "RNDV_THRESH", thresh.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return BC_FAIL(BC_ERR_PARAM, "BC_UCX_RNDV_THRESH=%s: UCX refused it: %s", thresh.c_str(), ucs_status_string(s));
    }
  }
  ucp_params_t params;
  std::memset(&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | (w->event_mode ? UCP_FEATURE_WAKEUP : 0);
  params.mt_workers_shared = 0;
  s = ucp_init(&params, config, &w->context);
  ucp_config_release(config);
  if (s != UCS_OK) {
    w->context = nullptr;
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucp_init failed: %s", ucs_status_string(s));
  }
  ucp_worker_params_t wp;
  std::memset(&wp, 0, sizeof wp);
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Serialized: every call holds UcxWorker::mutex.
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  s = ucp_worker_create(w->context, &wp, &w->worker);
  if (s != UCS_OK) {
    w->worker = nullptr;
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucp_worker_create failed: %s", ucs_status_string(s));
  }
  if (w->event_mode) {
    s = ucp_worker_get_efd(w->worker, &w->efd);
    if (s != UCS_OK) {
      w->efd = -1;
      BC_WARN(Transport, "ucx: BC_UCX_WAIT=event but the worker has no event fd (%s); yielding instead",
              ucs_status_string(s));
    }
  }
  BC_CHECK(query_address(w->worker, false, &w->full));
  BC_CHECK(query_address(w->worker, true, &w->net));
  BC_DEBUGLOG(Transport, "ucx: worker address %zu bytes, network-only %zu bytes", w->full.size(), w->net.size());
  return BC_OK;
}

// Can an endpoint with peer-failure handling reach a peer of each kind? A
// user's UCX_TLS may leave only transports without it (UCX_TLS=sm: shared
// memory has it only with UCX_{POSIX,SYSV}_ERROR_HANDLING=y). An endpoint to
// our own full and network-only address tells, involving no other process.
// Once per worker. Under w->mutex.
void worker_probe(UcxWorker *w, int rank) {
  if (w->reach[0] >= 0) return;
  std::vector<void *> closing;
  for (int kind = 0; kind < 2; ++kind) {
    const std::vector<unsigned char> &addr = kind == 1 ? w->net : w->full;
    ucp_ep_params_t ep;
    std::memset(&ep, 0, sizeof ep);
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t *>(addr.data());
    ep.err_mode = kind == 1 ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    ucp_ep_h probe = nullptr;
    ucs_status_t s = ucp_ep_create(w->worker, &ep, &probe);
    w->reach[kind] = s == UCS_OK ? 1 : 0;
    if (s != UCS_OK) {
      BC_LOG(rank == 0 ? LogLevel::Info : LogLevel::Debug, LogSys::Transport,
             "ucx: rank %d cannot reach %s peers with peer-failure handling: %s (UCX_TLS needs tcp, "
             "or UCX_POSIX_ERROR_HANDLING=y / UCX_SYSV_ERROR_HANDLING=y for shared memory)",
             rank, kind == 1 ? "off-node" : "same-node", ucs_status_string(s));
      continue;
    }
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof param);
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void *r = ucp_ep_close_nbx(probe, &param);
    if (UCS_PTR_IS_PTR(r)) closing.push_back(r);
  }
  ucx_finish_requests(w->worker, &closing, 100);
}

// Endpoints closed by force (nothing is in flight: every communicator has
// been destroyed, and each flushed its endpoints then), the worker and the
// context destroyed. Under g_workers_mutex; `w` is unused. False when the
// worker was left to process exit instead (a same-node peer died): then `w`
// must not be deleted either (UCX may still call back into it).
bool worker_stop(UcxWorker *w) {
  drain_stop(w);  // before the lock: it joins a thread that takes it
  std::lock_guard<std::recursive_mutex> lock(w->mutex);
  // A same-node endpoint has no peer-failure handling, and UCX 1.13 cannot
  // close one whose peer died with transfers in flight: ucp_worker_destroy
  // asserted in cma's endpoint cleanup and aborted the survivor (seen after a
  // kill -9). Give abandoned requests a moment; after such a death keep the
  // worker, its context and its buffers for process exit: a few fds and some
  // memory, once per process, after a failure that ends the job anyway.
  ucx_finish_requests(w->worker, &w->abandoned, kFailedCloseMs);
  bool same_node_death = false;
  for (auto &e : w->all_eps) same_node_death = same_node_death || (e->dead && !e->off_node);
  if (same_node_death) {
    BC_DEBUGLOG(Transport, "ucx: a same-node peer died; the UCX worker is left to process exit");
    return false;
  }
  // Messages of communicators broken by failures that arrived after their
  // destroy drained them: taken into scratch buffers so that
  // ucp_worker_destroy does not warn about each one on stderr.
  for (int n = 0; w->worker && n < 65536; ++n) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = ucp_tag_probe_nb(w->worker, 0, 0, 1, &info);
    if (!msg) break;
    w->sinks.emplace_back(info.length ? info.length : 1);
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof param);
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    void *r = ucp_tag_msg_recv_nbx(w->worker, w->sinks.back().data(), info.length, msg, &param);
    if (UCS_PTR_IS_PTR(r)) w->drains.push_back(r);
  }
  // Drained rendezvous receives need the network (or a cma read) to finish,
  // and ucp_worker_destroy must not find them pending: progress them, within
  // one bound (a read from a process that is gone fails at once).
  ucx_finish_requests(w->worker, &w->drains, 500);
  std::vector<void *> closing;
  for (auto &e : w->all_eps) {
    if (!e->ep) continue;
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof param);
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    e->users = 0;  // the peers closing first look like failures: not news
    void *r = ucp_ep_close_nbx(e->ep, &param);
    e->ep = nullptr;
    if (UCS_PTR_IS_PTR(r)) closing.push_back(r);
  }
  // Forced closes need no answer from the peer; progress lets UCX purge what
  // was still queued on them before ucp_worker_destroy (bounded).
  ucx_finish_requests(w->worker, &closing, 200);
  if (w->worker) ucp_worker_destroy(w->worker);
  if (w->context) ucp_cleanup(w->context);
  w->worker = nullptr;
  w->context = nullptr;
  w->eps.clear();
  w->all_eps.clear();
  w->sinks.clear();
  w->drains.clear();
  return true;
}

}  // namespace

// This process's worker for these settings, started on first use; counts a
// user. The status is local: the caller agrees on it with the other ranks.
Status worker_acquire(bool event_mode, int64_t rndv_thresh, bool network_only, int rank, UcxWorker **out) {
  *out = nullptr;
  std::lock_guard<std::mutex> lock(g_workers_mutex);
  for (UcxWorker *w : *g_workers) {
    if (w->event_mode != event_mode || w->rndv_thresh != rndv_thresh || w->network_only != network_only) continue;
    std::lock_guard<std::recursive_mutex> wl(w->mutex);
    ++w->users;
    *out = w;
    return BC_OK;
  }
  std::unique_ptr<UcxWorker> w(new UcxWorker);
  w->event_mode = event_mode;
  w->rndv_thresh = rndv_thresh;
  w->network_only = network_only;
  Status st = worker_start(w.get());
  if (st == BC_OK) {
    std::lock_guard<std::recursive_mutex> wl(w->mutex);
    worker_probe(w.get(), rank);
  }
  if (st != BC_OK) {
    worker_stop(w.get());
    return st;
  }
  w->users = 1;
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(stop_drainers_at_exit); });
  drain_start(w.get());
  g_workers->push_back(w.get());
  *out = w.release();
  return BC_OK;
}

void ucx_finish_requests(ucp_worker_h worker, std::vector<void *> *reqs, int ms) {
  size_t open = 0;
  WaitPolicy::poll_for(ms, [&] {
    open = 0;
    for (void *r : *reqs)
      if (ucp_request_check_status(r) == UCS_INPROGRESS) ++open;
    return open == 0;
  }, [&] { return ucp_worker_progress(worker) != 0; });
  if (open > 0) BC_DEBUGLOG(Transport, "ucx: %zu requests did not finish within %d ms", open, ms);
  for (void *r : *reqs) ucp_request_free(r);
  reqs->clear();
}

void ucx_release_idle() {
  std::lock_guard<std::mutex> lock(g_workers_mutex);
  std::vector<UcxWorker *> keep;
  for (UcxWorker *w : *g_workers) {
    bool idle = false;
    {
      std::lock_guard<std::recursive_mutex> wl(w->mutex);
      idle = w->users == 0;
    }
    if (!idle) {
      keep.push_back(w);
      continue;
    }
    if (!worker_stop(w)) continue;  // left to process exit, deliberately
    delete w;
  }
  g_workers->swap(keep);
}

}  // namespace bc
