// Catch2 under MPI: every rank runs the same test cases; only rank 0 reports.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include "blueconnect.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (bc_init() != BC_OK) {
    std::fprintf(stderr, "bc_init failed: %s\n", bc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  Catch::Session session;
  int rc = session.applyCommandLine(argc, argv);
  if (rc == 0) {
    if (rank != 0) session.configData().outputFilename = "/dev/null";
    rc = session.run();
  }
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  bc_finalize();
  MPI_Finalize();
  return worst;
}
