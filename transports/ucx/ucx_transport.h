// The UCX transport: tagged point-to-point over one UCP worker per communicator.
//
// Files: ucx_setup.cc creates and destroys (context, worker, address exchange,
// endpoints, teardown); ucx_transport.cc moves bytes (post, test, cancel,
// idle_wait).
//
// One UCP context and one worker per communicator, not per process:
//  - Isolation. Our tag is (32-bit plan tag << 32 | source rank), the whole of
//    UCX's 64-bit tag; a worker shared by several communicators would need the
//    communicator's id in those bits as well. Worse, after a timeout the sends
//    that a peer posted for the failed collective stay in its worker's
//    unexpected queue; in a shared worker they could match a later
//    communicator's receive, here they die with the communicator.
//  - Teardown with the communicator: ucp_worker_destroy drops every endpoint,
//    unexpected message and pending request of that communicator, whatever
//    state a failure left them in, and nothing outlives bc_comm_destroy.
//  - Threads: two communicators can be driven by two threads with no lock
//    (each worker is UCS_THREAD_MODE_SERIALIZED, as a communicator is).
//  The cost is one set of interfaces (a TCP listening socket, a shared-memory
//  FIFO) and one ucp_init per communicator: measured 6-14 ms per create and
//  2-10 ms per destroy (2-4 ranks on 2 cores) and a few fds, fine for the few
//  long-lived communicators a job makes (the PMPI layer caches them).
//
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
// Failures: every endpoint uses UCP_ERR_HANDLING_MODE_PEER; the error callback
// marks the peer failed and every later post or test on it returns
// BC_ERR_TRANSPORT naming the rank and UCX's reason (tcp notices a killed peer
// at once). A peer that stops answering without dying surfaces as the
// executor's BC_ERR_TIMEOUT. The price, in UCX 1.13: shared memory (posix,
// sysv) offers peer-failure handling only with UCX_{POSIX,SYSV}_ERROR_HANDLING=y
// and cma drops out of the rendezvous, so same-node peers go over TCP loopback
// (2-4x below MPI's shared memory). Same-node peers normally belong to the shm
// transport; probe_reach (ucx_setup.cc) leaves a kind of peer that UCX cannot
// reach this way (UCX_TLS=sm) to the next transport.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "transports/transport.h"

namespace bc {

class UcxTransport;

// Per peer; addresses stay fixed (the error callback holds a pointer).
struct UcxPeer {
  UcxTransport *owner = nullptr;
  int rank = -1;
  bool off_node = false;
  ucp_ep_h ep = nullptr;
  ucs_status_t failed = UCS_OK;  // set by the error callback or an abort
  bool dead = false;  // peer_died(): cancel() does not wait for it
  std::vector<unsigned char> address;  // full or network-only, per off_node
};

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

  // For the executor's idle path (not yet in Transport): with BC_UCX_WAIT=event,
  // arms the worker and sleeps on its event fd until the network has something
  // for us or timeout_ms passes; otherwise (or when UCX cannot give an fd) it
  // yields the core. Returns at once when there is work to progress.
  Status idle_wait(int timeout_ms) override;
  // Whether idle_wait really sleeps (BC_UCX_WAIT=event and UCX gave an fd).
  bool can_sleep() const override { return efd_ >= 0; }
  // The worker's event fd (-1 without BC_UCX_WAIT=event), for a caller that
  // wants to poll several transports at once; arm it with ucp_worker_arm first.
  int wait_fd() const { return efd_; }

 private:
  friend Status ucx_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out);
  UcxTransport() = default;

  static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status);
  Status init_local(const TransportSetup &setup);
  Status exchange_addresses(const TransportSetup &setup);
  Status probe_reach(const TransportSetup &setup);
  Status ensure_ep(int peer);
  Status test_request(TransportRequest *req, bool *done);
  Status peer_error(int peer) const;
  void abort_peer(int peer, ucs_status_t why);
  // False when a close could not finish (a same-node peer that died): then
  // the worker must not be destroyed.
  bool close_endpoints();
  void drain_unexpected();
  void log_lanes(const UcxPeer &p);
  // Progresses the worker a bounded number of times; true if anything moved.
  bool progress();
  // Progresses until `ucx_req` is no longer in progress or `ms` pass.
  bool wait_request(void *ucx_req, int ms);

  int rank_ = 0;
  int size_ = 0;
  bool event_mode_ = false;
  int64_t rndv_thresh_ = 512 << 10;  // BC_UCX_RNDV_THRESH
  int close_timeout_ms_ = 1000;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::vector<unsigned char> my_full_, my_net_;  // this rank's addresses
  std::unique_ptr<UcxPeer[]> peers_;
  // Whether every rank can reach [0] same-node and [1] off-node peers with
  // peer-failure handling, as agreed at creation (see probe_reach).
  bool reach_[2] = {true, true};
  bool logged_on_node_ = false, logged_off_node_ = false;
  // A transfer failed or was cancelled: the communicator is broken, so
  // teardown drops the endpoints instead of flushing them.
  bool had_failure_ = false;
  bool closing_ = false;
  // Receive buffers UCX may still write into; freed after ucp_worker_destroy.
  std::vector<std::vector<unsigned char>> sinks_;
  // Same-node requests that could not be cancelled (cancel() says why).
  std::vector<void *> abandoned_;
};

}  // namespace bc
