// The UCX transport's life: the process's shared context and worker
// (UcxWorker), a communicator's address exchange and id over MPI, endpoints
// (lazy, one per peer process, with peer-failure handling) and teardown. See
// ucx_transport.h.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <uct/api/uct.h>

#include "core/log.h"
#include "core/wait_policy.h"
#include "transports/ucx/ucx_drain.h"
#include "transports/ucx/ucx_transport.h"

namespace bc {
namespace {

using Clock = std::chrono::steady_clock;
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

// "am posix/memory, rndv cma/memory" from ucp_ep_print_info's lane lines, e.g.
//   #                 lane[0]:  3:posix/memory.0 md[3]  -> md[3]/posix/sysdev[255] am am_bw#0
std::string summarize_lanes(const std::string &info) {
  std::string out;
  size_t pos = 0;
  while ((pos = info.find("lane[", pos)) != std::string::npos) {
    size_t eol = info.find('\n', pos);
    std::string line = info.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
    pos = eol == std::string::npos ? info.size() : eol;
    size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    size_t tl = line.find(':', colon + 2);  // "3:posix/memory.0"
    size_t sp = line.find(' ', tl == std::string::npos ? colon + 2 : tl);
    if (tl == std::string::npos || sp == std::string::npos) continue;
    std::string res = line.substr(tl + 1, sp - tl - 1);
    size_t dot = res.rfind('.');
    if (dot != std::string::npos) res.resize(dot);
    // The lane's uses follow the remote resource ("-> md[..]/tl/sysdev[..] uses").
    size_t arrow = line.find("-> ");
    std::string uses;
    if (arrow != std::string::npos) {
      size_t u = line.find(' ', arrow + 3);
      if (u != std::string::npos) uses = line.substr(u + 1);
    }
    if (!out.empty()) out += "; ";
    out += res + (uses.empty() ? "" : " (" + uses + ")");
  }
  return out.empty() ? "(no lanes listed)" : out;
}


// Whether this process's off-node traffic goes over tcp, and why (for the
// log). A UCX_TLS list decides where the user gave one (tcp in it and no RDMA
// transport); otherwise, and for "^..." or "all", whether UCX has an ib or ugni
// memory domain with a device. A verbs device that UCX lists but the traffic
// does not use (a RoCE NIC run as plain Ethernet, EFA) reads as RDMA there:
// UCX_TLS=tcp settles it.
bool tcp_is_the_network(std::string *why) {
  const char *tls = std::getenv("UCX_TLS");
  if (tls && *tls && *tls != '^') {
    bool tcp = false, rdma = false, all = false;
    std::string list(tls), token;
    for (size_t pos = 0; pos <= list.size(); ++pos) {
      if (pos < list.size() && list[pos] != ',') {
        token += list[pos];
        continue;
      }
      tcp = tcp || token == "tcp";
      all = all || token == "all";
      for (const char *prefix : {"rc", "ud", "dc", "ib", "ugni", "mlx"})
        rdma = rdma || token.rfind(prefix, 0) == 0;
      token.clear();
    }
    if (!all) {
      *why = std::string("UCX_TLS=") + tls + (tcp && !rdma ? " has tcp and no RDMA transport" : " decides");
      return tcp && !rdma;
    }
  }
  uct_component_h *components = nullptr;
  unsigned count = 0;
  if (uct_query_components(&components, &count) != UCS_OK) {
    *why = "UCX could not list its components";
    return false;
  }
  std::string rdma;
  for (unsigned i = 0; i < count && rdma.empty(); ++i) {
    uct_component_attr_t attr;
    std::memset(&attr, 0, sizeof attr);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[i], &attr) != UCS_OK) continue;
    const std::string name = attr.name;
    if (attr.md_resource_count > 0 && (name == "ib" || name.rfind("ugni", 0) == 0)) rdma = name;
  }
  uct_release_component_list(components);
  *why = rdma.empty() ? "no ib or ugni device" : "UCX has " + rdma + " devices";
  return rdma.empty();
}

// UCX 1.13's tcp transport completes an active-message zero-copy send twice
// when its socket fails part-way through the send (uct_tcp_ep_sendv: once in
// the purge that the send error starts, once more on return), and the second
// completion aborts the process on UCX's assertion 'comp->count > 0' (in a
// build without assertions: a second callback on a request that may be
// reused). That is a rank dying because a peer died during a transfer to it
// (1 in 20 runs of liveness_kill_sim_ucx; docs/FAILURES.md). Where tcp is the
// network, this context sends by copy: no zero-copy threshold, and 64 KiB
// send segments (UCX's tcp default is 8 KiB; zero-copy sent 64 KiB per
// message), so that a copy costs the same system calls as zero-copy did.
// Measured on layout d of scripts/bench (1 Gbit/s): the same times at 4 KiB-
// 16 MiB within the noise; with 8 KiB segments 256-512 KiB took 1.3-1.7x
// longer. The user's environment variables win: UCX_ZCOPY_THRESH, and
// UCX_TCP_TX_SEG_SIZE or UCX_TCP_RX_SEG_SIZE (a send segment larger than the
// receive segment makes UCX refuse the interface). Set in ucx.conf instead,
// they are overridden.
Status avoid_tcp_zcopy(ucp_config_t *config) {
  std::string why;
  if (!tcp_is_the_network(&why)) {
    BC_DEBUGLOG(Transport, "ucx: zero-copy sends as UCX chooses (%s)", why.c_str());
    return BC_OK;
  }
  // {the variables that leave it to the user, the key for ucp_config_modify,
  // the value}; a transport's key goes without its prefix (UCX applies it to
  // every interface that has it: tcp alone has TX_SEG_SIZE).
  struct Setting {
    const char *user[2];
    const char *key, *value;
  };
  const Setting settings[] = {{{"UCX_ZCOPY_THRESH", nullptr}, "ZCOPY_THRESH", "inf"},
                              {{"UCX_TCP_TX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE"}, "TX_SEG_SIZE", "64k"}};
  std::string done;
  for (const Setting &setting : settings) {
    if (std::getenv(setting.user[0]) || (setting.user[1] && std::getenv(setting.user[1]))) continue;
    ucs_status_t s = ucp_config_modify(config, setting.key, setting.value);
    if (s != UCS_OK)
      return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx: cannot set %s=%s: %s", setting.key, setting.value,
                     ucs_status_string(s));
    done += std::string(done.empty() ? "" : ", ") + setting.key + "=" + setting.value;
  }
  BC_DEBUGLOG(Transport, "ucx: tcp is the network (%s): sends by copy (%s; docs/FAILURES.md)", why.c_str(),
              done.empty() ? "the user's UCX settings kept" : done.c_str());
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

// Ids a process reports busy after releasing them, so that a new communicator
// takes an id no recent one had.
constexpr size_t kRecentIds = 64;

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

// What each rank tells the others at creation (one allgather).
struct Hello {
  int32_t status;     // BC_OK, or why UCX did not start here
  uint32_t full_len;  // address lengths
  uint32_t net_len;
  uint8_t unreachable;  // bit k: this rank has a peer of kind k it cannot reach (see worker_probe)
  uint8_t pad[3];
  UcxIdRound id;  // the first round of the id agreement (UcxIdAgreement)
};

}  // namespace

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

void UcxTransport::on_ep_error(void *arg, ucp_ep_h, ucs_status_t status) {
  auto *e = static_cast<UcxSharedEp *>(arg);
  if (e->failed != UCS_OK) return;
  e->failed = status;
  // The next communicator that needs this peer connects anew.
  for (auto it = e->worker->eps.begin(); it != e->worker->eps.end(); ++it)
    if (it->second == e) {
      e->worker->eps.erase(it);
      break;
    }
  // A peer no live communicator of ours uses, or one that closed while we
  // tear a communicator down (it finished first), is not news.
  BC_LOG(e->users > 0 && e->worker->closing == 0 ? LogLevel::Warn : LogLevel::Debug, LogSys::Transport,
         "ucx: the connection to %s peer %d (its rank in the communicator that connected first) failed: %s",
         e->off_node ? "off-node" : "same-node", e->first_rank, ucs_status_string(status));
}

bool UcxTransport::can_connect(int peer, bc_memtype_t mem) const {
  // Debian's UCX has no CUDA support: host memory only. Every peer, unless
  // UCX_TLS leaves no transport with peer-failure handling for its kind.
  if (peer < 0 || peer >= size_ || mem == BC_MEM_CUDA) return false;
  return peer == rank_ || reach_[peers_[peer].off_node ? 1 : 0];
}

// Collective: one allgather of every rank's status, address lengths, reach
// and the id agreement's first round, then the addresses (and more id rounds
// only when other creations ran at the same time: ucx_comm_id.cc). Every rank
// reaches the same verdict.
Status UcxTransport::exchange(const TransportSetup &setup, Status local, int64_t timeout_ms) {
  const int n = setup.size;
  Hello mine;
  std::memset(&mine, 0, sizeof mine);
  if (local == BC_OK && n > (1 << kRankBits))
    local = BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx: communicators of more than %d ranks are not supported (%d)",
                    1 << kRankBits, n);
  mine.status = local;
  std::unique_ptr<UcxIdAgreement> ids;
  if (local == BC_OK) {
    ids.reset(new UcxIdAgreement(w_));
    ids->first_round(&mine.id);
    std::lock_guard<std::recursive_mutex> lock(w_->mutex);
    mine.full_len = static_cast<uint32_t>(w_->full.size());
    mine.net_len = static_cast<uint32_t>(w_->net.size());
    for (int r = 0; r < n; ++r) {
      if (r == setup.rank) continue;
      const int kind = setup.node_of[r] != setup.node_of[setup.rank] ? 1 : 0;
      if (w_->reach[kind] == 0) mine.unreachable |= static_cast<uint8_t>(1 << kind);
    }
  }
  std::vector<Hello> all(static_cast<size_t>(n));
  BC_MPI_CHECK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, setup.bootstrap));
  for (int r = 0; r < n; ++r) {
    if (all[r].status == BC_OK) continue;
    if (local != BC_OK) {  // keeps this rank's own reason
      trail(local, __FILE__, __LINE__);
      return BC_ERR_NOT_SUPPORTED;
    }
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx could not start on rank %d (its log says why)", r);
  }
  uint8_t unreachable = 0;
  for (int r = 0; r < n; ++r) unreachable |= all[r].unreachable;
  reach_[0] = !(unreachable & 1);
  reach_[1] = !(unreachable & 2);

  std::vector<int> counts(n), displs(n);
  uint64_t total = 0;
  for (int r = 0; r < n; ++r) {
    const uint64_t c = static_cast<uint64_t>(all[r].full_len) + all[r].net_len;
    if (c > INT_MAX || total > static_cast<uint64_t>(INT_MAX) - c)
      return BC_FAIL(BC_ERR_TRANSPORT, "ucx: worker addresses too large to exchange (%llu bytes from rank %d)",
                     static_cast<unsigned long long>(c), r);
    counts[r] = static_cast<int>(c);
    displs[r] = static_cast<int>(total);
    total += c;
  }
  std::vector<unsigned char> blob;
  {
    std::lock_guard<std::recursive_mutex> lock(w_->mutex);
    blob = w_->full;
    blob.insert(blob.end(), w_->net.begin(), w_->net.end());
  }
  std::vector<unsigned char> addrs(total ? total : 1);
  BC_MPI_CHECK(MPI_Allgatherv(blob.data(), counts[setup.rank], MPI_BYTE, addrs.data(), counts.data(), displs.data(),
                              MPI_BYTE, setup.bootstrap));
  peers_.reset(new UcxPeer[n]);
  for (int r = 0; r < n; ++r) {
    UcxPeer &p = peers_[r];
    p.owner = this;
    p.rank = r;
    p.off_node = setup.node_of[r] != setup.node_of[setup.rank];
    const unsigned char *a = addrs.data() + displs[r] + (p.off_node ? all[r].full_len : 0);
    p.address.assign(a, a + (p.off_node ? all[r].net_len : all[r].full_len));
  }
  // Last: the id is in use from here, and the destructor gives it back.
  std::vector<UcxIdRound> first(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) first[r] = all[r].id;
  int id = -1;
  BC_CHECK(ids->finish(std::move(first), setup.bootstrap, timeout_ms, &id));
  comm_id_ = id;
  return BC_OK;
}

Status ucx_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out) {
  if (static_cast<int>(setup.node_of.size()) != setup.size || setup.rank < 0 || setup.rank >= setup.size)
    return BC_FAIL(BC_ERR_INTERNAL, "ucx: the transport setup has %zu node entries for %d ranks", setup.node_of.size(),
                   setup.size);
  std::unique_ptr<UcxTransport> t(new UcxTransport);
  t->rank_ = setup.rank;
  t->size_ = setup.size;
  bool event_mode = false;
  int64_t rndv_thresh = 512 << 10, timeout = 0;
  if (setup.params) {
    event_mode = setup.params->get_str(ParamId::UcxWait) == "event";
    rndv_thresh = setup.params->get_int(ParamId::UcxRndvThresh);
    timeout = setup.params->get_int(ParamId::Timeout);
    if (timeout > 0 && timeout < t->close_timeout_ms_) t->close_timeout_ms_ = static_cast<int>(timeout);
  }
  const auto t0 = Clock::now();
  UcxWorker *w = nullptr;
  // auto: the shm transport comes first for same-node peers (registry.cc).
  const bool network_only =
      setup.params && setup.params->get_str(ParamId::Transport) == "auto" && !std::getenv("UCX_TLS");
  Status local = worker_acquire(event_mode, rndv_thresh, network_only, setup.rank, &w);
  if (local == BC_OK) {
    t->w_ = w;
    t->worker_ = w->worker;
    t->efd_ = w->efd;
  }
  const auto t1 = Clock::now();
  // Collective from here on: every rank learns whether UCX came up everywhere.
  BC_CHECK(t->exchange(setup, local, timeout));
  if (setup.rank == 0 && log_enabled(LogLevel::Info, LogSys::Init)) {
    const auto ms = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    BC_INFO(Init, "ucx transport of %d ranks (rank 0): worker %.1f ms (%s), exchange %.1f ms, id %d", setup.size,
            ms(t0, t1), ms(t0, t1) > 1.0 ? "started" : "shared", ms(t1, Clock::now()), t->comm_id_);
  }
  *out = std::move(t);
  return BC_OK;
}

ucs_status_t UcxTransport::peer_failed(int peer) const {
  const UcxPeer &p = peers_[peer];
  if (p.failed != UCS_OK) return p.failed;
  return p.shared ? p.shared->failed : UCS_OK;
}

Status UcxTransport::peer_error(int peer) const {
  const UcxPeer &p = peers_[peer];
  const ucs_status_t why = peer_failed(peer);
  if (why == UCS_ERR_CANCELED)
    return BC_FAIL(BC_ERR_TRANSPORT, "ucx: the connection to rank %d was aborted after a cancelled transfer", peer);
  return BC_FAIL(BC_ERR_TRANSPORT, "ucx: rank %d failed (%s): %s", peer, p.off_node ? "off-node" : "same node",
                 ucs_status_string(why));
}

// Under w_->mutex.
Status UcxTransport::ensure_ep(int peer) {
  if (peer < 0 || peer >= size_)
    return BC_FAIL(BC_ERR_INTERNAL, "ucx: rank %d is outside the communicator of %d ranks", peer, size_);
  UcxPeer &p = peers_[peer];
  if (peer_failed(peer) != UCS_OK) return peer_error(peer);
  if (p.shared) return BC_OK;
  const std::vector<unsigned char> &addr = peer == rank_ ? w_->full : p.address;
  auto it = w_->eps.find({p.off_node, addr});
  if (it != w_->eps.end()) {  // another communicator connected to this process already
    p.shared = it->second;
    ++p.shared->users;
    return BC_OK;
  }
  std::unique_ptr<UcxSharedEp> e(new UcxSharedEp);
  e->worker = w_;
  e->off_node = p.off_node;
  e->first_rank = peer;
  ucp_ep_params_t ep;
  std::memset(&ep, 0, sizeof ep);
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t *>(addr.data());
  // Off-node peers need UCX's peer-failure handling: a dead host must surface at
  // once. On the same node UCX 1.13 would then drop shared memory and cma for
  // TCP loopback (2-4x slower), so there we rely on BC_TIMEOUT instead; in auto
  // mode the shm transport serves same-node peers anyway.
  ep.err_mode = p.off_node ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  ep.err_handler.cb = on_ep_error;
  ep.err_handler.arg = e.get();
  ucs_status_t s = ucp_ep_create(worker_, &ep, &e->ep);
  if (s != UCS_OK)
    return BC_FAIL(BC_ERR_TRANSPORT,
                   "ucx: cannot connect to rank %d (%s, %s address): %s. Endpoints need peer-failure "
                   "handling: UCX_TLS must include tcp, or for shared memory set "
                   "UCX_POSIX_ERROR_HANDLING=y / UCX_SYSV_ERROR_HANDLING=y",
                   peer, p.off_node ? "off-node" : "same node", p.off_node ? "network-only" : "full",
                   ucs_status_string(s));
  e->users = 1;
  p.shared = e.get();
  w_->eps[{p.off_node, addr}] = e.get();
  w_->all_eps.push_back(std::move(e));
  if (peer != rank_) log_lanes(p);
  return BC_OK;
}

Status UcxTransport::connect(int peer) {
  if (!w_) return BC_FAIL(BC_ERR_INTERNAL, "ucx: the transport has no worker");
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  return ensure_ep(peer);
}

void UcxTransport::log_lanes(const UcxPeer &p) {
  bool &done = p.off_node ? logged_off_node_ : logged_on_node_;
  if (done) return;
  done = true;
  const bool info = rank_ == 0 && log_enabled(LogLevel::Info, LogSys::Transport);
  if (!info && !log_enabled(LogLevel::Debug, LogSys::Transport)) return;
  char *text = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return;
  ucp_ep_print_info(p.shared->ep, f);
  std::fclose(f);
  std::string lanes = summarize_lanes(std::string(text, len));
  std::free(text);
  BC_LOG(info ? LogLevel::Info : LogLevel::Debug, LogSys::Transport, "ucx: rank %d -> %s peer (rank %d): %s", rank_,
         p.off_node ? "off-node" : "same-node", p.rank, lanes.c_str());
}

// A transfer UCX would not give up: close the peer's endpoint by force, which
// completes everything queued on it (UCS_ERR_CANCELED). Every communicator of
// this process that uses the peer sees the failure; the next one to need the
// peer connects anew. Under w_->mutex.
void UcxTransport::abort_peer(int peer, ucs_status_t why) {
  UcxPeer &p = peers_[peer];
  if (p.failed == UCS_OK) p.failed = why;
  UcxSharedEp *e = p.shared;
  if (!e || !e->ep) return;
  if (e->failed == UCS_OK) e->failed = why;
  for (auto it = w_->eps.begin(); it != w_->eps.end(); ++it)
    if (it->second == e) {
      w_->eps.erase(it);
      break;
    }
  ucp_request_param_t param;
  std::memset(&param, 0, sizeof param);
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void *r = ucp_ep_close_nbx(e->ep, &param);
  e->ep = nullptr;
  if (UCS_PTR_IS_PTR(r)) {
    wait_request(r, close_timeout_ms_);
    ucp_request_free(r);
  }
}

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
