// A liveness watch over TCP, for peers whose process this rank cannot look at
// (another host, or BC_LIVENESS=net). Moves no data: it only holds one UCX
// endpoint with peer-failure handling (UCP_ERR_HANDLING_MODE_PEER) to each
// watched peer, over TCP only, in a UCX context and worker of its own.
//
// Why a worker of its own rather than the ucx transport's: every transport
// (mpi, shm, ucx) needs the same answer, the ucx transport's endpoints are
// lazy (only to peers a plan talks to) and its same-node endpoints have no
// failure handling (UCX 1.13 would drop shared memory for them); and a watch
// that only polls when a collective waits must not be starved or confused by
// data traffic. The cost is one ucp_init per communicator that has such peers
// (a few ms) and one TCP connection per watched peer.
//
// How a death shows: the kernel closes a process's sockets when it dies, so
// the survivor's connection sees the close and UCX calls the endpoint's error
// callback on the next poll. A host that vanishes without closing (power off,
// cable) shows only through TCP keepalive (UCX_TCP_KEEPIDLE, _KEEPINTVL,
// _KEEPCNT; tens of seconds), and until then as lateness.
//
// Leaving is not dying: a rank that destroys its communicator first sends a
// "bye" to each watched peer, so that a peer still waiting in its last
// collective does not take the closing connection for a death.
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <vector>

#include "transports/transport.h"

namespace bc {

class UcxWatch {
 public:
  ~UcxWatch();  // says bye to every living watched peer, then closes
  // Collective over setup.bootstrap (every rank calls it, even one that
  // watches nobody: the addresses are exchanged with an allgather).
  // `watched[r]`: this rank watches rank r. NotSupported on every rank when
  // UCX cannot start a TCP worker on some rank.
  static Status create(const TransportSetup &setup, const std::vector<char> &watched, std::unique_ptr<UcxWatch> *out);
  // Polls the worker (never blocks) and appends to *gone every watched rank
  // whose connection failed without a bye since the last call.
  void poll(std::vector<int> *gone);
  // After a death: the destructor closes without flushing to dead peers.
  void forget(int rank);

 private:
  UcxWatch() = default;
  struct Peer {
    UcxWatch *owner = nullptr;
    int rank = -1;
    ucp_ep_h ep = nullptr;
    ucs_status_t failed = UCS_OK;  // set by the error callback
    bool left = false;             // its bye arrived
    bool reported = false;
    bool dead = false;             // reported, or told by forget()
  };
  static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status);
  void take_byes();

  int rank_ = 0;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::unique_ptr<Peer[]> peers_;
  int size_ = 0;
  bool closing_ = false;
  uint64_t bye_sink_ = 0;
};

}  // namespace bc
