/* Argument mismatch through the PMPI preload (issue 13 item 2): with
 * BC_CHECK_ARGS=1 and BC_PMPI_ROUTE=bc, rank 0 calls MPI_Allreduce (and then
 * MPI_Reduce_scatter_block and MPI_Iallreduce) with half the others' count.
 * Every rank must get an MPI_ERR_ARG error class back (MPI_ERRORS_RETURN)
 * within 5 s, and the communicator must still work afterwards (nothing was
 * sent). MPI_Iallreduce returns at once (the agreement is its request's first
 * phase) and the error comes from MPI_Wait; MPI raises an error of a
 * generalized request through MPI_COMM_WORLD's handler (Open MPI: a request
 * with no communicator of its own), so that one returns errors too. Exits 0 on pass, 1 on failure; quiet unless something fails. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, size, failures;

static void expect(int ok, const char *what) {
  int all = 0;
  PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (!all) {
    if (rank == 0) fprintf(stderr, "pmpi_mismatch: FAILED: %s (on some rank)\n", what);
    ++failures;
  }
}

static int err_class(int rc) {
  int cls = rc;
  if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
  return cls;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) {
    MPI_Finalize();
    return 77;
  }
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  enum { kCount = 1000 };
  float *in = malloc(sizeof(float) * kCount * size), *out = malloc(sizeof(float) * kCount * size);
  for (int i = 0; i < kCount * size; ++i) in[i] = 1.0f;
  const int mine = rank == 0 ? kCount / 2 : kCount;

  double t0 = MPI_Wtime();
  int cls = err_class(MPI_Allreduce(in, out, mine, MPI_FLOAT, MPI_SUM, comm));
  expect(cls == MPI_ERR_ARG, "MPI_Allreduce with rank 0 at half the count returns MPI_ERR_ARG");
  expect(MPI_Wtime() - t0 < 5.0, "... within 5 s");

  t0 = MPI_Wtime();
  cls = err_class(MPI_Reduce_scatter_block(in, out, mine, MPI_FLOAT, MPI_SUM, comm));
  expect(cls == MPI_ERR_ARG, "MPI_Reduce_scatter_block with rank 0 at half the count returns MPI_ERR_ARG");
  expect(MPI_Wtime() - t0 < 5.0, "... within 5 s");

  t0 = MPI_Wtime();
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Iallreduce(in, out, mine, MPI_FLOAT, MPI_SUM, comm, &req);
  if (rc == MPI_SUCCESS) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
  expect(err_class(rc) == MPI_ERR_ARG, "MPI_Iallreduce with rank 0 at half the count returns MPI_ERR_ARG");
  expect(MPI_Wtime() - t0 < 5.0, "... within 5 s");

  /* Nothing was sent: the same communicator still gives the right sum. */
  rc = MPI_Allreduce(in, out, kCount, MPI_FLOAT, MPI_SUM, comm);
  int right = rc == MPI_SUCCESS;
  for (int i = 0; i < kCount && right; ++i) right = out[i] == (float)size;
  expect(right, "the next MPI_Allreduce on the communicator is right");

  free(in);
  free(out);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return failures ? 1 : 0;
}
