// The one registry of BC_* parameters.
//
// Every knob the library has is a row of kParamDefs (params.cc) with its type,
// default and documentation; nothing else reads the environment. The process
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
  UcxWait,      // BC_UCX_WAIT
  UcxRndvThresh,// BC_UCX_RNDV_THRESH
  Chunk,        // BC_CHUNK
  PipelineDepth,// BC_PIPELINE_DEPTH
  Plan,         // BC_PLAN
  Model,        // BC_MODEL
  ModelFile,    // BC_MODEL_FILE
  CudaIpc,      // BC_CUDA_IPC
  CudaIpcCache, // BC_CUDA_IPC_CACHE
  CudaStagingChunk, // BC_CUDA_STAGING_CHUNK
  CudaStagingBufs,  // BC_CUDA_STAGING_BUFS
  ProgressThread,   // BC_PROGRESS_THREAD
  PmpiRoute,        // BC_PMPI_ROUTE
  Count
};

enum class ParamType { Int, Bytes, Seconds, Bool, String, Enum };

struct ParamDef {
  ParamId id;
  const char *name;
  ParamType type;
  const char *default_value;
  const char *choices;  // for Enum: '|'-separated; else nullptr
  const char *doc;
};

const ParamDef &param_def(ParamId id);
// Looks up a definition by its BC_ name; nullptr when unknown.
const ParamDef *param_find(const char *name);

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
// Parses "60", "60s", "500ms", "2m" into milliseconds; false on bad text.
bool parse_duration_ms(const std::string &text, int64_t *out);

}  // namespace bc
