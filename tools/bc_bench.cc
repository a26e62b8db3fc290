// bc_bench: times BlueConnect's collectives over a range of sizes, in the
// manner of the OSU micro-benchmarks and nccl-tests, optionally against the MPI
// library's own collective on the same buffers. `bc_bench --help` lists the
// options; the header it prints defines every column.
//
// Timing (Mode, bench_args.h). By default back-to-back, as a program calls a
// library in a loop: per size, each library alone runs its warm-up, then a
// small PMPI_Allreduce over all ranks that is the barrier, carries "some rank
// failed" and fixes the count N of timed calls for every rank alike; then N
// calls with nothing between them but a clock read; then another such
// agreement. No MPI call runs inside the timed loop: a rank whose call fails
// skips the rest of the loop, and the ranks it leaves inside a BlueConnect
// call stop at BC_TIMEOUT. --app puts a fixed compute time and a barrier
// before each call; --interleave is the earlier timing, one synchronisation
// before every call, the libraries alternating. Preparing the buffers and
// checking the results are outside the timed region in every mode.
#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
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
  double stage_sum[kMaxStages] = {};  // --stages: BlueConnect's calls only
  void add(double t) {
    min = n ? std::min(min, t) : t;
    max = std::max(max, t);
    sum += t;
    ++n;
  }
  double mean() const { return n ? sum / n : 0; }
  // Another round's calls into this one (--repeats).
  void merge(const Stat &o) {
    if (o.n == 0) return;
    min = n ? std::min(min, o.min) : o.min;
    max = std::max(max, o.max);
    sum += o.sum;
    n += o.n;
    wrong += o.wrong;
    for (int s = 0; s < kMaxStages; ++s) stage_sum[s] += o.stage_sum[s];
  }
};

// One size, reduced over the ranks (valid on rank 0).
struct Row {
  int64_t size = 0, count = 0;
  int warmup = 0, iters[2] = {0, 0};
  double avg[2] = {0, 0}, min[2] = {0, 0}, max[2] = {0, 0};
  int64_t wrong[2] = {0, 0};
  std::vector<double> stages;
  std::vector<double> rounds[2];  // --repeats: each round's time per call (us, slowest rank)
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

// Seconds on the monotonic clock (a vDSO read): what runs between back-to-back
// calls, where even MPI_Wtime, an MPI call, should not.
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// --app: the application's compute. Busy-waiting on the clock gives the same
// wall time on every rank whatever else shares the cores, and, unlike a sleep
// or an MPI call, gives neither library's progress engine a chance to run.
void compute_for(double seconds) {
  const double end = now() + seconds;
  while (now() < end) {
  }
}

std::string fmt(const char *f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// --via mpi: the file whose MPI_Allreduce the program calls, when that is not
// the MPI library's own (Open MPI's MPI_Allreduce is an alias of PMPI_Allreduce).
std::string g_interposer;

// Under the preload's learned route (docs/PMPI.md) the first calls of each
// size are probes, half of them through the MPI library, and a close call
// is probed again later: the warm-up covers them all, so that the timed loop
// sees the route a long-running program gets.
// 0 without the preload or with BC_PMPI_ROUTE=bc.
int preload_probe_calls(int64_t bytes) {
  using ProbeCalls = int (*)(long long);
  static const auto fn = reinterpret_cast<ProbeCalls>(dlsym(RTLD_DEFAULT, "bc_pmpi_probe_calls"));
  return fn ? fn(static_cast<long long>(bytes)) : 0;
}

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

  // True on every rank when true on every rank. PMPI_: under the preload
  // (--via mpi) the benchmark's own synchronisation is not BlueConnect's to serve.
  static bool everywhere(bool ok) {
    int v = ok ? 1 : 0;
    PMPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return v != 0;
  }

  // After a loop: whether every rank got through it.
  bool agree() { return everywhere(!failed_); }

  bool report(const char *what, bc_status_t st) {
    if (st == BC_OK) return true;
    // bc_last_error() starts with the status's name already ("timeout: ...").
    const char *why = *bc_last_error() ? bc_last_error() : bc_strerror(st);
    std::fprintf(stderr, "bc_bench: rank %d: %s failed: %s\n", rank_, what, why);
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
    if (!set_up(bytes)) return false;
    Stat st[2];
    // The learned route's probes advance only with BlueConnect's calls (MPI's
    // go through PMPI_*): its first warm-up covers them, the others need not.
    const int base = o_.warmup >= 0 ? o_.warmup : auto_warmup(bytes);
    const int probes = o_.warmup < 0 && o_.via_mpi ? preload_probe_calls(bytes) : 0;
    row->warmup = base + probes;
    std::vector<double> mine[2];  // back-to-back and app: this rank's time per call in each round
    if (o_.mode == Mode::Interleave) {
      if (!run_interleaved(row->warmup, st)) return false;
    } else if (!run_rounds(base, probes, st, mine)) {
      return false;
    }
    summarize(bytes, st, mine, row);
    return true;
  }

  // Back-to-back and app: o_.repeats rounds of one loop per library, the
  // first library alternating (BlueConnect first in round 1, as with one
  // round), so that neither always runs on the other's leftovers.
  bool run_rounds(int warmup, int probes, Stat *st, std::vector<double> *mine) {
    const int nimpl = o_.compare_mpi ? 2 : 1;
    for (int r = 0; r < o_.repeats; ++r)
      for (int j = 0; j < nimpl; ++j) {
        const int k = (r % 2 == 0) ? j : nimpl - 1 - j;
        Stat round;
        if (!measure(k, warmup + (k == kBC && r == 0 ? probes : 0), &round)) return false;
        mine[k].push_back(round.mean());
        st[k].merge(round);
      }
    return true;
  }

  // Buffers and reference data for one size, on every rank or on none.
  bool set_up(int64_t bytes) {
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
    return true;
  }

  // Back-to-back and app modes: library k alone. The count of timed calls is
  // fixed before the timed loop and agreed by all ranks, so that no rank waits
  // in a call that another never makes.
  bool measure(int k, int warmup, Stat *st) {
    Stat first, probe;  // auto count: the time per call of the warm-up after its first call (one-time setup)
    loop(k, std::min(warmup, 1), &first, false);
    loop(k, warmup - 1, &probe, false);
    if (!o_.iters && probe.n == 0) loop(k, 1, &probe, false);
    prepare();  // back-to-back: once for the whole loop; app: again before every call
    double v[2] = {failed_ ? 1.0 : 0.0, probe.mean()};
    PMPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // and the barrier
    if (v[0] > 0) return false;
    const bool back_to_back = o_.mode == Mode::BackToBack;
    loop(k, o_.iters ? o_.iters : auto_iters(v[1]), st, o_.check && !back_to_back);
    if (!agree()) return false;
    if (!back_to_back || !o_.check) return true;
    // The send buffer is the same for every call, so the last call's results
    // are checkable. In place, each call reduces the previous one's results
    // (values grow, to inf for long float sums, but never to denormals, which
    // would slow the arithmetic): check one more call, on fresh input.
    if (o_.inplace) {
      Stat untimed;
      prepare();
      loop(k, 1, &untimed, false);
      if (!agree()) return false;
    }
    check(st);
    return true;
  }

  // n calls of library k, each timed into *st; checks each when check_each.
  // Back-to-back (and --interleave, one call at a time): only a clock read
  // between calls, so the times add up to the loop's. --app: before each
  // call the compute and a barrier, outside the time. A rank that failed
  // skips the calls but keeps the barriers, so that the others do not hang.
  void loop(int k, int n, Stat *st, bool check_each) {
    const bool app = o_.mode == Mode::App;
    double t0 = now();
    for (int i = 0; i < n; ++i) {
      if (app) {
        prepare();
        if (!failed_) compute_for(o_.app_us * 1e-6);
        PMPI_Barrier(MPI_COMM_WORLD);  // PMPI_: not served by the preload
        t0 = now();
      }
      if (failed_) continue;
      const bool ok = invoke(k);
      const double t1 = now();
      if (ok) record(k, t1 - t0, st);
      if (ok && check_each) check(st);
      t0 = t1;
    }
  }

  // --interleave: one synchronisation before every call, which also carries
  // rank 0's decision to stop iterating; BlueConnect and MPI alternate.
  bool run_interleaved(int warmup, Stat *st) {
    const int nimpl = o_.compare_mpi ? 2 : 1;
    for (int w = 0; w < warmup; ++w)
      for (int k = 0; k < nimpl; ++k)
        if (call((w % 2 == 0) ? k : nimpl - 1 - k, false, 0, st) < 0) return false;
    bool stopped = false;
    for (int it = 0; !stopped; ++it) {
      const double measured = st[kBC].sum + st[kMPI].sum;  // rank 0's timed seconds, for the automatic stop
      int stop = 0;
      if (rank_ == 0)
        stop = o_.iters ? it >= o_.iters
                        : it >= kAutoMaxIters || (it >= kAutoMinIters && measured >= kAutoSeconds);
      for (int j = 0; j < nimpl && !stopped; ++j) {
        const int k = (it % 2 == 0) ? j : nimpl - 1 - j;  // alternate which goes first
        const int r = call(k, true, j == 0 ? stop : 0, st);
        if (r < 0) return false;
        stopped = r > 0;
      }
    }
    return true;
  }

  // --interleave: prepares the buffers, synchronises, and runs one call of
  // implementation k. Returns -1 when some rank failed, 1 when rank 0 said
  // stop, 0 otherwise.
  int call(int k, bool timed, int stop, Stat *st) {
    prepare();
    int flags[2] = {failed_ ? 1 : 0, stop};
    PMPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (flags[0]) return -1;
    if (flags[1]) return 1;
    Stat untimed;
    loop(k, 1, timed ? &st[k] : &untimed, timed && o_.check);
    return 0;
  }

  // Before a call or a back-to-back loop: a fresh poison in the receive buffer
  // (-c), and the input in it (in place).
  void prepare() {
    unsigned char *recv = static_cast<unsigned char *>(recv_.data());
    if (o_.check) recv_.poison(poison_ ^= 0x97);  // alternates 0xCD and 0x5A
    if (o_.inplace) std::memcpy(recv + sh_.in_at * elem_, input_.data(), sh_.in_n * elem_);
    if (o_.mem_cuda && (o_.check || o_.inplace) && !drecv_.upload(recv, sh_.recv_n * elem_)) failed_ = true;
  }

  // One call of library k. A failure marks this rank failed: the next
  // agreement stops every rank.
  bool invoke(int k) {
    bc_status_t status = BC_OK;
    if (k == kBC) status = call_bc();
    else call_mpi();
    if (report(k == kBC ? "BlueConnect call" : "MPI call", status)) return true;
    std::fprintf(stderr, "bc_bench: rank %d: stopping; ranks still inside the call stop at BC_TIMEOUT\n", rank_);
    failed_ = true;
    return false;
  }

  // A timed call's seconds, and BlueConnect's stage times (a local read).
  void record(int k, double seconds, Stat *st) {
    st->add(seconds);
    if (k != kBC || nstages_ == 0 || sh_.call == 0) return;
    double s[kMaxStages];
    int ns = 0;
    if (!report("bc_comm_stage_times", bc_comm_stage_times(comm_, s, kMaxStages, &ns))) failed_ = true;
    for (int i = 0; i < std::min(ns, nstages_); ++i) st->stage_sum[i] += s[i];
  }

  // The results now in the buffers, counted into st->wrong.
  void check(Stat *st) {
    if (o_.mem_cuda) {
      if (!drecv_.download(recv_.data(), sh_.recv_n * elem_)) failed_ = true;
      if (!o_.inplace && !dsend_.download(send_.data(), sh_.send_n * elem_)) failed_ = true;
    }
    st->wrong += verify();
    if (o_.mem_cuda && !o_.inplace && !dsend_.upload(send_.data(), sh_.send_n * elem_)) failed_ = true;
  }

  // Reduces over the ranks into *row (rank 0): latencies and stage times by
  // max, wrong counts by sum. With rounds (back-to-back, app), avg is the
  // median over the rounds of each round's slowest rank: with one round, the
  // slowest rank's mean, as without rounds.
  void summarize(int64_t bytes, const Stat *st, const std::vector<double> *mine, Row *row) {
    std::vector<double> loc = {st[0].mean(), st[0].min, st[0].max, st[1].mean(), st[1].min, st[1].max};
    for (int s = 0; s < nstages_; ++s) loc.push_back(div0(st[kBC].stage_sum[s], static_cast<double>(st[kBC].n)));
    std::vector<double> glob(loc.size());
    MPI_Reduce(loc.data(), glob.data(), static_cast<int>(loc.size()), MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    int64_t wl[2] = {st[0].wrong, st[1].wrong}, wg[2] = {0, 0};
    MPI_Reduce(wl, wg, 2, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    row->size = bytes;
    row->count = sh_.total;
    for (int k = 0; k < 2; ++k) {
      row->iters[k] = static_cast<int>(st[k].n);
      row->avg[k] = glob[3 * k] * 1e6;
      row->min[k] = glob[3 * k + 1] * 1e6;
      row->max[k] = glob[3 * k + 2] * 1e6;
      row->wrong[k] = wg[k];
    }
    for (int s = 0; s < nstages_; ++s) row->stages.push_back(glob[6 + s] * 1e6);
    for (int k = 0; k < 2; ++k) {
      if (mine[k].empty()) continue;
      std::vector<double> slowest(mine[k].size());
      MPI_Reduce(mine[k].data(), slowest.data(), static_cast<int>(slowest.size()), MPI_DOUBLE, MPI_MAX, 0,
                 MPI_COMM_WORLD);
      for (double &v : slowest) v *= 1e6;
      row->rounds[k] = slowest;
      std::sort(slowest.begin(), slowest.end());
      const size_t m = slowest.size();
      row->avg[k] = m % 2 ? slowest[m / 2] : 0.5 * (slowest[m / 2 - 1] + slowest[m / 2]);
    }
    if (o_.plan) {
      char text[256] = "";
      double predicted = -1;
      if (bc_comm_plan_for(comm_, sh_.total * elem_, text, sizeof text, &predicted) == BC_OK) {
        row->plan = text;
        row->predicted_us = predicted >= 0 ? predicted * 1e6 : -1;
      }
    }
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
  void write_json(FILE *f, const Row &r) const {
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

  void print_header() const;
  void print_timing(const char *mpi_name) const;

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
  unsigned char poison_ = 0x5A;
  bool failed_ = false;
};

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
