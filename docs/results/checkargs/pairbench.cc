// Paired cost of BC_CHECK_ARGS: two communicators in one job, one with the
// check and one without; blocks of back-to-back calls alternate between them,
// so that the load of a shared machine hits both alike. Median per-call time
// over the blocks, slowest rank's block time.
#include <mpi.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "blueconnect.h"
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  bc_init();
  int r, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  bc_comm_t on, off;
  bc_comm_create_with(MPI_COMM_WORLD, "BC_CHECK_ARGS=1", &on);
  bc_comm_create_with(MPI_COMM_WORLD, "BC_CHECK_ARGS=0", &off);
  const long sizes[] = {4, 64 << 10, 4 << 20};
  const int blocks = atoi(argv[1]);
  std::vector<float> a(1 << 20, 1.0f), b(1 << 20);
  for (long bytes : sizes) {
    const long n = bytes / 4;
    const int calls = bytes <= 4 ? 400 : bytes <= (64 << 10) ? 100 : 10;
    std::vector<double> t[2];
    for (int w = 0; w < 2; ++w) for (int i = 0; i < 5; ++i) bc_allreduce(a.data(), b.data(), n, BC_FLOAT32, BC_SUM, w ? on : off);
    for (int k = 0; k < blocks; ++k)
      for (int w0 = 0; w0 < 2; ++w0) {
        const int w = (k % 2) ? 1 - w0 : w0;  // alternate which goes first
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < calls; ++i)
          if (bc_allreduce(a.data(), b.data(), n, BC_FLOAT32, BC_SUM, w ? on : off) != BC_OK) { fprintf(stderr, "%s\n", bc_last_error()); MPI_Abort(MPI_COMM_WORLD, 1); }
        double dt = (MPI_Wtime() - t0) / calls, mx;
        MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[w].push_back(mx);
      }
    for (int w = 0; w < 2; ++w) std::sort(t[w].begin(), t[w].end());
    double off_us = t[0][blocks / 2] * 1e6, on_us = t[1][blocks / 2] * 1e6;
    if (r == 0) printf("np %d size %ld off %.2f us on %.2f us diff %.2f us (%.1f%%)\n", p, bytes, off_us, on_us,
                       on_us - off_us, 100.0 * (on_us - off_us) / off_us);
  }
  bc_comm_destroy(&on);
  bc_comm_destroy(&off);
  bc_finalize();
  MPI_Finalize();
}
