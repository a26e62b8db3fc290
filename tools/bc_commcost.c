/* bc_commcost: what a new communicator costs, end to end.
 *
 * One iteration = create a communicator, run its first all-reduce (4 floats),
 * destroy it; timed on every rank after a barrier, the slowest rank counts.
 * Prints the median, min and max over the iterations (after one untimed
 * warm-up iteration unless --no-warmup), and the median of each part. A
 * second all-reduce on the new communicator, timed apart and not counted,
 * shows what the first one costs beyond a steady-state call.
 *
 *   bc_commcost --api  [-n 20]   bc_comm_create / bc_allreduce / bc_comm_destroy
 *   bc_commcost --mpi  [-n 20]   MPI_Comm_dup / MPI_Allreduce / MPI_Comm_free:
 *                                Open MPI alone, or BlueConnect under the preload
 *                                (LD_PRELOAD=build/lib/pmpi/libblueconnect_mpi.so)
 *
 * The statistics travel over PMPI_ calls, so the preload never sees them.
 * Rank 0 also prints every iteration with --all. Exit code 1 on any failure.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blueconnect.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int use_api = 0, iters = 20, warmup = 1, all = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--api")) use_api = 1;
    else if (!strcmp(argv[i], "--mpi")) use_api = 0;
    else if (!strcmp(argv[i], "-n") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-warmup")) warmup = 0;
    else if (!strcmp(argv[i], "--all")) all = 1;
    else {
      fprintf(stderr, "usage: %s [--api|--mpi] [-n ITERATIONS] [--no-warmup] [--all]\n", argv[0]);
      return 2;
    }
  }
  if (iters < 1) iters = 1;
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  if (use_api && bc_init() != BC_OK) {
    fprintf(stderr, "rank %d: bc_init failed: %s\n", rank, bc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* Per iteration: total, create, first all-reduce, destroy, second all-reduce. */
  double *t = calloc(5 * (size_t)iters + 5, sizeof(double));
  double *slowest = calloc(5 * (size_t)iters + 5, sizeof(double));
  int failed = 0;
  const int total = iters + warmup;
  for (int it = 0; it < total; ++it) {
    float in[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
    PMPI_Barrier(MPI_COMM_WORLD);
    float again[4];
    double t0 = PMPI_Wtime(), t1 = t0, t2 = t0, t2b = t0;
    if (use_api) {
      bc_comm_t c = NULL;
      int ok = bc_comm_create(MPI_COMM_WORLD, &c) == BC_OK;
      t1 = PMPI_Wtime();
      ok = ok && bc_allreduce(in, out, 4, BC_FLOAT32, BC_SUM, c) == BC_OK;
      t2 = PMPI_Wtime();
      ok = ok && bc_allreduce(in, again, 4, BC_FLOAT32, BC_SUM, c) == BC_OK;
      t2b = PMPI_Wtime();
      ok = ok && bc_comm_destroy(&c) == BC_OK;
      if (!ok) {
        fprintf(stderr, "rank %d: %s\n", rank, bc_last_error());
        failed = 1;
      }
    } else {
      MPI_Comm c = MPI_COMM_NULL;
      int ok = MPI_Comm_dup(MPI_COMM_WORLD, &c) == MPI_SUCCESS;
      t1 = PMPI_Wtime();
      ok = ok && MPI_Allreduce(in, out, 4, MPI_FLOAT, MPI_SUM, c) == MPI_SUCCESS;
      t2 = PMPI_Wtime();
      ok = ok && MPI_Allreduce(in, again, 4, MPI_FLOAT, MPI_SUM, c) == MPI_SUCCESS;
      t2b = PMPI_Wtime();
      ok = ok && MPI_Comm_free(&c) == MPI_SUCCESS;
      if (!ok) failed = 1;
    }
    const double t3 = PMPI_Wtime();
    if (out[0] != (float)size || out[3] != 4.0f * (float)size || again[0] != (float)size) failed = 1;
    if (it >= warmup) {
      const int k = it - warmup;
      t[k] = (t3 - t0) - (t2b - t2);
      t[iters + k] = t1 - t0;
      t[2 * iters + k] = t2 - t1;
      t[3 * iters + k] = t3 - t2b;
      t[4 * iters + k] = t2b - t2;
    }
  }
  PMPI_Reduce(t, slowest, 5 * iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  int any_failed = 0;
  PMPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    if (all)
      for (int i = 0; i < iters; ++i) printf("iteration %d: %.3f ms\n", i, slowest[i] * 1e3);
    for (int part = 0; part < 5; ++part) qsort(slowest + part * iters, (size_t)iters, sizeof(double), cmp_double);
    printf("# np %d, %s, %d iterations%s: create + first allreduce + destroy, slowest rank\n", size,
           use_api ? "C API (bc_comm_create)" : "MPI_Comm_dup/MPI_Allreduce/MPI_Comm_free", iters,
           warmup ? " after 1 warm-up" : "");
    printf("median %.3f ms  min %.3f ms  max %.3f ms%s\n", slowest[iters / 2] * 1e3, slowest[0] * 1e3,
           slowest[iters - 1] * 1e3, any_failed ? "  (FAILED)" : "");
    printf("# medians of the parts (each the slowest rank's): create %.3f ms, first allreduce %.3f ms, destroy %.3f ms;"
           " a second allreduce (not counted) %.3f ms\n",
           slowest[iters + iters / 2] * 1e3, slowest[2 * iters + iters / 2] * 1e3, slowest[3 * iters + iters / 2] * 1e3,
           slowest[4 * iters + iters / 2] * 1e3);
  }
  free(t);
  free(slowest);
  if (use_api) bc_finalize();
  MPI_Finalize();
  return any_failed ? 1 : 0;
}
