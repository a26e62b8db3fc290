// The PMPI interposer: MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather
// and MPI_Iallreduce served by BlueConnect, everything else by the MPI library.
//
// Route of one call (the same for the Fortran entry points, pmpi_fortran.cc):
//
//   inside BlueConnect already? ── yes ──> PMPI_ (not counted: the library's own traffic)
//   BC_DISABLE / bad parameter? ── yes ──> PMPI_ (counted: disabled / init-error)
//   arguments MPI rejects?      ── yes ──> PMPI_ (MPI raises its own error)
//   op, datatype, layout, size  ── not served ──> PMPI_ (counted with the reason)
//   device buffer, (dtype, op) the GPU kernels lack ── yes ──> PMPI_ (device-op-dtype)
//   MPI_Allreduce, BC_PMPI_ROUTE=learn: MPI faster at this size, or its
//   probe turn (pmpi_route.h) ── yes ──> PMPI_ (learned)
//   communicator state (lazy, collective on first use; intercommunicators and
//   communicators BlueConnect made itself are marked pass-through)
//   bc_allreduce / bc_reduce_scatter / bc_allgather ── error ──> the
//   communicator's error handler, with an MPI error class
//
// Every input of a routing decision is an argument MPI requires to be the same
// on every rank (count, datatype, op, communicator, MPI_IN_PLACE), so all ranks
// of a communicator take the same route and the lazy, collective
// bc_comm_create is reached by all of them together.
//
// This file holds the collectives' entry points and what runs on every call:
// the memo that sends a settled small MPI_Allreduce straight to MPI (here, so
// that it inlines into MPI_Allreduce), the start and end every route shares,
// each collective's route and call into BlueConnect, and BlueConnect's errors
// handed to MPI's error handlers. Elsewhere: what BlueConnect serves exactly
// (pmpi_serve.cc), the communicator state (pmpi_comm.cc), the learned route
// (pmpi_learn.cc, pmpi_route.cc), MPI_Init and MPI_Finalize (pmpi_init.cc),
// BC_PMPI_STATS (pmpi_stats.cc).
#include "pmpi/pmpi.h"

#include <atomic>
#include <cstdint>
#include <exception>
#include <new>

#include "pmpi/pmpi_internal.h"
#include "pmpi/pmpi_route.h"
#include "blueconnect.h"
#include "core/log.h"

namespace bc {
namespace pmpi {

namespace {

// ---- errors ----

// The null handle, or no handle at all: Open MPI's MPI_*_f2c return a null
// pointer for an unknown Fortran handle. MPI raises its own error for both.
template <typename H>
bool bad(H handle, H null_handle) {
  return handle == null_handle || handle == H{};
}

int mpi_error_class(bc_status_t st) {
  switch (st) {
    case BC_ERR_INVALID_ARG:
    case BC_ERR_MISMATCH: return MPI_ERR_ARG;  // ranks disagree on count, datatype or op (BC_CHECK_ARGS)
    case BC_ERR_NO_MEMORY: return MPI_ERR_NO_MEM;
    case BC_ERR_NOT_SUPPORTED:   // the route should have sent it to MPI
    case BC_ERR_NOT_INITIALIZED:
    case BC_ERR_INTERNAL: return MPI_ERR_INTERN;
#ifdef MPIX_ERR_PROC_FAILED
    case BC_ERR_PEER_DEAD: return MPIX_ERR_PROC_FAILED;  // ULFM builds
#endif
    default: return MPI_ERR_OTHER;  // transport, timeout, MPI, a dead peer (no ULFM), a broken communicator
  }
}

// Hands a BlueConnect failure to the communicator's error handler, as MPI does.
int raise(Coll c, MPI_Comm comm, bc_status_t st, const char *what) {
  g_errors[static_cast<int>(c)].fetch_add(1, std::memory_order_relaxed);
  const int cls = mpi_error_class(st);
  BC_LOG(LogLevel::Error, LogSys::Pmpi, "%s: %s", kCollNames[static_cast<int>(c)], what);
  if (!bad(comm, MPI_COMM_NULL)) PMPI_Comm_call_errhandler(comm, cls);
  return cls;
}

// Keeps C++ exceptions out of the C entry points.
template <typename F>
int guarded(Coll c, MPI_Comm comm, F &&body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return raise(c, comm, BC_ERR_NO_MEMORY, "out of memory");
  } catch (const std::exception &e) {
    return raise(c, comm, BC_ERR_INTERNAL, e.what());
  } catch (...) {
    return raise(c, comm, BC_ERR_INTERNAL, "unexpected exception");
  }
}

// ---- MPI_Iallreduce: a request that is already complete ----

int grequest_query(void *, MPI_Status *status) {
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_ANY_SOURCE;
  status->MPI_TAG = MPI_ANY_TAG;
  status->MPI_ERROR = MPI_SUCCESS;
  return MPI_SUCCESS;
}
int grequest_free(void *) { return MPI_SUCCESS; }
int grequest_cancel(void *, int) { return MPI_SUCCESS; }

int completed_request(MPI_Request *request) {
  int rc = PMPI_Grequest_start(grequest_query, grequest_free, grequest_cancel, nullptr, request);
  if (rc != MPI_SUCCESS) return rc;
  return PMPI_Grequest_complete(*request);
}

// ---- the route's start and end, shared by every collective ----

// The start every route shares. Returns false when the MPI library takes the
// call: *reason says why, or stays kServe for calls that are not counted (the
// library's own calls, calls before MPI_Init or after finalisation).
bool route_start(int forced_reason, Reason *reason) {
  *reason = kServe;
  if (t_inside > 0) return false;
  const int s = ensure_init();
  if (s == kDisabled) *reason = Reason::Disabled;
  else if (s == kFailed) *reason = Reason::InitError;
  else if (s != kReady) return false;
  else if (forced_reason >= 0) *reason = static_cast<Reason>(forced_reason);
  return *reason == kServe;
}

int pass(Coll c, Reason reason) {
  if (reason != kServe) count_pass(c, reason);
  return kPass;
}

// ---- the collectives ----

// The last blocking MPI_Allreduce this thread handed to MPI by a final learned
// route: the next call with the same communicator, datatype, op and size
// bucket goes to MPI without the route's checks, which it passed already.
// Why: a call the route gives to MPI is a tiny one (0.3-0.9 us at np 2 on one
// node), and the checks cost 20-30 ns of it at np 1, 0.89-0.95 of Open MPI's
// loop at np 2. Valid while no communicator state was deleted since
// (g_comm_generation), the preload is still up, the buffers are host memory,
// and the bucket stays settled on MPI (SizeRoute::count_final refuses the call
// that a late look is due at, and every call once the route went elsewhere).
// No member initialisers: MPI_COMM_NULL and the like are addresses in Open
// MPI, so they would make the thread-local dynamically initialised, with a
// guard behind __tls_get_addr on every access. Zero: state null, not valid.
struct PassMemo {
  CommState *state;
  MPI_Comm comm;
  MPI_Datatype dt;
  MPI_Op op;
  int64_t type_size;
  int bucket;
  uint64_t generation;
};
thread_local PassMemo t_pass_memo __attribute__((tls_model("initial-exec")));

// Whether the memo routes this call to MPI; counts it as the full route would.
bool pass_by_memo(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
  const PassMemo &m = t_pass_memo;
  if (!m.state || m.comm != comm || m.dt != dt || m.op != op || count < 0 || recvbuf == MPI_IN_PLACE) return false;
  if (t_inside > 0 || m.generation != g_comm_generation.load(std::memory_order_acquire) ||
      g_state.load(std::memory_order_acquire) != kReady)
    return false;
  const int64_t bytes = count * m.type_size;
  if (bytes < g_min_bytes || SizeRoute::bucket_of(bytes) != m.bucket) return false;
  if (on_device(sendbuf) || on_device(recvbuf)) return false;
  if (!m.state->route.count_final(bytes, Path::Mpi)) return false;  // a look is due, or the route changed
  ++m.state->memo_passes;  // into passed:learned when the state goes, not a locked add per call
  return true;
}

void remember_pass(CommState *cs, MPI_Comm comm, MPI_Datatype dt, MPI_Op op, const TypeEntry *t, int64_t bytes) {
  Path path;
  if (!cs->route.final_route(bytes, &path) || path != Path::Mpi) return;
  t_pass_memo = {cs, comm, dt, op, t->size, SizeRoute::bucket_of(bytes),
                 g_comm_generation.load(std::memory_order_acquire)};
}

// MPI_Allreduce and MPI_Iallreduce share the route and the call; a missing
// request (Iallreduce) is one more argument error that MPI must report itself.
// `started` (Iallreduce, when the progress hook is in): start the operation
// and hand it back instead of running it to the end.
// Not inlined into the entry points: their memo path stays a few instructions.
__attribute__((noinline)) int serve_allreduce(Coll c, const void *sendbuf, void *recvbuf, int count,
                                              MPI_Datatype dt, MPI_Op op, MPI_Comm comm, bool request_missing,
                                              int fallback_reason, bc_request_t *started = nullptr,
                                              bc_comm_t *started_on = nullptr) {
  return guarded(c, comm, [&]() -> int {
    Reason why;
    if (!route_start(fallback_reason, &why)) return pass(c, why);
    const TypeEntry *t = nullptr;
    bc_op_t bop = BC_SUM;
    CommState *cs = nullptr;
    if (bad(comm, MPI_COMM_NULL) || count < 0 || bad(dt, MPI_DATATYPE_NULL) || bad(op, MPI_OP_NULL) ||
        recvbuf == MPI_IN_PLACE || request_missing)
      why = Reason::InvalidArgs;
    else
      why = reduction_route(count, dt, op, comm, &t, &bop, &cs);
    if (why == kServe) why = device_route(recvbuf, t->bc, bop);
    if (why != kServe) return pass(c, why);
    const int64_t bytes = static_cast<int64_t>(count) * t->size;
    bool timed = false;
    Path path = Path::Bc;
    if (g_route_learn && mpi_may_take(t->bc, bop))
      path = started ? cs->route.unprobed(bytes) : cs->route.next(bytes, &timed);
    if (path == Path::Mpi) {
      if (!timed) {
        if (c == Coll::Allreduce && !started) remember_pass(cs, comm, dt, op, t, bytes);
        return pass(c, Reason::Learned);
      }
      // A timed probe of the MPI library: run here, where it can be timed.
      count_pass(c, Reason::Learned);
      const double t0 = PMPI_Wtime();
      const int rc = fallback_allreduce(sendbuf, recvbuf, count, dt, op, comm);
      if (rc == MPI_SUCCESS) cs->route.record(bytes, Path::Mpi, PMPI_Wtime() - t0, agree_on(comm));
      return rc;
    }
    bc_status_t st;
    {
      Inside in;
      const void *input = sendbuf == MPI_IN_PLACE ? BC_IN_PLACE : sendbuf;
      const double t0 = timed ? PMPI_Wtime() : 0;
      st = started ? bc_iallreduce(input, recvbuf, count, t->bc, bop, cs->bc, started)
                   : bc_allreduce(input, recvbuf, count, t->bc, bop, cs->bc);
      if (started_on) *started_on = cs->bc;
      if (timed && st == BC_OK) cs->route.record(bytes, Path::Bc, PMPI_Wtime() - t0, agree_on(comm));
    }
    if (st != BC_OK) return raise(c, comm, st, bc_last_error());
    g_served[static_cast<int>(c)].fetch_add(1, std::memory_order_relaxed);
    return MPI_SUCCESS;
  });
}

}  // namespace

int allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
              int fallback_reason) {
  if (fallback_reason < 0 && pass_by_memo(sendbuf, recvbuf, count, dt, op, comm)) return kPass;
  return serve_allreduce(Coll::Allreduce, sendbuf, recvbuf, count, dt, op, comm, false, fallback_reason);
}

int iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
               MPI_Request *request, int fallback_reason) {
  // Non-blocking where Open MPI's progress loop drives it (pmpi_requests.cc);
  // otherwise BlueConnect runs it here and the request returned is already
  // complete (a generalized request either way, so MPI_Wait/MPI_Test take it).
  const bool async = requests_async();
  bc_request_t op_started = nullptr;
  bc_comm_t on = nullptr;
  const int rc = serve_allreduce(Coll::Iallreduce, sendbuf, recvbuf, count, dt, op, comm, request == nullptr,
                                 fallback_reason, async ? &op_started : nullptr, &on);
  if (rc != MPI_SUCCESS) return rc;  // kPass, or an error already raised
  const int grc = op_started ? requests_start(op_started, on, request) : completed_request(request);
  if (grc != MPI_SUCCESS) {
    PMPI_Comm_call_errhandler(comm, grc);
    return grc;
  }
  return MPI_SUCCESS;
}

int reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype dt, MPI_Op op,
                         MPI_Comm comm, int fallback_reason) {
  const Coll c = Coll::ReduceScatterBlock;
  return guarded(c, comm, [&]() -> int {
    Reason why;
    if (!route_start(fallback_reason, &why)) return pass(c, why);
    const TypeEntry *t = nullptr;
    bc_op_t bop = BC_SUM;
    CommState *cs = nullptr;
    int p = 0;
    if (bad(comm, MPI_COMM_NULL) || recvcount < 0 || bad(dt, MPI_DATATYPE_NULL) || bad(op, MPI_OP_NULL) ||
        recvbuf == MPI_IN_PLACE || PMPI_Comm_size(comm, &p) != MPI_SUCCESS)
      why = Reason::InvalidArgs;
    else
      why = reduction_route(static_cast<int64_t>(recvcount) * p, dt, op, comm, &t, &bop, &cs);
    if (why == kServe) why = device_route(recvbuf, t->bc, bop);
    if (why != kServe) return pass(c, why);
    bc_status_t st;
    {
      Inside in;
      // In place, recvbuf holds the whole input: BC_IN_PLACE has the same convention.
      st = bc_reduce_scatter(sendbuf == MPI_IN_PLACE ? BC_IN_PLACE : sendbuf, recvbuf, recvcount, t->bc, bop,
                             cs->bc);
    }
    if (st != BC_OK) return raise(c, comm, st, bc_last_error());
    g_served[static_cast<int>(c)].fetch_add(1, std::memory_order_relaxed);
    return MPI_SUCCESS;
  });
}

int allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
              MPI_Datatype recvtype, MPI_Comm comm, int fallback_reason) {
  const Coll c = Coll::Allgather;
  return guarded(c, comm, [&]() -> int {
    Reason why;
    if (!route_start(fallback_reason, &why)) return pass(c, why);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    CommState *cs = nullptr;
    int p = 0;
    int64_t rsize = 0, ssize = 0;
    if (bad(comm, MPI_COMM_NULL) || recvcount < 0 || bad(recvtype, MPI_DATATYPE_NULL) || recvbuf == MPI_IN_PLACE ||
        (!in_place && (sendcount < 0 || bad(sendtype, MPI_DATATYPE_NULL))) ||
        PMPI_Comm_size(comm, &p) != MPI_SUCCESS)
      why = Reason::InvalidArgs;
    else if ((rsize = dense_size(recvtype)) == 0 || (!in_place && (ssize = dense_size(sendtype)) == 0))
      why = Reason::Derived;
    else if (!in_place && static_cast<int64_t>(sendcount) * ssize != static_cast<int64_t>(recvcount) * rsize)
      why = Reason::TypeMismatch;
    else if (static_cast<int64_t>(recvcount) * rsize * p < g_min_bytes)
      why = Reason::Small;
    else
      why = comm_route(comm, &cs);
    if (why != kServe) return pass(c, why);
    bc_status_t st;
    {
      Inside in;
      // Any dense datatype travels as bytes; in place, this rank's block is
      // already at recvbuf + rank * block, as BC_IN_PLACE expects.
      st = bc_allgather(in_place ? BC_IN_PLACE : sendbuf, recvbuf, static_cast<int64_t>(recvcount) * rsize,
                        BC_UINT8, cs->bc);
    }
    if (st != BC_OK) return raise(c, comm, st, bc_last_error());
    g_served[static_cast<int>(c)].fetch_add(1, std::memory_order_relaxed);
    return MPI_SUCCESS;
  });
}

int error_class(bc_status_t st) { return mpi_error_class(st); }

}  // namespace pmpi
}  // namespace bc

// ---- the C entry points ----
extern "C" {

BC_PMPI_EXPORT int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                 MPI_Comm comm) {
  // Host buffers, checked by the memo: straight to the MPI library.
  if (bc::pmpi::pass_by_memo(sendbuf, recvbuf, count, datatype, op, comm))
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  const int rc = bc::pmpi::serve_allreduce(bc::pmpi::Coll::Allreduce, sendbuf, recvbuf, count, datatype, op, comm,
                                           false, -1);
  return rc != bc::pmpi::kPass ? rc : bc::pmpi::fallback_allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

BC_PMPI_EXPORT int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                                  MPI_Op op, MPI_Comm comm, MPI_Request *request) {
  const int rc = bc::pmpi::iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  return rc != bc::pmpi::kPass ? rc
                               : bc::pmpi::fallback_iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
}

BC_PMPI_EXPORT int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                                            MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  const int rc = bc::pmpi::reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
  return rc != bc::pmpi::kPass
             ? rc
             : bc::pmpi::fallback_reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
}

BC_PMPI_EXPORT int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const int rc = bc::pmpi::allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return rc != bc::pmpi::kPass
             ? rc
             : bc::pmpi::fallback_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

}  // extern "C"
