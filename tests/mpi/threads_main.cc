// Catch2 under MPI for the tests that call the library from several threads
// at once (test_threads.cc): MPI_THREAD_MULTIPLE, which they need. The main
// suite (main.cc) keeps MPI_Init, the level most MPI programs run at.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include <cstdio>

#include "catch_mpi_session.h"

int main(int argc, char **argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    // Every test here needs it; an MPI without it cannot run them.
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
      std::fprintf(stderr, "threads_tests: this MPI gives thread level %d, below MPI_THREAD_MULTIPLE: skipped\n",
                   provided);
    MPI_Finalize();
    return 77;
  }
  return bctest::catch_mpi_session(argc, argv);
}
