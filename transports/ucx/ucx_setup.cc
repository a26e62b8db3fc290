// The UCX transport's life: context and worker, the address exchange over MPI,
// endpoints (lazy, with peer-failure handling) and teardown. See ucx_transport.h.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/log.h"
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

}  // namespace

void UcxTransport::on_ep_error(void *arg, ucp_ep_h, ucs_status_t status) {
  auto *p = static_cast<UcxPeer *>(arg);
  if (p->failed != UCS_OK) return;
  p->failed = status;
  p->owner->had_failure_ = true;
  // While tearing down, peers that close first look like failures: not news.
  BC_LOG(p->owner->closing_ ? LogLevel::Debug : LogLevel::Warn, LogSys::Transport,
         "ucx: rank %d: the connection to rank %d failed: %s", p->owner->rank_, p->rank, ucs_status_string(status));
}

bool UcxTransport::can_connect(int peer, bc_memtype_t mem) const {
  // Debian's UCX has no CUDA support: host memory only. Every peer, unless
  // UCX_TLS leaves no transport with peer-failure handling for its kind.
  if (peer < 0 || peer >= size_ || mem == BC_MEM_CUDA) return false;
  return peer == rank_ || reach_[peers_[peer].off_node ? 1 : 0];
}

Status UcxTransport::init_local(const TransportSetup &setup) {
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
  if (!std::getenv("UCX_RNDV_THRESH")) {  // the user's UCX setting wins (docs: BC_UCX_RNDV_THRESH)
    const std::string thresh = std::to_string(static_cast<long long>(rndv_thresh_));
    s = ucp_config_modify(config, "RNDV_THRESH", thresh.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return BC_FAIL(BC_ERR_PARAM, "BC_UCX_RNDV_THRESH=%s: UCX refused it: %s", thresh.c_str(), ucs_status_string(s));
    }
  }
  ucp_params_t params;
  std::memset(&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | (event_mode_ ? UCP_FEATURE_WAKEUP : 0);
  params.mt_workers_shared = 0;
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) {
    context_ = nullptr;
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucp_init failed: %s", ucs_status_string(s));
  }

  ucp_worker_params_t wp;
  std::memset(&wp, 0, sizeof wp);
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  s = ucp_worker_create(context_, &wp, &worker_);
  if (s != UCS_OK) {
    worker_ = nullptr;
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucp_worker_create failed: %s", ucs_status_string(s));
  }
  if (event_mode_) {
    s = ucp_worker_get_efd(worker_, &efd_);
    if (s != UCS_OK) {
      efd_ = -1;
      BC_WARN(Transport, "ucx: BC_UCX_WAIT=event but the worker has no event fd (%s); yielding instead",
              ucs_status_string(s));
    }
  }
  BC_CHECK(query_address(worker_, false, &my_full_));
  BC_CHECK(query_address(worker_, true, &my_net_));
  BC_DEBUGLOG(Transport, "ucx: rank %d worker address %zu bytes, network-only %zu bytes", setup.rank,
              my_full_.size(), my_net_.size());
  return BC_OK;
}

Status UcxTransport::exchange_addresses(const TransportSetup &setup) {
  const int n = setup.size;
  uint64_t mine[2] = {my_full_.size(), my_net_.size()};
  std::vector<uint64_t> lens(2 * static_cast<size_t>(n));
  BC_MPI_CHECK(MPI_Allgather(mine, 2, MPI_UINT64_T, lens.data(), 2, MPI_UINT64_T, setup.bootstrap));
  std::vector<int> counts(n), displs(n);
  uint64_t total = 0;
  for (int r = 0; r < n; ++r) {
    uint64_t c = lens[2 * r] + lens[2 * r + 1];
    if (c > INT_MAX || total > static_cast<uint64_t>(INT_MAX) - c)
      return BC_FAIL(BC_ERR_TRANSPORT, "ucx: worker addresses too large to exchange (%llu bytes from rank %d)",
                     static_cast<unsigned long long>(c), r);
    counts[r] = static_cast<int>(c);
    displs[r] = static_cast<int>(total);
    total += c;
  }
  std::vector<unsigned char> blob(my_full_);
  blob.insert(blob.end(), my_net_.begin(), my_net_.end());
  std::vector<unsigned char> all(total ? total : 1);
  BC_MPI_CHECK(MPI_Allgatherv(blob.data(), counts[setup.rank], MPI_BYTE, all.data(), counts.data(), displs.data(),
                              MPI_BYTE, setup.bootstrap));
  peers_.reset(new UcxPeer[n]);
  for (int r = 0; r < n; ++r) {
    UcxPeer &p = peers_[r];
    p.owner = this;
    p.rank = r;
    p.off_node = setup.node_of[r] != setup.node_of[setup.rank];
    const unsigned char *a = all.data() + displs[r] + (p.off_node ? lens[2 * r] : 0);
    p.address.assign(a, a + (p.off_node ? lens[2 * r + 1] : lens[2 * r]));
  }
  return BC_OK;
}

Status ucx_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out) {
  if (static_cast<int>(setup.node_of.size()) != setup.size || setup.rank < 0 || setup.rank >= setup.size)
    return BC_FAIL(BC_ERR_INTERNAL, "ucx: the transport setup has %zu node entries for %d ranks", setup.node_of.size(),
                   setup.size);
  std::unique_ptr<UcxTransport> t(new UcxTransport);
  t->rank_ = setup.rank;
  t->size_ = setup.size;
  if (setup.params) {
    t->event_mode_ = setup.params->get_str(ParamId::UcxWait) == "event";
    t->rndv_thresh_ = setup.params->get_int(ParamId::UcxRndvThresh);
    const int64_t timeout = setup.params->get_int(ParamId::Timeout);
    if (timeout > 0 && timeout < t->close_timeout_ms_) t->close_timeout_ms_ = static_cast<int>(timeout);
  }
  // Collective from here on: every rank learns whether UCX came up everywhere,
  // before anyone enters the address exchange, so all return the same status.
  Status local = t->init_local(setup);
  struct {
    int failed;
    int rank;
  } in{local == BC_OK ? 0 : 1, setup.rank}, worst{0, 0};
  BC_MPI_CHECK(MPI_Allreduce(&in, &worst, 1, MPI_2INT, MPI_MAXLOC, setup.bootstrap));
  if (worst.failed) {
    if (local != BC_OK) {  // keeps this rank's own reason
      trail(local, __FILE__, __LINE__);
      return BC_ERR_NOT_SUPPORTED;
    }
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx could not start on rank %d (its log says why)", worst.rank);
  }
  BC_CHECK(t->exchange_addresses(setup));
  BC_CHECK(t->probe_reach(setup));
  *out = std::move(t);
  return BC_OK;
}

// Can UCX reach a peer of each kind with UCP_ERR_HANDLING_MODE_PEER? A user's
// UCX_TLS may leave only transports without peer-failure support (UCX_TLS=sm:
// shared memory has it only with UCX_{POSIX,SYSV}_ERROR_HANDLING=y). Each rank
// tries an endpoint to its own full and network-only address, which involves
// no other rank, and all agree, so that every rank picks the same transport
// for every pair; unreachable kinds are left to the next transport (mpi).
Status UcxTransport::probe_reach(const TransportSetup &setup) {
  int ok[2] = {1, 1};
  for (int kind = 0; kind < 2; ++kind) {
    bool any = false;
    for (int r = 0; r < size_ && !any; ++r) any = r != rank_ && peers_[r].off_node == (kind == 1);
    if (!any) continue;
    const std::vector<unsigned char> &addr = kind == 1 ? my_net_ : my_full_;
    ucp_ep_params_t ep;
    std::memset(&ep, 0, sizeof ep);
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t *>(addr.data());
    ep.err_mode = kind == 1 ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    ucp_ep_h probe = nullptr;
    ucs_status_t s = ucp_ep_create(worker_, &ep, &probe);
    if (s != UCS_OK) {
      ok[kind] = 0;
      BC_LOG(rank_ == 0 ? LogLevel::Info : LogLevel::Debug, LogSys::Transport,
             "ucx: rank %d cannot reach %s peers with peer-failure handling: %s (UCX_TLS needs tcp, "
             "or UCX_POSIX_ERROR_HANDLING=y / UCX_SYSV_ERROR_HANDLING=y for shared memory)",
             rank_, kind == 1 ? "off-node" : "same-node", ucs_status_string(s));
      continue;
    }
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof param);
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void *r = ucp_ep_close_nbx(probe, &param);
    if (UCS_PTR_IS_PTR(r)) {
      wait_request(r, 100);
      ucp_request_free(r);
    }
  }
  int all[2] = {1, 1};
  BC_MPI_CHECK(MPI_Allreduce(ok, all, 2, MPI_INT, MPI_LAND, setup.bootstrap));
  reach_[0] = all[0] != 0;
  reach_[1] = all[1] != 0;
  return BC_OK;
}

Status UcxTransport::peer_error(int peer) const {
  const UcxPeer &p = peers_[peer];
  if (p.failed == UCS_ERR_CANCELED)
    return BC_FAIL(BC_ERR_TRANSPORT, "ucx: the connection to rank %d was aborted after a cancelled transfer", peer);
  return BC_FAIL(BC_ERR_TRANSPORT, "ucx: rank %d failed (%s): %s", peer, p.off_node ? "off-node" : "same node",
                 ucs_status_string(p.failed));
}

Status UcxTransport::ensure_ep(int peer) {
  if (peer < 0 || peer >= size_)
    return BC_FAIL(BC_ERR_INTERNAL, "ucx: rank %d is outside the communicator of %d ranks", peer, size_);
  UcxPeer &p = peers_[peer];
  if (p.failed != UCS_OK) return peer_error(peer);
  if (p.ep) return BC_OK;
  ucp_ep_params_t ep;
  std::memset(&ep, 0, sizeof ep);
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t *>(peer == rank_ ? my_full_.data() : p.address.data());
  // Off-node peers need UCX's peer-failure handling: a dead host must surface at
  // once. On the same node UCX 1.13 would then drop shared memory and cma for
  // TCP loopback (2-4x slower), so there we rely on BC_TIMEOUT instead; in auto
  // mode the shm transport serves same-node peers anyway.
  ep.err_mode = p.off_node ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  ep.err_handler.cb = on_ep_error;
  ep.err_handler.arg = &p;
  ucs_status_t s = ucp_ep_create(worker_, &ep, &p.ep);
  if (s != UCS_OK) {
    p.ep = nullptr;
    return BC_FAIL(BC_ERR_TRANSPORT,
                   "ucx: cannot connect to rank %d (%s, %s address): %s. Endpoints need peer-failure "
                   "handling: UCX_TLS must include tcp, or for shared memory set "
                   "UCX_POSIX_ERROR_HANDLING=y / UCX_SYSV_ERROR_HANDLING=y",
                   peer, p.off_node ? "off-node" : "same node", p.off_node ? "network-only" : "full",
                   ucs_status_string(s));
  }
  if (peer != rank_) log_lanes(p);
  return BC_OK;
}

Status UcxTransport::connect(int peer) { return ensure_ep(peer); }

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
  ucp_ep_print_info(p.ep, f);
  std::fclose(f);
  std::string lanes = summarize_lanes(std::string(text, len));
  std::free(text);
  BC_LOG(info ? LogLevel::Info : LogLevel::Debug, LogSys::Transport, "ucx: rank %d -> %s peer (rank %d): %s", rank_,
         p.off_node ? "off-node" : "same-node", p.rank, lanes.c_str());
}

void UcxTransport::abort_peer(int peer, ucs_status_t why) {
  UcxPeer &p = peers_[peer];
  if (p.failed == UCS_OK) p.failed = why;
  if (!p.ep) return;
  ucp_request_param_t param;
  std::memset(&param, 0, sizeof param);
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void *r = ucp_ep_close_nbx(p.ep, &param);
  p.ep = nullptr;
  if (UCS_PTR_IS_PTR(r)) {
    wait_request(r, close_timeout_ms_);
    ucp_request_free(r);
  }
}

bool UcxTransport::close_endpoints() {
  if (!peers_) return true;
  closing_ = true;
  std::vector<void *> pending;
  for (int r = 0; r < size_; ++r) {
    UcxPeer &p = peers_[r];
    if (!p.ep) continue;
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof param);
    // A failed peer cannot confirm a flush, and after a failure nothing in
    // flight matters any more (the communicator is broken): drop the endpoint.
    // Otherwise flush, so that our last eager sends reach their peers. Only an
    // off-node endpoint (peer-failure handling) may be dropped by force: UCX
    // 1.13 does not support a forced close without it; a same-node one is
    // flushed, briefly after a failure.
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = p.off_node && (p.failed != UCS_OK || had_failure_) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void *req = ucp_ep_close_nbx(p.ep, &param);
    p.ep = nullptr;
    if (UCS_PTR_IS_PTR(req)) pending.push_back(req);
  }
  // All closes progress together, within one bound: short after a failure,
  // where only same-node flushes need progress and a dead peer never answers.
  const auto deadline = Clock::now() + std::chrono::milliseconds(had_failure_ ? kFailedCloseMs : close_timeout_ms_);
  auto open_count = [&] {
    size_t open = 0;
    for (void *req : pending)
      if (ucp_request_check_status(req) == UCS_INPROGRESS) ++open;
    for (void *req : abandoned_)
      if (ucp_request_check_status(req) == UCS_INPROGRESS) ++open;
    return open;
  };
  size_t open = open_count();
  while (open > 0 && Clock::now() < deadline) {
    if (ucp_worker_progress(worker_) == 0) sched_yield();
    open = open_count();
  }
  if (open > 0)
    BC_DEBUGLOG(Transport, "ucx: rank %d: %zu endpoint closes or requests did not finish within %d ms", rank_, open,
                had_failure_ ? kFailedCloseMs : close_timeout_ms_);
  for (void *req : pending) ucp_request_free(req);
  for (void *req : abandoned_) ucp_request_free(req);  // released by UCX when (if) it completes
  abandoned_.clear();
  return open == 0 || !had_failure_;
}

// After a failure, messages for the receives we cancelled wait in the
// unexpected queue; take them into scratch buffers so that ucp_worker_destroy
// does not warn about each one on stderr. No progress here: that would let
// UCX retry connections to peers that have already gone.
void UcxTransport::drain_unexpected() {
  for (int n = 0; n < 4096; ++n) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, 0, 0, 1, &info);
    if (!msg) break;
    sinks_.emplace_back(info.length ? info.length : 1);
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof param);
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    void *r = ucp_tag_msg_recv_nbx(worker_, sinks_.back().data(), info.length, msg, &param);
    if (!UCS_PTR_IS_PTR(r)) continue;
    // An eager message is copied at once; a rendezvous one would need the
    // network, so its sink stays until the worker is gone.
    if (ucp_request_check_status(r) != UCS_INPROGRESS) sinks_.pop_back();
    ucp_request_free(r);
  }
}

UcxTransport::~UcxTransport() {
  if (worker_) {
    closing_ = true;
    if (had_failure_ && peers_) drain_unexpected();
    if (!close_endpoints()) {
      // A same-node peer died with transfers in flight: UCX 1.13's
      // ucp_worker_destroy asserts on such an endpoint (cma's queue is not
      // empty) and aborts the survivor. Leave the worker, its context and the
      // buffers it may still write to for process exit: a few fds and some
      // memory, once per broken communicator.
      BC_DEBUGLOG(Transport, "ucx: rank %d: a same-node peer failed with transfers in flight; the UCX worker is "
                  "left to process exit", rank_);
      new std::vector<std::vector<unsigned char>>(std::move(sinks_));  // deliberately kept
      return;
    }
    ucp_worker_destroy(worker_);
  }
  if (context_) ucp_cleanup(context_);
}

}  // namespace bc
