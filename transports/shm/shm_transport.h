// The shared-memory transport's state: posted operations, and this rank's view
// of each node peer. The protocol is drawn in shm_layout.h; the collective setup
// is in shm_node.cc; the public operations in shm_transport.cc; the protocol
// engine (publish, match, stream, cancel) in shm_progress.cc.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "transports/shm/shm_node.h"
#include "transports/transport.h"

namespace bc {
namespace shm {

// What a TransportRequest's slot holds: an index into ops_, checked by generation.
struct ReqSlot {
  uint32_t op;
  uint32_t gen;
};

// One posted send or receive.
struct Op {
  uint32_t gen = 0;
  bool in_use = false;
  bool is_send = false;
  bool done = false;
  int local = -1;  // the peer's index on the node
  unsigned char *buf = nullptr;
  size_t size = 0;
  uint32_t tag = 0;
  uint64_t seq = 0;  // its desc's seq, once published (send) or matched (receive)
  int slot = -1;     // its desc slot
  size_t off = 0;    // bytes streamed so far (copy mode)
  uint64_t order = 0;  // receive: posting order among receives from this peer
  Status err = BC_OK;
  std::string why;
};

// A POSTED desc of the peer's that no receive has taken yet.
struct Offer {
  uint64_t seq;
  uint32_t tag;
  int slot;
};

// This rank's view of one node peer.
struct Peer {
  int rank = -1;
  pid_t pid = 0;
  Channel *out = nullptr;  // me -> peer
  Channel *in = nullptr;   // peer -> me
  unsigned char *out_ring = nullptr;
  unsigned char *in_ring = nullptr;
  unsigned char *out_eager = nullptr;  // my inline areas toward the peer (null: no eager path)
  unsigned char *in_eager = nullptr;
  uint64_t next_seq = 0;            // seqs given to my sends so far
  uint64_t out_head = 0;            // out->head, of which I am the only writer
  uint64_t in_tail = 0;             // in->tail, likewise
  uint64_t seen = 0;                // in->published at my last scan
  uint32_t free_hint = 0;
  uint32_t passes = 0;              // of progress(), while receiving: paces check_eager_refusals
  uint64_t recvs_posted = 0;
  // Vectors, front removal included: these hold a few ids at most, and a
  // vector keeps its capacity where a deque allocates a block every 128
  // pushes (a warm all-reduce allocates nothing: tests/mpi/test_reuse.cc).
  std::vector<uint32_t> queued;     // sends waiting for a free desc slot, in posting order
  std::vector<uint32_t> sending;    // published sends not yet complete
  std::vector<uint32_t> unmatched;  // receives, in posting order
  std::vector<uint32_t> streaming;  // copy mode: matched receives; the first holds the grant
  std::vector<Offer> offers;        // by seq
  std::string broken;               // set: the channel from this peer can no longer be trusted
  uint64_t bytes_sent = 0, bytes_received = 0, msgs_sent = 0, msgs_received = 0;
};

class ShmTransport final : public Transport {
 public:
  ShmTransport(const TransportSetup &s, std::unique_ptr<Node> node);
  ~ShmTransport() override;
  const char *name() const override { return "shm"; }
  bool can_connect(int peer, bc_memtype_t mem) const override;
  Status connect(int peer) override;
  Status post_send(int peer, const void *buf, size_t bytes, bc_memtype_t mem, uint32_t tag,
                   TransportRequest *req) override;
  Status post_recv(int peer, void *buf, size_t bytes, bc_memtype_t mem, uint32_t tag,
                   TransportRequest *req) override;
  Status test(TransportRequest *req, bool *done) override;
  void cancel(TransportRequest *req) override;
  Status reopen(int peer) override;

  // Reuse by a later communicator over the same processes (shm_reuse.cc).
  // Nothing of this rank's is in flight and no channel failed: worth keeping.
  bool locally_idle() const;
  // And every message in both directions of every channel has been consumed
  // and freed by both sides (the peers are done with it too).
  bool quiet() const;
  uint64_t instance() const { return node_->instance(); }
  uint64_t reuse_key = 0;  // what it was made for (shm_reuse.cc)

 private:
  // shm_transport.cc: requests and their operations.
  Status check(int peer, const void *buf, size_t bytes, bc_memtype_t mem, const char *what) const;
  uint32_t new_op(TransportRequest *req, int peer, bool is_send, void *buf, size_t bytes, uint32_t tag);
  Op *lookup(TransportRequest *req);
  void release(TransportRequest *req);

  // shm_progress.cc: the protocol.
  void progress(Peer &p);
  void publish(Peer &p);
  int free_slot(Peer &p, bool eager);
  void advance_sends(Peer &p);
  void check_eager_refusals(Peer &p);
  bool reclaim_given_up(Peer &p, uint32_t slot);
  void stream_out(Peer &p, Op &op);
  void scan_offers(Peer &p);
  void match(Peer &p);
  void start_recv(Peer &p, uint32_t id);
  void read_cma(Peer &p, uint32_t id, uint64_t addr);
  void drain(Peer &p);
  void rematch(Peer &p, uint32_t id);
  void refuse(Peer &p, uint32_t id, const std::string &why);
  void fail_receives(Peer &p);
  void cancel_send(Peer &p, uint32_t id);
  void cancel_recv(Peer &p, uint32_t id);
  void complete(Peer &p, Op &op);
  void fail(Op &op, Status code, const std::string &why);
  std::string describe(const Peer &p, const Op &op) const;

  int rank_;
  int size_;
  std::unique_ptr<Node> node_;
  std::vector<Peer> peers_;  // by local index; my own entry is unused
  std::vector<Op> ops_;
  std::vector<uint32_t> free_ops_;
};

}  // namespace shm
}  // namespace bc
