// A liveness watch over TCP, for peers whose process this rank cannot look at
// (another host, or BC_LIVENESS=net). Moves no data: it only holds one UCX
// endpoint with peer-failure handling (UCP_ERR_HANDLING_MODE_PEER) to each
// watched peer process, over TCP only, in a UCX context and worker of its own.
//
// Why a worker of its own rather than the ucx transport's: every transport
// (mpi, shm, ucx) needs the same answer, the ucx transport's endpoints are
// lazy (only to peers a plan talks to) and its same-node endpoints have no
// failure handling (UCX 1.13 would drop shared memory for them); and a watch
// that only polls when a collective waits must not be starved or confused by
// data traffic.
//
// One per process, not per communicator: liveness is a property of a process,
// and a TCP context and worker per communicator cost 50-90 ms of each
// communicator's creation and destruction across the simulated nodes (np 8,
// layout a). The process's watch (the hub, ucx_watch.cc) starts with the first
// communicator that needs it, keeps one endpoint per peer process (keyed by
// the process's identity: host, boot id, pid, start time) and goes at
// bc_finalize (ucx_watch_release). A later communicator whose watched peers
// are all connected already needs one allreduce; otherwise the addresses are
// exchanged as well.
//
// How a death shows: the kernel closes a process's sockets when it dies, so
// the survivor's connection sees the close and UCX calls the endpoint's error
// callback on the next poll. A host that vanishes without closing (power off,
// cable) shows only through TCP keepalive (UCX_TCP_KEEPIDLE, _KEEPINTVL,
// _KEEPCNT; tens of seconds), and until then as lateness.
//
// Leaving is not dying: a process that releases its watch (bc_finalize) first
// sends a "bye" (its identity) to each living peer, so that a peer still
// waiting in its last collective does not take the closing connection for a
// death.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transports/transport.h"

namespace bc {

struct WatchEp;

// One communicator's view of the process's watch.
class UcxWatch {
 public:
  ~UcxWatch();  // the endpoints stay with the process (ucx_watch_release)
  // Collective over setup.bootstrap (every rank calls it, even one that
  // watches nobody: it may be watched). `watched[r]`: this rank watches rank
  // r; `process_key[r]`: r's process identity, the same on every rank.
  // NotSupported on every rank when UCX cannot start a TCP worker on some rank.
  static Status create(const TransportSetup &setup, const std::vector<char> &watched,
                       const std::vector<uint64_t> &process_key, std::unique_ptr<UcxWatch> *out);
  // Polls the worker (never blocks) and appends to *gone every watched rank
  // whose connection failed without a bye since the last call.
  void poll(std::vector<int> *gone);
  // After a death: the release closes without flushing to that process.
  void forget(int rank);

 private:
  UcxWatch() = default;
  std::vector<WatchEp *> eps_;  // per rank; null where not watched
  std::vector<char> reported_;
};

// bc_finalize: once no communicator uses it, says bye to every living peer
// process, closes and destroys the process's watch. Safe to call any time.
void ucx_watch_release();

}  // namespace bc
