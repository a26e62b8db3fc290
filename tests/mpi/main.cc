// Catch2 under MPI: every rank runs the same test cases; only rank 0 reports.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include "catch_mpi_session.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  return bctest::catch_mpi_session(argc, argv);
}
