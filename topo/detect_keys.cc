// This rank's own topology keys, innermost level first, from what it can see
// without the other ranks: the hwloc level inside the node (BC_TOPO_INTRA), the
// node, and the levels above it from BC_TOPO_FILE or the scheduler's address
// (BC_TOPO_ADDR, Slurm's SLURM_TOPOLOGY_ADDR). Separate from detect.cc, which
// gathers every rank's keys and decides the layout from them.
#include <hwloc.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "topo/detect_internal.h"
#include "topo/topo.h"

namespace bc {
namespace {

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

}  // namespace

std::string this_host() {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return host;
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

}  // namespace bc
