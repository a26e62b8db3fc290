/* An ordinary MPI program whose threads call MPI_Allreduce and
 * MPI_Iallreduce at the same time, each on communicators of its own
 * (MPI_THREAD_MULTIPLE), as a program with a communication thread per model
 * part or per process group does. Under the interposer the first call on each
 * communicator creates its BlueConnect communicator, so creations overlap too;
 * the last phase duplicates and frees communicators in the threads as well.
 *
 * Every thread's data depends on its communicator, so a message delivered to
 * another thread's operation shows as a wrong element. The expected values are
 * computed locally; the threads call no collective on MPI_COMM_WORLD.
 *
 * Usage: mpirun ... pmpi_threads   (exit 0 pass, 1 fail, 77 skip: an MPI
 * without MPI_THREAD_MULTIPLE). tests/pmpi/threads_check.sh runs it under the
 * interposer and checks from BC_PMPI_STATS that BlueConnect served the calls. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 3
#define GUARD 64

struct job {
  int k;             /* thread index */
  MPI_Comm parent;   /* its communicator (dup'd again in the last phase) */
  int rounds;
  char error[400];   /* first failure, "" if none */
};

/* Element i of rank r's input in thread k's round: small integers, exact in
 * float, different in every thread and round. */
static long value(int k, int r, long i, int round) { return (i * 37 + r * 101 + k * 17 + round * 3) % 200 - 100; }

static void put(void *buf, MPI_Datatype t, long i, long v) {
  if (t == MPI_INT) ((int *)buf)[i] = (int)v;
  else if (t == MPI_FLOAT) ((float *)buf)[i] = (float)v;
  else ((double *)buf)[i] = (double)v;
}

static int same(const void *buf, MPI_Datatype t, long i, long v) {
  if (t == MPI_INT) return ((const int *)buf)[i] == (int)v;
  if (t == MPI_FLOAT) return ((const float *)buf)[i] == (float)v;
  return ((const double *)buf)[i] == (double)v;
}

static int guards_intact(const unsigned char *mem, size_t bytes) {
  for (size_t i = 0; i < GUARD; ++i)
    if (mem[i] != 0xA5 || mem[GUARD + bytes + i] != 0xA5) return 0;
  return 1;
}

/* One pass over counts of every shape on comm; 0 or 1 with job->error set. */
static int pass(struct job *job, MPI_Comm comm, int round, int *call) {
  int r, p;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &p);
  const long counts[] = {0, 1, 7, p + 1, 1031, 65537, 600001};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; ++c) {
    const long n = counts[c];
    const int kind = *call % 4, in_place = *call % 2 == 0, nonblocking = *call % 3 == 1;
    ++*call;
    MPI_Datatype t = kind == 0 ? MPI_INT : kind == 2 ? MPI_DOUBLE : MPI_FLOAT;
    MPI_Op op = kind == 2 ? MPI_MAX : MPI_SUM;
    int es;
    MPI_Type_size(t, &es);
    const size_t bytes = (size_t)n * (size_t)es;
    unsigned char *in = malloc(bytes + 2 * GUARD), *out = malloc(bytes + 2 * GUARD);
    if (!in || !out) {
      snprintf(job->error, sizeof job->error, "thread %d: out of memory", job->k);
      free(in);
      free(out);
      return 1;
    }
    memset(in, 0xA5, bytes + 2 * GUARD);
    memset(out, 0xA5, bytes + 2 * GUARD);
    memset(out + GUARD, 0xCD, bytes);
    for (long i = 0; i < n; ++i) put((in_place ? out : in) + GUARD, t, i, value(job->k, r, i, round));
    const void *send = in_place ? MPI_IN_PLACE : (const void *)(in + GUARD);
    int rc;
    if (nonblocking) {
      MPI_Request req;
      rc = MPI_Iallreduce(send, out + GUARD, (int)n, t, op, comm, &req);
      if (rc == MPI_SUCCESS) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
      rc = MPI_Allreduce(send, out + GUARD, (int)n, t, op, comm);
    }
    const char *what = "";
    long bad = -1;
    if (rc != MPI_SUCCESS) what = "returned an error";
    for (long i = 0; i < n && !*what; ++i) {
      long want = value(job->k, 0, i, round);
      for (int q = 1; q < p; ++q) {
        const long v = value(job->k, q, i, round);
        want = op == MPI_MAX ? (v > want ? v : want) : want + v;
      }
      if (!same(out + GUARD, t, i, want)) what = "wrong element", bad = i;
    }
    if (!*what && (!guards_intact(out, bytes) || !guards_intact(in, bytes))) what = "guard bytes damaged";
    for (long i = 0; i < n && !*what && !in_place; ++i)
      if (!same(in + GUARD, t, i, value(job->k, r, i, round))) what = "input changed", bad = i;
    free(in);
    free(out);
    if (*what) {
      snprintf(job->error, sizeof job->error, "thread %d round %d count %ld kind %d%s%s: %s %ld", job->k, round, n,
               kind, in_place ? " in place" : "", nonblocking ? " MPI_Iallreduce" : "", what, bad);
      return 1;
    }
  }
  return 0;
}

static void *run(void *arg) {
  struct job *job = arg;
  int call = 0;
  for (int round = 0; round < job->rounds; ++round)
    if (pass(job, job->parent, round, &call)) return NULL;
  /* Communicators that come and go in the threads at once: each new one makes
   * the interposer create (and at free destroy) a BlueConnect communicator. */
  for (int life = 0; life < 4; ++life) {
    MPI_Comm c;
    MPI_Comm_dup(job->parent, &c);
    const int failed = pass(job, c, life, &call);
    MPI_Comm_free(&c);
    if (failed) return NULL;
  }
  return NULL;
}

int main(int argc, char **argv) {
  int provided = MPI_THREAD_SINGLE, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0) fprintf(stderr, "pmpi_threads: thread level %d, below MPI_THREAD_MULTIPLE: skipped\n", provided);
    MPI_Finalize();
    return 77;
  }
  struct job jobs[THREADS];
  pthread_t threads[THREADS];
  memset(jobs, 0, sizeof jobs);
  /* The world, the world in reverse rank order, and odd and even ranks. */
  MPI_Comm_dup(MPI_COMM_WORLD, &jobs[0].parent);
  MPI_Comm_split(MPI_COMM_WORLD, 0, size - 1 - rank, &jobs[1].parent);
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &jobs[2].parent);
  for (int k = 0; k < THREADS; ++k) {
    jobs[k].k = k;
    jobs[k].rounds = 3;
    pthread_create(&threads[k], NULL, run, &jobs[k]);
  }
  int failed = 0;
  for (int k = 0; k < THREADS; ++k) {
    pthread_join(threads[k], NULL);
    if (jobs[k].error[0]) {
      fprintf(stderr, "pmpi_threads: rank %d: %s\n", rank, jobs[k].error);
      failed = 1;
    }
    MPI_Comm_free(&jobs[k].parent);
  }
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("pmpi_threads: %d ranks x %d threads: %s\n", size, THREADS, any ? "FAILED" : "all results right");
  MPI_Finalize();
  return any ? 1 : 0;
}
