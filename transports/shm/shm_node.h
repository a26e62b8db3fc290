// The shared-memory transport's node setup: who shares this node, whether
// single-copy CMA works between them, and the mapped segment (shm_layout.h).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "transports/shm/shm_layout.h"
#include "transports/transport.h"

namespace bc {
namespace shm {

// A segment's variable sizes, and its total: `fixed` bytes (header and
// channels) plus, per directed pair, kEagerSlots eager areas and ring_slots
// chunks of the copy ring.
struct SegmentSize {
  size_t eager_bytes;
  uint32_t ring_slots;
  size_t total;
};
// What fits where /dev/shm has `avail` bytes free: as asked if it fits; else
// the eager areas halve (down to 64 B), then go, then the ring halves to 2
// chunks. The result may still not fit (the caller refuses it then).
SegmentSize fit_segment(size_t avail, size_t fixed, size_t npairs, size_t eager_bytes, uint32_t ring_slots,
                        size_t chunk);

class Node {
 public:
  Node() = default;
  ~Node();
  Node(const Node &) = delete;
  Node &operator=(const Node &) = delete;

  // Collective over setup.bootstrap; returns the same status on every rank.
  static Status setup(const TransportSetup &setup, Node *out);

  int nlocal() const { return static_cast<int>(ranks_.size()); }
  int me() const { return me_; }
  // Index of communicator rank r on this node, or -1.
  int local_of(int r) const { return local_of_[r]; }
  int rank_of(int local) const { return ranks_[local]; }
  pid_t pid_of(int local) const { return pids_[local]; }
  bool cma() const { return cma_; }
  size_t chunk() const { return chunk_; }
  uint32_t ring_slots() const { return ring_slots_; }
  size_t eager_bytes() const { return eager_bytes_; }  // 0: no eager path
  // Chosen by the communicator's rank 0 at setup, the same on every rank: which
  // setup a transport kept for reuse came from (shm_reuse.cc).
  uint64_t instance() const { return instance_; }
  Channel *channel(int from, int to) const;
  unsigned char *ring(int from, int to) const;   // copy mode only
  unsigned char *eager(int from, int to) const;  // kEagerSlots inline areas of eager_bytes()

 private:
  int pair_index(int from, int to) const { return from * (nlocal() - 1) + (to < from ? to : to - 1); }
  Status create_segment(char *name, size_t name_size);
  Status open_segment(const char *name);
  void unlink_created();
  void unmap();

  std::vector<int> ranks_;     // communicator ranks on this node, ascending
  std::vector<int> local_of_;  // per communicator rank
  std::vector<pid_t> pids_;    // per local index
  int me_ = 0;
  uint64_t instance_ = 0;
  bool cma_ = false;
  size_t chunk_ = 0;
  uint32_t ring_slots_ = 0;
  size_t eager_bytes_ = 0;
  unsigned char *base_ = nullptr;
  size_t length_ = 0;
  Header *header_ = nullptr;
  std::string created_;  // on the leader, until every rank has mapped it
};

}  // namespace shm
}  // namespace bc
