// A UCX communicator's endpoints: one per peer process, made on first use
// and shared with every other communicator of the process (ucx_transport.h says
// why), the error callback that marks a peer failed, the log of the lanes UCX
// chose, and the forced close of a peer whose transfer UCX would not give up.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "core/log.h"
#include "transports/ucx/ucx_transport.h"

namespace bc {
namespace {

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

}  // namespace bc
