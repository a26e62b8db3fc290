// Topology detection at communicator creation (topo/detect.h): the node split,
// one allgather of every rank's record, the agreement checks, the layout built
// from the keys, and the process's cache of layouts detected before. This
// rank's own keys come from detect_keys.cc, the measured or checked rack level
// from detect_racks.cc.
#include "topo/detect.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <map>

#include "core/hash.h"
#include "core/log.h"
#include "topo/detect_internal.h"

namespace bc {
namespace {

// The settings every rank must share (hashed into the allgather's record) and
// that key the process's layout cache (which adds the per-rank addresses).
std::string shared_settings(const ParamSet &params) {
  return params.get_str(ParamId::Topo) + "|" + params.get_str(ParamId::TopoFile) + "|" +
         params.get_str(ParamId::TopoIntra) + "|" + params.get_str(ParamId::TopoScheduler) + "|" +
         params.get_str(ParamId::TopoDiscover);
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
    std::string measured, racks_cache;
    BC_CHECK(discover_level(comm, params, all, above, &allkeys, &names, &measured, &racks_cache));
    const auto rack = std::find(names.begin(), names.end(), "rack");
    if (rack != names.end())
      BC_CHECK(check_given_racks(comm, params, all, above, static_cast<int>(rack - names.begin()), rank));
    BC_CHECK(topo_from_keys(allkeys, names, &t));
    t.source = "MPI_COMM_TYPE_SHARED";
    if (above == kAboveFile) t.source += " + BC_TOPO_FILE";
    if (above == kAboveSlurm) t.source += " + Slurm SLURM_TOPOLOGY_ADDR";
    if (above == kAboveAddr) t.source += " + BC_TOPO_ADDR";
    if (!measured.empty()) t.source += " + " + measured;
    t.racks_cache = racks_cache;
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
