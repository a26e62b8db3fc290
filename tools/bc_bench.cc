// bc_bench: times BlueConnect's collectives over a range of sizes, in the
// manner of the OSU micro-benchmarks and nccl-tests, optionally against the MPI
// library's own collective on the same buffers. `bc_bench --help` lists the
// options; the header it prints defines every column.
//
// Timing: every call is preceded by a small MPI_Allreduce over all ranks. It is
// the barrier; it carries "some rank failed", so that all ranks stop together
// instead of hanging; and it carries rank 0's decision to stop iterating, so
// that every rank runs the same number of iterations. Only the collective call
// is timed: preparing the buffers and checking the results are outside.
#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "bc_config.h"
#include "bench_args.h"
#include "bench_data.h"
#include "blueconnect.h"
#if BC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

extern char **environ;

namespace {
using namespace bcbench;

// --mem cuda: device copies of the send and receive buffers. The host
// GuardedBufs stay the reference: they are uploaded before a call and the
// results downloaded for the check, outside the timed region.
class DevMirror {
 public:
  ~DevMirror() { release(); }
  bool allocate(size_t bytes) {
#if BC_HAVE_CUDA
    if (bytes <= cap_ && p_) return true;
    release();
    cap_ = bytes;
    return cudaMalloc(&p_, bytes ? bytes : 1) == cudaSuccess;
#else
    (void)bytes;
    return false;
#endif
  }
  void *data() { return p_; }
  bool upload(const void *h, size_t bytes) {
#if BC_HAVE_CUDA
    return cudaMemcpy(p_, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
#else
    (void)h, (void)bytes;
    return false;
#endif
  }
  bool download(void *h, size_t bytes) {
#if BC_HAVE_CUDA
    return cudaMemcpy(h, p_, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
#else
    (void)h, (void)bytes;
    return false;
#endif
  }

 private:
  void release() {
#if BC_HAVE_CUDA
    if (p_) cudaFree(p_);
#endif
    p_ = nullptr;
    cap_ = 0;
  }
  void *p_ = nullptr;
  size_t cap_ = 0;
};

constexpr int kBC = 0, kMPI = 1;
constexpr int kMaxStages = 32;
constexpr double kProgressSeconds = 2.0;

struct Stat {
  double sum = 0, min = 0, max = 0;
  int64_t n = 0, wrong = 0;
  void add(double t) {
    min = n ? std::min(min, t) : t;
    max = std::max(max, t);
    sum += t;
    ++n;
  }
  double mean() const { return n ? sum / n : 0; }
};

// One size, reduced over the ranks (valid on rank 0).
struct Row {
  int64_t size = 0, count = 0;
  int warmup = 0, iters = 0;
  double avg[2] = {0, 0}, min[2] = {0, 0}, max[2] = {0, 0};
  int64_t wrong[2] = {0, 0};
  std::vector<double> stages;
  double predicted_us = -1;  // --plan: the cost model's prediction (-1: model off)
  std::string plan;          // --plan: the choice, BC_PLAN-style
};

// Element counts of one size, for this rank.
struct Shape {
  int64_t total = 0;                 // elements of the full buffer
  int64_t call = 0;                  // the count argument of the call
  int64_t in_first = 0, in_n = 0;    // this rank's input: global elements
  int64_t in_at = 0;                 // in-place: where the input sits in recv
  int64_t out_first = 0, out_n = 0;  // the expected result, at recv[0]
  int64_t send_n = 0, recv_n = 0;
};

double div0(double a, double b) { return b > 0 ? a / b : 0; }

std::string fmt(const char *f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// --via mpi: the file whose MPI_Allreduce the program calls, when that is not
// the MPI library's own (Open MPI's MPI_Allreduce is an alias of PMPI_Allreduce).
std::string g_interposer;

bool find_interposer() {
  void *mpi = dlsym(RTLD_DEFAULT, "MPI_Allreduce"), *pmpi = dlsym(RTLD_DEFAULT, "PMPI_Allreduce");
  Dl_info info;
  if (!mpi || mpi == pmpi || !dladdr(mpi, &info) || !info.dli_fname) return false;
  g_interposer = info.dli_fname;
  return true;
}

class Bench {
 public:
  Bench(const Options &o, bc_comm_t comm, int rank, int p)
      : o_(o), comm_(comm), rank_(rank), p_(p), elem_(bc_dtype_size(o.dtype)),
        data_(o.dtype, o.op, p, o.coll == Coll::Allgather) {
    MPI_Comm_dup(MPI_COMM_WORLD, &mpi_comm_);
    if (o.via_mpi) MPI_Comm_dup(MPI_COMM_WORLD, &bc_mpi_comm_);
    busbw_factor_ = o.coll == Coll::Allreduce ? 2.0 * (p - 1) / p : 1.0 * (p - 1) / p;
  }
  ~Bench() {
    MPI_Comm_free(&mpi_comm_);
    if (bc_mpi_comm_ != MPI_COMM_NULL) MPI_Comm_free(&bc_mpi_comm_);
  }

  // 0: all right; 1: a wrong result or an error.
  int run(FILE *json) {
    if (o_.stages && !probe_stages()) return 1;
    print_header();
    int64_t wrong = 0;
    for (int64_t s = o_.min_bytes; s <= o_.max_bytes; s = s ? s * 2 : 1) {
      const double t0 = MPI_Wtime();
      Row row;
      if (!run_size(s, &row)) return 1;
      if (rank_ == 0) {
        std::printf("%s\n", line(&row).c_str());
        std::fflush(stdout);
        if (json) write_json(json, row);
        if (MPI_Wtime() - t0 > kProgressSeconds)
          std::fprintf(stderr, "# size %s done (%.1f s)\n", format_bytes(s).c_str(), MPI_Wtime() - t0);
        wrong += row.wrong[kBC] + row.wrong[kMPI];
      }
    }
    MPI_Bcast(&wrong, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rank_ == 0 && o_.check)
      std::printf("# %s\n", wrong ? "FAILED: some results were wrong (see #wrong)" : "all results correct");
    return wrong ? 1 : 0;
  }

 private:
  Shape shape_of(int64_t bytes) const {
    Shape s;
    const int64_t n = bytes / static_cast<int64_t>(elem_);
    if (o_.coll == Coll::Allreduce) {
      s.total = s.call = s.in_n = s.out_n = s.recv_n = n;
      s.send_n = o_.inplace ? 0 : n;
      return s;
    }
    const int64_t b = n / p_;
    s.total = b * p_;
    s.call = b;
    if (o_.coll == Coll::ReduceScatter) {
      s.in_n = s.total;
      s.out_first = rank_ * b;
      s.out_n = b;
      s.send_n = o_.inplace ? 0 : s.total;
      s.recv_n = o_.inplace ? s.total : b;
    } else {
      s.in_first = s.in_at = rank_ * b;
      s.in_n = b;
      s.out_n = s.recv_n = s.total;
      s.send_n = o_.inplace ? 0 : b;
    }
    return s;
  }

  // True on every rank when true on every rank.
  static bool everywhere(bool ok) {
    int v = ok ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return v != 0;
  }

  bool report(const char *what, bc_status_t st) {
    if (st == BC_OK) return true;
    std::fprintf(stderr, "bc_bench: rank %d: %s failed: %s: %s\n", rank_, what, bc_strerror(st), bc_last_error());
    return false;
  }

  // The number of stages, from one small all-reduce.
  bool probe_stages() {
    std::vector<float> v(static_cast<size_t>(p_), 1.0f);
    int ns = 0;
    const bool ok = report("bc_allreduce", bc_allreduce(BC_IN_PLACE, v.data(), p_, BC_FLOAT32, BC_SUM, comm_)) &&
                    report("bc_comm_stage_times", bc_comm_stage_times(comm_, nullptr, 0, &ns));
    nstages_ = std::min(ns, kMaxStages);
    return everywhere(ok);
  }

  bool run_size(int64_t bytes, Row *row) {
    sh_ = shape_of(bytes);
    const bool mem = send_.allocate(sh_.send_n * elem_) && recv_.allocate(sh_.recv_n * elem_) &&
                     input_.allocate(sh_.in_n * elem_) && ref_.allocate(o_.check ? sh_.out_n * elem_ : 0);
    bool dmem = true;
    if (o_.mem_cuda) dmem = dsend_.allocate(sh_.send_n * elem_) && drecv_.allocate(sh_.recv_n * elem_);
    if (!mem || !dmem)
      std::fprintf(stderr, "bc_bench: rank %d: out of %s memory for size %lld\n", rank_, mem ? "device" : "host",
                   (long long)bytes);
    if (!everywhere(mem && dmem)) return false;
    data_.fill_input(input_.data(), rank_, sh_.in_first, sh_.in_n);
    if (!o_.inplace) std::memcpy(send_.data(), input_.data(), sh_.send_n * elem_);
    if (o_.mem_cuda && !o_.inplace && !dsend_.upload(send_.data(), sh_.send_n * elem_)) failed_ = true;
    if (o_.check) data_.fill_expected(ref_.data(), sh_.out_first, sh_.out_n, sh_.call);

    Stat st[2];
    stage_sum_.assign(nstages_, 0.0);
    const int nimpl = o_.compare_mpi ? 2 : 1;
    row->warmup = o_.warmup >= 0 ? o_.warmup : auto_warmup(bytes);
    for (int w = 0; w < row->warmup; ++w)
      for (int k = 0; k < nimpl; ++k)
        if (call((w % 2 == 0) ? k : nimpl - 1 - k, false, 0, st) < 0) return false;
    double measured = 0;  // rank 0's timed seconds, for the automatic stop
    bool stopped = false;
    for (int it = 0; !stopped; ++it) {
      int stop = 0;
      if (rank_ == 0)
        stop = o_.iters ? it >= o_.iters
                        : it >= kAutoMaxIters || (it >= kAutoMinIters && measured >= kAutoSeconds);
      for (int j = 0; j < nimpl && !stopped; ++j) {
        const int k = (it % 2 == 0) ? j : nimpl - 1 - j;  // alternate which goes first
        const int r = call(k, true, j == 0 ? stop : 0, st);
        if (r < 0) return false;
        stopped = r > 0;
        measured += last_seconds_;
      }
    }

    // Reduce over the ranks: latencies and stage times by max, wrong counts by sum.
    std::vector<double> loc = {st[0].mean(), st[0].min, st[0].max, st[1].mean(), st[1].min, st[1].max};
    for (double s : stage_sum_) loc.push_back(div0(s, static_cast<double>(st[0].n)));
    std::vector<double> glob(loc.size());
    MPI_Reduce(loc.data(), glob.data(), static_cast<int>(loc.size()), MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    int64_t wl[2] = {st[0].wrong, st[1].wrong}, wg[2] = {0, 0};
    MPI_Reduce(wl, wg, 2, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    row->size = bytes;
    row->count = sh_.total;
    row->iters = static_cast<int>(st[0].n);
    for (int k = 0; k < 2; ++k) {
      row->avg[k] = glob[3 * k] * 1e6;
      row->min[k] = glob[3 * k + 1] * 1e6;
      row->max[k] = glob[3 * k + 2] * 1e6;
      row->wrong[k] = wg[k];
    }
    for (int s = 0; s < nstages_; ++s) row->stages.push_back(glob[6 + s] * 1e6);
    if (o_.plan) {
      char text[256] = "";
      double predicted = -1;
      if (bc_comm_plan_for(comm_, sh_.total * elem_, text, sizeof text, &predicted) == BC_OK) {
        row->plan = text;
        row->predicted_us = predicted >= 0 ? predicted * 1e6 : -1;
      }
    }
    return true;
  }

  // Prepares the buffers, synchronises, and runs one call of implementation k.
  // Returns -1 when some rank failed, 1 when rank 0 said stop, 0 otherwise.
  int call(int k, bool timed, int stop, Stat *st) {
    last_seconds_ = 0;
    unsigned char *recv = static_cast<unsigned char *>(recv_.data());
    if (o_.check) recv_.poison(poison_ ^= 0x97);  // alternates 0xCD and 0x5A
    if (o_.inplace) std::memcpy(recv + sh_.in_at * elem_, input_.data(), sh_.in_n * elem_);
    if (o_.mem_cuda && (o_.check || o_.inplace) && !drecv_.upload(recv, sh_.recv_n * elem_)) failed_ = true;
    int flags[2] = {failed_ ? 1 : 0, stop};
    // PMPI_: under the preload this sync is not ours to measure or to serve.
    PMPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (flags[0]) return -1;
    if (flags[1]) return 1;

    const double t0 = MPI_Wtime();
    bc_status_t status = BC_OK;
    if (k == kBC) status = call_bc();
    else call_mpi();
    const double t = MPI_Wtime() - t0;
    if (!report(k == kBC ? "BlueConnect call" : "MPI call", status)) {
      std::fprintf(stderr, "bc_bench: rank %d: stopping; ranks still inside the call stop at BC_TIMEOUT\n", rank_);
      failed_ = true;  // the next synchronisation stops every rank
      return 0;
    }
    if (!timed) return 0;
    last_seconds_ = t;
    st[k].add(t);
    if (k == kBC && nstages_ > 0 && sh_.call > 0) {
      double s[kMaxStages];
      int ns = 0;
      if (!report("bc_comm_stage_times", bc_comm_stage_times(comm_, s, kMaxStages, &ns))) failed_ = true;
      for (int i = 0; i < std::min(ns, nstages_); ++i) stage_sum_[i] += s[i];
    }
    if (o_.check) {
      if (o_.mem_cuda) {
        if (!drecv_.download(recv_.data(), sh_.recv_n * elem_)) failed_ = true;
        if (!o_.inplace && !dsend_.download(send_.data(), sh_.send_n * elem_)) failed_ = true;
      }
      st[k].wrong += verify();
      if (o_.mem_cuda && !o_.inplace && !dsend_.upload(send_.data(), sh_.send_n * elem_)) failed_ = true;
    }
    return 0;
  }

  bc_status_t call_bc() {
    if (o_.via_mpi) {
      call_mpi_entry(false);  // MPI_*: served by the preload
      return BC_OK;
    }
    void *rb = o_.mem_cuda ? drecv_.data() : recv_.data();
    const void *s = o_.inplace ? BC_IN_PLACE : o_.mem_cuda ? dsend_.data() : send_.data();
    switch (o_.coll) {
      case Coll::Allreduce: return bc_allreduce(s, rb, sh_.call, o_.dtype, o_.op, comm_);
      case Coll::ReduceScatter: return bc_reduce_scatter(s, rb, sh_.call, o_.dtype, o_.op, comm_);
      case Coll::Allgather: return bc_allgather(s, rb, sh_.call, o_.dtype, comm_);
    }
    return BC_ERR_INTERNAL;
  }

  // The MPI library's collective: through PMPI_* with --via mpi, so that the
  // preload does not serve it.
  void call_mpi() { call_mpi_entry(o_.via_mpi); }

  // MPI's default error handler aborts the job on a failure.
  void call_mpi_entry(bool pmpi) {
    const void *s = o_.inplace ? MPI_IN_PLACE : send_.data();
    const MPI_Datatype t = mpi_datatype(o_.dtype);
    const int n = static_cast<int>(sh_.call);
    const MPI_Comm c = pmpi || !o_.via_mpi ? mpi_comm_ : bc_mpi_comm_;
    const MPI_Op op = mpi_op(o_.op);
    switch (o_.coll) {
      case Coll::Allreduce:
        pmpi ? PMPI_Allreduce(s, recv_.data(), n, t, op, c) : MPI_Allreduce(s, recv_.data(), n, t, op, c);
        break;
      case Coll::ReduceScatter:
        pmpi ? PMPI_Reduce_scatter_block(s, recv_.data(), n, t, op, c)
             : MPI_Reduce_scatter_block(s, recv_.data(), n, t, op, c);
        break;
      case Coll::Allgather: {
        const int sn = o_.inplace ? 0 : n;
        const MPI_Datatype st = o_.inplace ? MPI_DATATYPE_NULL : t;
        pmpi ? PMPI_Allgather(s, sn, st, recv_.data(), n, t, c) : MPI_Allgather(s, sn, st, recv_.data(), n, t, c);
        break;
      }
    }
  }

  // Wrong output elements + changed input elements + damaged guard zones.
  int64_t verify() {
    int64_t wrong = count_wrong(recv_.data(), ref_.data(), sh_.out_n, elem_);
    if (!o_.inplace) {
      const int64_t changed = count_wrong(send_.data(), input_.data(), sh_.send_n, elem_);
      if (changed) std::memcpy(send_.data(), input_.data(), sh_.send_n * elem_);
      wrong += changed + send_.repair_guards();
    }
    return wrong + recv_.repair_guards();
  }

  // The header (rank 0 prints) and the table lines: one function for both, so
  // that the column names always match the values.
  std::string line(const Row *r) const {
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
    if (o_.full) col(6, "iters", r ? std::to_string(r->iters) : "");
    col(11, "algbw(GB/s)", fmt("%.3f", bw(kBC)));
    col(11, "busbw(GB/s)", fmt("%.3f", bw(kBC) * busbw_factor_));
    col(7, "#wrong", wrong0);
    if (o_.compare_mpi) {
      const std::string wrong1 = o_.check && r ? std::to_string(r->wrong[kMPI]) : "N/A";
      if (o_.full) col(12, "mpi_min(us)", r ? fmt("%.2f", r->min[kMPI]) : "");
      col(12, "mpi_avg(us)", r ? fmt("%.2f", r->avg[kMPI]) : "");
      if (o_.full) col(12, "mpi_max(us)", r ? fmt("%.2f", r->max[kMPI]) : "");
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

  void write_json(FILE *f, const Row &r) const {
    auto impl = [&](int k) {
      const double algbw = div0(r.count * 1e-3 * elem_, r.avg[k]);
      std::fprintf(f, "{\"avg_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f,\"algbw_GBps\":%.6f,\"busbw_GBps\":%.6f,"
                   "\"wrong\":%s}", r.avg[k], r.min[k], r.max[k], algbw, algbw * busbw_factor_,
                   o_.check ? std::to_string(r.wrong[k]).c_str() : "null");
    };
    std::fprintf(f, "{\"coll\":\"%s\",\"dtype\":\"%s\",\"op\":\"%s\",\"inplace\":%s,\"nranks\":%d,"
                 "\"size\":%lld,\"count\":%lld,\"bytes\":%lld,\"warmup\":%d,\"iters\":%d,\"bc\":",
                 coll_name(o_.coll), bc_dtype_name(o_.dtype), o_.coll == Coll::Allgather ? "none" : bc_op_name(o_.op),
                 o_.inplace ? "true" : "false", p_, (long long)r.size, (long long)r.count,
                 (long long)(r.count * elem_), r.warmup, r.iters);
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

  void print_header() const;

  const Options &o_;
  bc_comm_t comm_;
  int rank_, p_;
  size_t elem_;
  ExactData data_;
  MPI_Comm mpi_comm_ = MPI_COMM_NULL;
  MPI_Comm bc_mpi_comm_ = MPI_COMM_NULL;  // --via mpi: the communicator BlueConnect serves
  double busbw_factor_ = 0;
  int nstages_ = 0;
  Shape sh_;
  GuardedBuf send_, recv_, input_, ref_;
  DevMirror dsend_, drecv_;
  std::vector<double> stage_sum_;
  unsigned char poison_ = 0x5A;
  bool failed_ = false;
  double last_seconds_ = 0;
};

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
  if (o_.compare_mpi) {
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int vlen = 0;
    MPI_Get_library_version(ver, &vlen);
    ver[std::strcspn(ver, ",\n")] = '\0';
    std::printf("# compare: %s of %s on the same buffers, alternating with BlueConnect (each goes first on every "
                "other iteration), same iteration counts\n", mpi_name, ver);
  }
  std::printf("# data: %s, op %s, %s; check: %s\n", bc_dtype_name(o_.dtype),
              o_.coll == Coll::Allgather ? "none" : bc_op_name(o_.op), o_.inplace ? "in-place" : "out-of-place",
              o_.check ? "every timed call, bit for bit against a local reference" : "off (-c to check)");
  std::printf("#   values: %s\n", data_.describe());
  std::printf("# sizes: %s to %s bytes, doubling; warm-up: ", format_bytes(o_.min_bytes).c_str(),
              format_bytes(o_.max_bytes).c_str());
  if (o_.warmup >= 0) std::printf("%d", o_.warmup);
  else std::printf("auto (5 up to %s, 2 above)", format_bytes(kWarmupBigBytes).c_str());
  if (o_.iters) std::printf("; iterations: %d\n", o_.iters);
  else std::printf("; iterations: auto (until the timed calls%s add up to %.1f s; %d to %d)\n",
                   o_.compare_mpi ? " of both" : "", kAutoSeconds, kAutoMinIters, kAutoMaxIters);

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
    if (l.compare(0, 7, "  step ") != 0) std::printf("#   %.150s\n", l.c_str());
    at = end + 1;
  }

  const bool ar = o_.coll == Coll::Allreduce;
  std::printf("# columns:\n");
  if (ar) std::printf("#   size      bytes of the vector reduced\n");
  else std::printf("#   size      bytes of the full buffer, p blocks of size/p (the %s)\n",
                   o_.coll == Coll::ReduceScatter ? "input" : "output");
  std::printf("#   count     elements in it: size / %zu floored%s\n", elem_, ar ? "" : ", then to a multiple of p");
  std::printf("#   avg       each rank's mean time per call, then the max over ranks (us)\n");
  if (o_.full) {
    std::printf("#   min, max  each rank's fastest (slowest) call, then the max over ranks (us)\n");
    std::printf("#   iters     timed calls per rank (each implementation)\n");
  }
  std::printf("#   algbw     count * %zu bytes / avg, GB/s = 1e9 B/s\n", elem_);
  std::printf("#   busbw     algbw * %s = algbw * %.4f (nccl-tests' bus bandwidth)\n", ar ? "2(p-1)/p" : "(p-1)/p",
              busbw_factor_);
  std::printf("#   #wrong    %s\n", o_.check ? "wrong output elements + changed input elements + damaged guard "
                                                 "zones, summed over ranks and checked calls"
                                               : "N/A: no check without -c");
  if (o_.compare_mpi)
    std::printf("#   mpi_*     the same for %s; mpi/bc = mpi_avg / avg (> 1: BlueConnect faster)\n", mpi_name);
  if (o_.stages)
    std::printf(nstages_ ? "#   sK        time in hierarchy stage K (its reduce-scatter and all-gather steps): "
                           "each rank's mean, then the max over ranks (us)\n"
                         : "#   (--stages: the plan has no stages here, p = 1)\n");
  if (o_.plan)
    std::printf("#   pred      the cost model's predicted time for the plan chosen (BC_MODEL; N/A when off);\n"
                "#   pred/avg  prediction / measured avg; plan: the choice, in BC_PLAN's terms\n");
  std::printf("%s\n", line(nullptr).c_str());
  std::fflush(stdout);
}

int finish(int code) {
  MPI_Finalize();
  return code;
}

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  // Every rank parses the same argv, so every rank takes the same exit.
  Options opt;
  std::string err;
  if (!parse_args(argc, argv, &opt, &err)) {
    if (rank == 0) std::fprintf(stderr, "bc_bench: %s\nTry 'bc_bench --help'.\n", err.c_str());
    return finish(2);
  }
  if (opt.help) {
    if (rank == 0) std::fputs(usage_text(), stdout);
    return finish(0);
  }
  if (opt.mem_cuda) {
#if BC_HAVE_CUDA
    // Ranks share the node's GPUs round-robin (one GPU: all on device 0).
    int ndev = 0;
    const bool have = cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0;
    if (have) cudaSetDevice(rank % ndev);
    int all = have ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
      if (rank == 0) std::fprintf(stderr, "bc_bench: --mem cuda: no CUDA device on some rank\n");
      return finish(2);
    }
#else
    if (rank == 0) std::fprintf(stderr, "bc_bench: --mem cuda: built without CUDA (meson -Dcuda=enabled)\n");
    return finish(2);
#endif
  }

  if (opt.via_mpi && !find_interposer()) {
    if (rank == 0)
      std::fprintf(stderr, "bc_bench: --via mpi: MPI_Allreduce is the MPI library's own; load the PMPI preload "
                           "(mpirun -x LD_PRELOAD=.../libblueconnect_mpi.so)\n");
    return finish(2);
  }
  bc_status_t st = bc_init();
  int ok = st == BC_OK;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!ok) {  // the first failing rank speaks for all (the environment is usually the same)
    int first = st != BC_OK ? rank : size;
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == first) std::fprintf(stderr, "bc_bench: rank %d: bc_init failed: %s\n", rank, bc_last_error());
    return finish(1);
  }
  bc_comm_t comm = nullptr;
  st = bc_comm_create_with(MPI_COMM_WORLD, opt.bc_options.c_str(), &comm);
  if (st != BC_OK) {
    if (rank == 0) std::fprintf(stderr, "bc_bench: bc_comm_create_with failed: %s\n", bc_last_error());
    bc_finalize();
    return finish(1);
  }

  FILE *json = nullptr;
  int opened = 1;
  if (rank == 0 && !opt.json.empty()) {
    json = std::fopen(opt.json.c_str(), "w");
    if (!json) {
      std::fprintf(stderr, "bc_bench: cannot write --json file '%s': %s\n", opt.json.c_str(), std::strerror(errno));
      opened = 0;
    }
  }
  MPI_Bcast(&opened, 1, MPI_INT, 0, MPI_COMM_WORLD);
  int code = 2;
  if (opened) {
    Bench bench(opt, comm, rank, size);
    code = bench.run(json);
  }
  if (json) std::fclose(json);
  if (bc_comm_destroy(&comm) != BC_OK) code = 1;
  bc_finalize();
  return finish(code);
}
