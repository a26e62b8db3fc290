/* The preload's soak (issue 43 item 3): an ordinary MPI program that makes
 * many all-reduces of random shape, each checked bit for bit, on communicators
 * created and freed along the way, and watches its own memory and file
 * descriptors. Run under LD_PRELOAD=libblueconnect_mpi.so by scripts/soak (by
 * hand: 20,000 calls, 0 B-16 MiB, one node and 3 simulated hosts) and, short,
 * by the pmpi suite (pmpi_soak_np4).
 *
 * Every rank draws the same sequence (one seed): per call the communicator
 * (the world, or the current extra one: a duplicate, the world in reverse
 * order, or the odd or even ranks, replaced every --comm-every calls), the
 * datatype, the op, the size (2 % 0 B, 2 % the maximum, the rest log-uniform
 * from one element to the maximum), in place or not, blocking MPI_Allreduce
 * or MPI_Iallreduce completed by MPI_Wait or an MPI_Test loop. Inputs are
 * small integers from (call, rank, element), so every reduction is exact in
 * any order and each rank computes the expected result itself. Outputs are
 * poisoned before the call; guard bytes follow every buffer; a send buffer
 * must come back unchanged.
 *
 * Memory: VmRSS and the count of /proc/self/fd, the largest over the ranks
 * (MPI_Reduce: not interposed), and the ranks' mappings of shared-memory
 * segments in all (/proc/self/maps),
 * at the end of the first thousand calls, at the start of the last 10,000
 * (or of the last half when fewer) and at the end. Exit 0 when nothing was
 * wrong, RSS grew at most --rss-slack-kib over that last stretch, and the
 * descriptors and segments are no more at the end than at its start; 1
 * otherwise. The last stretch, not the first thousand, is the reference:
 * by then every kind of communicator has been made and freed, and the shm
 * transport keeps a few idle setups for the next one of the same ranks
 * (transports/shm/shm_reuse.cc), so the count of segments after the first
 * thousand (two communicators) is not the steady state. The heap's bytes in
 * use (glibc's mallinfo2) are reported beside RSS: RSS that grows while they
 * stay flat is memory the allocator keeps, not memory anyone leaked. The
 * report is printed by rank 0.
 *
 * Usage: pmpi_soak [--calls N] [--max-bytes B] [--seed S] [--comm-every K]
 *                  [--rss-slack-kib K] [--heap-slack-kib K] [--trace-every K]
 * --heap-slack-kib K: the heap in use may grow at most K KiB over the last
 * stretch too (default: not checked; RSS is). Exact where RSS is not, so a
 * leak of a few hundred bytes per communicator shows in a short run.
 * --trace-every K: each rank prints its VmRSS and heap in use to stderr every
 * K calls (to see when memory grows).
 */
#include <dirent.h>
#include <malloc.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kGuard = 64, kPoison = 0xA5, kGuardByte = 0x5C };

/* splitmix64: the same stream on every rank. */
static uint64_t g_state;
static uint64_t next_u64(void) {
  uint64_t z = (g_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double next_unit(void) { return (double)(next_u64() >> 11) / 9007199254740992.0; }

typedef enum { T_INT32, T_INT64, T_FLOAT, T_DOUBLE, T_INT16, T_COUNT } Type;
static const char *type_name[] = {"int32", "int64", "float", "double", "int16"};
static size_t type_size(Type t) {
  switch (t) {
    case T_INT32: return 4;
    case T_INT64: return 8;
    case T_FLOAT: return 4;
    case T_DOUBLE: return 8;
    default: return 2;
  }
}
static MPI_Datatype type_mpi(Type t) {
  switch (t) {
    case T_INT32: return MPI_INT32_T;
    case T_INT64: return MPI_INT64_T;
    case T_FLOAT: return MPI_FLOAT;
    case T_DOUBLE: return MPI_DOUBLE;
    default: return MPI_INT16_T;
  }
}

typedef enum { O_SUM, O_MAX, O_MIN, O_PROD, O_COUNT } Op;
static const char *op_name[] = {"sum", "max", "min", "prod"};
static MPI_Op op_mpi(Op o) { return o == O_SUM ? MPI_SUM : o == O_MAX ? MPI_MAX : o == O_MIN ? MPI_MIN : MPI_PROD; }

/* Rank r's element i in call `call`: |sum| <= 8 * 50 for sums, products of
 * 1, -1 and (rarely) 2 over at most 8 ranks: exact in every type. */
static int64_t value(Op o, uint64_t call, int r, int64_t i) {
  const uint64_t h = (uint64_t)i * 2654435761u + (uint64_t)r * 40503u + call * 97u;
  if (o == O_PROD) return (h % 11 == 0) ? 2 : (h % 3 == 0) ? -1 : 1;
  return (int64_t)(h % 101) - 50;
}
static void store(Type t, void *base, int64_t i, int64_t v) {
  switch (t) {
    case T_INT32: ((int32_t *)base)[i] = (int32_t)v; break;
    case T_INT64: ((int64_t *)base)[i] = v; break;
    case T_FLOAT: ((float *)base)[i] = (float)v; break;
    case T_DOUBLE: ((double *)base)[i] = (double)v; break;
    default: ((int16_t *)base)[i] = (int16_t)v; break;
  }
}
static int64_t expected(Op o, uint64_t call, int p, int64_t i) {
  int64_t acc = value(o, call, 0, i);
  for (int r = 1; r < p; ++r) {
    const int64_t v = value(o, call, r, i);
    acc = o == O_SUM ? acc + v : o == O_MAX ? (v > acc ? v : acc) : o == O_MIN ? (v < acc ? v : acc) : acc * v;
  }
  return acc;
}

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = strtol(line + 6, NULL, 10);
  if (f) fclose(f);
  return kib;
}
/* The heap's bytes in use, small and mmapped blocks (what a leak grows). */
static long heap_in_use_kib(void) {
  const struct mallinfo2 m = mallinfo2();
  return (long)((m.uordblks + m.hblkhd) / 1024);
}
static long open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  long n = 0;
  if (!d) return -1;
  while (readdir(d)) ++n;
  closedir(d);
  return n - 3; /* ".", ".." and the directory's own descriptor */
}

/* The shared-memory segments this process has mapped (transports/shm: the
 * node leader creates /dev/shm/bc-shm-PID-..., every rank maps it, and the
 * name is unlinked once all have, so /proc/self/maps is where a leak shows). */
static long mapped_shm_segments(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  long n = 0;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, "/bc-shm-")) ++n;
  if (f) fclose(f);
  return n;
}

/* At rank 0: the largest RSS and fd count over the ranks, the ranks'
 * mappings of shared-memory segments in all, and the largest heap in use. */
static void sample(long out[4]) {
  long mine[2] = {rss_kib(), open_fds()}, shm = mapped_shm_segments(), heap = heap_in_use_kib();
  MPI_Reduce(mine, out, 2, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&shm, out + 2, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&heap, out + 3, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
}

/* The extra communicator of generation g (the world is always there too). */
static MPI_Comm make_extra(int g) {
  int p = 0, r = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm c = MPI_COMM_NULL;
  switch (g % 3) {
    case 0: MPI_Comm_dup(MPI_COMM_WORLD, &c); break;
    case 1: MPI_Comm_split(MPI_COMM_WORLD, 0, p - 1 - r, &c); break;
    default: MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &c); break;
  }
  return c;
}

int main(int argc, char **argv) {
  long calls = 20000, comm_every = 500, rss_slack_kib = 1024, heap_slack_kib = -1, trace_every = 0;
  double max_bytes = 16.0 * 1024 * 1024;
  uint64_t seed = 42;
  for (int a = 1; a + 1 < argc; a += 2) {
    if (!strcmp(argv[a], "--calls")) calls = atol(argv[a + 1]);
    else if (!strcmp(argv[a], "--max-bytes")) max_bytes = atof(argv[a + 1]);
    else if (!strcmp(argv[a], "--seed")) seed = strtoull(argv[a + 1], NULL, 10);
    else if (!strcmp(argv[a], "--comm-every")) comm_every = atol(argv[a + 1]);
    else if (!strcmp(argv[a], "--rss-slack-kib")) rss_slack_kib = atol(argv[a + 1]);
    else if (!strcmp(argv[a], "--heap-slack-kib")) heap_slack_kib = atol(argv[a + 1]);
    else if (!strcmp(argv[a], "--trace-every")) trace_every = atol(argv[a + 1]);
    else {
      fprintf(stderr, "pmpi_soak: unknown argument %s\n", argv[a]);
      return 2;
    }
  }
  if (calls < 1 || max_bytes < 8 || comm_every < 1) {
    fprintf(stderr, "pmpi_soak: --calls and --comm-every must be positive, --max-bytes at least 8\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  g_state = seed;

  const size_t cap = (size_t)max_bytes;
  unsigned char *send = malloc(cap + kGuard), *recv = malloc(cap + kGuard);
  unsigned char want[8]; /* one expected element, of the widest type */
  if (!send || !recv) {
    fprintf(stderr, "pmpi_soak: rank %d: cannot allocate 2 x %zu bytes\n", world_rank, cap);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  memset(send, kGuardByte, cap + kGuard);
  memset(recv, kGuardByte, cap + kGuard);

  int generation = 0;
  MPI_Comm extra = make_extra(generation);
  long wrong = 0, errors = 0, in_place_n = 0, nonblocking_n = 0, empty_n = 0, max_n = 0;
  double bytes_total = 0;
  long first_thousand[4] = {0, 0, 0, 0}, stretch_start[4] = {0, 0, 0, 0}, end[4] = {0, 0, 0, 0};
  const long first_mark = calls < 1000 ? calls : 1000;
  const long stretch_mark = calls > 20000 ? calls - 10000 : calls > 1 ? calls / 2 : 1;
  char first_wrong[512] = "";
  const double t0 = MPI_Wtime();

  for (long call = 0; call < calls; ++call) {
    if (call > 0 && call % comm_every == 0) {
      MPI_Comm_free(&extra);
      extra = make_extra(++generation);
    }
    /* The draws, the same on every rank. */
    const int use_extra = next_u64() % 2 == 0;
    const Type t = (Type)(next_u64() % T_COUNT);
    const Op o = (next_u64() % 8 == 0) ? O_PROD : (Op)(next_u64() % 3);
    const double u = next_unit();
    const int in_place = next_u64() % 2 == 0;
    const int how = (int)(next_u64() % 3); /* 0 blocking, 1 MPI_Wait, 2 MPI_Test loop */
    const size_t es = type_size(t);
    const int64_t max_count = (int64_t)(cap / es);
    int64_t count;
    if (u < 0.02) count = 0;
    else if (u < 0.04) count = max_count;
    else count = (int64_t)floor(exp(log((double)max_count) * (u - 0.04) / 0.96));
    if (count > max_count) count = max_count;
    MPI_Comm comm = use_extra ? extra : MPI_COMM_WORLD;
    int p = 0, r = 0;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &r);
    const size_t bytes = (size_t)count * es;

    /* Inputs; the output poisoned; guard bytes after each. */
    unsigned char *in = in_place ? recv : send;
    for (int64_t i = 0; i < count; ++i) store(t, in, i, value(o, (uint64_t)call, r, i));
    if (!in_place) memset(recv, kPoison, bytes);
    memset(recv + bytes, kGuardByte, kGuard);
    memset(send + bytes, kGuardByte, kGuard);

    int rc;
    if (how == 0) {
      rc = MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, (int)count, type_mpi(t), op_mpi(o), comm);
    } else {
      MPI_Request req = MPI_REQUEST_NULL;
      rc = MPI_Iallreduce(in_place ? MPI_IN_PLACE : send, recv, (int)count, type_mpi(t), op_mpi(o), comm, &req);
      if (rc == MPI_SUCCESS && how == 1) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
      for (int done = 0; rc == MPI_SUCCESS && how == 2 && !done;) rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      ++nonblocking_n;
    }
    in_place_n += in_place;
    empty_n += count == 0;
    max_n += count == max_count;
    bytes_total += (double)bytes;

    /* The check: every element, the guards, the send buffer. */
    long bad = 0;
    int64_t first_bad = -1;
    if (rc != MPI_SUCCESS) {
      ++errors;
      bad = 1;
    }
    for (int64_t i = 0; i < count && rc == MPI_SUCCESS; ++i) {
      store(t, want, 0, expected(o, (uint64_t)call, p, i));
      if (memcmp(want, recv + i * es, es) != 0) {
        if (first_bad < 0) first_bad = i;
        ++bad;
      }
    }
    for (int g = 0; g < kGuard; ++g)
      if (recv[bytes + g] != kGuardByte || send[bytes + g] != kGuardByte) {
        bad += 1;
        break;
      }
    if (!in_place)
      for (int64_t i = 0; i < count; ++i) {
        store(t, want, 0, value(o, (uint64_t)call, r, i));
        if (memcmp(want, send + i * es, es) != 0) {
          bad += 1;
          break;
        }
      }
    if (bad) {
      ++wrong;
      if (!first_wrong[0])
        snprintf(first_wrong, sizeof first_wrong,
                 "call %ld: %s %s count %lld on %s%s%s: rc %d, %ld wrong, first at element %lld", call,
                 type_name[t], op_name[o], (long long)count, use_extra ? "the extra communicator" : "the world",
                 in_place ? ", in place" : "", how == 0 ? "" : how == 1 ? ", MPI_Iallreduce+MPI_Wait" : ", MPI_Iallreduce+MPI_Test",
                 rc, bad, (long long)first_bad);
    }
    if (trace_every > 0 && (call + 1) % trace_every == 0)
      fprintf(stderr, "pmpi_soak: rank %d after call %ld: VmRSS %ld KiB, heap in use %ld KiB\n", world_rank, call + 1,
              rss_kib(), heap_in_use_kib());
    if (call + 1 == first_mark) sample(first_thousand);
    if (call + 1 == stretch_mark) sample(stretch_start);
  }
  MPI_Comm_free(&extra);
  sample(end);
  const double seconds = MPI_Wtime() - t0;

  long wrong_all = 0, errors_all = 0;
  MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&errors, &errors_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (wrong && first_wrong[0]) fprintf(stderr, "pmpi_soak: rank %d: first wrong %s\n", world_rank, first_wrong);
  int ok = 1;
  if (world_rank == 0) {
    const long growth = end[0] - stretch_start[0];
    ok = wrong_all == 0 && errors_all == 0 && growth <= rss_slack_kib && end[1] <= stretch_start[1] &&
         end[2] <= stretch_start[2] && (heap_slack_kib < 0 || end[3] - stretch_start[3] <= heap_slack_kib);
    printf("pmpi_soak: %ld calls in %.1f s (%.2f GB reduced per rank; %ld of 0 B, %ld of the maximum %.0f B, "
           "%ld in place, %ld non-blocking, %d communicators freed), seed %llu\n",
           calls, seconds, bytes_total / 1e9, empty_n, max_n, max_bytes, in_place_n, nonblocking_n, generation,
           (unsigned long long)seed);
    printf("pmpi_soak: wrong %ld (calls x ranks), MPI errors %ld\n", wrong_all, errors_all);
    printf("pmpi_soak: largest VmRSS over the ranks: %ld KiB after call %ld, %ld KiB after call %ld, %ld KiB at the "
           "end: %+ld KiB over the last %ld calls (at most %ld allowed)\n",
           first_thousand[0], first_mark, stretch_start[0], stretch_mark, end[0], growth, calls - stretch_mark,
           rss_slack_kib);
    printf("pmpi_soak: largest heap in use over the ranks (mallinfo2): %ld KiB after call %ld, %ld KiB after call %ld, "
           "%ld KiB at the end: %+ld KiB over the last %ld calls%s\n",
           first_thousand[3], first_mark, stretch_start[3], stretch_mark, end[3], end[3] - stretch_start[3],
           calls - stretch_mark, heap_slack_kib < 0 ? " (not checked)" : "");
    printf("pmpi_soak: open descriptors (most on a rank): %ld after call %ld, %ld after call %ld, %ld at the end\n",
           first_thousand[1], first_mark, stretch_start[1], stretch_mark, end[1]);
    printf("pmpi_soak: the ranks' mappings of shared-memory segments: %ld after call %ld, %ld after call %ld, %ld at "
           "the end (the world's communicator's stay until MPI_Finalize)\n",
           first_thousand[2], first_mark, stretch_start[2], stretch_mark, end[2]);
    printf("pmpi_soak: %s\n", ok ? "PASS" : "FAIL");
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  free(send);
  free(recv);
  MPI_Finalize();
  return ok ? 0 : 1;
}
