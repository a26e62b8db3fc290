// bc_bench's command line: the options, their parsing and the usage text.
// Parsing is pure (no MPI), so every rank parses the same argv alike and all
// ranks agree on whether to run, print help, or fail.
#pragma once

#include <cstdint>
#include <string>

#include "blueconnect.h"

namespace bcbench {

enum class Coll { Allreduce = 0, ReduceScatter, Allgather };
const char *coll_name(Coll c);

struct Options {
  Coll coll = Coll::Allreduce;
  int64_t min_bytes = 1024;
  int64_t max_bytes = 16 << 20;
  int iters = 0;    // 0: auto
  int warmup = -1;  // -1: auto
  bool check = false;
  bc_dtype_t dtype = BC_FLOAT32;
  bc_op_t op = BC_SUM;
  bool inplace = false;
  std::string json;
  bool compare_mpi = false;
  bool via_mpi = false;  // BlueConnect through MPI_Allreduce (the PMPI preload); MPI through PMPI_*
  bool stages = false;
  bool plan = false;
  bool full = false;
  bool mem_cuda = false;  // --mem cuda: device buffers (CUDA builds)
  std::string bc_options;  // for bc_comm_create_with
  bool help = false;
};

// Defaults of the automatic modes, shared with the header text.
constexpr double kAutoSeconds = 0.2;  // measured time per size and implementation set
constexpr int kAutoMinIters = 3;
constexpr int kAutoMaxIters = 200;
constexpr int64_t kWarmupBigBytes = 1 << 20;  // warm-up 5 up to this size, 2 above
inline int auto_warmup(int64_t bytes) { return bytes <= kWarmupBigBytes ? 5 : 2; }

// Fills *opt; on a bad argument returns false with a one-line reason in *err.
bool parse_args(int argc, char **argv, Options *opt, std::string *err);
// "4K" -> 4096; K, M, G are powers of 1024, case-insensitive, optional trailing B.
bool parse_bytes(const std::string &text, int64_t *out);
// "16777216" -> "16M" when exact, else the number.
std::string format_bytes(int64_t bytes);
const char *usage_text();

}  // namespace bcbench
