/*
 * pmpi_check: an ordinary MPI program (no BlueConnect header, no BlueConnect
 * library) that checks MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather
 * and MPI_Iallreduce. Run it under libblueconnect_mpi.so (LD_PRELOAD) to check
 * the interposer, or without it (or with BC_DISABLE=1) to check the test
 * against the MPI library itself.
 *
 * Every expected result is computed locally: the input of rank r, element i is
 * a function of (r, i, call number), so each rank knows what all ranks
 * contributed. Nothing here calls a collective the interposer intercepts to
 * check a result; the final verdict travels with MPI_Reduce and MPI_Gather,
 * which it does not intercept.
 *
 * Integer data are random bits, so sums and products wrap as in C (two's
 * complement); 8-bit sums need `--mca op ^avx` when they reach Open MPI (its
 * vectorised 8-bit sum saturates, upstream issue 8045). Floating data are small
 * integers, halves and powers of two, exact in any order of reduction; a
 * separate check uses inexact doubles and requires identical bits on every
 * rank.
 *
 * Modes:
 *   pmpi_check                 the full sweep
 *   pmpi_check --expect-bc     also checks what only the interposer does
 *                              (a BlueConnect error reaches the error handler)
 *   pmpi_check --stats         a fixed list of calls whose routes the
 *                              BC_PMPI_STATS file must show (stats_check.sh)
 *   pmpi_check --latency N     prints the mean time of N 8-byte MPI_Allreduce
 *   pmpi_check --reuse N       three communicators in turn (dup, N 8-byte
 *                              calls, free): each learns its route anew
 *
 * Exit status 0 when every check passed on every rank, 1 otherwise. On success
 * rank 0 prints exactly one line; failures are described on stderr.
 */
#include <mpi.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank, g_size;
/* Open MPI 4.1.2-4.1.4 reduce MPI_UNSIGNED_LONG as signed in MPI_MIN/MPI_MAX
 * (open-mpi/ompi#10525); BlueConnect does not. Set when the MPI library has
 * the bug and the run does not expect BlueConnect to serve the calls. */
static int g_skip_ulong_minmax;
static long g_checks, g_failures;
static unsigned g_salt = 1; /* advances with every collective call: same on every rank */

static void fail(const char *fmt, ...) {
  va_list ap;
  ++g_failures;
  if (g_failures > 25) return;
  fprintf(stderr, "pmpi_check [rank %d] FAIL: ", g_rank);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static void check(int ok, const char *fmt, ...) {
  va_list ap;
  char msg[512];
  ++g_checks;
  if (ok) return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fail("%s", msg);
}

/* ---- datatypes, values and ops ---- */

enum kind { KF, KS, KU };
typedef struct {
  const char *name;
  MPI_Datatype dt;
  int size;
  enum kind kind;
} tinfo;

enum opid { O_SUM, O_PROD, O_MIN, O_MAX, O_BAND, O_BOR, O_BXOR, O_COUNT };
static const char *const op_names[O_COUNT] = {"SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR"};
static MPI_Op op_handle(int o) {
  switch (o) {
    case O_SUM: return MPI_SUM;
    case O_PROD: return MPI_PROD;
    case O_MIN: return MPI_MIN;
    case O_MAX: return MPI_MAX;
    case O_BAND: return MPI_BAND;
    case O_BOR: return MPI_BOR;
    default: return MPI_BXOR;
  }
}

#define MAX_TYPES 24
static tinfo g_types[MAX_TYPES];
static int g_ntypes;

static void add_type(const char *name, MPI_Datatype dt, enum kind k) {
  int size = 0;
  MPI_Type_size(dt, &size);
  if (size != 1 && size != 2 && size != 4 && size != 8) return;
  g_types[g_ntypes].name = name;
  g_types[g_ntypes].dt = dt;
  g_types[g_ntypes].size = size;
  g_types[g_ntypes].kind = k;
  ++g_ntypes;
}

static const tinfo *type_named(const char *name) {
  int i;
  for (i = 0; i < g_ntypes; ++i)
    if (strcmp(g_types[i].name, name) == 0) return &g_types[i];
  return NULL;
}

static void init_types(void) {
  add_type("MPI_FLOAT", MPI_FLOAT, KF);
  add_type("MPI_DOUBLE", MPI_DOUBLE, KF);
  add_type("MPI_INT8_T", MPI_INT8_T, KS);
  add_type("MPI_UINT8_T", MPI_UINT8_T, KU);
  add_type("MPI_SIGNED_CHAR", MPI_SIGNED_CHAR, KS);
  add_type("MPI_UNSIGNED_CHAR", MPI_UNSIGNED_CHAR, KU);
  add_type("MPI_INT", MPI_INT, KS);
  add_type("MPI_UNSIGNED", MPI_UNSIGNED, KU);
  add_type("MPI_INT32_T", MPI_INT32_T, KS);
  add_type("MPI_UINT32_T", MPI_UINT32_T, KU);
  add_type("MPI_LONG", MPI_LONG, KS);
  add_type("MPI_UNSIGNED_LONG", MPI_UNSIGNED_LONG, KU);
  add_type("MPI_LONG_LONG", MPI_LONG_LONG, KS);
  add_type("MPI_UNSIGNED_LONG_LONG", MPI_UNSIGNED_LONG_LONG, KU);
  add_type("MPI_INT64_T", MPI_INT64_T, KS);
  add_type("MPI_UINT64_T", MPI_UINT64_T, KU);
  /* Not reduced by BlueConnect: the interposer must hand them to MPI. */
  add_type("MPI_SHORT", MPI_SHORT, KS);
  add_type("MPI_UNSIGNED_SHORT", MPI_UNSIGNED_SHORT, KU);
  add_type("MPI_INT16_T", MPI_INT16_T, KS);
}

static int op_valid(const tinfo *t, int o) { return t->kind != KF || o <= O_MAX; }

typedef union {
  double f;
  uint64_t u;
} val;

static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* Integers are kept truncated to the type's width and sign- or zero-extended. */
static uint64_t norm_int(const tinfo *t, uint64_t x) {
  const int bits = 8 * t->size;
  if (bits == 64) return x;
  x &= (1ull << bits) - 1;
  if (t->kind == KS && (x >> (bits - 1))) x |= ~((1ull << bits) - 1);
  return x;
}

/* The input of `rank`, element i, for op o. */
static val gen(const tinfo *t, int o, int rank, long i, unsigned salt) {
  val v;
  const uint64_t h = mix(((uint64_t)salt << 40) ^ ((uint64_t)rank << 32) ^ (uint64_t)i);
  if (t->kind == KF) {
    static const double factors[4] = {1.0, -1.0, 2.0, 0.5};
    if (o == O_SUM) v.f = (double)((int)(h % 201) - 100);
    else if (o == O_PROD) v.f = factors[h % 4];
    else v.f = (double)((int)(h % 2001) - 1000) + 0.5 * (double)((h >> 20) & 1);
  } else {
    v.u = norm_int(t, h);
  }
  return v;
}

static val combine(const tinfo *t, int o, val a, val b) {
  val r;
  if (t->kind == KF) {
    switch (o) {
      case O_SUM: r.f = a.f + b.f; break;
      case O_PROD: r.f = a.f * b.f; break;
      case O_MIN: r.f = a.f < b.f ? a.f : b.f; break;
      default: r.f = a.f > b.f ? a.f : b.f; break;
    }
    return r;
  }
  switch (o) {
    case O_SUM: r.u = a.u + b.u; break;
    case O_PROD: r.u = a.u * b.u; break;
    case O_MIN:
      if (t->kind == KS) r.u = (int64_t)a.u < (int64_t)b.u ? a.u : b.u;
      else r.u = a.u < b.u ? a.u : b.u;
      break;
    case O_MAX:
      if (t->kind == KS) r.u = (int64_t)a.u > (int64_t)b.u ? a.u : b.u;
      else r.u = a.u > b.u ? a.u : b.u;
      break;
    case O_BAND: r.u = a.u & b.u; break;
    case O_BOR: r.u = a.u | b.u; break;
    default: r.u = a.u ^ b.u; break;
  }
  r.u = norm_int(t, r.u);
  return r;
}

static void put(void *buf, long i, const tinfo *t, val v) {
  char *p = (char *)buf + (size_t)i * t->size;
  if (t->kind == KF) {
    if (t->size == 4) {
      float f = (float)v.f;
      memcpy(p, &f, 4);
    } else {
      memcpy(p, &v.f, 8);
    }
    return;
  }
  switch (t->size) {
    case 1: { uint8_t x = (uint8_t)v.u; memcpy(p, &x, 1); break; }
    case 2: { uint16_t x = (uint16_t)v.u; memcpy(p, &x, 2); break; }
    case 4: { uint32_t x = (uint32_t)v.u; memcpy(p, &x, 4); break; }
    default: memcpy(p, &v.u, 8); break;
  }
}

/* The reduction over `ranks` (world ranks, or any numbering gen uses) of element i. */
static val expect(const tinfo *t, int o, const int *ranks, int n, long i, unsigned salt) {
  int k;
  val acc = gen(t, o, ranks[0], i, salt);
  for (k = 1; k < n; ++k) acc = combine(t, o, acc, gen(t, o, ranks[k], i, salt));
  return acc;
}

/* ---- buffers with guard bytes ---- */

#define GUARD 32
#define POISON 0xA5

static unsigned char *guarded_alloc(size_t bytes) {
  unsigned char *p = malloc(bytes + GUARD);
  if (!p) {
    fprintf(stderr, "pmpi_check: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  memset(p, POISON, bytes + GUARD);
  return p;
}

static int guard_intact(const unsigned char *p, size_t bytes) {
  size_t k;
  for (k = 0; k < GUARD; ++k)
    if (p[bytes + k] != POISON) return 0;
  return 1;
}

static void comm_ranks(MPI_Comm comm, int *ranks /* size p: world rank of each rank of comm */) {
  int p = 0, k;
  MPI_Group g, w;
  int *idx;
  MPI_Comm_size(comm, &p);
  idx = malloc(sizeof(int) * (size_t)p);
  for (k = 0; k < p; ++k) idx[k] = k;
  MPI_Comm_group(comm, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &w);
  MPI_Group_translate_ranks(g, p, idx, w, ranks);
  MPI_Group_free(&g);
  MPI_Group_free(&w);
  free(idx);
}

/* ---- MPI_Allreduce and MPI_Iallreduce ---- */

enum how { H_BLOCKING, H_WAIT, H_TEST };

static void check_allreduce(MPI_Comm comm, const char *cname, const tinfo *t, int o, int count, int in_place,
                            enum how how) {
  int p = 0, r = 0, rc, k, *ranks;
  long i, bad = 0;
  const unsigned salt = g_salt++;
  const size_t bytes = (size_t)count * t->size;
  unsigned char *send = guarded_alloc(bytes), *recv = guarded_alloc(bytes), *want = guarded_alloc(bytes);
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  ranks = malloc(sizeof(int) * (size_t)p);
  comm_ranks(comm, ranks);
  for (i = 0; i < count; ++i) put(in_place ? recv : send, i, t, gen(t, o, ranks[r], i, salt));
  if (how == H_BLOCKING) {
    rc = MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, count, t->dt, op_handle(o), comm);
  } else {
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status st;
    int flag = 0;
    rc = MPI_Iallreduce(in_place ? MPI_IN_PLACE : send, recv, count, t->dt, op_handle(o), comm, &req);
    if (rc == MPI_SUCCESS && how == H_WAIT) rc = MPI_Wait(&req, &st);
    while (rc == MPI_SUCCESS && how == H_TEST && !flag) rc = MPI_Test(&req, &flag, &st);
    check(req == MPI_REQUEST_NULL, "%s: MPI_Iallreduce request not freed by completion", cname);
  }
  check(rc == MPI_SUCCESS, "%s: %s %s %s count %d%s returned %d", cname, how == H_BLOCKING ? "MPI_Allreduce" : "MPI_Iallreduce",
        t->name, op_names[o], count, in_place ? " in place" : "", rc);
  for (i = 0; i < count; ++i) put(want, i, t, expect(t, o, ranks, p, i, salt));
  for (i = 0; i < count; ++i)
    if (memcmp(recv + (size_t)i * t->size, want + (size_t)i * t->size, (size_t)t->size) != 0) ++bad;
  check(bad == 0, "%s: %s %s %s count %d%s: %ld wrong elements", cname,
        how == H_BLOCKING ? "MPI_Allreduce" : how == H_WAIT ? "MPI_Iallreduce+Wait" : "MPI_Iallreduce+Test",
        t->name, op_names[o], count, in_place ? " in place" : "", bad);
  check(guard_intact(recv, bytes), "%s: %s %s count %d: wrote past the receive buffer", cname, t->name,
        op_names[o], count);
  if (!in_place) {
    for (i = 0, k = 1; i < count && k; ++i) {
      unsigned char one[8];
      put(one, 0, t, gen(t, o, ranks[r], i, salt));
      k = memcmp(one, send + (size_t)i * t->size, (size_t)t->size) == 0;
    }
    check(k, "%s: %s %s count %d: the send buffer changed", cname, t->name, op_names[o], count);
  }
  free(ranks);
  free(send);
  free(recv);
  free(want);
}

/* ---- MPI_Reduce_scatter_block ---- */

static void check_reduce_scatter(MPI_Comm comm, const char *cname, const tinfo *t, int o, int recvcount,
                                 int in_place) {
  int p = 0, r = 0, rc, *ranks;
  long i, bad = 0;
  const unsigned salt = g_salt++;
  size_t in_bytes, out_bytes;
  unsigned char *send, *recv, *want;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  in_bytes = (size_t)recvcount * p * t->size;
  out_bytes = (size_t)recvcount * t->size;
  send = guarded_alloc(in_bytes);
  recv = guarded_alloc(in_place ? in_bytes : out_bytes);
  want = guarded_alloc(out_bytes);
  ranks = malloc(sizeof(int) * (size_t)p);
  comm_ranks(comm, ranks);
  for (i = 0; i < (long)recvcount * p; ++i) put(in_place ? recv : send, i, t, gen(t, o, ranks[r], i, salt));
  rc = MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, recvcount, t->dt, op_handle(o), comm);
  check(rc == MPI_SUCCESS, "%s: MPI_Reduce_scatter_block returned %d", cname, rc);
  for (i = 0; i < recvcount; ++i) put(want, i, t, expect(t, o, ranks, p, (long)r * recvcount + i, salt));
  for (i = 0; i < recvcount; ++i)
    if (memcmp(recv + (size_t)i * t->size, want + (size_t)i * t->size, (size_t)t->size) != 0) ++bad;
  check(bad == 0, "%s: MPI_Reduce_scatter_block %s %s recvcount %d%s: %ld wrong elements", cname, t->name,
        op_names[o], recvcount, in_place ? " in place" : "", bad);
  check(guard_intact(recv, in_place ? in_bytes : out_bytes),
        "%s: MPI_Reduce_scatter_block %s recvcount %d: wrote past the receive buffer", cname, t->name, recvcount);
  free(ranks);
  free(send);
  free(recv);
  free(want);
}

/* ---- MPI_Allgather ---- */

/* Byte b of rank `rank`'s contribution. */
static unsigned char gather_byte(int rank, size_t b, unsigned salt) {
  return (unsigned char)(mix(((uint64_t)salt << 40) ^ ((uint64_t)rank << 32) ^ b) & 0xFF);
}

/* Contiguous layouts: every rank gives `bytes` bytes (sendcount x sendtype on
 * the send side, recvcount x recvtype on the receive side). */
static void check_allgather_dense(MPI_Comm comm, const char *cname, const char *what, MPI_Datatype stype,
                                  int scount, MPI_Datatype rtype, int rcount, size_t bytes, int in_place) {
  int p = 0, r = 0, rc, k, *ranks;
  size_t b, bad = 0;
  const unsigned salt = g_salt++;
  unsigned char *send, *recv;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  send = guarded_alloc(bytes);
  recv = guarded_alloc(bytes * p);
  ranks = malloc(sizeof(int) * (size_t)p);
  comm_ranks(comm, ranks);
  for (b = 0; b < bytes; ++b) (in_place ? recv + (size_t)r * bytes : send)[b] = gather_byte(ranks[r], b, salt);
  rc = MPI_Allgather(in_place ? MPI_IN_PLACE : send, scount, stype, recv, rcount, rtype, comm);
  check(rc == MPI_SUCCESS, "%s: MPI_Allgather %s returned %d", cname, what, rc);
  for (k = 0; k < p; ++k)
    for (b = 0; b < bytes; ++b)
      if (recv[(size_t)k * bytes + b] != gather_byte(ranks[k], b, salt)) ++bad;
  check(bad == 0, "%s: MPI_Allgather %s (%zu bytes per rank)%s: %zu wrong bytes", cname, what, bytes,
        in_place ? " in place" : "", bad);
  check(guard_intact(recv, bytes * p), "%s: MPI_Allgather %s: wrote past the receive buffer", cname, what);
  free(ranks);
  free(send);
  free(recv);
}

static void check_allgather_type(MPI_Comm comm, const char *cname, const char *name, MPI_Datatype dt, int count) {
  int size = 0;
  MPI_Type_size(dt, &size);
  check_allgather_dense(comm, cname, name, dt, count, dt, count, (size_t)count * size, 0);
  check_allgather_dense(comm, cname, name, dt, count, dt, count, (size_t)count * size, 1);
}

/* A non-contiguous type: every other int of 2*count ints (MPI moves it). */
static void check_allgather_vector(MPI_Comm comm, const char *cname, int count) {
  int p = 0, r = 0, rc, k, *ranks, *send, *recv;
  long i, bad = 0;
  const unsigned salt = g_salt++;
  MPI_Datatype vec;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  ranks = malloc(sizeof(int) * (size_t)p);
  comm_ranks(comm, ranks);
  MPI_Type_vector(count, 1, 2, MPI_INT, &vec);
  MPI_Type_commit(&vec);
  send = malloc(sizeof(int) * (size_t)(2 * count + 1));
  recv = malloc(sizeof(int) * (size_t)(2 * count * p + 1));
  for (i = 0; i < 2 * count; ++i) send[i] = (i % 2 == 0) ? (int)(mix(salt ^ ((uint64_t)ranks[r] << 32) ^ (uint64_t)i) & 0x7fffffff) : -1;
  for (i = 0; i < 2 * count * p; ++i) recv[i] = -7;
  /* The extent of the vector is 2*count - 1 ints: blocks land at that stride. */
  rc = MPI_Allgather(send, 1, vec, recv, 1, vec, comm);
  check(rc == MPI_SUCCESS, "%s: MPI_Allgather vector returned %d", cname, rc);
  for (k = 0; k < p; ++k) {
    for (i = 0; i < count; ++i) {
      const int got = recv[(long)k * (2 * count - 1) + 2 * i];
      const int want = (int)(mix(salt ^ ((uint64_t)ranks[k] << 32) ^ (uint64_t)(2 * i)) & 0x7fffffff);
      if (got != want) ++bad;
    }
  }
  check(bad == 0, "%s: MPI_Allgather with a vector type, count %d: %ld wrong elements", cname, count, bad);
  MPI_Type_free(&vec);
  free(ranks);
  free(send);
  free(recv);
}

/* ---- the sweeps ---- */

static int counts[8], ncounts;

static void add_count(int c) {
  int k;
  for (k = 0; k < ncounts; ++k)
    if (counts[k] == c) return;
  counts[ncounts++] = c;
}

static void sweep_allreduce_full(MPI_Comm comm, const char *cname) {
  int ti, o, k, ip;
  for (ti = 0; ti < g_ntypes; ++ti)
    for (o = 0; o < O_COUNT; ++o) {
      if (!op_valid(&g_types[ti], o)) continue;
      if (g_skip_ulong_minmax && g_types[ti].dt == MPI_UNSIGNED_LONG && (o == O_MIN || o == O_MAX)) continue;
      for (k = 0; k < ncounts; ++k)
        for (ip = 0; ip < 2; ++ip) check_allreduce(comm, cname, &g_types[ti], o, counts[k], ip, H_BLOCKING);
    }
  /* large */
  check_allreduce(comm, cname, type_named("MPI_FLOAT"), O_SUM, 100003, 0, H_BLOCKING);
  check_allreduce(comm, cname, type_named("MPI_DOUBLE"), O_MAX, 100003, 1, H_BLOCKING);
  check_allreduce(comm, cname, type_named("MPI_INT"), O_SUM, 100003, 0, H_BLOCKING);
  check_allreduce(comm, cname, type_named("MPI_UINT8_T"), O_SUM, 100003, 1, H_BLOCKING);
  check_allreduce(comm, cname, type_named("MPI_INT64_T"), O_BXOR, 100003, 0, H_BLOCKING);
}

/* A few combinations on every other communicator. */
static void sweep_allreduce_some(MPI_Comm comm, const char *cname) {
  static const char *const names[] = {"MPI_FLOAT", "MPI_DOUBLE", "MPI_INT8_T", "MPI_INT", "MPI_UINT64_T", "MPI_SHORT"};
  static const int ops[] = {O_SUM, O_MIN, O_SUM, O_MAX, O_BXOR, O_SUM};
  int n, k, ip;
  for (n = 0; n < 6; ++n)
    for (k = 0; k < ncounts; ++k)
      for (ip = 0; ip < 2; ++ip) check_allreduce(comm, cname, type_named(names[n]), ops[n], counts[k], ip, H_BLOCKING);
  check_allreduce(comm, cname, type_named("MPI_DOUBLE"), O_SUM, 50021, 0, H_BLOCKING);
}

static void sweep_iallreduce(MPI_Comm comm, const char *cname) {
  static const char *const names[] = {"MPI_FLOAT", "MPI_DOUBLE", "MPI_INT", "MPI_UINT8_T", "MPI_SHORT"};
  static const int ops[] = {O_SUM, O_PROD, O_BOR, O_MAX, O_SUM};
  int n, k;
  for (n = 0; n < 5; ++n)
    for (k = 0; k < ncounts; ++k) {
      check_allreduce(comm, cname, type_named(names[n]), ops[n], counts[k], k % 2, H_WAIT);
      check_allreduce(comm, cname, type_named(names[n]), ops[n], counts[k], (k + 1) % 2, H_TEST);
    }
  /* Two outstanding at once, completed together. */
  {
    const tinfo *t = type_named("MPI_INT");
    int a[3] = {1, 2, 3}, b[3], c[2] = {g_rank, 1}, d[2], p = 0, rc;
    MPI_Request reqs[2];
    MPI_Comm_size(comm, &p);
    (void)t;
    MPI_Iallreduce(a, b, 3, MPI_INT, MPI_SUM, comm, &reqs[0]);
    MPI_Iallreduce(c + 1, d + 1, 1, MPI_INT, MPI_SUM, comm, &reqs[1]);
    rc = MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
    check(rc == MPI_SUCCESS && b[0] == p && b[1] == 2 * p && b[2] == 3 * p && d[1] == p,
          "%s: two MPI_Iallreduce + MPI_Waitall", cname);
  }
}

static void sweep_reduce_scatter(MPI_Comm comm, const char *cname) {
  static const char *const names[] = {"MPI_FLOAT", "MPI_DOUBLE", "MPI_INT8_T", "MPI_UNSIGNED", "MPI_LONG",
                                      "MPI_UINT64_T", "MPI_SHORT"};
  static const int ops[] = {O_SUM, O_MAX, O_SUM, O_BAND, O_PROD, O_SUM, O_MIN};
  int n, k, ip;
  for (n = 0; n < 7; ++n)
    for (k = 0; k < ncounts; ++k)
      for (ip = 0; ip < 2; ++ip) check_reduce_scatter(comm, cname, type_named(names[n]), ops[n], counts[k], ip);
  check_reduce_scatter(comm, cname, type_named("MPI_FLOAT"), O_SUM, 20011, 0);
}

static void sweep_allgather(MPI_Comm comm, const char *cname) {
  int k;
  MPI_Datatype four, four_dup, resized;
  MPI_Type_contiguous(4, MPI_INT, &four);
  MPI_Type_commit(&four);
  MPI_Type_dup(four, &four_dup);
  MPI_Type_commit(&four_dup);
  /* Dense but with a lower bound moved: not a plain run of bytes (MPI moves it). */
  MPI_Type_create_resized(MPI_INT, 0, 8, &resized);
  MPI_Type_commit(&resized);
  for (k = 0; k < ncounts; ++k) {
    const int c = counts[k];
    check_allgather_type(comm, cname, "MPI_FLOAT", MPI_FLOAT, c);
    check_allgather_type(comm, cname, "MPI_DOUBLE", MPI_DOUBLE, c);
    check_allgather_type(comm, cname, "MPI_INT", MPI_INT, c);
    check_allgather_type(comm, cname, "MPI_CHAR", MPI_CHAR, c);
    check_allgather_type(comm, cname, "MPI_BYTE", MPI_BYTE, c);
    check_allgather_type(comm, cname, "MPI_SHORT", MPI_SHORT, c);
    check_allgather_type(comm, cname, "MPI_C_BOOL", MPI_C_BOOL, c);
    check_allgather_type(comm, cname, "MPI_2INT", MPI_2INT, c);
    check_allgather_type(comm, cname, "contiguous(4, MPI_INT)", four, c);
    check_allgather_type(comm, cname, "dup(contiguous(4, MPI_INT))", four_dup, c);
    /* Different datatypes, same bytes (legal: the signatures match). */
    check_allgather_dense(comm, cname, "4c x MPI_INT -> c x contiguous(4)", MPI_INT, 4 * c, four, c,
                          (size_t)16 * c, 0);
    check_allgather_dense(comm, cname, "c x contiguous(4) -> 4c x MPI_INT", four, c, MPI_INT, 4 * c,
                          (size_t)16 * c, 0);
    if (c > 0) check_allgather_vector(comm, cname, c);
  }
  check_allgather_type(comm, cname, "MPI_DOUBLE", MPI_DOUBLE, 30011);
  /* The resized type: 1 int per 8-byte slot. */
  {
    int p = 0, r = 0, rc, i, send[2] = {0, 0}, *recv, bad = 0;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &r);
    recv = malloc(sizeof(int) * 2 * (size_t)p);
    for (i = 0; i < 2 * p; ++i) recv[i] = -3;
    send[0] = 1000 + r;
    rc = MPI_Allgather(send, 1, resized, recv, 1, resized, comm);
    for (i = 0; i < p; ++i)
      if (recv[2 * i] != 1000 + i || recv[2 * i + 1] != -3) ++bad;
    check(rc == MPI_SUCCESS && bad == 0, "%s: MPI_Allgather with a resized type: %d wrong", cname, bad);
    free(recv);
  }
  /* Dense and in its own extent, but in swapped order: {int 1, int 0}. Sent
   * with it and received as two MPI_INT, every pair arrives swapped. */
  {
    int blocklens[2] = {1, 1}, displs[2] = {1, 0}, p = 0, r = 0, rc, i, send[2], *recv, bad = 0;
    MPI_Datatype swapped;
    MPI_Type_indexed(2, blocklens, displs, MPI_INT, &swapped);
    MPI_Type_commit(&swapped);
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &r);
    recv = malloc(sizeof(int) * 2 * (size_t)p);
    send[0] = 10 * r;
    send[1] = 10 * r + 1;
    rc = MPI_Allgather(send, 1, swapped, recv, 2, MPI_INT, comm);
    for (i = 0; i < p; ++i)
      if (recv[2 * i] != 10 * i + 1 || recv[2 * i + 1] != 10 * i) ++bad;
    check(rc == MPI_SUCCESS && bad == 0, "%s: MPI_Allgather from a permuting indexed type: %d wrong", cname, bad);
    free(recv);
    MPI_Type_free(&swapped);
  }
  MPI_Type_free(&resized);
  MPI_Type_free(&four_dup);
  MPI_Type_free(&four);
}

/* ---- what the interposer must hand to MPI ---- */

/* Sums ints; a derived datatype made of ints counts as several. */
static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
  int i, size = 0;
  MPI_Type_size(*dt, &size);
  for (i = 0; i < *len * (size / (int)sizeof(int)); ++i) ((int *)inout)[i] += ((int *)in)[i];
}

static void check_fallbacks(MPI_Comm comm, const char *cname) {
  int p = 0, r = 0, rc, i, *ranks;
  MPI_Op my_sum;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  ranks = malloc(sizeof(int) * (size_t)p);
  comm_ranks(comm, ranks);
  MPI_Op_create(user_sum, 1, &my_sum);
  { /* user-defined op, out of place and in place, blocking and not */
    int in[5], out[5], want = 0, bad = 0;
    MPI_Request req;
    for (i = 0; i < p; ++i) want += ranks[i] * 3 + 1;
    for (i = 0; i < 5; ++i) in[i] = ranks[r] * 3 + 1 + i;
    rc = MPI_Allreduce(in, out, 5, MPI_INT, my_sum, comm);
    for (i = 0; i < 5; ++i) bad += out[i] != want + i * p;
    check(rc == MPI_SUCCESS && !bad, "%s: MPI_Allreduce with a user op", cname);
    rc = MPI_Allreduce(MPI_IN_PLACE, in, 5, MPI_INT, my_sum, comm);
    for (i = 0, bad = 0; i < 5; ++i) bad += in[i] != want + i * p;
    check(rc == MPI_SUCCESS && !bad, "%s: MPI_Allreduce in place with a user op", cname);
    for (i = 0; i < 5; ++i) in[i] = ranks[r] * 3 + 1 + i;
    rc = MPI_Iallreduce(in, out, 5, MPI_INT, my_sum, comm, &req);
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (i = 0, bad = 0; i < 5; ++i) bad += out[i] != want + i * p;
    check(rc == MPI_SUCCESS && !bad, "%s: MPI_Iallreduce with a user op", cname);
  }
  { /* user op through MPI_Reduce_scatter_block */
    int *in = malloc(sizeof(int) * 2 * (size_t)p), out[2], bad = 0, k;
    for (i = 0; i < 2 * p; ++i) in[i] = ranks[r] + i;
    rc = MPI_Reduce_scatter_block(in, out, 2, MPI_INT, my_sum, comm);
    for (i = 0; i < 2; ++i) {
      int want = 0;
      for (k = 0; k < p; ++k) want += ranks[k] + 2 * r + i;
      bad += out[i] != want;
    }
    check(rc == MPI_SUCCESS && !bad, "%s: MPI_Reduce_scatter_block with a user op", cname);
    free(in);
  }
  { /* MPI_MINLOC on MPI_2INT; MPI_MAXLOC on MPI_DOUBLE_INT */
    struct { int v, loc; } a[3], b[3];
    struct { double v; int loc; } c[2], d[2];
    int bad = 0;
    for (i = 0; i < 3; ++i) { a[i].v = (ranks[r] * 7 + i) % 3; a[i].loc = r; }
    rc = MPI_Allreduce(a, b, 3, MPI_2INT, MPI_MINLOC, comm);
    for (i = 0; i < 3; ++i) {
      int k, best = -1, bestv = 0;
      for (k = 0; k < p; ++k) {
        const int v = (ranks[k] * 7 + i) % 3;
        if (best < 0 || v < bestv) { best = k; bestv = v; }
      }
      bad += b[i].v != bestv || b[i].loc != best;
    }
    check(rc == MPI_SUCCESS && !bad, "%s: MPI_Allreduce MPI_MINLOC on MPI_2INT", cname);
    for (i = 0; i < 2; ++i) { c[i].v = (double)((ranks[r] * 5 + i) % 4); c[i].loc = r; }
    rc = MPI_Allreduce(c, d, 2, MPI_DOUBLE_INT, MPI_MAXLOC, comm);
    for (i = 0, bad = 0; i < 2; ++i) {
      int k, best = -1;
      double bestv = 0;
      for (k = 0; k < p; ++k) {
        const double v = (double)((ranks[k] * 5 + i) % 4);
        if (best < 0 || v > bestv) { best = k; bestv = v; }
      }
      bad += d[i].v != bestv || d[i].loc != best;
    }
    check(rc == MPI_SUCCESS && !bad, "%s: MPI_Allreduce MPI_MAXLOC on MPI_DOUBLE_INT", cname);
  }
  { /* logical ops */
    int x = ranks[r] != 1, y = -1, land = 1;
    _Bool bx = ranks[r] == 0, by = 0;
    for (i = 0; i < p; ++i) land = land && (ranks[i] != 1);
    rc = MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_LAND, comm);
    check(rc == MPI_SUCCESS && y == land, "%s: MPI_Allreduce MPI_LAND on MPI_INT", cname);
    {
      int any0 = 0;
      for (i = 0; i < p; ++i) any0 = any0 || ranks[i] == 0;
      rc = MPI_Allreduce(&bx, &by, 1, MPI_C_BOOL, MPI_LOR, comm);
      check(rc == MPI_SUCCESS && by == any0, "%s: MPI_Allreduce MPI_LOR on MPI_C_BOOL", cname);
    }
  }
  { /* a derived datatype with a user op: two ints per element */
    MPI_Datatype pair;
    int in[6], out[6], bad = 0, k;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    for (i = 0; i < 6; ++i) in[i] = ranks[r] + i;
    rc = MPI_Allreduce(in, out, 3, pair, my_sum, comm);
    for (i = 0; i < 6; ++i) {
      int want = 0;
      for (k = 0; k < p; ++k) want += ranks[k] + i;
      bad += out[i] != want;
    }
    check(rc == MPI_SUCCESS && !bad, "%s: MPI_Allreduce on a derived type with a user op", cname);
    /* A predefined op on a derived type: Open MPI refuses it (MPI_ERR_OP), and
     * so must the interposer, by handing it over; an MPI that accepts it must
     * get the sum right. */
    {
      MPI_Comm quiet;
      MPI_Comm_dup(comm, &quiet);
      MPI_Comm_set_errhandler(quiet, MPI_ERRORS_RETURN);
      for (i = 0; i < 6; ++i) in[i] = ranks[r] + i;
      for (i = 0; i < 6; ++i) out[i] = -1;
      rc = MPI_Allreduce(in, out, 3, pair, MPI_SUM, quiet);
      for (i = 0, bad = 0; i < 6 && rc == MPI_SUCCESS; ++i) {
        int want = 0;
        for (k = 0; k < p; ++k) want += ranks[k] + i;
        bad += out[i] != want;
      }
      check(!bad, "%s: MPI_Allreduce MPI_SUM on a derived type", cname);
      MPI_Comm_free(&quiet);
    }
    MPI_Type_free(&pair);
  }
  MPI_Op_free(&my_sum);
  free(ranks);
}

/* An intercommunicator between the even and the odd world ranks. */
static void check_intercomm(void) {
  MPI_Comm half, inter;
  int color = g_rank % 2, rc, i, remote = 0, bad = 0;
  int in[4], out[4], *gathered;
  MPI_Request req;
  if (g_size < 2) return;
  MPI_Comm_split(MPI_COMM_WORLD, color, g_rank, &half);
  MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, color == 0 ? 1 : 0, 77, &inter);
  MPI_Comm_remote_size(inter, &remote);
  for (i = 0; i < 4; ++i) in[i] = g_rank * 10 + i;
  rc = MPI_Allreduce(in, out, 4, MPI_INT, MPI_SUM, inter);
  for (i = 0; i < 4; ++i) {
    int want = 0, w;
    for (w = 1 - color; w < g_size; w += 2) want += w * 10 + i;
    bad += out[i] != want;
  }
  check(rc == MPI_SUCCESS && !bad, "intercomm: MPI_Allreduce");
  for (i = 0; i < 4; ++i) out[i] = -1;
  rc = MPI_Iallreduce(in, out, 4, MPI_INT, MPI_MAX, inter, &req);
  if (rc == MPI_SUCCESS) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
  for (i = 0, bad = 0; i < 4; ++i) {
    int want = -1, w;
    for (w = 1 - color; w < g_size; w += 2) want = w * 10 + i > want ? w * 10 + i : want;
    bad += out[i] != want;
  }
  check(rc == MPI_SUCCESS && !bad, "intercomm: MPI_Iallreduce");
  gathered = malloc(sizeof(int) * 2 * (size_t)remote);
  in[0] = g_rank;
  in[1] = -g_rank;
  rc = MPI_Allgather(in, 2, MPI_INT, gathered, 2, MPI_INT, inter);
  for (i = 0, bad = 0; i < remote; ++i) {
    const int w = 2 * i + (1 - color);
    bad += gathered[2 * i] != w || gathered[2 * i + 1] != -w;
  }
  check(rc == MPI_SUCCESS && !bad, "intercomm: MPI_Allgather");
  free(gathered);
  MPI_Comm_free(&inter);
  MPI_Comm_free(&half);
}

/* Inexact doubles: every rank must hold the same bits, close to the exact sum. */
static void check_determinism(MPI_Comm comm, const char *cname) {
  const int n = 4099;
  int p = 0, r = 0, k, rc, *ranks, same = 1;
  long i, far = 0;
  double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n);
  uint64_t h = 1469598103934665603ull, *all;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  ranks = malloc(sizeof(int) * (size_t)p);
  comm_ranks(comm, ranks);
  for (i = 0; i < n; ++i) x[i] = (double)(mix((uint64_t)ranks[r] * 1000003u + (uint64_t)i) % 1000003) / 7.0 - 70000.0;
  rc = MPI_Allreduce(x, y, n, MPI_DOUBLE, MPI_SUM, comm);
  check(rc == MPI_SUCCESS, "%s: determinism MPI_Allreduce returned %d", cname, rc);
  for (i = 0; i < n; ++i) {
    double exact = 0;
    uint64_t bits;
    for (k = 0; k < p; ++k) exact += (double)(mix((uint64_t)ranks[k] * 1000003u + (uint64_t)i) % 1000003) / 7.0 - 70000.0;
    if (y[i] - exact > 1e-6 || exact - y[i] > 1e-6) ++far;
    memcpy(&bits, &y[i], 8);
    h = (h ^ bits) * 1099511628211ull;
  }
  check(far == 0, "%s: determinism: %ld sums far from the exact value", cname, far);
  all = malloc(sizeof(uint64_t) * (size_t)p);
  MPI_Gather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, comm);
  if (r == 0)
    for (k = 1; k < p; ++k) same = same && all[k] == all[0];
  MPI_Bcast(&same, 1, MPI_INT, 0, comm);
  check(same, "%s: the ranks hold different bits for the same MPI_DOUBLE sum", cname);
  free(all);
  free(ranks);
  free(x);
  free(y);
}

/* ---- only under the interposer: a BlueConnect error reaches the error handler ---- */

static int g_handler_calls, g_handler_class;
static void count_errors(MPI_Comm *comm, int *code, ...) {
  (void)comm;
  ++g_handler_calls;
  MPI_Error_class(*code, &g_handler_class);
}

static void check_error_handler(void) {
  MPI_Comm c;
  MPI_Errhandler eh;
  int buf[8] = {1, 2, 3, 4, 5, 6, 7, 8}, rc, cls = -1, out = 0;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  MPI_Comm_create_errhandler(count_errors, &eh);
  MPI_Comm_set_errhandler(c, eh);
  /* Overlapping buffers (erroneous in MPI): BlueConnect refuses them. */
  rc = MPI_Allreduce(buf, buf + 1, 4, MPI_INT, MPI_SUM, c);
  if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
  check(rc != MPI_SUCCESS && cls == MPI_ERR_ARG, "error handler: MPI_Allreduce on overlapping buffers returned %d (class %d), want MPI_ERR_ARG", rc, cls);
  check(g_handler_calls == 1 && g_handler_class == MPI_ERR_ARG, "error handler: called %d times with class %d", g_handler_calls, g_handler_class);
  /* The communicator still works. */
  rc = MPI_Allreduce(&g_rank, &out, 1, MPI_INT, MPI_MAX, c);
  check(rc == MPI_SUCCESS && out == g_size - 1, "error handler: MPI_Allreduce after the error");
  MPI_Errhandler_free(&eh);
  MPI_Comm_free(&c);
}

/* ---- MPI_Iallreduce in the background (under the interposer, on Open MPI) ----
 * 1. Rank 0 joins 0.3 s late: the others' MPI_Iallreduce must return at once
 *    and MPI_Test must say "not yet" (a blocking one would sit in the call).
 * 2. The operation advances while the program is in other MPI calls: a
 *    blocking ring exchange and a barrier on another communicator, then Wait.
 * 3. MPI_Request_free on an operation in flight, then MPI_Comm_free of its
 *    communicator: the free finishes it, and the result is there. */
static void check_iallreduce_async(void) {
  enum { N = 200003 };
  int *in = malloc(N * sizeof *in), *out = malloc(N * sizeof *out), i, flag = 1, bad = 0, rc;
  int token = g_rank, got = -1;
  double t0, in_call;
  MPI_Request req;
  MPI_Comm dup;
  for (i = 0; i < N; ++i) in[i] = (i % 7) + g_rank;
  if (g_size > 1) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
      t0 = MPI_Wtime();
      while (MPI_Wtime() - t0 < 0.3) {
      }
    }
    t0 = MPI_Wtime();
    rc = MPI_Iallreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
    in_call = MPI_Wtime() - t0;
    if (g_rank != 0) {
      MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
      check(rc == MPI_SUCCESS && in_call < 0.2 && !flag,
            "async: MPI_Iallreduce waited %.3f s in the call (flag %d) while rank 0 was late", in_call, flag);
    }
    /* Other MPI traffic while it runs: a ring exchange and a barrier. */
    MPI_Sendrecv(&token, 1, MPI_INT, (g_rank + 1) % g_size, 5, &got, 1, MPI_INT, (g_rank + g_size - 1) % g_size, 5,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (i = 0; i < N; ++i) bad += out[i] != g_size * (i % 7) + g_size * (g_size - 1) / 2;
    check(rc == MPI_SUCCESS && !bad && got == (g_rank + g_size - 1) % g_size,
          "async: MPI_Iallreduce overlapped with a ring exchange and a barrier: %d wrong", bad);
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  memset(out, 0, N * sizeof *out);
  rc = MPI_Iallreduce(in, out, N, MPI_INT, MPI_SUM, dup, &req);
  MPI_Request_free(&req);
  MPI_Comm_free(&dup);
  bad = 0;
  for (i = 0; i < N; ++i) bad += out[i] != g_size * (i % 7) + g_size * (g_size - 1) / 2;
  check(rc == MPI_SUCCESS && req == MPI_REQUEST_NULL && !bad,
        "async: MPI_Request_free + MPI_Comm_free finished the operation: %d wrong", bad);
  free(in);
  free(out);
}

/* ---- communicators ---- */

static void run_full(int expect_bc) {
  MPI_Comm half, rev, dup, c;
  int k;
  ncounts = 0;
  add_count(0);
  add_count(1);
  if (g_size > 1) add_count(g_size - 1);
  add_count(g_size + 1);
  add_count(7);
  add_count(1031);

  sweep_allreduce_full(MPI_COMM_WORLD, "world");
  sweep_iallreduce(MPI_COMM_WORLD, "world");
  sweep_reduce_scatter(MPI_COMM_WORLD, "world");
  sweep_allgather(MPI_COMM_WORLD, "world");
  check_fallbacks(MPI_COMM_WORLD, "world");
  check_determinism(MPI_COMM_WORLD, "world");

  /* Halves, with the rank order reversed inside each. */
  MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_size - g_rank, &half);
  sweep_allreduce_some(half, "half-reversed");
  sweep_reduce_scatter(half, "half-reversed");
  sweep_allgather(half, "half-reversed");
  sweep_iallreduce(half, "half-reversed");
  check_fallbacks(half, "half-reversed");
  check_determinism(half, "half-reversed");

  /* The whole world, scrambled: odd ranks first. */
  MPI_Comm_split(MPI_COMM_WORLD, 0, (g_rank % 2) * g_size + g_size - g_rank, &rev);
  sweep_allreduce_some(rev, "world-scrambled");
  sweep_reduce_scatter(rev, "world-scrambled");
  sweep_allgather(rev, "world-scrambled");

  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  sweep_allreduce_some(dup, "world-dup");
  sweep_iallreduce(dup, "world-dup");

  /* Free and create again: the handle may come back; the state must not. */
  for (k = 0; k < 3; ++k) {
    MPI_Comm_dup(k % 2 ? half : MPI_COMM_WORLD, &c);
    check_allreduce(c, "dup-free-reuse", type_named("MPI_INT"), O_SUM, 13 + k, k % 2, H_BLOCKING);
    check_reduce_scatter(c, "dup-free-reuse", type_named("MPI_DOUBLE"), O_SUM, 5, k % 2);
    MPI_Comm_free(&c);
  }
  MPI_Comm_free(&half);
  MPI_Comm_split(MPI_COMM_WORLD, g_rank % 3, g_rank, &half);
  check_allreduce(half, "split-after-free", type_named("MPI_FLOAT"), O_SUM, 1031, 0, H_BLOCKING);
  MPI_Comm_free(&half);

  /* The reversed world again, after the others were freed. */
  check_allreduce(rev, "world-scrambled", type_named("MPI_UINT32_T"), O_PROD, 77, 1, H_BLOCKING);
  MPI_Comm_free(&rev);
  MPI_Comm_free(&dup);

  check_intercomm();
  if (expect_bc) check_error_handler();
  if (expect_bc) check_iallreduce_async();
}

/* A fixed list of calls for stats_check.sh (world of 4 ranks, BC_PMPI_MIN_BYTES=64):
 *   MPI_Allreduce            served 3; small 1, user-op 1, op 2, dtype 1, intercomm 1
 *   MPI_Reduce_scatter_block served 2; user-op 1
 *   MPI_Allgather            served 2; derived-dtype 1, small 1
 *   MPI_Iallreduce           served 4; user-op 1 */
static void run_stats(void) {
  int k;
  MPI_Op my_sum;
  ncounts = 0;
  MPI_Op_create(user_sum, 1, &my_sum);
  for (k = 0; k < 3; ++k) check_allreduce(MPI_COMM_WORLD, "stats", type_named("MPI_FLOAT"), O_SUM, 100, k == 1, H_BLOCKING);
  check_allreduce(MPI_COMM_WORLD, "stats", type_named("MPI_FLOAT"), O_SUM, 2, 0, H_BLOCKING); /* 8 bytes: small */
  check_allreduce(MPI_COMM_WORLD, "stats", type_named("MPI_SHORT"), O_SUM, 100, 0, H_BLOCKING);
  {
    int in[100], out[100], i, bad = 0;
    struct { int v, loc; } a[50], b[50];
    for (i = 0; i < 100; ++i) in[i] = g_rank + i;
    MPI_Allreduce(in, out, 100, MPI_INT, my_sum, MPI_COMM_WORLD);
    for (i = 0; i < 100; ++i) bad += out[i] != g_size * (g_size - 1) / 2 + g_size * i;
    check(!bad, "stats: user op");
    for (i = 0; i < 50; ++i) { a[i].v = g_rank; a[i].loc = g_rank; }
    MPI_Allreduce(a, b, 50, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
    check(b[0].v == 0 && b[0].loc == 0, "stats: MPI_MINLOC");
    for (i = 0; i < 100; ++i) in[i] = 1;
    MPI_Allreduce(in, out, 100, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    check(out[0] == 1, "stats: MPI_LAND");
  }
  check_reduce_scatter(MPI_COMM_WORLD, "stats", type_named("MPI_INT"), O_SUM, 50, 0);
  check_reduce_scatter(MPI_COMM_WORLD, "stats", type_named("MPI_INT"), O_SUM, 50, 1);
  {
    int *in = malloc(sizeof(int) * 4 * (size_t)g_size), out[4], i;
    for (i = 0; i < 4 * g_size; ++i) in[i] = 1;
    MPI_Reduce_scatter_block(in, out, 4, MPI_INT, my_sum, MPI_COMM_WORLD);
    check(out[0] == g_size && out[3] == g_size, "stats: MPI_Reduce_scatter_block with a user op");
    free(in);
  }
  check_allgather_dense(MPI_COMM_WORLD, "stats", "MPI_INT", MPI_INT, 50, MPI_INT, 50, 200, 0);
  check_allgather_dense(MPI_COMM_WORLD, "stats", "MPI_INT", MPI_INT, 50, MPI_INT, 50, 200, 1);
  check_allgather_dense(MPI_COMM_WORLD, "stats", "MPI_INT", MPI_INT, 1, MPI_INT, 1, 4, 0); /* 4p bytes: small */
  check_allgather_vector(MPI_COMM_WORLD, "stats", 3);
  for (k = 0; k < 4; ++k) check_allreduce(MPI_COMM_WORLD, "stats", type_named("MPI_DOUBLE"), O_SUM, 100, k % 2, k % 2 ? H_TEST : H_WAIT);
  {
    int in[20], out[20], i;
    MPI_Request req;
    for (i = 0; i < 20; ++i) in[i] = 2;
    MPI_Iallreduce(in, out, 20, MPI_INT, my_sum, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    check(out[19] == 2 * g_size, "stats: MPI_Iallreduce with a user op");
  }
  MPI_Op_free(&my_sum);
  if (g_size >= 2) {
    MPI_Comm half, inter;
    int in[30], out[30], i;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, g_rank % 2 ? 0 : 1, 78, &inter);
    for (i = 0; i < 30; ++i) in[i] = 1;
    MPI_Allreduce(in, out, 30, MPI_INT, MPI_SUM, inter);
    check(out[0] == (g_rank % 2 ? (g_size + 1) / 2 : g_size / 2), "stats: intercommunicator sum");
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
  }
}

static void run_latency(long iters) {
  double x = 1.0, y = 0.0, t0, t1, mean;
  long k;
  for (k = 0; k < iters / 10 + 10; ++k) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  for (k = 0; k < iters; ++k) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  t1 = MPI_Wtime();
  mean = (t1 - t0) / (double)iters * 1e6;
  MPI_Reduce(&mean, &x, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (g_rank == 0) printf("pmpi_check: 8-byte MPI_Allreduce on %d ranks: %.3f us (slowest rank's mean of %ld)\n", g_size, x, iters);
  check(y == (double)g_size, "latency: wrong sum %g", y);
}

/* Communicators made and freed in turn, each with `calls` 8-byte sums: under
 * the learned route each learns anew (a freed communicator's handle, reused
 * by the next, must not reach the old one's decision or its state); every
 * 16th call is two MPI_INT (the same size bucket, another datatype), and every
 * 5th is in place. Results exact on every call. */
static void run_reuse(long calls) {
  int round;
  long k;
  for (round = 0; round < 3; ++round) {
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    for (k = 0; k < calls; ++k) {
      const double want = (double)g_size * (g_size + 1) / 2 + (double)g_size * (double)(k % 1000);
      if (k % 16 == 15) {
        int in[2] = {g_rank + 1, (int)k}, out[2] = {-1, -1};
        MPI_Allreduce(in, out, 2, MPI_INT, MPI_SUM, c);
        check(out[0] == g_size * (g_size + 1) / 2 && out[1] == g_size * (int)k,
              "reuse: round %d call %ld: MPI_INT sum %d %d", round, k, out[0], out[1]);
      } else {
        double x = g_rank + 1 + (double)(k % 1000), y = -1.0;
        if (k % 5 == 4) {
          MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, c);
          y = x;
        } else {
          MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, c);
        }
        check(y == want, "reuse: round %d call %ld: sum %g, want %g", round, k, y, want);
      }
    }
    MPI_Comm_free(&c);
  }
}

int main(int argc, char **argv) {
  int expect_bc = 0, stats = 0, a;
  long latency = 0, reuse = 0, total = 0, failed = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  for (a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "--expect-bc") == 0) expect_bc = 1;
    else if (strcmp(argv[a], "--stats") == 0) stats = 1;
    else if (strcmp(argv[a], "--latency") == 0 && a + 1 < argc) latency = atol(argv[++a]);
    else if (strcmp(argv[a], "--reuse") == 0 && a + 1 < argc) reuse = atol(argv[++a]);
  }
  alarm(600); /* a hang fails the run instead of blocking the suite */
  init_types();
  if (!expect_bc) {
    /* MPI_Reduce: a collective the interposer leaves to MPI. */
    unsigned long mine = g_rank == 0 ? 0x8000000000000000ul : 1ul, least = 0;
    MPI_Reduce(&mine, &least, 1, MPI_UNSIGNED_LONG, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Bcast(&least, 1, MPI_UNSIGNED_LONG, 0, MPI_COMM_WORLD);
    g_skip_ulong_minmax = g_size > 1 && least != 1ul;
    if (g_skip_ulong_minmax && g_rank == 0 && !stats && latency == 0 && reuse == 0)
      fprintf(stderr, "pmpi_check: this MPI reduces MPI_UNSIGNED_LONG as signed in MPI_MIN/MPI_MAX "
                      "(open-mpi/ompi#10525): those checks are skipped\n");
  }
  if (latency > 0) run_latency(latency);
  else if (reuse > 0) run_reuse(reuse);
  else if (stats) run_stats();
  else run_full(expect_bc);

  MPI_Reduce(&g_failures, &failed, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&g_checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Bcast(&failed, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  if (g_rank == 0 && latency == 0) {
    if (failed == 0) printf("pmpi_check: all checks passed\n");
    else printf("pmpi_check: %ld of %ld checks failed\n", failed, total);
    fflush(stdout);
  }
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
