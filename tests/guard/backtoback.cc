// One back-to-back loop of all-reduces through the C API, as a training loop
// calls it: a barrier, then `calls` bc_allreduce of `bytes` with nothing in
// between. Prints the slowest rank's time per call; the last result is checked
// exactly (small integers, exact in any order). Run by backtoback_check.sh,
// once per configuration, each in its own processes: the guard compares
// configurations as separate jobs, as users run them, so that one cannot
// change the other's heap or caches.
//
// Usage: mpirun -np N backtoback BYTES CALLS   (BC_* settings from the environment)
// Output: "us_per_call US"; exit 1 on a BlueConnect error or a wrong result.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "blueconnect.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long long bytes = argc > 1 ? std::atoll(argv[1]) : 4 << 20;
  const int calls = argc > 2 ? std::atoi(argv[2]) : 10;
  const int64_t n = bytes / 4;
  std::vector<int32_t> in(static_cast<size_t>(n)), out(static_cast<size_t>(n), -1);
  for (int64_t i = 0; i < n; ++i) in[static_cast<size_t>(i)] = static_cast<int32_t>((i + rank) % 7);
  bc_comm_t comm = nullptr;
  bool ok = bc_init() == BC_OK && bc_comm_create(MPI_COMM_WORLD, &comm) == BC_OK;
  // Two warm-up calls: the first builds the plan and touches the buffers.
  for (int k = 0; k < 2 && ok; ++k) ok = bc_allreduce(in.data(), out.data(), n, BC_INT32, BC_SUM, comm) == BC_OK;
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int k = 0; k < calls && ok; ++k) ok = bc_allreduce(in.data(), out.data(), n, BC_INT32, BC_SUM, comm) == BC_OK;
  double t = (MPI_Wtime() - t0) / calls * 1e6, slowest = 0;
  if (!ok) std::fprintf(stderr, "rank %d: %s\n", rank, bc_last_error());
  for (int64_t i = 0; i < n && ok; ++i) {
    int32_t want = 0;
    for (int r = 0; r < size; ++r) want += static_cast<int32_t>((i + r) % 7);
    if (out[static_cast<size_t>(i)] != want) {
      std::fprintf(stderr, "rank %d: element %lld is %d, want %d\n", rank, static_cast<long long>(i),
                   out[static_cast<size_t>(i)], want);
      ok = false;
    }
  }
  MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  int all_ok = ok, every = 0;
  MPI_Allreduce(&all_ok, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0 && every) std::printf("us_per_call %.1f\n", slowest);
  if (comm) bc_comm_destroy(&comm);
  bc_finalize();
  MPI_Finalize();
  return every ? 0 : 1;
}
