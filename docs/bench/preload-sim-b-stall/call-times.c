/* A back-to-back all-reduce loop that records every call's time on every
   rank, with the calling thread's scheduler counters around it
   (/proc/thread-self/schedstat: time on a CPU, time waiting runnable on a
   runqueue, timeslices; getrusage's context switches), and prints the calls
   over a threshold: to tell which call stalled, on which ranks, and whether
   a rank sat runnable but unscheduled. Rounds alternate: even rounds call
   MPI_Allreduce (BlueConnect under the preload), odd rounds PMPI_Allreduce
   (the MPI library alone).
   mpicc -O2 -o call-times call-times.c
   ... -np 8 ./call-times BYTES CALLS_PER_ROUND THRESHOLD_US ROUNDS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/resource.h>
static int ssfd = -1;
/* /proc/self/schedstat: ns on cpu, ns waiting on a runqueue, timeslices */
static void sched_read(double v[5]) { char b[128] = {0}; pread(ssfd, b, sizeof b - 1, 0); unsigned long long a=0,c=0,d=0; sscanf(b, "%llu %llu %llu", &a, &c, &d); v[0]=a/1e3; v[1]=c/1e3; v[2]=d;
  struct rusage ru; getrusage(RUSAGE_SELF, &ru); v[3]=ru.ru_nvcsw; v[4]=ru.ru_nivcsw; }

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, np; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &np);
  int bytes = argc > 1 ? atoi(argv[1]) : 256, calls = argc > 2 ? atoi(argv[2]) : 5000;
  double thresh = argc > 3 ? atof(argv[3]) : 10000;
  int rounds = argc > 4 ? atoi(argv[4]) : 3;
  /* rounds alternate: even rounds MPI_Allreduce (the preload), odd rounds PMPI_Allreduce (the MPI library) */
  int n = bytes / 4;
  float *s = malloc(bytes + 4), *r = malloc(bytes + 4);
  for (int i = 0; i < n; i++) s[i] = rank + i % 7;
  double *t = malloc(sizeof(double) * calls), *st = malloc(sizeof(double) * calls);
  double (*sa)[5] = malloc(sizeof(double[5]) * calls), (*sb)[5] = malloc(sizeof(double[5]) * calls);
  ssfd = open("/proc/thread-self/schedstat", O_RDONLY);
  for (int round = 0; round < rounds; round++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_us();
    for (int i = 0; i < calls; i++) {
      sched_read(sa[i]);
      double a = now_us();
      if (round % 2 == 0) MPI_Allreduce(s, r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else PMPI_Allreduce(s, r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double b = now_us();
      sched_read(sb[i]);
      st[i] = a - t0; t[i] = b - a;
    }
    double tot = now_us() - t0;
    int slow = 0;
    for (int i = 0; i < calls; i++)
      if (t[i] > thresh) { printf("%s round %d rank %d call %d at %.0f us took %.0f us: on cpu %.0f us, runqueue wait %.0f us, slices %.0f, voluntary switches %.0f, involuntary %.0f\n", round % 2 ? "mpi" : "bc", round, rank, i, st[i], t[i], sb[i][0]-sa[i][0], sb[i][1]-sa[i][1], sb[i][2]-sa[i][2], sb[i][3]-sa[i][3], sb[i][4]-sa[i][4]); slow++; }
    printf("%s round %d rank %d: %d calls %.1f us/call, %d slow\n", round % 2 ? "mpi" : "bc", round, rank, calls, tot / calls, slow);
    fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
