/* The first calls after start: per window of calls, the mean time per call, on each rank; BlueConnect (MPI_Allreduce under
   the preload) first, then the MPI library (PMPI_Allreduce), as the route's probes run them. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int n = argc > 1 ? atoi(argv[1]) / 4 : 1, calls = argc > 2 ? atoi(argv[2]) : 4000;
  float s[1024] = {1}, r[1024];
  double *t = malloc(sizeof(double) * (calls + 1));
  int mpi_first = argc > 3 && atoi(argv[3]);
  for (int pass = 0; pass < 2; pass++) {
    int lib = mpi_first ? 1 - pass : pass;
    for (int i = 0; i < calls; i++) {
      t[i] = now_us();
      if (lib == 0) MPI_Allreduce(s, r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else PMPI_Allreduce(s, r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    t[calls] = now_us();
    char line[2000]; int len = snprintf(line, sizeof line, "rank %d %s:", rank, lib ? "mpi" : "bc ");
    int w[] = {0, 1, 2, 10, 74, 148, 300, 600, 1000, 2000, 4000, 8000, 16000};
    for (int k = 0; k + 1 < 13 && w[k + 1] <= calls; k++)
      len += snprintf(line + len, sizeof line - len, " [%d,%d) %.2f", w[k], w[k + 1], (t[w[k + 1]] - t[w[k]]) / (w[k + 1] - w[k]));
    printf("%s\n", line); fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
