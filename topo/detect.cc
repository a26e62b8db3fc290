#include "topo/detect.h"

#include <hwloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <fstream>
#include <map>
#include <sstream>

#include "core/hash.h"
#include "core/log.h"
#include "topo/discover.h"

namespace bc {
namespace {

constexpr int kMaxKeys = 8;
constexpr int kCpuWords = CPU_SETSIZE / 64;

// What each rank contributes to the one allgather.
struct TopoRecord {
  int32_t status;       // BC_OK, or this rank's failure code
  int32_t nkeys;
  int64_t node_leader;  // smallest rank on this rank's node
  uint64_t settings_hash;  // BC_TOPO / BC_TOPO_FILE / BC_TOPO_INTRA / BC_TOPO_SCHEDULER / BC_TOPO_DISCOVER must agree
  int32_t above;           // where the levels above the node come from (Above); must agree
  int32_t given_checked;   // 1: this process checked given racks already (check_given_racks)
  uint64_t host_hash;      // of this rank's host name: the discovered racks' cache key
  int64_t keys[kMaxKeys];
  uint64_t cpus[kCpuWords];  // the CPUs this process may run on (its affinity mask); all 0: unknown
};

// Where a rank's levels above the node come from. The address variables are
// per rank, so they are not in the settings hash; every rank must still have
// the same kind, else some would build levels that others do not have.
enum Above : int32_t { kAboveNone = 0, kAboveFile, kAboveSlurm, kAboveAddr };
const char *const kAboveText[] = {"no address (BC_TOPO_ADDR and SLURM_TOPOLOGY_ADDR unset)", "BC_TOPO_FILE",
                                  "Slurm's SLURM_TOPOLOGY_ADDR", "BC_TOPO_ADDR"};

// The settings every rank must share (hashed into the allgather's record) and
// that key the process's layout cache (which adds the per-rank addresses).
std::string shared_settings(const ParamSet &params) {
  return params.get_str(ParamId::Topo) + "|" + params.get_str(ParamId::TopoFile) + "|" +
         params.get_str(ParamId::TopoIntra) + "|" + params.get_str(ParamId::TopoScheduler) + "|" +
         params.get_str(ParamId::TopoDiscover);
}

// The package or NUMA node that this process is bound inside; -1 when its
// binding spans several (e.g. --bind-to none).
Status hwloc_key(const std::string &kind, int64_t *key) {
  *key = -1;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0)
    return BC_FAIL(BC_ERR_TOPOLOGY, "hwloc could not load this machine's topology");
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0) {
    hwloc_obj_type_t type = kind == "numa" ? HWLOC_OBJ_NUMANODE : HWLOC_OBJ_PACKAGE;
    int n = hwloc_get_nbobjs_by_type(topo, type);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t obj = hwloc_get_obj_by_type(topo, type, i);
      if (obj->cpuset && hwloc_bitmap_isincluded(set, obj->cpuset)) {
        *key = static_cast<int64_t>(obj->logical_index);
        break;
      }
    }
  }
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topo);
  return BC_OK;
}

std::string this_host() {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return host;
}

// The group columns of this host's line in BC_TOPO_FILE.
Status topo_file_keys(const std::string &path, std::vector<std::string> *groups) {
  std::ifstream in(path);
  if (!in) return BC_FAIL(BC_ERR_TOPOLOGY, "BC_TOPO_FILE=%s: cannot open the file", path.c_str());
  std::ostringstream text;
  text << in.rdbuf();
  return topo_file_parse(text.str(), path, this_host(), kMaxKeys - 2, groups);
}

// Which scheduler address this rank has, and its switches innermost first.
// Slurm's variables are the scheduler's, not BC_* parameters, so they are read
// here rather than in the registry (BC_TOPO_SCHEDULER says whether to).
Status scheduler_switches(const ParamSet &params, Above *above, std::vector<std::string> *switches) {
  *above = kAboveNone;
  const std::string &addr = params.get_str(ParamId::TopoAddr);
  if (!addr.empty()) {
    *above = kAboveAddr;
    return topo_addr_parse(addr, "BC_TOPO_ADDR", nullptr, nullptr, switches);
  }
  if (params.get_str(ParamId::TopoScheduler) == "off") return BC_OK;
  const char *slurm_addr = std::getenv("SLURM_TOPOLOGY_ADDR");
  const char *slurm_pattern = std::getenv("SLURM_TOPOLOGY_ADDR_PATTERN");
  if (!slurm_addr && !slurm_pattern) return BC_OK;
  *above = kAboveSlurm;
  if (!slurm_addr || !slurm_pattern)
    return BC_FAIL(BC_ERR_TOPOLOGY,
                   "%s is set but %s is not; Slurm sets both (BC_TOPO_SCHEDULER=off ignores them)",
                   slurm_addr ? "SLURM_TOPOLOGY_ADDR" : "SLURM_TOPOLOGY_ADDR_PATTERN",
                   slurm_addr ? "SLURM_TOPOLOGY_ADDR_PATTERN" : "SLURM_TOPOLOGY_ADDR");
  const std::string pattern = slurm_pattern;
  return topo_addr_parse(slurm_addr, "SLURM_TOPOLOGY_ADDR", &pattern, "SLURM_TOPOLOGY_ADDR_PATTERN", switches);
}

// This process's affinity mask as bits, CPU c at bit c % 64 of word c / 64;
// all zero when the kernel does not say (then nobody is counted as sharing).
void affinity_of_this_process(uint64_t *words) {
  std::memset(words, 0, kCpuWords * sizeof(uint64_t));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) words[cpu / 64] |= uint64_t{1} << (cpu % 64);
}

// Per rank: how many CPUs the ranks of its node may run on between them (the
// union of their masks); 0 when one of them does not know its own.
std::vector<int> node_cpus_of(const std::vector<TopoRecord> &all) {
  std::map<int64_t, std::vector<uint64_t>> unions;  // by node leader
  std::map<int64_t, bool> unknown;
  for (const TopoRecord &r : all) {
    std::vector<uint64_t> &u = unions[r.node_leader];
    u.resize(kCpuWords, 0);
    bool any = false;
    for (int w = 0; w < kCpuWords; ++w) {
      u[w] |= r.cpus[w];
      any = any || r.cpus[w] != 0;
    }
    if (!any) unknown[r.node_leader] = true;
  }
  std::vector<int> out(all.size(), 0);
  for (size_t r = 0; r < all.size(); ++r) {
    if (unknown.count(all[r].node_leader)) continue;
    for (uint64_t word : unions[all[r].node_leader]) out[r] += __builtin_popcountll(word);
  }
  return out;
}

// This rank's keys, innermost level first, without collectives other than the
// node split (which every rank makes).
Status node_leader_of(MPI_Comm comm, int64_t *leader) {
  int rank = 0;
  BC_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_Comm node;
  BC_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  // Ours for a moment: errors come back as codes, as on the communicator it came from.
  int rc = MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
  int node_leader = rank;
  if (rc == MPI_SUCCESS) rc = MPI_Bcast(&node_leader, 1, MPI_INT, 0, node);
  const int free_rc = MPI_Comm_free(&node);
  BC_MPI_CHECK(rc);
  BC_MPI_CHECK(free_rc);
  *leader = node_leader;
  return BC_OK;
}

Status local_keys(const ParamSet &params, int64_t node_leader, std::vector<int64_t> *keys,
                  std::vector<std::string> *names, Above *above) {
  const std::string intra = params.get_str(ParamId::TopoIntra);
  if (intra != "none") {
    int64_t k = -1;
    BC_CHECK(hwloc_key(intra, &k));
    keys->push_back(k);
    names->push_back(intra);
  }
  keys->push_back(node_leader);
  names->push_back("node");
  // BC_TOPO_FILE first; else the scheduler's address. Either way group names,
  // innermost first.
  const std::string file = params.get_str(ParamId::TopoFile);
  std::vector<std::string> groups;
  if (!file.empty()) {
    *above = kAboveFile;
    BC_CHECK(topo_file_keys(file, &groups));
  } else {
    BC_CHECK(scheduler_switches(params, above, &groups));
    if (groups.size() > static_cast<size_t>(kMaxKeys - 2))
      return BC_FAIL(BC_ERR_TOPOLOGY, "%s: %zu switch levels; at most %d are supported", kAboveText[*above],
                     groups.size(), kMaxKeys - 2);
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    keys->push_back(topo_group_key(groups[i]));
    names->push_back(i == 0 ? "rack" : "level" + std::to_string(i + 2));
  }
  return BC_OK;
}

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
  const std::string source = how == "measured" ? "measured now; BC_DEBUG=TOPO shows the rates" : how + ", with the rates";
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
                      std::string *measured) {
  if (above != kAboveNone || params.get_str(ParamId::TopoDiscover) == "off") return BC_OK;
  const Nodes n = nodes_of(all);
  if (n.leaders.size() < 3) return BC_OK;  // with 2 nodes no level can lie between them and the root
  std::vector<int> rack_of_node;
  std::string how;
  BC_CHECK(discover_racks(comm, params, n.node_of, n.host_hash, &rack_of_node, &how));
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

// The detection itself: node split, keys, one allgather. `cpus`: this
// process's affinity mask (affinity_of_this_process), read once by the caller
// for its cache key too, so that the key and the record say the same.
Status detect(MPI_Comm comm, const ParamSet &params, const uint64_t *cpus, Topology *out) {
  int rank = 0, size = 0;
  BC_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  BC_MPI_CHECK(MPI_Comm_size(comm, &size));
  const std::string spec = params.get_str(ParamId::Topo);

  TopoRecord mine;
  std::memset(&mine, 0, sizeof mine);
  mine.settings_hash = fnv1a(shared_settings(params));
  mine.host_hash = fnv1a(this_host());
  std::vector<int64_t> keys;
  std::vector<std::string> names;
  Above above = kAboveNone;
  // Every rank takes part in the node split, so a failure is recorded, not returned.
  Status st = node_leader_of(comm, &mine.node_leader);
  if (st == BC_OK && spec.empty()) st = local_keys(params, mine.node_leader, &keys, &names, &above);
  if (st != BC_OK) mine.status = st;
  mine.above = above;
  mine.given_checked = g_given_checked ? 1 : 0;
  std::memcpy(mine.cpus, cpus, sizeof mine.cpus);
  mine.nkeys = static_cast<int32_t>(keys.size());
  for (size_t i = 0; i < keys.size() && i < kMaxKeys; ++i) mine.keys[i] = keys[i];

  std::vector<TopoRecord> all(size);
  BC_MPI_CHECK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, comm));

  // Failures first: a rank that failed has no levels to compare.
  for (int r = 0; r < size; ++r) {
    if (all[r].status != BC_OK) {
      if (all[rank].status != BC_OK) return static_cast<Status>(all[rank].status);  // keeps this rank's own message
      return BC_FAIL(static_cast<Status>(all[r].status), "topology detection failed on rank %d", r);
    }
  }
  for (int r = 0; r < size; ++r) {
    if (all[r].settings_hash != mine.settings_hash)
      return BC_FAIL(BC_ERR_TOPOLOGY,
                     "rank %d has different BC_TOPO/BC_TOPO_FILE/BC_TOPO_INTRA/BC_TOPO_SCHEDULER/BC_TOPO_DISCOVER settings "
                     "than rank %d; every rank must use the same", r, rank);
    if (all[r].above != mine.above)
      return BC_FAIL(BC_ERR_TOPOLOGY,
                     "rank %d takes the levels above the node from %s, rank %d from %s; every rank must see "
                     "the same kind of address (export BC_TOPO_ADDR to every rank, or set "
                     "BC_TOPO_SCHEDULER=off to ignore Slurm's variables)",
                     r, kAboveText[all[r].above >= 0 && all[r].above <= kAboveAddr ? all[r].above : 0], rank,
                     kAboveText[mine.above]);
    if (all[r].nkeys != mine.nkeys)
      return BC_FAIL(BC_ERR_TOPOLOGY, "rank %d found %d topology levels, rank %d found %d%s%s%s", r,
                     all[r].nkeys, rank, mine.nkeys,
                     mine.above == kAboveSlurm || mine.above == kAboveAddr ? " (from " : "",
                     mine.above == kAboveSlurm || mine.above == kAboveAddr ? kAboveText[mine.above] : "",
                     mine.above == kAboveSlurm || mine.above == kAboveAddr
                         ? ": every rank's address needs as many switches)" : "");
  }

  Topology t;
  if (!spec.empty()) {
    BC_CHECK(topo_parse(spec, size, &t));
  } else {
    std::vector<std::vector<int64_t>> allkeys(size);
    for (int r = 0; r < size; ++r) allkeys[r].assign(all[r].keys, all[r].keys + all[r].nkeys);
    std::string measured;
    BC_CHECK(discover_level(comm, params, all, above, &allkeys, &names, &measured));
    const auto rack = std::find(names.begin(), names.end(), "rack");
    if (rack != names.end())
      BC_CHECK(check_given_racks(comm, params, all, above, static_cast<int>(rack - names.begin()), rank));
    BC_CHECK(topo_from_keys(allkeys, names, &t));
    t.source = "MPI_COMM_TYPE_SHARED";
    if (above == kAboveFile) t.source += " + BC_TOPO_FILE";
    if (above == kAboveSlurm) t.source += " + Slurm SLURM_TOPOLOGY_ADDR";
    if (above == kAboveAddr) t.source += " + BC_TOPO_ADDR";
    if (!measured.empty()) t.source += " + " + measured;
    if (params.get_str(ParamId::TopoIntra) != "none") t.source += " + hwloc " + params.get_str(ParamId::TopoIntra);
  }
  t.node_of.resize(size);
  for (int r = 0; r < size; ++r) t.node_of[r] = all[r].node_leader;
  t.node_cpus = node_cpus_of(all);
  if (rank == 0) BC_INFO(Topo, "%s", t.describe().c_str());
  if (t.uneven() || t.noncontiguous())
    BC_DEBUGLOG(Topo, "layout is%s%s; the plan folds extra ranks into the hierarchy",
                t.uneven() ? " uneven" : "", t.noncontiguous() ? " non-contiguous" : "");
  *out = std::move(t);
  return BC_OK;
}

// Layouts detected before, by the members' ranks in MPI_COMM_WORLD (in
// communicator order) and the settings: the same processes under the same
// settings have the same layout. A few, most recently used last.
struct CachedTopo {
  std::vector<int> world_ranks;
  std::string settings;
  Topology topo;
};
constexpr size_t kTopoCacheSize = 16;
std::mutex g_topo_mutex;
std::vector<CachedTopo> g_topos;

}  // namespace

bool world_ranks_of(MPI_Comm comm, std::vector<int> *out) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  int size = 0;
  bool ok = MPI_Comm_group(comm, &group) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS &&
            MPI_Group_size(group, &size) == MPI_SUCCESS;
  if (ok) {
    std::vector<int> mine(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) mine[i] = i;
    out->assign(static_cast<size_t>(size), MPI_UNDEFINED);
    ok = MPI_Group_translate_ranks(group, size, mine.data(), world, out->data()) == MPI_SUCCESS;
    if (!ok) out->clear();
    for (int w : *out) ok = ok && w != MPI_UNDEFINED;
  } else {
    out->clear();
  }
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
  return ok;
}

// A communicator over the same processes as one detected before, with the
// same settings, takes that layout after one allreduce that says every rank
// has it (frameworks duplicate and split the same groups again and again); the
// node split, its broadcast and the allgather cost 1.8 of 6 ms of a
// communicator's creation at np 8 on one node.
Status topo_detect(MPI_Comm comm, const ParamSet &params, Topology *out) {
  // This rank's addresses too: the same settings with another address are
  // another layout. And its affinity mask: a process that moved to other CPUs
  // since may share them differently (Topology::node_cpus).
  const char *slurm_addr = std::getenv("SLURM_TOPOLOGY_ADDR");
  const char *slurm_pattern = std::getenv("SLURM_TOPOLOGY_ADDR_PATTERN");
  uint64_t cpus[kCpuWords];
  affinity_of_this_process(cpus);
  std::string settings = shared_settings(params) +
                         "|" + params.get_str(ParamId::TopoAddr) + "|" + (slurm_addr ? slurm_addr : "-") +
                         "|" + (slurm_pattern ? slurm_pattern : "-") + "|";
  settings.append(reinterpret_cast<const char *>(cpus), sizeof cpus);
  std::vector<int> members;
  // BC_TOPO_DISCOVER=always measures at every creation: nothing is reused.
  const bool cacheable = world_ranks_of(comm, &members) && params.get_str(ParamId::TopoDiscover) != "always";
  int have = 0;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(g_topo_mutex);
    for (auto it = g_topos.begin(); it != g_topos.end(); ++it) {
      if (it->world_ranks != members || it->settings != settings) continue;
      *out = it->topo;
      std::rotate(it, it + 1, g_topos.end());
      have = 1;
      break;
    }
  }
  int everyone = 0;
  BC_MPI_CHECK(MPI_Allreduce(&have, &everyone, 1, MPI_INT, MPI_MIN, comm));
  if (everyone) {
    BC_DEBUGLOG(Topo, "layout of %zu ranks as detected before: %s", members.size(), out->source.c_str());
    return BC_OK;
  }
  BC_CHECK(detect(comm, params, cpus, out));
  if (cacheable) {
    std::lock_guard<std::mutex> lock(g_topo_mutex);
    if (g_topos.size() >= kTopoCacheSize) g_topos.erase(g_topos.begin());
    g_topos.push_back({members, settings, *out});
  }
  return BC_OK;
}

}  // namespace bc
