// bc_bench's Bench: the benchmark of one collective over a range of sizes on
// one communicator, and the types its files share. Its members live in
// bench_loops.cc (buffers, the timing loops, the reduction of a size's times
// over the ranks), bench_calls.cc (the calls of each library, and the PMPI
// preload glue of --via mpi) and bench_output.cc (the header, the table rows
// and the JSON lines). Internal to bc_bench.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bc_config.h"
#include "bench_args.h"
#include "bench_data.h"
#include "blueconnect.h"
#if BC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace bcbench {

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

inline double div0(double a, double b) { return b > 0 ? a / b : 0; }

// bench_calls.cc: --via mpi's interposer and the preload's probe calls.
extern std::string g_interposer;
int preload_probe_calls(int64_t bytes);
bool find_interposer();

class Bench {
 public:
  Bench(const Options &o, bc_comm_t comm, int rank, int p);
  ~Bench();

  // 0: all right; 1: a wrong result or an error.
  int run(FILE *json);
  // The rows run() printed, in size order (rank 0's are complete).
  const std::vector<Row> &rows() const { return rows_; }

 private:
  // bench_loops.cc: buffers, timing loops and the reduction over the ranks.
  Shape shape_of(int64_t bytes) const;
  static bool everywhere(bool ok);
  bool agree();
  bool report(const char *what, bc_status_t st);
  bool probe_stages();
  bool run_size(int64_t bytes, Row *row);
  bool run_rounds(int warmup, int probes, Stat *st, std::vector<double> *mine);
  bool set_up(int64_t bytes);
  bool measure(int k, int warmup, Stat *st);
  void loop(int k, int n, Stat *st, bool check_each);
  bool run_interleaved(int warmup, Stat *st);
  int call(int k, bool timed, int stop, Stat *st);
  void prepare();
  bool invoke(int k);
  void record(int k, double seconds, Stat *st);
  void check(Stat *st);
  void summarize(int64_t bytes, const Stat *st, const std::vector<double> *mine, Row *row);
  int64_t verify();

  // bench_calls.cc: one call of each library.
  bc_status_t call_bc();
  void call_mpi();
  void call_mpi_entry(bool pmpi);

  // bench_output.cc: the header, the table lines and the JSON lines.
  std::string line(const Row *r) const;
  void write_json(FILE *f, const Row &r) const;
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
  std::vector<Row> rows_;
};

}  // namespace bcbench
