// bc_bench's output on rank 0: the header (the run's settings, the plan for
// the largest size, every column defined), the table's lines and the JSON
// lines (--json). See bench_run.h.
#include <cstring>
#include <ctime>
#include <map>

#include "bench_run.h"

extern char **environ;

namespace bcbench {
namespace {

std::string fmt(const char *f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// One line of bc_comm_describe's text as header lines of at most ~150
// characters, broken at spaces (the cost model's line holds every fit, which
// scripts read: it must not be cut).
void print_wrapped(const std::string &line) {
  const size_t width = 150;
  size_t at = 0;
  bool first = true;
  while (at < line.size()) {
    size_t end = line.size();
    if (end - at > width) {
      const size_t space = line.rfind(' ', at + width);
      end = space != std::string::npos && space > at ? space : at + width;
    }
    std::printf("#   %s%s\n", first ? "" : "    ", line.substr(at, end - at).c_str());
    at = end < line.size() && line[end] == ' ' ? end + 1 : end;
    first = false;
  }
}

}  // namespace

// The header (rank 0 prints) and the table lines: one function for both, so
// that the column names always match the values.
std::string Bench::line(const Row *r) const {
  std::string out = r ? " " : "#";
  auto col = [&](int width, const char *name, const std::string &value) {
    char b[96];
    std::snprintf(b, sizeof b, " %*s", width, r ? value.c_str() : name);
    out += b;
  };
  auto bw = [&](int k) { return r ? div0(r->count * 1e-3 * elem_, r->avg[k]) : 0; };  // bytes/us/1e3 = GB/s
  const std::string wrong0 = o_.check && r ? std::to_string(r->wrong[kBC]) : "N/A";
  col(11, "size(B)", r ? std::to_string(r->size) : "");
  col(11, "count", r ? std::to_string(r->count) : "");
  if (o_.full) col(10, "min(us)", r ? fmt("%.2f", r->min[kBC]) : "");
  col(10, "avg(us)", r ? fmt("%.2f", r->avg[kBC]) : "");
  if (o_.full) col(10, "max(us)", r ? fmt("%.2f", r->max[kBC]) : "");
  if (o_.full) col(6, "iters", r ? std::to_string(r->iters[kBC]) : "");
  col(11, "algbw(GB/s)", fmt("%.3f", bw(kBC)));
  col(11, "busbw(GB/s)", fmt("%.3f", bw(kBC) * busbw_factor_));
  col(7, "#wrong", wrong0);
  if (o_.compare_mpi) {
    const std::string wrong1 = o_.check && r ? std::to_string(r->wrong[kMPI]) : "N/A";
    if (o_.full) col(12, "mpi_min(us)", r ? fmt("%.2f", r->min[kMPI]) : "");
    col(12, "mpi_avg(us)", r ? fmt("%.2f", r->avg[kMPI]) : "");
    if (o_.full) col(12, "mpi_max(us)", r ? fmt("%.2f", r->max[kMPI]) : "");
    if (o_.full) col(9, "mpi_iters", r ? std::to_string(r->iters[kMPI]) : "");
    col(11, "mpi_busbw", fmt("%.3f", bw(kMPI) * busbw_factor_));
    col(7, "mpi/bc", r ? fmt("%.2f", div0(r->avg[kMPI], r->avg[kBC])) : "");
    col(9, "mpi#wrong", wrong1);
  }
  for (int s = 0; s < nstages_; ++s) {
    const std::string name = "s" + std::to_string(s + 1) + "(us)";
    col(9, name.c_str(), r ? fmt("%.2f", r->stages[s]) : "");
  }
  if (o_.plan) {
    const bool model = r && r->predicted_us >= 0;
    col(10, "pred(us)", model ? fmt("%.2f", r->predicted_us) : "N/A");
    col(9, "pred/avg", model ? fmt("%.2f", div0(r->predicted_us, r->avg[kBC])) : "N/A");
    out += r ? "  " + r->plan : "  plan";
  }
  return out;
}

// "iters" at the top level is BlueConnect's count (the only one before the
// modes); each implementation's object has its own.
void Bench::write_json(FILE *f, const Row &r) const {
  auto impl = [&](int k) {
    const double algbw = div0(r.count * 1e-3 * elem_, r.avg[k]);
    std::fprintf(f, "{\"avg_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f,\"algbw_GBps\":%.6f,\"busbw_GBps\":%.6f,"
                 "\"wrong\":%s,\"iters\":%d", r.avg[k], r.min[k], r.max[k], algbw, algbw * busbw_factor_,
                 o_.check ? std::to_string(r.wrong[k]).c_str() : "null", r.iters[k]);
    if (o_.repeats > 1) {
      std::fprintf(f, ",\"rounds_us\":[");
      for (size_t i = 0; i < r.rounds[k].size(); ++i) std::fprintf(f, "%s%.3f", i ? "," : "", r.rounds[k][i]);
      std::fprintf(f, "]");
    }
    std::fprintf(f, "}");
  };
  std::fprintf(f, "{\"coll\":\"%s\",\"dtype\":\"%s\",\"op\":\"%s\",\"inplace\":%s,\"nranks\":%d,"
               "\"size\":%lld,\"count\":%lld,\"bytes\":%lld,\"warmup\":%d,\"iters\":%d,\"mode\":\"%s\","
               "\"app_us\":%s,\"bc\":",
               coll_name(o_.coll), bc_dtype_name(o_.dtype), o_.coll == Coll::Allgather ? "none" : bc_op_name(o_.op),
               o_.inplace ? "true" : "false", p_, (long long)r.size, (long long)r.count,
               (long long)(r.count * elem_), r.warmup, r.iters[kBC], mode_name(o_.mode),
               o_.mode == Mode::App ? std::to_string(o_.app_us).c_str() : "null");
  impl(kBC);
  if (o_.compare_mpi) {
    std::fprintf(f, ",\"mpi\":");
    impl(kMPI);
    std::fprintf(f, ",\"mpi_over_bc\":%.4f", div0(r.avg[kMPI], r.avg[kBC]));
  }
  if (o_.stages) {
    std::fprintf(f, ",\"stages_us\":[");
    for (size_t s = 0; s < r.stages.size(); ++s) std::fprintf(f, "%s%.3f", s ? "," : "", r.stages[s]);
    std::fprintf(f, "]");
  }
  if (o_.plan) std::fprintf(f, ",\"predicted_us\":%.3f,\"plan\":\"%s\"", r.predicted_us, r.plan.c_str());
  std::fprintf(f, "}\n");
  std::fflush(f);
}

// The timing mode and, with --compare mpi, how the MPI library's calls are
// placed relative to BlueConnect's.
void Bench::print_timing(const char *mpi_name) const {
  switch (o_.mode) {
    case Mode::BackToBack:
      std::printf("# timing: back-to-back: per size, each library alone, as a program calls it in a loop: warm-up,"
                  " a barrier,\n#   then one timed loop of N calls with nothing between them but a clock read;"
                  " time per call = the loop's\n#   time / N, then the max over ranks\n");
      break;
    case Mode::App:
      std::printf("# timing: app (--app %d): per size, each library alone: before every call %d us of compute"
                  " (busy-waiting on the\n#   monotonic clock: no sleep, no MPI call), then PMPI_Barrier;"
                  " only the call is timed\n", o_.app_us, o_.app_us);
      break;
    case Mode::Interleave:
      std::printf("# timing: interleave (--interleave): every call timed alone, after a barrier (a small"
                  " PMPI_Allreduce that also\n#   carries whether to stop)\n");
      break;
  }
  if (o_.repeats > 1)
    std::printf("# repeats: %d rounds per size, each with one timed loop %s; avg = the median over the rounds"
                " of each round's\n#   slowest-rank time per call (the JSON's rounds_us); min and max over every"
                " call\n", o_.repeats, o_.compare_mpi ? "of each library, which goes first alternating" : "");
  if (!o_.compare_mpi) return;
  char ver[MPI_MAX_LIBRARY_VERSION_STRING];
  int vlen = 0;
  MPI_Get_library_version(ver, &vlen);
  ver[std::strcspn(ver, ",\n")] = '\0';
  if (o_.mode == Mode::Interleave)
    std::printf("# compare: %s of %s on the same buffers, alternating with BlueConnect (each goes first on every "
                "other iteration), same iteration counts\n", mpi_name, ver);
  else
    std::printf("# compare: %s of %s on the same buffers, in its own loop %s\n", mpi_name, ver,
                o_.repeats > 1 ? "(BlueConnect's first in odd rounds)" : "after BlueConnect's");
}

void Bench::print_header() const {
  // Host names, gathered to rank 0.
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> names(rank_ == 0 ? static_cast<size_t>(p_) * MPI_MAX_PROCESSOR_NAME : 1);
  MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
             MPI_COMM_WORLD);
  if (rank_ != 0) return;
  std::map<std::string, int> per_host;
  for (int r = 0; r < p_; ++r) ++per_host[std::string(&names[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME])];
  int lo = p_, hi = 0;
  for (const auto &h : per_host) lo = std::min(lo, h.second), hi = std::max(hi, h.second);

  const char *cname = coll_name(o_.coll);
  const char *mpi_name = o_.coll == Coll::Allreduce       ? "MPI_Allreduce"
                         : o_.coll == Coll::ReduceScatter ? "MPI_Reduce_scatter_block"
                                                          : "MPI_Allgather";
  char date[64];
  const time_t now = time(nullptr);
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
  std::printf("# bc_bench: BlueConnect %s, %s\n# date: %s\n", BC_VERSION, cname, date);
  std::printf("# ranks: p = %d on %zu host(s), ", p_, per_host.size());
  if (lo == hi) std::printf("%d rank(s) per host\n", lo);
  else std::printf("%d to %d ranks per host (uneven)\n", lo, hi);
  std::string env;
  for (char **e = environ; *e; ++e)
    if (std::strncmp(*e, "BC_", 3) == 0) env += std::string(env.empty() ? "" : " ") + *e;
  std::printf("# BC_* options: environment: %s; --options: %s\n", env.empty() ? "(none)" : env.c_str(),
              o_.bc_options.empty() ? "(none)" : ("\"" + o_.bc_options + "\"").c_str());
  if (o_.via_mpi)
    std::printf("# via: BlueConnect through MPI_Allreduce etc. of %s (the PMPI preload), on its own duplicate of "
                "MPI_COMM_WORLD; the MPI library through PMPI_*\n", g_interposer.c_str());
  print_timing(mpi_name);
  const bool b2b = o_.mode == Mode::BackToBack;
  const char *checked = !o_.check ? "off (-c to check)"
                        : !b2b    ? "every timed call, bit for bit against a local reference"
                        : o_.inplace
                            ? "after each timed loop, one more (untimed) call on fresh input, bit for bit against\n"
                              "#   a local reference (in-place calls consume their input: the timed calls' own "
                              "results are not checked)"
                            : "after each timed loop, bit for bit against a local reference: the receive\n"
                              "#   buffer as the loop's last call left it (poisoned before the loop), and the send "
                              "buffer unchanged";
  std::printf("# data: %s, op %s, %s; check: %s\n", bc_dtype_name(o_.dtype),
              o_.coll == Coll::Allgather ? "none" : bc_op_name(o_.op), o_.inplace ? "in-place" : "out-of-place",
              checked);
  std::printf("#   values: %s\n", data_.describe());
  std::printf("# sizes: %s to %s bytes, doubling; warm-up: ", format_bytes(o_.min_bytes).c_str(),
              format_bytes(o_.max_bytes).c_str());
  if (o_.warmup >= 0) std::printf("%d", o_.warmup);
  else std::printf("auto (5 up to %s, 2 above%s)", format_bytes(kWarmupBigBytes).c_str(),
                   o_.via_mpi && preload_probe_calls(1) > 0
                       ? ", plus, before BlueConnect's first loop of each size, the learned route's"
                         " probe calls through the preload" : "");
  if (o_.iters) std::printf("; iterations: %d per library\n", o_.iters);
  else if (o_.mode == Mode::Interleave)
    std::printf("; iterations: auto (until the timed calls%s add up to %.1f s; %d to %d)\n",
                o_.compare_mpi ? " of both" : "", kAutoSeconds, kAutoMinIters, kAutoMaxIters);
  else
    std::printf("; iterations: auto, per library,\n#   fixed before its timed loop: %.1f s / the time per "
                "call of its warm-up after the first call (max over ranks), %d to %d\n",
                kAutoSeconds, kAutoMinIters, kAutoMaxIters);

  // The plan for the largest size, without the per-step lines.
  const int64_t count = shape_of(o_.max_bytes).total;
  size_t needed = 0;
  std::string text;
  if (bc_comm_describe(comm_, count, o_.dtype, nullptr, 0, &needed) == BC_OK) {
    text.resize(needed);
    bc_comm_describe(comm_, count, o_.dtype, &text[0], needed, &needed);
    text.resize(std::strlen(text.c_str()));
  }
  std::printf("# plan for the largest size (bc_comm_describe, all-reduce of %lld elements, rank 0):\n",
              (long long)count);
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string l = text.substr(at, end - at);
    if (l.compare(0, 7, "  step ") != 0) print_wrapped(l);
    at = end + 1;
  }

  const bool ar = o_.coll == Coll::Allreduce;
  std::printf("# columns:\n");
  if (ar) std::printf("#   size      bytes of the vector reduced\n");
  else std::printf("#   size      bytes of the full buffer, p blocks of size/p (the %s)\n",
                   o_.coll == Coll::ReduceScatter ? "input" : "output");
  std::printf("#   count     elements in it: size / %zu floored%s\n", elem_, ar ? "" : ", then to a multiple of p");
  std::printf("#   avg       each rank's %s, then the max over ranks (us)\n",
              b2b ? "time of the timed loop / its N calls" : "mean time per call");
  if (o_.full) {
    std::printf("#   min, max  each rank's fastest (slowest) call%s, then the max over ranks (us)\n",
                b2b ? " (from the clock reads between calls)" : "");
    std::printf("#   iters     timed calls per rank%s\n", o_.compare_mpi ? " (BlueConnect; mpi_iters: MPI)" : "");
  }
  std::printf("#   algbw     count * %zu bytes / avg, GB/s = 1e9 B/s\n", elem_);
  std::printf("#   busbw     algbw * %s = algbw * %.4f (nccl-tests' bus bandwidth)\n", ar ? "2(p-1)/p" : "(p-1)/p",
              busbw_factor_);
  std::printf("#   #wrong    %s%s\n",
              o_.check ? "wrong output elements + changed input elements + damaged guard zones, summed over ranks "
                         "and checks"
                       : "N/A: no check without -c",
              !o_.check ? "" : b2b ? " (one per timed loop)" : " (one per timed call)");
  if (o_.compare_mpi)
    std::printf("#   mpi_*     the same for %s; mpi/bc = mpi_avg / avg (> 1: BlueConnect faster)\n", mpi_name);
  if (o_.stages)
    std::printf(nstages_ ? "#   sK        time in hierarchy stage K (its reduce-scatter and all-gather steps): "
                           "each rank's mean, then the max over ranks (us);\n#             read after every timed "
                           "call (bc_comm_stage_times: local, no communication)\n"
                         : "#   (--stages: the plan has no stages here, p = 1)\n");
  if (o_.plan)
    std::printf("#   pred      the cost model's predicted time for the plan chosen (BC_MODEL; N/A when off);\n"
                "#   pred/avg  prediction / measured avg; plan: the choice, in BC_PLAN's terms\n");
  std::printf("%s\n", line(nullptr).c_str());
  std::fflush(stdout);
}

}  // namespace bcbench
