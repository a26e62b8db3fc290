// bc_bench: times BlueConnect's collectives over a range of sizes, in the
// manner of the OSU micro-benchmarks and nccl-tests, optionally against the MPI
// library's own collective on the same buffers. `bc_bench --help` lists the
// options; the header it prints defines every column.
//
// Files: bench_args.cc (the command line), bench_data.cc (exact inputs and
// references), bench_run.h (the benchmark) with bench_loops.cc (the timing),
// bench_calls.cc (the calls, --via mpi) and bench_output.cc (header, table,
// JSON); this file starts MPI and BlueConnect and runs it.
#include <mpi.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bc_config.h"
#include "bench_args.h"
#include "bench_run.h"
#include "blueconnect.h"
#if BC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {
using namespace bcbench;

int finish(int code) {
  MPI_Finalize();
  return code;
}

// The parameters that pin a plan (docs/PLANS.md, "Who chooses"): set, the
// communicator runs that plan and learns none.
const char *const kPinning[] = {"BC_PLAN", "BC_ALGO", "BC_CHUNK", "BC_PIPELINE_DEPTH"};

std::string pinned_by(const Options &opt) {
  std::string out;
  for (const char *name : kPinning) {
    const char *env = std::getenv(name);
    const bool in_options = opt.bc_options.find(std::string(name) + "=") != std::string::npos;
    if ((env && *env) || in_options) out += std::string(out.empty() ? "" : ", ") + name;
  }
  return out;
}

// --plan with a pinned plan: the same sizes again, BlueConnect alone, on a
// communicator without the pins ("!BC_PLAN" restores a parameter's default),
// where it chooses and learns its plan; then, per size, whether the
// pinned plan was slower. 0 all right; 1 a wrong result or an error.
int compare_with_learned(const Options &opt, const std::vector<Row> &pinned, const std::string &pins, int rank,
                         int size) {
  std::string options = opt.bc_options;
  for (const char *name : kPinning) options += std::string(options.empty() ? "" : ";") + "!" + name;
  if (rank == 0)
    std::printf("#\n# the plan is pinned (%s): the same sizes on a communicator without the pins, where "
                "BlueConnect chooses and learns its plan\n", pins.c_str());
  bc_comm_t learned = nullptr;
  if (bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &learned) != BC_OK) {
    if (rank == 0) std::fprintf(stderr, "bc_bench: the communicator without the pins: %s\n", bc_last_error());
    return 1;
  }
  Options o = opt;
  o.compare_mpi = false;
  o.bc_options = options;  // the header's "BC_* options" line then shows the unpinning
  int code = 0;
  std::vector<Row> rows;
  {
    Bench bench(o, learned, rank, size);
    code = bench.run(nullptr);
    rows = bench.rows();
  }
  if (bc_comm_destroy(&learned) != BC_OK) code = 1;
  if (rank != 0 || code != 0) return code;
  // Slower by more than 5 %: this box's spread between two loops of one plan.
  int slower = 0;
  std::printf("# pinned against learned: %12s %14s %15s %8s\n", "size", "pinned_us", "learned_us", "ratio");
  for (size_t i = 0; i < pinned.size() && i < rows.size(); ++i) {
    const double a = pinned[i].avg[kBC], b = rows[i].avg[kBC];
    const bool worse = b > 0 && a > 1.05 * b;
    slower += worse;
    std::printf("# pinned against learned: %12lld %14.2f %15.2f %8.2f%s\n", static_cast<long long>(pinned[i].size), a,
                b, b > 0 ? a / b : 0.0, worse ? "  the pinned plan is SLOWER" : "");
  }
  std::printf("# the pinned plan was slower than the learned one (by more than 5 %%) at %d of %zu sizes\n", slower,
              pinned.size());
  return 0;
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
  std::vector<Row> rows;
  if (opened) {
    Bench bench(opt, comm, rank, size);
    code = bench.run(json);
    rows = bench.rows();
  }
  if (json) std::fclose(json);
  if (bc_comm_destroy(&comm) != BC_OK) code = 1;
  const std::string pins = pinned_by(opt);
  if (code == 0 && opt.plan && !pins.empty() && !opt.via_mpi && opt.coll == Coll::Allreduce)
    code = compare_with_learned(opt, rows, pins, rank, size);
  bc_finalize();
  return finish(code);
}
