// Racks from measured rates: the pure part of discovery (topo/discover.h),
// data in and data out, so it is unit-tested without MPI.
//
// Measurement runs rounds d = 1, 2, 4, ... < n over the n node leaders; in
// round d leader i exchanges with leader i XOR d (when that is < n; else it
// idles), all pairs at once. In a layout of racks that are aligned blocks of
// nodes in rank order, a round with d below the rack size keeps every flow
// inside its rack and a round with d at or above it sends every flow across,
// each rack's trunk carrying all of its nodes' flows at once: a trunk slower
// than the node links, or one shared by several nodes (oversubscribed),
// shows as slow flows.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace bc {

// The distances of the measurement rounds for n nodes: 1, 2, 4, ... < n.
std::vector<int> discover_rounds(int n);
// Node i's partner in the round of distance d, or -1 when it idles.
int discover_partner(int i, int d, int n);

// One measured flow: src sent to dst in round `round`, received at `rate`
// (bytes/s; <= 0: not measured).
struct Flow {
  int round;
  int src;
  int dst;
  double rate;
};

struct RackClusters {
  bool found = false;         // a rack level with >= 2 racks, one of them of >= 2 nodes
  // found, or every pair fast (one rack): the data decide. Otherwise (a pair
  // in the uncertain band, inconsistent or ambiguous data, a flow not
  // measured) they say nothing either way: discovery measures again.
  bool conclusive = false;
  std::vector<int> rack_of;   // found: rack of each node, numbered by smallest node
  double best = 0;            // the fastest pair (bytes/s, mean of its directions)
  std::string why;            // the decision in words (found or not)
};

// The rack of each of n nodes from the flows. A pair of nodes has the mean
// rate of its two directions (each direction its best measurement), and is
// fast when that reaches slow_ratio x the best pair's: on a busy host one
// direction may starve while the other runs, and flows that share a trunk
// share it unfairly, but neither lifts both directions at once. Nodes joined
// by fast pairs share a rack (union-find); then every check must pass, else
// no level is found and `why` says which failed: no pair inside a rack is
// slow; every two racks are separated by at least one measured slow pair
// (else they might be one rack never measured as such); no pair lies in the
// uncertain band within `margin` (relative) of the threshold. Deterministic:
// every leader computes the same.
RackClusters rack_clusters(int n, const std::vector<Flow> &flows, double slow_ratio = 0.55, double margin = 0.05);

// The passes of one discovery and when they decide (docs/TOPOLOGY.md). Each
// pass is classified alone; a conclusive one votes for its racks, or for one
// rack. Noise only ever lowers a rate (a late process, a starved host), so
// one fast reading proves a pair fast and no number of slow ones proves it
// slow: a rack level, which rests on slow pairs, needs kVotesForRacks
// agreeing votes, one rack kVotesForOneRack, and the flows of all passes
// together (each direction its best) must classify the same, so that a pass
// that read a pair fast overrules the votes that read it slow. Two passes in
// a row that read one pair inside a rack slow (a starved host on CI) made a
// wrong rack level when two votes decided either way.
class RackPasses {
 public:
  static constexpr int kVotesForRacks = 3;
  static constexpr int kVotesForOneRack = 2;

  RackPasses(int n, int max_passes, double slow_ratio = 0.55, double margin = 0.05)
      : n_(n), max_passes_(max_passes), slow_ratio_(slow_ratio), margin_(margin) {}
  // Adds one pass's flows. True when the passes are over: decided, or no
  // verdict can reach its votes in the passes left.
  bool add(const std::vector<Flow> &flows);
  // After the last add(): found or conclusive only when decided; `why` says
  // how, or why not.
  const RackClusters &result() const { return result_; }
  int passes() const { return passes_; }

 private:
  int n_, max_passes_;
  double slow_ratio_, margin_;
  int passes_ = 0;
  std::vector<Flow> all_;                               // every pass's flows
  std::vector<std::pair<std::vector<int>, int>> votes_;  // racks (empty: one rack), how many passes
  RackClusters result_;
};

}  // namespace bc
