// The transport interface: a small table of operations, chosen per peer.
//
// A transport moves the bytes it is given to the peer it is given; it knows
// nothing of stages or plans. Creation is collective over the communicator's
// bootstrap MPI_Comm (that is where addresses are exchanged); everything after
// that is point-to-point and non-blocking.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "blueconnect.h"
#include "core/params.h"
#include "core/status.h"

namespace bc {

class Transport;

// One posted send or receive. Transports keep their own state in `slot`.
struct TransportRequest {
  Transport *transport = nullptr;
  int peer = -1;
  bool active = false;
  alignas(8) unsigned char slot[64];
};

// What a transport is told at creation. `node_of[r]` identifies rank r's node
// (equal values = same node), so a transport can tell which peers it can reach.
struct TransportSetup {
  MPI_Comm bootstrap = MPI_COMM_NULL;  // private to the library; collective calls allowed
  int rank = 0;
  int size = 0;
  std::vector<int64_t> node_of;
  const ParamSet *params = nullptr;
};

class Transport {
 public:
  virtual ~Transport() = default;  // free: releases every resource
  virtual const char *name() const = 0;
  // Whether this transport can reach `peer` with buffers of memory type `mem`.
  virtual bool can_connect(int peer, bc_memtype_t mem) const = 0;
  // Prepares the connection to `peer` (local, idempotent).
  virtual Status connect(int peer) = 0;
  virtual Status post_send(int peer, const void *buf, size_t bytes, bc_memtype_t mem, uint32_t tag,
                           TransportRequest *req) = 0;
  virtual Status post_recv(int peer, void *buf, size_t bytes, bc_memtype_t mem, uint32_t tag,
                           TransportRequest *req) = 0;
  // Advances `req`; *done becomes true once its buffer may be reused. Returns
  // at once: a transport never spins, yields or sleeps on its own; whoever
  // polls it waits under the one waiting policy (core/wait_policy.h).
  virtual Status test(TransportRequest *req, bool *done) = 0;
  // Abandons a request after a failure or timeout (best effort).
  virtual void cancel(TransportRequest *req) = 0;
  // The liveness checks (sched/liveness.h) found `peer` dead: cancel() need
  // not give its requests time to finish, since nobody will ever answer them.
  virtual void peer_died(int peer) { (void)peer; }
  // After a failure broke the communicator, makes `peer` (alive: the
  // liveness checks say so) usable again for the few small messages of the
  // survivors' agreement (bc_comm_shrink, lib/sched/dead_agreement.h), whose
  // tags no operation uses. Called again if the peer fails once more (its
  // side of a closed connection may report the close later). Not supported
  // by default: the mpi transport sends through Open MPI, which without ULFM
  // may abort a process whose send to a dead peer fails.
  virtual Status reopen(int peer) {
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "the %s transport (rank %d's) cannot carry the survivors' agreement after a "
                   "failure", name(), peer);
  }
  // Idle waiting: a transport that can sleep until its network has something
  // for it says so here; idle_wait(ms) then sleeps at most ms (returns at once
  // when there is work). The waiting policy (core/wait_policy.h) calls it
  // instead of sched_yield when every peer of the communicator uses this one
  // transport. A transport's own bounded waits (a cancel's grace, a flush at
  // teardown) go through WaitPolicy::poll_until.
  virtual bool can_sleep() const { return false; }
  virtual Status idle_wait(int timeout_ms) { (void)timeout_ms; return BC_OK; }
  // A clean destroy's last step (comm_destroy): what must be finished before
  // this process may stop calling the transport. UCX flushes its endpoints,
  // and a flush can need the peer's progress, so every rank keeps polling
  // until all are done. quiesce_start() posts it; quiesce_poll() progresses
  // the transport (our part and what peers need from us) and returns true
  // once this rank's part is done. needs_quiesce() must be the same on every
  // rank: it depends only on the transport existing, which creation agrees.
  virtual bool needs_quiesce() const { return false; }
  virtual void quiesce_start() {}
  virtual bool quiesce_poll() { return true; }
};

// The tag every transport carries whole: bits 0-19 are the program's (stage
// and phase << 12 | step, lib/plan/program.cc), bits 20-30 the chunk's
// sequence number (lib/sched/executor.cc), so that back-to-back operations and
// the chunks of one pipeline never match each other's messages. 31 bits: a
// positive int, as MPI tags are.
constexpr int kProgramTagBits = 20;
constexpr int kSeqTagBits = 11;
constexpr uint32_t kSeqTagMask = (1u << kSeqTagBits) - 1;
constexpr int kTagBits = kProgramTagBits + kSeqTagBits;

// The largest tag MPI allows, for transports that send over MPI. MPI_TAG_UB
// is attached to MPI_COMM_WORLD and holds for every communicator, but Open MPI
// 4.1 has no value on a communicator from MPI_Comm_split (nor on its
// duplicates): reading it there fell back to 32767, which folded away the
// sequence bits of every tag, so the chunks of one pipelined all-reduce
// matched each other's messages and ranks returned BC_OK with wrong results.
inline int mpi_tag_ub() {
  int flag = 0;
  int *ub = nullptr;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag) != MPI_SUCCESS || !flag || !ub) return 32767;
  return *ub;
}

// For a transport that sends over MPI: BC_ERR_NOT_SUPPORTED unless MPI's tags
// hold kTagBits (MPI_TAG_UB, or BC_MPI_TAG_UB when smaller). The same on every
// rank (the bound is MPI_COMM_WORLD's), so the transport is refused everywhere
// at once; under BC_TRANSPORT=auto the next one is tried. Folding the tags
// into a smaller bound would let operations in flight, and with a bound below
// 2^20 the stages of one program, match each other's messages.
Status mpi_tags_fit(const char *transport, const ParamSet &params);

// The table of transports, in order of preference for a peer.
struct TransportKind {
  const char *name;
  // Collective over setup.bootstrap. Returns NotSupported (on every rank) when the
  // transport cannot run here.
  Status (*create)(const TransportSetup &setup, std::unique_ptr<Transport> *out);
};

// All transports this build knows, most preferred first.
const std::vector<TransportKind> &transport_kinds();

Status shm_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out);
Status ucx_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out);
Status mpi_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out);

// What transports keep between communicators (UCX's context, worker and
// connections: ucx_transport.h) is released here once no communicator uses
// it. bc_finalize calls it.
void transports_release_idle();
void ucx_release_idle();
void shm_release_idle();
// A destroyed communicator's transports: shm keeps its node setup for the next
// communicator over the same processes when `clean` (shm_reuse.cc); the rest
// are freed.
void transports_retire(std::vector<std::unique_ptr<Transport>> *transports, bool clean);
void shm_transport_retire(std::unique_ptr<Transport> t, bool clean);

}  // namespace bc
