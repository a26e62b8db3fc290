// The rack level from measurement (topo/discover.h) at detection: a level
// discovered where nothing else gives the levels above the node, and the
// check of racks that BC_TOPO_FILE or an address gives against what the
// network shows. Separate from detect.cc: it works on the allgathered records
// only where discovery is on and there are 3 nodes or more.
#include <algorithm>
#include <atomic>

#include "core/log.h"
#include "topo/detect_internal.h"
#include "topo/discover.h"
#include "topo/topo.h"

namespace bc {
namespace {

// The nodes of the allgathered records: each rank's node leader and host
// hash, the leaders in rank order, and each leader's node index.
struct Nodes {
  std::vector<int64_t> node_of;
  std::vector<uint64_t> host_hash;
  std::vector<int> leaders;
  std::vector<int> node_index;  // by rank: its index among the nodes if it leads one, else -1
};
Nodes nodes_of(const std::vector<TopoRecord> &all) {
  Nodes n;
  n.node_of.resize(all.size());
  n.host_hash.resize(all.size());
  n.node_index.assign(all.size(), -1);
  for (size_t r = 0; r < all.size(); ++r) {
    n.node_of[r] = all[r].node_leader;
    n.host_hash[r] = all[r].host_hash;
    if (all[r].node_leader == static_cast<int64_t>(r)) {
      n.node_index[r] = static_cast<int>(n.leaders.size());
      n.leaders.push_back(static_cast<int>(r));
    }
  }
  return n;
}

// "{0,2} {4,6}": the nodes of each group, by their leaders' ranks, groups in
// order of their first node; at most 16 groups (brace_groups caps each at 16
// nodes), so that the message stays whole.
std::string node_groups_text(const std::vector<int> &leaders, const std::vector<int64_t> &group_of_node) {
  std::vector<int64_t> order;
  std::vector<std::vector<int>> groups;
  for (size_t i = 0; i < leaders.size(); ++i) {
    const size_t k = static_cast<size_t>(std::find(order.begin(), order.end(), group_of_node[i]) - order.begin());
    if (k == order.size()) order.push_back(group_of_node[i]), groups.emplace_back();
    groups[k].push_back(leaders[i]);
  }
  return brace_groups(groups, 16) + (groups.size() > 16 ? " (" + std::to_string(groups.size()) + " groups)" : "");
}

// Whether the groups put at least two nodes together and leave at least two
// apart: one group of every node, or every node alone, is no level between
// the nodes and the root.
bool groups_form_a_level(const std::vector<int64_t> &group_of_node) {
  std::vector<int64_t> distinct(group_of_node);
  std::sort(distinct.begin(), distinct.end());
  const size_t groups = static_cast<size_t>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  return groups > 1 && groups < group_of_node.size();
}

}  // namespace

// True in a process that has checked given racks once (check_given_racks).
std::atomic<bool> g_given_checked{false};

// With the racks given by BC_TOPO_FILE or an address, among 3 nodes or more
// and BC_TOPO_DISCOVER not off: measure them as discovery would (cached
// alike, per set of hosts) and say whether the network agrees, once per
// process (the first such communicator, normally the world's: a file wrong
// for a subset of the hosts is wrong for all of them; later ones would pay
// the measurement again, or disturb each other's if created side by side).
// The given levels are used whatever the verdict: a file written for another
// allocation costs speed, never results. Rank 0 says:
//   INFO  the measured racks are the given ones;
//   WARN  the measurement finds other racks, or (for a file or BC_TOPO_ADDR,
//         which the user can fix) every flow equally fast where it gives racks;
//   INFO  for Slurm's address over such a flat measurement (a non-blocking
//         fabric looks so too), or when the data were inconclusive.
// rack_key: the index of the first level above the node in the records' keys.
Status check_given_racks(MPI_Comm comm, const ParamSet &params, const std::vector<TopoRecord> &all, Above above,
                         int rack_key, int rank) {
  if (above == kAboveNone || params.get_str(ParamId::TopoDiscover) == "off") return BC_OK;
  for (const TopoRecord &r : all)
    if (r.given_checked) return BC_OK;  // every rank sees the same records: all skip alike
  const Nodes n = nodes_of(all);
  if (n.leaders.size() < 3) return BC_OK;
  std::vector<int> measured_of_node;
  std::string how;
  bool flat = false;
  BC_CHECK(discover_racks(comm, params, n.node_of, n.host_hash, &measured_of_node, &how, &flat));
  g_given_checked = true;
  if (rank != 0) return BC_OK;
  std::vector<int64_t> given(n.leaders.size()), measured(n.leaders.size(), 0);
  for (size_t i = 0; i < n.leaders.size(); ++i) {
    given[i] = all[static_cast<size_t>(n.leaders[i])].keys[rack_key];
    if (!measured_of_node.empty()) measured[i] = measured_of_node[i];
  }
  const bool given_level = groups_form_a_level(given);
  if (!given_level) std::fill(given.begin(), given.end(), 0);  // no level: one group, as measured "none"
  // The same partition of the nodes, whatever the groups are called.
  bool agree = true;
  for (size_t i = 0; i < given.size() && agree; ++i)
    for (size_t j = i + 1; j < given.size() && agree; ++j) agree = (given[i] == given[j]) == (measured[i] == measured[j]);
  const std::string given_text = given_level ? node_groups_text(n.leaders, given) : "no rack level";
  const std::string source = how == "measured" ? "measured now; BC_DEBUG=TOPO shows the rates"
                             : how == "failed"  ? "it failed; the warning before this says why"
                                                : how + ", with the rates";
  const bool conclusive = !measured_of_node.empty() || flat;
  if (conclusive && agree) {
    BC_INFO(Topo, "%s: the network agrees with its racks: %s (nodes by their first rank; %s)", kAboveText[above],
            given_text.c_str(), source.c_str());
  } else if (!conclusive) {
    BC_INFO(Topo, "%s: its racks %s are not confirmed: the measurement was inconclusive (%s); they are used",
            kAboveText[above], given_text.c_str(), source.c_str());
  } else if (measured_of_node.empty() && above == kAboveSlurm) {
    BC_INFO(Topo, "%s: every flow between its racks %s ran as fast as inside them (%s): no bottleneck between "
            "them that the measurement sees, as on a non-blocking fabric; they are used",
            kAboveText[above], given_text.c_str(), source.c_str());
  } else {
    const std::string measured_text =
        measured_of_node.empty() ? "no rack level (every flow between nodes equally fast)" : node_groups_text(n.leaders, measured);
    BC_WARN(Topo,
            "%s and the network disagree: it groups the nodes (by their first rank) as %s, the measurement "
            "finds %s (%s). Its levels are used; a wrong file or address costs speed, not results. Fix it, "
            "or set BC_TOPO_DISCOVER=off to skip this check",
            kAboveText[above], given_text.c_str(), measured_text.c_str(), source.c_str());
  }
  return BC_OK;
}

// Without levels above the node from anywhere else, a rack level measured
// among 3 nodes or more (topo/discover.h): its key appended to every rank's.
// Every rank decides alike, from the allgathered records. *measured: "measured
// racks" when a level was added.
Status discover_level(MPI_Comm comm, const ParamSet &params, const std::vector<TopoRecord> &all, Above above,
                      std::vector<std::vector<int64_t>> *keys, std::vector<std::string> *names,
                      std::string *measured, std::string *cache_used) {
  if (above != kAboveNone || params.get_str(ParamId::TopoDiscover) == "off") return BC_OK;
  const Nodes n = nodes_of(all);
  if (n.leaders.size() < 3) return BC_OK;  // with 2 nodes no level can lie between them and the root
  std::vector<int> rack_of_node;
  std::string how;
  BC_CHECK(discover_racks(comm, params, n.node_of, n.host_hash, &rack_of_node, &how));
  static const std::string kCached = "cached in ";
  if (how.compare(0, kCached.size(), kCached) == 0) *cache_used = how.substr(kCached.size());  // racks or flat
  if (rack_of_node.empty()) return BC_OK;
  for (size_t r = 0; r < all.size(); ++r) {
    const int node = n.node_index[static_cast<size_t>(n.node_of[r])];
    if (node < 0) return BC_FAIL(BC_ERR_INTERNAL, "rank %zu's node leader %lld leads no node", r,
                                 static_cast<long long>(n.node_of[r]));
    (*keys)[r].push_back(rack_of_node[static_cast<size_t>(node)]);
  }
  names->push_back("rack");
  *measured = how == "measured" ? "measured racks" : "measured racks (" + how + ")";
  return BC_OK;
}

}  // namespace bc
