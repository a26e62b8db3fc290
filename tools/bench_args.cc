#include "bench_args.h"

#include <cctype>
#include <cerrno>
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace bcbench {
namespace {

bool is_float_dtype(bc_dtype_t t) { return t == BC_FLOAT32 || t == BC_FLOAT64 || t == BC_FLOAT16 || t == BC_BFLOAT16; }

bool parse_dtype(const std::string &s, bc_dtype_t *out) {
  static const struct { const char *name; bc_dtype_t t; } kAliases[] = {
      {"float", BC_FLOAT32}, {"f32", BC_FLOAT32}, {"double", BC_FLOAT64}, {"f64", BC_FLOAT64},
      {"half", BC_FLOAT16},  {"f16", BC_FLOAT16}, {"bf16", BC_BFLOAT16},  {"char", BC_INT8},
      {"int", BC_INT32},     {"long", BC_INT64}};
  for (int t = 0; t < BC_DTYPE_COUNT; ++t)
    if (s == bc_dtype_name(static_cast<bc_dtype_t>(t))) return *out = static_cast<bc_dtype_t>(t), true;
  for (const auto &a : kAliases)
    if (s == a.name) return *out = a.t, true;
  return false;
}

bool parse_op(const std::string &s, bc_op_t *out) {
  for (int o = 0; o < BC_OP_COUNT; ++o)
    if (s == bc_op_name(static_cast<bc_op_t>(o))) return *out = static_cast<bc_op_t>(o), true;
  return false;
}

bool parse_int(const std::string &s, int lo, int *out) {
  if (s.empty()) return false;
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno || *end || v < lo || v > INT_MAX) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_range(const std::string &s, int64_t *lo, int64_t *hi) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos) return parse_bytes(s, lo) && (*hi = *lo, true);
  const std::string a = s.substr(0, colon), b = s.substr(colon + 1);
  if (!a.empty() && !parse_bytes(a, lo)) return false;
  if (!b.empty() && !parse_bytes(b, hi)) return false;
  return true;
}

}  // namespace

const char *coll_name(Coll c) {
  switch (c) {
    case Coll::Allreduce: return "allreduce";
    case Coll::ReduceScatter: return "reduce_scatter";
    case Coll::Allgather: return "allgather";
  }
  return "?";
}

const char *mode_name(Mode m) {
  switch (m) {
    case Mode::BackToBack: return "back-to-back";
    case Mode::Interleave: return "interleave";
    case Mode::App: return "app";
  }
  return "?";
}

int auto_iters(double seconds_per_call) {
  if (seconds_per_call <= 0) return kAutoMaxIters;  // nothing measurable (count 0)
  const double n = std::ceil(kAutoSeconds / seconds_per_call);  // compared as double: no int overflow
  return static_cast<int>(std::max<double>(kAutoMinIters, std::min<double>(kAutoMaxIters, n)));
}

bool parse_bytes(const std::string &text, int64_t *out) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 15) return false;
  int64_t v = std::strtoll(text.substr(0, i).c_str(), nullptr, 10);
  std::string suffix = text.substr(i);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  int shift = 0;
  if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      default: return false;
    }
  } else if (!suffix.empty()) {
    return false;
  }
  if (v > (INT64_C(1) << 40) >> shift) return false;  // at most 1 TiB
  *out = v << shift;
  return true;
}

std::string format_bytes(int64_t b) {
  static const char *kUnits[] = {"", "K", "M", "G"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) b /= 1024, ++u;
  return std::to_string(b) + kUnits[u];
}

bool parse_args(int argc, char **argv, Options *opt, std::string *err) {
  bool sizes_given = false;
  const char *mode_option = nullptr;  // the option that chose a mode: only one may
  auto choose_mode = [&](const char *option, Mode m) {
    if (mode_option && opt->mode != m) {
      *err = std::string(option) + " and " + mode_option + " are different timing modes; choose one";
      return false;
    }
    mode_option = option;
    opt->mode = m;
    return true;
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], val;
    bool has_val = false;
    const size_t eq = arg.find('=');
    if (arg.compare(0, 2, "--") == 0 && eq != std::string::npos) {  // --name=value
      val = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_val = true;
    }
    auto value = [&](const char *what) -> bool {
      if (has_val) return true;
      if (i + 1 >= argc) {
        *err = "option " + arg + " needs a value (" + what + ")";
        return false;
      }
      val = argv[++i];
      return true;
    };
    auto bad = [&](const std::string &why) {
      *err = "bad value '" + val + "' for " + arg + ": " + why;
      return false;
    };
    if (arg == "-h" || arg == "--help") {
      opt->help = true;
    } else if (arg == "--coll") {
      if (!value("allreduce|reduce_scatter|allgather")) return false;
      if (val == "allreduce") opt->coll = Coll::Allreduce;
      else if (val == "reduce_scatter") opt->coll = Coll::ReduceScatter;
      else if (val == "allgather") opt->coll = Coll::Allgather;
      else return bad("expected allreduce, reduce_scatter or allgather");
    } else if (arg == "-m" || arg == "--msg-size") {
      if (!value("MIN:MAX")) return false;
      if (!parse_range(val, &opt->min_bytes, &opt->max_bytes))
        return bad("expected MIN:MAX or SIZE in bytes, suffixes K M G (powers of 1024), at most 1T");
      sizes_given = true;
    } else if (arg == "-i" || arg == "--iters") {
      if (!value("a count")) return false;
      if (!parse_int(val, 1, &opt->iters)) return bad("expected a positive integer");
    } else if (arg == "-x" || arg == "--warmup") {
      if (!value("a count")) return false;
      if (val.compare(0, 3, "BC_") == 0)
        return bad("-x is the warm-up count here; pass BlueConnect parameters with --options \"" + val +
                   "\", or as mpirun -x " + val + " before -np");
      if (!parse_int(val, 0, &opt->warmup)) return bad("expected a non-negative integer");
    } else if (arg == "-c" || arg == "--check") {
      opt->check = true;
    } else if (arg == "-t" || arg == "--dtype") {
      if (!value("a datatype")) return false;
      if (!parse_dtype(val, &opt->dtype))
        return bad("expected float32 float64 float16 bfloat16 int8 uint8 int32 uint32 int64 uint64");
    } else if (arg == "--op") {
      if (!value("an operation")) return false;
      if (!parse_op(val, &opt->op)) return bad("expected sum prod min max avg band bor bxor");
    } else if (arg == "--mem") {
      if (!value("host or cuda")) return false;
      if (val != "host" && val != "cuda") return bad("expected host or cuda");
      opt->mem_cuda = val == "cuda";
    } else if (arg == "--inplace") {
      opt->inplace = true;
    } else if (arg == "--json") {
      if (!value("a file name")) return false;
      if (val.empty()) return bad("empty file name");
      opt->json = val;
    } else if (arg == "--compare") {
      if (!value("mpi")) return false;
      if (val != "mpi") return bad("only 'mpi' is supported");
      opt->compare_mpi = true;
    } else if (arg == "--interleave") {
      if (!choose_mode("--interleave", Mode::Interleave)) return false;
    } else if (arg == "--app") {
      if (!value("microseconds of compute per call")) return false;
      if (!parse_int(val, 0, &opt->app_us) || opt->app_us > kMaxAppUs)
        return bad("expected microseconds, an integer from 0 to " + std::to_string(kMaxAppUs));
      if (!choose_mode("--app", Mode::App)) return false;
    } else if (arg == "-r" || arg == "--repeats") {
      if (!value("a count of rounds")) return false;
      if (!parse_int(val, 1, &opt->repeats) || opt->repeats > kMaxRepeats)
        return bad("expected rounds per size, an integer from 1 to " + std::to_string(kMaxRepeats));
    } else if (arg == "--via") {
      if (!value("mpi")) return false;
      if (val != "mpi") return bad("only 'mpi' is supported");
      opt->via_mpi = true;
    } else if (arg == "--stages") {
      opt->stages = true;
    } else if (arg == "--plan") {
      opt->plan = true;
    } else if (arg == "-f" || arg == "--full") {
      opt->full = true;
    } else if (arg == "--options") {
      if (!value("\"BC_NAME=value;...\"")) return false;
      opt->bc_options = val;
    } else {
      *err = "unknown argument '" + std::string(argv[i]) + "'";
      if (arg.size() > 3 && arg.compare(0, 3, "BC_") == 0)
        *err += " (pass BlueConnect parameters with --options \"" + arg + "\", or as mpirun -x " + arg + ")";
      return false;
    }
  }
  if (opt->help) return true;
  if (sizes_given && opt->min_bytes > opt->max_bytes) {
    *err = "-m: MIN (" + std::to_string(opt->min_bytes) + ") is larger than MAX (" +
           std::to_string(opt->max_bytes) + ")";
    return false;
  }
  const bool reduces = opt->coll != Coll::Allgather;
  if (reduces && opt->op == BC_AVG && !is_float_dtype(opt->dtype)) {
    *err = "--op avg needs a floating dtype, not " + std::string(bc_dtype_name(opt->dtype));
    return false;
  }
  if (reduces && (opt->op == BC_BAND || opt->op == BC_BOR || opt->op == BC_BXOR) && is_float_dtype(opt->dtype)) {
    *err = "--op " + std::string(bc_op_name(opt->op)) + " needs an integer dtype, not " + bc_dtype_name(opt->dtype);
    return false;
  }
  if (opt->repeats > 1 && opt->mode == Mode::Interleave) {
    *err = "--repeats with --interleave: interleaving alternates the libraries call by call already";
    return false;
  }
  if (opt->via_mpi && opt->stages) {
    *err = "--stages reads BlueConnect's API communicator; it cannot go with --via mpi";
    return false;
  }
  if (opt->mem_cuda && (opt->compare_mpi || opt->via_mpi)) {
    *err = "--mem cuda with --compare/--via mpi: the MPI underneath is not assumed CUDA-aware";
    return false;
  }
  if (opt->compare_mpi || opt->via_mpi) {
    if (opt->dtype == BC_FLOAT16 || opt->dtype == BC_BFLOAT16) {
      *err = "--compare/--via mpi: MPI has no " + std::string(bc_dtype_name(opt->dtype)) + " type; use another -t";
      return false;
    }
    if (reduces && opt->op == BC_AVG) {
      *err = "--compare/--via mpi: MPI has no avg operation; use --op sum";
      return false;
    }
    if (opt->max_bytes / static_cast<int64_t>(bc_dtype_size(opt->dtype)) > INT_MAX) {
      *err = "--compare/--via mpi: counts above INT_MAX do not fit MPI's int count; lower -m MAX";
      return false;
    }
  }
  return true;
}

const char *usage_text() {
  return
      "Usage: mpirun -np N bc_bench [options]\n"
      "Times BlueConnect collectives over a range of sizes, OSU/nccl-tests style.\n"
      "\n"
      "Timing (the header states the mode; the JSON records it as \"mode\"):\n"
      "  (default)         back-to-back, as nccl-tests and as a program calls a library in a\n"
      "                    loop: per size, each library alone: warm-up, a barrier, then one\n"
      "                    loop of N calls with nothing between them; time per call = the\n"
      "                    loop's time / N on the slowest rank\n"
      "      --interleave  every call timed alone after a barrier; with --compare mpi the two\n"
      "                    libraries alternate call by call (the timing of earlier versions;\n"
      "                    it hides slowdowns that need calls to follow each other)\n"
      "      --app USEC    an application step: before each call USEC microseconds of compute\n"
      "                    (busy-waiting on the monotonic clock) and an MPI barrier\n"
      "                    (PMPI_Barrier); only the call is timed; each library alone\n"
      "\n"
      "Options:\n"
      "  --coll C          allreduce (default), reduce_scatter or allgather. For reduce_scatter\n"
      "                    and allgather a size is the full buffer: p blocks of size/p bytes.\n"
      "  -m, --msg-size R  sizes in bytes: MIN:MAX (doubling from MIN), or one SIZE; suffixes\n"
      "                    K M G are powers of 1024 (default 1K:16M). Any size is allowed:\n"
      "                    count = size / sizeof(dtype) floored (and a multiple of p for\n"
      "                    reduce_scatter/allgather); a count of 0 gives a row too.\n"
      "  -i, --iters N     timed calls per size and library. Default auto: as many as take\n"
      "                    0.2 s, at least 3 and at most 10000, from the time per call of the\n"
      "                    warm-up (the slowest rank's), fixed before the timed loop;\n"
      "                    --interleave: until the timed calls add up to 0.2 s\n"
      "  -r, --repeats R   rounds per size (back-to-back and --app; default 1): each round\n"
      "                    times one loop of each library, which goes first alternating;\n"
      "                    avg is the median of the rounds' times per call (slowest rank),\n"
      "                    min and max over every call of every round\n"
      "  -x, --warmup N    untimed calls first (default 5 up to 1M, 2 above)\n"
      "  -c, --check       exact-data check: fills the #wrong column, exits 1 when any result\n"
      "                    is wrong. Back-to-back: after each timed loop, the results of its\n"
      "                    last call (--inplace: of one more, untimed, call on fresh input);\n"
      "                    --interleave and --app: every timed call\n"
      "  -t, --dtype T     float32 (default) float64 float16 bfloat16 int8 uint8 int32 uint32\n"
      "                    int64 uint64\n"
      "      --op OP       sum (default) prod min max avg band bor bxor (ignored by allgather)\n"
      "      --inplace     in-place calls (BC_IN_PLACE / MPI_IN_PLACE)\n"
      "      --mem M       host (default) or cuda: device buffers (CUDA builds; -c checks\n"
      "                    through host copies, outside the timing)\n"
      "      --json FILE   also write one JSON object per size to FILE (JSON Lines)\n"
      "      --compare mpi also time the MPI library's own collective on the same buffers, in\n"
      "                    its own loop after BlueConnect's (--interleave: alternating call by\n"
      "                    call), and add its latency, busbw and the ratio mpi/bc\n"
      "      --via mpi     call BlueConnect through MPI_Allreduce (etc.), as an application does\n"
      "                    under the PMPI preload (LD_PRELOAD=libblueconnect_mpi.so; checked),\n"
      "                    and the MPI library's own collective through PMPI_Allreduce\n"
      "      --stages      add the time of each hierarchy stage of BlueConnect's plan\n"
      "      --plan        add the cost model's predicted time and the plan chosen for each size; where\n"
      "                    BC_PLAN, BC_ALGO, BC_CHUNK or BC_PIPELINE_DEPTH pin the plan (environment or\n"
      "                    --options), all-reduce: then the same sizes on a communicator without the pins,\n"
      "                    which learns its plan, and per size whether the pinned plan was slower (> 5 %)\n"
      "  -f, --full        full statistics: min, avg, max latency and iterations\n"
      "      --options S   BlueConnect parameters for the communicator, e.g. \"BC_TOPO=2x2;BC_ALGO=ring\"\n"
      "                    (BC_* environment variables apply too: mpirun -x BC_TOPO=2x2 ...)\n"
      "  -h, --help        this text\n"
      "\n"
      "Exit status: 0 success; 1 a wrong result or a BlueConnect error; 2 a bad argument.\n";
}

}  // namespace bcbench
