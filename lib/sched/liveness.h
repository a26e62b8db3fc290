// Liveness: telling a dead peer from a late one (docs/FAILURES.md, "Peer death
// and lateness").
//
// A collective that stops moving is either waiting for a peer that is busy
// (late: a checkpoint, a slow loader; BC_TIMEOUT, 30 min by default, is for
// that) or for a peer that will never come (dead). The waiter cannot tell
// from the data, so it asks, but only while it waits without progress: every
// BC_LIVENESS_INTERVAL (WaitPolicy::liveness_due) the operation calls
// check(). The fast path never does.
//
// Every rank checks every peer, not only the one it waits for: a rank blocked
// on a living neighbour who is itself blocked on the dead one must still name
// the dead one, and no message has to travel from the rank that noticed first.
// How a peer is checked (BC_LIVENESS):
//  - on this host (same host name and boot id, and its /proc/PID/stat start
//    time matched at creation, so it is the same process in the same pid
//    namespace): /proc/PID/stat. Gone, a zombie, or another start time (the
//    pid was reused) is dead. A few microseconds per peer.
//  - anywhere else: the UCX TCP watch (transports/ucx/ucx_watch.h), which
//    sees the connection the kernel closes when the process dies.
// Identities (host, pid, start time) are gathered once, at creation.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/status.h"
#include "transports/transport.h"

namespace bc {

class UcxWatch;

class Liveness {
 public:
  ~Liveness();
  // Collective over setup.bootstrap. Never fails for lack of a way to watch:
  // peers that cannot be watched are listed in unwatched() (and BC_LIVENESS=off
  // watches nobody); only MPI errors fail it.
  static Status create(const TransportSetup &setup, std::unique_ptr<Liveness> *out);

  // Checks every peer once; returns true when some peer is (now or already)
  // known dead. dead() lists them in the order found. Both may be called from
  // two threads at once: a caller's argument agreement (BC_CHECK_ARGS) checks
  // while the progress thread's operations do.
  bool check();
  std::vector<int> dead() const;
  bool enabled() const { return enabled_; }
  int64_t interval_ms() const { return interval_ms_; }
  int rank() const { return rank_; }
  // "rank 1 (host sc-node0, pid 1234)"
  std::string who(int rank) const;
  // who() of each of `ranks`: "rank 1 (...)", "rank 1 (...) and rank 3 (...)",
  // "rank 1 (...), rank 2 (...) and rank 3 (...)".
  std::string who_list(const std::vector<int> &ranks) const;
  // How rank's death was seen: "its process is gone" / "its connection closed".
  const char *how(int rank) const;
  // Ranks no check covers (BC_LIVENESS=off, or the TCP watch could not start).
  int unwatched() const { return unwatched_; }

 private:
  Liveness() = default;
  enum class Way : uint8_t { Self, Proc, Net, None };
  struct Peer {
    Way way = Way::None;
    int64_t pid = 0;
    uint64_t start = 0;  // /proc/PID/stat field 22, clock ticks after boot
    std::string host;
  };
  bool proc_alive(const Peer &p) const;
  void mark_dead(int rank);

  int rank_ = 0;
  bool enabled_ = false;
  int64_t interval_ms_ = 200;
  int unwatched_ = 0;
  std::vector<Peer> peers_;
  mutable std::mutex mutex_;  // guards is_dead_, dead_ and the watch's poll
  std::vector<char> is_dead_;
  std::vector<int> dead_;
  std::unique_ptr<UcxWatch> watch_;
};

// This process's start time (/proc/self/stat field 22), 0 when unknown.
uint64_t proc_start_time(int64_t pid);

}  // namespace bc
