// The one registry of BC_* parameters.
//
// Every knob the library has is a row of kParamDefs (params_table.cc) with its type,
// default and documentation; no other BC_* variable is read anywhere (the
// environment is read elsewhere only for other software's variables: Slurm's
// topology address, UCX_TLS and UCX_RNDV_THRESH, XDG_CACHE_HOME and HOME). The process
// values are read once, in bc_init (ParamSet::from_environment). A
// communicator may override them (bc_comm_create_with), with the same parsers.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace bc {

enum class ParamId : int {
  Debug = 0,    // BC_DEBUG
  DebugFile,    // BC_DEBUG_FILE
  Topo,         // BC_TOPO
  TopoFile,     // BC_TOPO_FILE
  TopoIntra,    // BC_TOPO_INTRA
  TopoScheduler,// BC_TOPO_SCHEDULER
  TopoAddr,     // BC_TOPO_ADDR
  TopoDiscover, // BC_TOPO_DISCOVER
  Transport,    // BC_TRANSPORT
  Algo,         // BC_ALGO
  Timeout,      // BC_TIMEOUT
  SpinCount,    // BC_SPIN_COUNT
  MaxPlanCache, // BC_PLAN_CACHE
  Disable,      // BC_DISABLE (PMPI layer)
  PmpiStats,    // BC_PMPI_STATS
  PmpiMinBytes, // BC_PMPI_MIN_BYTES
  ShmMode,      // BC_SHM_MODE
  ShmChunk,     // BC_SHM_CHUNK
  ShmEager,     // BC_SHM_EAGER
  MpiTagUb,     // BC_MPI_TAG_UB
  UcxWait,      // BC_UCX_WAIT
  UcxRndvThresh,// BC_UCX_RNDV_THRESH
  Chunk,        // BC_CHUNK
  PipelineDepth,// BC_PIPELINE_DEPTH
  Plan,         // BC_PLAN
  Model,        // BC_MODEL
  ModelFile,    // BC_MODEL_FILE
  ModelCache,   // BC_MODEL_CACHE
  ModelCacheAge,// BC_MODEL_CACHE_AGE
  CacheDir,     // BC_CACHE_DIR
  CudaIpc,      // BC_CUDA_IPC
  CudaIpcCache, // BC_CUDA_IPC_CACHE
  CudaStagingChunk, // BC_CUDA_STAGING_CHUNK
  CudaStagingBufs,  // BC_CUDA_STAGING_BUFS
  ProgressThread,   // BC_PROGRESS_THREAD
  PmpiRoute,        // BC_PMPI_ROUTE
  Liveness,         // BC_LIVENESS
  LivenessInterval, // BC_LIVENESS_INTERVAL
  CheckArgs,        // BC_CHECK_ARGS
  TimelineFile,     // BC_TIMELINE_FILE
  PlanLearn,        // BC_PLAN_LEARN
  PlanCandidates,   // BC_PLAN_CANDIDATES
  Count
};

enum class ParamType { Int, Bytes, Seconds, Bool, String, Enum };

// The values a numeric parameter (Int, Bytes, Seconds) may take, in its unit
// (a count, bytes, milliseconds), both ends included. When `zero` is set, 0 is
// allowed too although below `min`, and means what `zero` says ("one chunk").
// The environment, bc_comm_create_with and BC_PLAN's rules all check values
// against it; code that reads a parameter may rely on it.
struct ParamRange {
  int64_t min;
  int64_t max;  // kParamNoMax: no upper limit
  const char *zero;
};
constexpr int64_t kParamNoMax = INT64_MAX;
constexpr ParamRange kParamAnyRange{0, kParamNoMax, nullptr};  // non-numeric types

struct ParamDef {
  ParamId id;
  const char *name;
  ParamType type;
  const char *default_value;
  const char *choices;  // for Enum: '|'-separated; else nullptr
  ParamRange range;     // for Int, Bytes, Seconds
  const char *doc;
};

const ParamDef &param_def(ParamId id);
// Looks up a definition by its BC_ name; nullptr when unknown.
const ParamDef *param_find(const char *name);

// Whether `v` (in the parameter's unit) lies in its range.
bool param_in_range(const ParamDef &d, int64_t v);
// The range in the parameter's own syntax: "1..1024", "0 (one chunk) or
// 4K..1G", "0s..24h", "0 or more"; empty for non-numeric parameters.
std::string param_range_text(const ParamDef &d);
// "BC_CHUNK=1 is outside its range 0 (one chunk) or 4K..1G", for errors.
std::string param_range_error(const ParamDef &d, const std::string &value);

// One value per parameter, parsed and checked.
class ParamSet {
 public:
  ParamSet();  // all defaults
  // Reads every BC_* variable of the environment (once, at bc_init).
  static Status from_environment(ParamSet *out);
  // "KEY=VALUE;KEY=VALUE", for bc_comm_create_with.
  Status apply_overrides(const char *options);
  Status set(ParamId id, const std::string &text, const char *origin);

  int64_t get_int(ParamId id) const;  // Int, Bytes, Bool; Seconds in milliseconds
  const std::string &get_str(ParamId id) const;  // String, Enum (the text)
  bool is_set(ParamId id) const { return set_[static_cast<int>(id)]; }

  // One line per parameter: name = value (default) — doc.
  std::string describe() const;

 private:
  std::string text_[static_cast<int>(ParamId::Count)];
  int64_t value_[static_cast<int>(ParamId::Count)];
  bool set_[static_cast<int>(ParamId::Count)];
};

// Parses "64K", "1M", "3G", "100" into bytes; false on bad text.
bool parse_bytes(const std::string &text, int64_t *out);
// Parses "60", "60s", "500ms", "2m", "1h" into milliseconds; false on bad text.
bool parse_duration_ms(const std::string &text, int64_t *out);

}  // namespace bc
