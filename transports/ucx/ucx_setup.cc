// A UCX communicator's creation: the shared worker taken (ucx_worker.cc),
// then one allgather of every rank's status, address lengths, reach and the
// first round of the id agreement, and the addresses (ucx_transport.h,
// "Addresses"). Endpoints come later, on first use (ucx_endpoints.cc);
// teardown is ucx_teardown.cc.
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/log.h"
#include "transports/ucx/ucx_setup_internal.h"
#include "transports/ucx/ucx_transport.h"

namespace bc {
namespace {

using Clock = std::chrono::steady_clock;

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

}  // namespace bc
