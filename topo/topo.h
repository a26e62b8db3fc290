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
  // Per rank: how many CPUs the ranks of its node (in this communicator) may
  // run on between them, the union of their affinity masks; 0 when unknown.
  // Fewer than the node's ranks: they take turns on cores, and a waiter
  // should yield at once (auto_spin_count). Empty when unknown (parsed specs).
  // A layout detected before is reused only while this process's mask is
  // the same (topo_detect).
  std::vector<int> node_cpus;
  // Where the levels came from, for printing ("BC_TOPO=2x2", "MPI_COMM_TYPE_SHARED + hwloc").
  std::string source;
  // The per-user cache file whose rack verdict (racks, or flat: none) these
  // levels took instead of measuring; "" when measured now or not looked for.
  // The plan learning removes it when the job's own calls say the network
  // is not what it was (lib/api/plan_learn.cc, stale caches).
  std::string racks_cache;

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

// Groups of ranks as "{0,1} {2,3}": at most 16 members shown per group (then
// "...N ranks") and at most max_groups groups (then " ..."). Topology::describe
// prints its units so; detect.cc the racks it compares.
std::string brace_groups(const std::vector<std::vector<int>> &groups, size_t max_groups);

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

// The key of a group name in BC_TOPO_FILE, BC_TOPO_ADDR or SLURM_TOPOLOGY_ADDR
// (the same name gives the same key wherever it comes from).
int64_t topo_group_key(const std::string &name);

// The group columns of `host`'s line in the text of a BC_TOPO_FILE (`label`,
// for messages, names the file): 'HOSTNAME GROUP [GROUP2 ...]' per line, '#'
// starts a comment, every line the same number of groups, at most max_cols.
Status topo_file_parse(const std::string &text, const std::string &label, const std::string &host,
                       int max_cols, std::vector<std::string> *groups);

// A scheduler's address of this rank's node, outermost switch first and the
// node name last ("s0.s10.node17"), into the switch names innermost first
// ({"s10", "s0"}). With a pattern (Slurm's SLURM_TOPOLOGY_ADDR_PATTERN,
// "switch.switch.node") the two must have as many dot-separated fields, the
// pattern's last 'node' and the others 'switch'; without one (BC_TOPO_ADDR)
// every field but the last is a switch. No field may be empty. addr_var and
// pattern_var name the variables in messages.
Status topo_addr_parse(const std::string &addr, const char *addr_var, const std::string *pattern,
                       const char *pattern_var, std::vector<std::string> *switches);

// The levels of `t` above the host, as a BC_TOPO_FILE: one line
// 'HOSTNAME GROUP [GROUP2 ...]' per host (host_of[r] is rank r's host), groups
// named after the level and its unit ("rack0", "level3_1"). Levels inside a
// host named "numa" or "package" are left to BC_TOPO_INTRA (a comment says
// so); any other level that splits a host (a virtual one from BC_TOPO, or
// BC_TOPO_ADDR giving the ranks of one host different switches) cannot be
// written and is an error. Without levels above the host every host gets the
// one group "all", which reloads to the same tree.
Status topo_to_file(const Topology &t, const std::vector<std::string> &host_of, std::string *out);

}  // namespace bc
