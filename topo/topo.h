// Where the ranks are: a tree of levels, fastest first.
//
// Level 1 units (nodes, or finer groups inside a node) hold ranks; level 2
// units (racks) hold level-1 units; and so on up to one root. The plan reads
// this as data only, so it can be built and checked without MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace bc {

struct Topology {
  int nranks = 0;
  // parent[l][u]: the level-(l+1) unit that holds unit u of level l, where level 0
  // units are the ranks themselves. parent.size() is the number of levels k; the
  // last level has one unit, the root. Units are numbered in order of their
  // smallest rank.
  std::vector<std::vector<int>> parent;
  // A name per level for printing: "node", "rack", "numa", "level3", ...
  std::vector<std::string> level_names;
  // The physical node (shared-memory domain) of each rank, from
  // MPI_COMM_TYPE_SHARED whatever the levels say: transports need it. Empty
  // when unknown (parsed specs in unit tests).
  std::vector<int64_t> node_of;
  // Where the levels came from, for printing ("BC_TOPO=2x2", "MPI_COMM_TYPE_SHARED + hwloc").
  std::string source;

  int levels() const { return static_cast<int>(parent.size()); }
  // Units of level l (0 = ranks).
  int units(int l) const;
  // Children of each unit of level l (l >= 1), in order.
  std::vector<std::vector<int>> children(int l) const;
  // Uneven: some level has units with different numbers of children.
  bool uneven() const;
  // Non-contiguous: some unit's ranks are not consecutive in rank order.
  bool noncontiguous() const;
  std::string describe() const;
};

// Parses a BC_TOPO spec for nranks ranks (syntax in params.cc's BC_TOPO doc):
// "2x2x2", "4/2", "3,2,3", "2,2,2/2,1". A root level is added when the spec stops
// short of one unit.
Status topo_parse(const std::string &spec, int nranks, Topology *out);

// Builds the tree from one key vector per rank: keys[r][l] identifies rank r's
// unit at level l+1 (as a path: two ranks share a level-l unit when keys agree at
// every level >= l). Levels where every unit has one child are dropped, except
// that at least the root remains.
Status topo_from_keys(const std::vector<std::vector<int64_t>> &keys,
                      const std::vector<std::string> &level_names, Topology *out);

}  // namespace bc
