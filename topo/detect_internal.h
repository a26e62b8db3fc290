// Topology detection's pieces shared by its files, not for other code
// (topo/detect.h is the interface): the record every rank contributes to the
// one allgather, where the levels above the node come from, and the helpers of
// detect.cc that live in detect_keys.cc (this rank's own keys: hwloc,
// BC_TOPO_FILE, the scheduler's address) and detect_racks.cc (the measured
// rack level, and the check of given racks against the network).
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

#include "core/params.h"

namespace bc {

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

// detect_keys.cc: this rank's keys, innermost level first, and its host name.
std::string this_host();
Status local_keys(const ParamSet &params, int64_t node_leader, std::vector<int64_t> *keys,
                  std::vector<std::string> *names, Above *above);

// detect_racks.cc: the measured rack level and the check of given racks.
extern std::atomic<bool> g_given_checked;
Status check_given_racks(MPI_Comm comm, const ParamSet &params, const std::vector<TopoRecord> &all, Above above,
                         int rack_key, int rank);
Status discover_level(MPI_Comm comm, const ParamSet &params, const std::vector<TopoRecord> &all, Above above,
                      std::vector<std::vector<int64_t>> *keys, std::vector<std::string> *names,
                      std::string *measured, std::string *cache_used);

}  // namespace bc
