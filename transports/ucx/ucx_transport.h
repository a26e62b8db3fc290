// The UCX transport: tagged point-to-point over one UCP worker per communicator.
//
// Files: ucx_worker.cc starts, shares and stops the process's context and
// worker (ucx_tcp.cc: their settings where tcp is the network); ucx_setup.cc
// creates a communicator (address exchange, id); ucx_endpoints.cc connects to
// peers and handles their failures; ucx_teardown.cc flushes and destroys;
// ucx_transport.cc moves bytes (post, test, cancel, idle_wait); ucx_drain.cc
// progresses the worker between operations, so that a send UCX completed
// before the socket took all of it still leaves.
//
// One UCP context, one worker and one endpoint per peer process, shared by
// every communicator of the process (UcxWorker below), not one set per
// communicator: creating a worker opened its interfaces anew (a TCP listening
// socket, shared-memory FIFOs) and cost 22-45 ms per rank, 105-140 ms of a
// communicator's creation at np 8 across the simulated nodes, plus 50-80 ms of
// endpoint flushes and worker teardown at destroy. Now a later communicator
// exchanges addresses and agrees on an id; connections are made once per pair
// of processes, on first use, and kept.
//  - Why endpoints are shared too: UCX pairs the endpoints of two workers by
//    the order in which each side created its endpoints to the other
//    (ucp_ep_match by connection sequence number). Endpoints created lazily per
//    communicator on one worker can be created in another order on the two
//    sides (a communicator that one side uses first, or only one side posts
//    to), and then closing one communicator's endpoint fails another
//    communicator's endpoint on the peer. One endpoint per peer process, kept
//    until the worker goes, cannot mis-pair.
//  - Isolation: the low 32 bits of UCX's 64-bit tag are the communicator's id
//    (kCommIdBits, agreed at creation: free on every member, and offered to
//    no other creation running at the same time, ucx_comm_id.cc) above the source
//    rank (kRankBits). A communicator whose operation failed or was cancelled
//    may leave messages in flight toward its members; its id is then never
//    reused in this process (quarantined) and the messages already in the
//    unexpected queue are drained at destroy. Ids of cleanly destroyed
//    communicators are reused last (each process reports its recently released
//    ids as busy).
//  - Threads: every call on the worker holds UcxWorker::mutex (recursive: the
//    error callback and nested helpers run under it), so communicators driven
//    by different threads (BC_PROGRESS_THREAD) share it safely; idle_wait
//    sleeps on the event fd without it. A thread that sleeps there may be woken
//    late when another thread consumed the event it waited for: idle_wait's
//    timeout bounds that. The drainer thread (ucx_drain.h) takes the mutex
//    only with try_lock.
//  - Lifetime: the worker is released by bc_finalize (transports_release_idle)
//    once no communicator uses it: a program that creates and frees
//    communicators in a loop keeps one worker and its connections.
//  - Failures: an endpoint error marks the shared endpoint failed, and every
//    communicator that uses that peer sees it on its next post or test (a dead
//    process is dead for all of them). A transfer that cannot be cancelled
//    still closes the endpoint by force (the peer is unusable afterwards for
//    every communicator of this process); the next communicator that needs the
//    peer connects anew.

// Transfers: UCP_FEATURE_TAG only, ucp_tag_send_nbx/ucp_tag_recv_nbx on the
// caller's buffers. Large messages take UCX's tag rendezvous, which is already
// single-copy where a transport allows it (cma: the receiver reads the
// sender's pages with process_vm_readv). RMA put would need a registration and
// an rkey exchange per buffer (the caller's buffers change every call): the
// same handshake the rendezvous does. Measured with UCX 1.13.1, 2 ranks, even
// with the rkey exchanged in advance put+flush was no faster: over tcp (which
// has no RMA lanes in 1.13, so put is emulated with active messages) 174-444
// MB/s against 466-593 for tag at 1-64 MiB; over cma 6.5-10 GB/s against
// 4.8-19. So no RMA.
//
// Addresses: every rank publishes its full worker address and its network-only
// one (UCP_WORKER_ADDRESS_FLAG_NET_ONLY); a peer on another node
// (setup.node_of differs) is reached with its network-only address, because
// UCX decides "same host" from boot_id and the IPC namespace, not from what our
// topology says, and would otherwise try shared memory across simulated hosts.
//
// Failures: off-node endpoints use UCP_ERR_HANDLING_MODE_PEER; the error
// callback marks the peer failed and every later post or test on it returns
// BC_ERR_TRANSPORT naming the rank and UCX's reason (tcp notices a killed peer
// at once). Same-node endpoints have no peer-failure handling: in UCX 1.13
// shared memory (posix, sysv) offers it only with
// UCX_{POSIX,SYSV}_ERROR_HANDLING=y and cma drops out of the rendezvous, so
// same-node peers would go over TCP loopback (2-4x below MPI's shared memory).
// A same-node death is seen by the liveness check (lib/sched/liveness.h, which
// looks at the peer's process) and reaches this transport as peer_died(): a
// request UCX will not cancel is then abandoned, and worker_stop leaves the
// worker to process exit rather than let ucp_worker_destroy assert. Same-node
// peers normally belong to the shm transport; worker_probe (ucx_worker.cc)
// leaves a kind of peer that UCX cannot reach (UCX_TLS=sm) to the next
// transport. A peer that stops answering without dying is late, not dead: the
// executor waits for it up to BC_TIMEOUT.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <bitset>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "transports/transport.h"

namespace bc {

class UcxTransport;
struct UcxWorker;

// Tag bits below the plan's 32: the communicator's id, then the source rank.
constexpr int kRankBits = 22;
constexpr int kCommIdBits = 10;
constexpr int kCommIds = 1 << kCommIdBits;

// One endpoint to one peer process (by its worker address and the address
// kind), shared by every communicator; lives as long as the worker (the error
// callback holds a pointer).
struct UcxSharedEp {
  UcxWorker *worker = nullptr;
  ucp_ep_h ep = nullptr;
  ucs_status_t failed = UCS_OK;  // set by the error callback or an abort
  bool off_node = false;
  int first_rank = -1;  // its rank in the communicator that connected first (for logs)
  int users = 0;        // live communicators that use it
  bool dead = false;    // the liveness check saw its process die (peer_died)
};

// Per peer of one communicator.
struct UcxPeer {
  UcxTransport *owner = nullptr;
  int rank = -1;
  bool off_node = false;
  UcxSharedEp *shared = nullptr;  // once connected
  ucs_status_t failed = UCS_OK;   // this communicator's own abort
  bool dead = false;              // peer_died(): cancel() does not wait for it
  std::vector<unsigned char> address;  // full or network-only, per off_node
};

// The process's UCP context and worker for one set of settings (BC_UCX_WAIT,
// BC_UCX_RNDV_THRESH), shared by every UCX transport created with them, until
// bc_finalize (ucx_worker.cc). Every field is guarded by `mutex`.
struct UcxWorker {
  std::recursive_mutex mutex;
  bool event_mode = false;
  int64_t rndv_thresh = 0;
  // Network transports only (UCX_TLS=^sm): see worker_start.
  bool network_only = false;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int efd = -1;
  // Threads asleep on efd in idle_wait now. Progress made by another thread
  // (the drainer, another communicator's) may consume the event such a thread
  // waits for; that thread then wakes it (ucx_progress_burst). Atomic: read
  // and changed outside `mutex`.
  std::atomic<int> sleepers{0};
  std::vector<unsigned char> full, net;  // this process's addresses
  // Whether an endpoint with peer-failure handling reaches [0] a same-node and
  // [1] an off-node peer (-1: not probed yet). A property of the worker and
  // UCX_TLS, so probed once (an endpoint to our own address of each kind).
  int reach[2] = {-1, -1};
  int users = 0;  // transports using it now
  int closing = 0;  // transports in their destroy's quiesce or destructor (peers that finish first are no news then)
  // Live endpoints by (off-node?, peer address), and every one ever made.
  std::map<std::pair<bool, std::vector<unsigned char>>, UcxSharedEp *> eps;
  std::vector<std::unique_ptr<UcxSharedEp>> all_eps;
  std::bitset<kCommIds> in_use, quarantined;
  std::deque<int> recent;  // ids released lately: reported busy, so reused last
  // Creations agreeing on an id right now (ucx_comm_id.cc): the ids offered to
  // one of them, which no other may be offered, and the keys of those retrying.
  std::bitset<kCommIds> offered;
  std::multiset<uint64_t> retry_keys;
  // Receive buffers of drained rendezvous messages UCX may still write into,
  // and those receives while in progress: the worker must not be destroyed
  // under them (a same-node cma endpoint asserts that nothing is pending).
  std::vector<std::vector<unsigned char>> sinks;
  std::vector<void *> drains;
  // Same-node requests whose peer died and that UCX would not cancel
  // (UcxTransport::cancel says why): while one is pending, or a same-node peer
  // has died, the worker is not destroyed (worker_stop).
  std::vector<void *> abandoned;
  // The send drainer (ucx_drain.h): its own mutex and condition, not `mutex`.
  std::thread drainer;
  std::mutex drain_mutex;
  std::condition_variable drain_cv;
  bool drain_stop = false;
  std::atomic<int64_t> last_send_ns{0};
};

// What each rank sends in a round of a communicator's id agreement.
struct UcxIdRound {
  uint64_t key;     // rank 0's is the creation's key, which orders retries
  int32_t give_up;  // this rank's BC_TIMEOUT passed while retrying
  int32_t pad;
  uint8_t busy[kCommIds / 8];   // in use, quarantined or recently released here
  uint8_t offer[kCommIds / 8];  // offered to this creation here
};

// A creation's agreement with the other ranks of its communicator on an id
// free on every one of them that no creation running at the same time in
// their processes can take (ucx_comm_id.cc says how). The first round rides on
// the creation's own first allgather: first_round() fills this rank's part
// before it, finish() decides from every rank's part after it (collective
// over `bootstrap` only when it needs more rounds) and marks the id in use in
// the worker; BC_ERR_TIMEOUT when rounds keep failing for `timeout_ms` (0: no
// limit). An offer not taken is withdrawn at the latest by the destructor.
class UcxIdAgreement {
 public:
  explicit UcxIdAgreement(UcxWorker *w) : w_(w) {}
  ~UcxIdAgreement();
  void first_round(UcxIdRound *part);
  Status finish(std::vector<UcxIdRound> all, MPI_Comm bootstrap, int64_t timeout_ms, int *id);

 private:
  void make(int round, UcxIdRound *part);
  void end_round(int id);  // withdraws the offer and takes `id` (if >= 0) in one step

  UcxWorker *w_;
  std::bitset<kCommIds> mine_;
  uint64_t key_ = 0;
  bool waiting_ = false;
  std::chrono::steady_clock::time_point start_;
};

// Progresses `worker` until every request in `reqs` is done or `ms` pass
// (resting as WaitPolicy::poll_until does when nothing moves), then frees them
// all: the bounded teardown wait of the transport and of the liveness watch
// (ucx_watch.cc).
void ucx_finish_requests(ucp_worker_h worker, std::vector<void *> *reqs, int ms);
// Progresses w's worker until it reports nothing, at most 16 times; whether
// anything moved. When something moved while a thread sleeps on the event fd,
// wakes it: what moved may be what it waits for, and its event is gone. Under
// the worker's mutex: test() and the drainer.
bool ucx_progress_burst(UcxWorker *w);

class UcxTransport final : public Transport {
 public:
  ~UcxTransport() override;
  const char *name() const override { return "ucx"; }
  bool can_connect(int peer, bc_memtype_t mem) const override;
  Status connect(int peer) override;
  Status post_send(int peer, const void *buf, size_t bytes, bc_memtype_t mem, uint32_t tag,
                   TransportRequest *req) override;
  Status post_recv(int peer, void *buf, size_t bytes, bc_memtype_t mem, uint32_t tag,
                   TransportRequest *req) override;
  Status test(TransportRequest *req, bool *done) override;
  void cancel(TransportRequest *req) override;
  void peer_died(int peer) override;
  // Forgets this communicator's failure of `peer` and, when its shared
  // endpoint failed (our forced close after a cancelled transfer, or the
  // peer's), connects anew: tag matching is per worker, so the peer's
  // messages reach us whichever endpoint carried them.
  Status reopen(int peer) override;

  // The executor's idle path (Transport::idle_wait): with BC_UCX_WAIT=event,
  // arms the worker and sleeps on its event fd until the network has something
  // for us or timeout_ms passes; otherwise (or when UCX cannot give an fd) it
  // returns at once: the waiter rests itself (core/wait_policy.h). Returns at
  // once when there is work to progress.
  Status idle_wait(int timeout_ms) override;
  // Whether idle_wait really sleeps (BC_UCX_WAIT=event and UCX gave an fd).
  bool can_sleep() const override { return efd_ >= 0; }
  // The endpoint flushes of a clean destroy, done while every rank polls
  // (comm_destroy); the destructor then flushes no more.
  bool needs_quiesce() const override { return true; }
  void quiesce_start() override;
  bool quiesce_poll() override;
  // The communicator's id in the tags (for tests and logs).
  int comm_id() const { return comm_id_; }

 private:
  friend Status ucx_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out);
  UcxTransport() = default;

  static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status);
  Status exchange(const TransportSetup &setup, Status local, int64_t timeout_ms);
  Status ensure_ep(int peer);
  ucs_status_t peer_failed(int peer) const;
  ucp_tag_t make_tag(uint32_t tag, int source) const;
  Status test_request(TransportRequest *req, bool *done);
  Status peer_error(int peer) const;
  void abort_peer(int peer, ucs_status_t why);
  // Posts a flush on every endpoint this communicator used; returns the requests in progress.
  std::vector<void *> post_flushes();
  void flush_endpoints();
  void drain_unexpected();
  void log_lanes(const UcxPeer &p);
  // Progresses the worker a bounded number of times; true if anything moved.
  bool progress();
  // Progresses until `ucx_req` is no longer in progress or `ms` pass.
  bool wait_request(void *ucx_req, int ms);

  int rank_ = 0;
  int size_ = 0;
  int close_timeout_ms_ = 1000;
  UcxWorker *w_ = nullptr;  // shared; released by the destructor
  ucp_worker_h worker_ = nullptr;  // w_'s
  int efd_ = -1;                   // w_'s
  int comm_id_ = -1;
  std::unique_ptr<UcxPeer[]> peers_;
  // Whether every rank can reach [0] same-node and [1] off-node peers with
  // peer-failure handling, as agreed at creation (see UcxWorker::reach).
  bool reach_[2] = {true, true};
  bool logged_on_node_ = false, logged_off_node_ = false;
  // A transfer failed or was cancelled: the communicator is broken, its id is
  // quarantined and its unexpected messages drained at destroy.
  bool had_failure_ = false;
  // quiesce_start's flushes still in progress; quiesced_ once all finished.
  std::vector<void *> quiesce_reqs_;
  bool quiesce_started_ = false;
  bool quiesced_ = false;
  std::chrono::steady_clock::time_point quiesce_t0_{};
};

}  // namespace bc
