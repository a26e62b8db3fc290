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

// How calls are timed (bc_bench's header spells each out).
//   BackToBack: per size, each library alone: one loop of calls with nothing
//     between them, timed as a whole, as a program calls a library in a loop.
//   Interleave: every call timed alone after a barrier; with --compare mpi the
//     libraries alternate call by call (the timing before back-to-back).
//   App: each library alone; before each call a fixed compute time and a
//     barrier, as an application step; every call timed alone.
enum class Mode { BackToBack = 0, Interleave, App };
const char *mode_name(Mode m);  // "back-to-back", "interleave", "app"

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
  Mode mode = Mode::BackToBack;
  int app_us = 0;  // --app: microseconds of compute before each call
  // Back-to-back and --app: rounds per size, each with one timed loop of each
  // library (which goes first alternates); the reported time is the median
  // of the rounds' times, so that one disturbed loop does not decide.
  int repeats = 1;
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
// 10000: OSU's count for small messages. At 200 (until 2026-12-03) a round
// of a 1 us call lasted 0.2 ms, and one 30-66 us preemption moved its mean by
// a tenth: np 2 read 0.75 where both loops were Open MPI's.
constexpr int kAutoMaxIters = 10000;
constexpr int64_t kWarmupBigBytes = 1 << 20;  // warm-up 5 up to this size, 2 above
inline int auto_warmup(int64_t bytes) { return bytes <= kWarmupBigBytes ? 5 : 2; }
// Back-to-back and app modes fix the count before the timed loop, from the
// probed time of one call: enough calls for kAutoSeconds, within the bounds.
int auto_iters(double seconds_per_call);
constexpr int kMaxRepeats = 99;
constexpr int kMaxAppUs = 10000000;  // --app: 10 s per step at most (more is a typo)

// Fills *opt; on a bad argument returns false with a one-line reason in *err.
bool parse_args(int argc, char **argv, Options *opt, std::string *err);
// "4K" -> 4096; K, M, G are powers of 1024, case-insensitive, optional trailing B.
bool parse_bytes(const std::string &text, int64_t *out);
// "16777216" -> "16M" when exact, else the number.
std::string format_bytes(int64_t bytes);
const char *usage_text();

}  // namespace bcbench
