// The Catch2 session every MPI test program runs, after MPI_Init: every rank
// runs the same test cases, only rank 0 reports, and the exit status is the
// worst of all ranks. Include it after <catch2/catch.hpp> with CATCH_CONFIG_RUNNER.
#pragma once

#include <mpi.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "blueconnect.h"

namespace bctest {

inline int catch_mpi_session(int argc, char **argv) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Tests never read or write the user's cost model cache (a model cached by
  // an earlier run would skip the calibrations they check); the cache's own
  // tests turn it on for their communicators, in a directory of their own.
  setenv("BC_MODEL_CACHE", "off", 0);
  if (bc_init() != BC_OK) {
    std::fprintf(stderr, "bc_init failed: %s\n", bc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  Catch::Session session;
  int rc = session.applyCommandLine(argc, argv);
  // Only rank 0 writes the report. If it cannot (say, -o into a directory that
  // does not exist), no rank runs: a rank 0 that stopped alone would leave the
  // others waiting in the first collective forever.
  int cannot_report = 0;
  if (rc == 0 && rank == 0) {
    const std::string out = session.configData().outputFilename;
    if (!out.empty() && out != "-" && out[0] != '%') {
      if (FILE *f = std::fopen(out.c_str(), "w")) {
        std::fclose(f);
      } else {
        std::fprintf(stderr, "cannot write the test report %s: %s\n", out.c_str(), std::strerror(errno));
        cannot_report = 1;
      }
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &cannot_report, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (cannot_report) rc = 2;
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

}  // namespace bctest
