// bc_bench's timing: per size, the buffers and reference data, the warm-up,
// the timed loops of each mode, the check of the results, and the reduction
// of every rank's times into the table's row. See bench_run.h.
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
#include <chrono>
#include <cstring>

#include "bench_run.h"

namespace bcbench {
namespace {

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

}  // namespace

Bench::Bench(const Options &o, bc_comm_t comm, int rank, int p)
    : o_(o), comm_(comm), rank_(rank), p_(p), elem_(bc_dtype_size(o.dtype)),
      data_(o.dtype, o.op, p, o.coll == Coll::Allgather) {
  MPI_Comm_dup(MPI_COMM_WORLD, &mpi_comm_);
  if (o.via_mpi) MPI_Comm_dup(MPI_COMM_WORLD, &bc_mpi_comm_);
  busbw_factor_ = o.coll == Coll::Allreduce ? 2.0 * (p - 1) / p : 1.0 * (p - 1) / p;
}

Bench::~Bench() {
  MPI_Comm_free(&mpi_comm_);
  if (bc_mpi_comm_ != MPI_COMM_NULL) MPI_Comm_free(&bc_mpi_comm_);
}

int Bench::run(FILE *json) {
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
    rows_.push_back(row);
  }
  MPI_Bcast(&wrong, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (rank_ == 0 && o_.check)
    std::printf("# %s\n", wrong ? "FAILED: some results were wrong (see #wrong)" : "all results correct");
  return wrong ? 1 : 0;
}

Shape Bench::shape_of(int64_t bytes) const {
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
bool Bench::everywhere(bool ok) {
  int v = ok ? 1 : 0;
  PMPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return v != 0;
}

// After a loop: whether every rank got through it.
bool Bench::agree() { return everywhere(!failed_); }

bool Bench::report(const char *what, bc_status_t st) {
  if (st == BC_OK) return true;
  // bc_last_error() starts with the status's name already ("timeout: ...").
  const char *why = *bc_last_error() ? bc_last_error() : bc_strerror(st);
  std::fprintf(stderr, "bc_bench: rank %d: %s failed: %s\n", rank_, what, why);
  return false;
}

// The number of stages, from one small all-reduce.
bool Bench::probe_stages() {
  std::vector<float> v(static_cast<size_t>(p_), 1.0f);
  int ns = 0;
  const bool ok = report("bc_allreduce", bc_allreduce(BC_IN_PLACE, v.data(), p_, BC_FLOAT32, BC_SUM, comm_)) &&
                  report("bc_comm_stage_times", bc_comm_stage_times(comm_, nullptr, 0, &ns));
  nstages_ = std::min(ns, kMaxStages);
  return everywhere(ok);
}

bool Bench::run_size(int64_t bytes, Row *row) {
  if (!set_up(bytes)) return false;
  Stat st[2];
  // The learned route's probes and the plan's learning turns (docs/PLANS.md,
  // Learning) advance only with BlueConnect's calls (MPI's go through
  // PMPI_*): its first warm-up covers them, the others need not.
  const int base = o_.warmup >= 0 ? o_.warmup : auto_warmup(bytes);
  int probes = 0;
  if (o_.warmup < 0 && o_.via_mpi) probes = preload_probe_calls(bytes);
  if (o_.warmup < 0 && !o_.via_mpi && bc_comm_learning_calls(comm_, bytes, &probes) != BC_OK) probes = 0;
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
bool Bench::run_rounds(int warmup, int probes, Stat *st, std::vector<double> *mine) {
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
bool Bench::set_up(int64_t bytes) {
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
bool Bench::measure(int k, int warmup, Stat *st) {
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
void Bench::loop(int k, int n, Stat *st, bool check_each) {
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
bool Bench::run_interleaved(int warmup, Stat *st) {
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
int Bench::call(int k, bool timed, int stop, Stat *st) {
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
void Bench::prepare() {
  unsigned char *recv = static_cast<unsigned char *>(recv_.data());
  if (o_.check) recv_.poison(poison_ ^= 0x97);  // alternates 0xCD and 0x5A
  if (o_.inplace) std::memcpy(recv + sh_.in_at * elem_, input_.data(), sh_.in_n * elem_);
  if (o_.mem_cuda && (o_.check || o_.inplace) && !drecv_.upload(recv, sh_.recv_n * elem_)) failed_ = true;
}

// One call of library k. A failure marks this rank failed: the next
// agreement stops every rank.
bool Bench::invoke(int k) {
  bc_status_t status = BC_OK;
  if (k == kBC) status = call_bc();
  else call_mpi();
  if (report(k == kBC ? "BlueConnect call" : "MPI call", status)) return true;
  std::fprintf(stderr, "bc_bench: rank %d: stopping; ranks still inside the call stop at BC_TIMEOUT\n", rank_);
  failed_ = true;
  return false;
}

// A timed call's seconds, and BlueConnect's stage times (a local read).
void Bench::record(int k, double seconds, Stat *st) {
  st->add(seconds);
  if (k != kBC || nstages_ == 0 || sh_.call == 0) return;
  double s[kMaxStages];
  int ns = 0;
  if (!report("bc_comm_stage_times", bc_comm_stage_times(comm_, s, kMaxStages, &ns))) failed_ = true;
  for (int i = 0; i < std::min(ns, nstages_); ++i) st->stage_sum[i] += s[i];
}

// The results now in the buffers, counted into st->wrong.
void Bench::check(Stat *st) {
  if (o_.mem_cuda) {
    if (!drecv_.download(recv_.data(), sh_.recv_n * elem_)) failed_ = true;
    if (!o_.inplace && !dsend_.download(send_.data(), sh_.send_n * elem_)) failed_ = true;
  }
  st->wrong += verify();
  if (o_.mem_cuda && !o_.inplace && !dsend_.upload(send_.data(), sh_.send_n * elem_)) failed_ = true;
}

// Wrong output elements + changed input elements + damaged guard zones.
int64_t Bench::verify() {
  int64_t wrong = count_wrong(recv_.data(), ref_.data(), sh_.out_n, elem_);
  if (!o_.inplace) {
    const int64_t changed = count_wrong(send_.data(), input_.data(), sh_.send_n, elem_);
    if (changed) std::memcpy(send_.data(), input_.data(), sh_.send_n * elem_);
    wrong += changed + send_.repair_guards();
  }
  return wrong + recv_.repair_guards();
}

// Reduces over the ranks into *row (rank 0): latencies and stage times by
// max, wrong counts by sum. With rounds (back-to-back, app), avg is the
// median over the rounds of each round's slowest rank: with one round, the
// slowest rank's mean, as without rounds.
void Bench::summarize(int64_t bytes, const Stat *st, const std::vector<double> *mine, Row *row) {
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

}  // namespace bcbench
