// Fortran entry points (mpif.h and `use mpi`): Open MPI's Fortran bindings call
// PMPI_Allreduce directly, so the C symbols never see Fortran callers.
//
// Each of the four collectives is defined under the four manglings compilers
// use (mpi_allreduce_, mpi_allreduce, mpi_allreduce__, MPI_ALLREDUCE). The
// arguments are translated to C (handles with MPI_*_f2c, Fortran MPI_IN_PLACE
// to MPI_IN_PLACE) and take the same route as C callers. A call the route
// hands to MPI goes to the MPI library's own Fortran binding (pmpi_allreduce_,
// the standard Fortran profiling name) with the caller's arguments untouched,
// so whatever MPI does with them (MPI_BOTTOM, sentinels we do not know) stays
// MPI's business. Only when that binding is missing do we call the C PMPI_
// function with the arguments translated as Open MPI's binding does.
//
// Not covered: the mpi_f08 module, whose bindings call ompi_allreduce_f
// directly; its calls are correct but not accelerated.
#include "pmpi/pmpi.h"

// Open MPI's Fortran sentinels are common blocks; the executable's copy wins,
// and these references resolve to it. Weak: another MPI may lack them.
extern "C" {
#define BC_FORTRAN_SENTINEL(name) extern int name __attribute__((weak, visibility("default")))
BC_FORTRAN_SENTINEL(MPI_FORTRAN_IN_PLACE);
BC_FORTRAN_SENTINEL(mpi_fortran_in_place);
BC_FORTRAN_SENTINEL(mpi_fortran_in_place_);
BC_FORTRAN_SENTINEL(mpi_fortran_in_place__);
BC_FORTRAN_SENTINEL(MPI_FORTRAN_BOTTOM);
BC_FORTRAN_SENTINEL(mpi_fortran_bottom);
BC_FORTRAN_SENTINEL(mpi_fortran_bottom_);
BC_FORTRAN_SENTINEL(mpi_fortran_bottom__);
#undef BC_FORTRAN_SENTINEL
}

namespace {

using bc::pmpi::kPass;
using bc::pmpi::Reason;

bool matches(const void *p, const int *a, const int *b, const int *c, const int *d) {
  return p && (p == a || p == b || p == c || p == d);
}
bool is_in_place(const void *p) {
  return matches(p, &MPI_FORTRAN_IN_PLACE, &mpi_fortran_in_place, &mpi_fortran_in_place_, &mpi_fortran_in_place__);
}
bool is_bottom(const void *p) {
  return matches(p, &MPI_FORTRAN_BOTTOM, &mpi_fortran_bottom, &mpi_fortran_bottom_, &mpi_fortran_bottom__);
}
// Without the sentinels' addresses a Fortran MPI_IN_PLACE cannot be told from
// a buffer: then every Fortran call goes to MPI.
bool sentinels_known() {
  return (&MPI_FORTRAN_IN_PLACE || &mpi_fortran_in_place || &mpi_fortran_in_place_ || &mpi_fortran_in_place__) &&
         (&MPI_FORTRAN_BOTTOM || &mpi_fortran_bottom || &mpi_fortran_bottom_ || &mpi_fortran_bottom__);
}

// Reason to hand the call to MPI before routing, or -1.
int sentinel_reason(const void *sendbuf, const void *recvbuf) {
  if (!sentinels_known() || is_bottom(sendbuf) || is_bottom(recvbuf))
    return static_cast<int>(Reason::FortranSentinel);
  return -1;
}
const void *c_sendbuf(const void *p) { return is_in_place(p) ? MPI_IN_PLACE : is_bottom(p) ? MPI_BOTTOM : p; }
void *c_recvbuf(void *p) { return is_bottom(p) ? MPI_BOTTOM : p; }

}  // namespace

// The MPI library's own Fortran bindings, for calls the route hands back.
extern "C" {
typedef void (*AllreduceF)(void *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *);
typedef void (*IallreduceF)(void *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *,
                            MPI_Fint *);
typedef void (*AllgatherF)(void *, MPI_Fint *, MPI_Fint *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *,
                           MPI_Fint *);
#define BC_DECLARE_PMPI_F(type, lower, upper)                                  \
  extern void p##lower##_() __attribute__((weak, visibility("default")));     \
  extern void p##lower() __attribute__((weak, visibility("default")));        \
  extern void p##lower##__() __attribute__((weak, visibility("default")));    \
  extern void P##upper() __attribute__((weak, visibility("default")));        \
  static type pmpi_f_##lower() {                                              \
    if (p##lower##_) return reinterpret_cast<type>(p##lower##_);              \
    if (p##lower) return reinterpret_cast<type>(p##lower);                    \
    if (p##lower##__) return reinterpret_cast<type>(p##lower##__);            \
    if (P##upper) return reinterpret_cast<type>(P##upper);                    \
    return nullptr;                                                           \
  }
BC_DECLARE_PMPI_F(AllreduceF, mpi_allreduce, MPI_ALLREDUCE)
BC_DECLARE_PMPI_F(AllreduceF, mpi_reduce_scatter_block, MPI_REDUCE_SCATTER_BLOCK)
BC_DECLARE_PMPI_F(AllgatherF, mpi_allgather, MPI_ALLGATHER)
BC_DECLARE_PMPI_F(IallreduceF, mpi_iallreduce, MPI_IALLREDUCE)
#undef BC_DECLARE_PMPI_F
}

namespace {

void f_allreduce(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *datatype, MPI_Fint *op, MPI_Fint *comm,
                 MPI_Fint *ierr) {
  const MPI_Comm c_comm = PMPI_Comm_f2c(*comm);
  const MPI_Datatype c_type = PMPI_Type_f2c(*datatype);
  const MPI_Op c_op = PMPI_Op_f2c(*op);
  const void *s = c_sendbuf(sendbuf);
  void *r = c_recvbuf(recvbuf);
  const int forced = is_in_place(recvbuf) ? static_cast<int>(Reason::InvalidArgs) : sentinel_reason(sendbuf, recvbuf);
  int rc = bc::pmpi::allreduce(s, r, static_cast<int>(*count), c_type, c_op, c_comm, forced);
  if (rc == kPass) {
    if (AllreduceF f = pmpi_f_mpi_allreduce()) return f(sendbuf, recvbuf, count, datatype, op, comm, ierr);
    rc = PMPI_Allreduce(s, r, static_cast<int>(*count), c_type, c_op, c_comm);
  }
  if (ierr) *ierr = static_cast<MPI_Fint>(rc);
}

void f_reduce_scatter_block(void *sendbuf, void *recvbuf, MPI_Fint *recvcount, MPI_Fint *datatype, MPI_Fint *op,
                            MPI_Fint *comm, MPI_Fint *ierr) {
  const MPI_Comm c_comm = PMPI_Comm_f2c(*comm);
  const MPI_Datatype c_type = PMPI_Type_f2c(*datatype);
  const MPI_Op c_op = PMPI_Op_f2c(*op);
  const void *s = c_sendbuf(sendbuf);
  void *r = c_recvbuf(recvbuf);
  const int forced = is_in_place(recvbuf) ? static_cast<int>(Reason::InvalidArgs) : sentinel_reason(sendbuf, recvbuf);
  int rc = bc::pmpi::reduce_scatter_block(s, r, static_cast<int>(*recvcount), c_type, c_op, c_comm, forced);
  if (rc == kPass) {
    if (AllreduceF f = pmpi_f_mpi_reduce_scatter_block())
      return f(sendbuf, recvbuf, recvcount, datatype, op, comm, ierr);
    rc = PMPI_Reduce_scatter_block(s, r, static_cast<int>(*recvcount), c_type, c_op, c_comm);
  }
  if (ierr) *ierr = static_cast<MPI_Fint>(rc);
}

void f_allgather(void *sendbuf, MPI_Fint *sendcount, MPI_Fint *sendtype, void *recvbuf, MPI_Fint *recvcount,
                 MPI_Fint *recvtype, MPI_Fint *comm, MPI_Fint *ierr) {
  const MPI_Comm c_comm = PMPI_Comm_f2c(*comm);
  const void *s = c_sendbuf(sendbuf);
  void *r = c_recvbuf(recvbuf);
  // In place, the send count and type are ignored (and may be anything).
  const MPI_Datatype c_stype = s == MPI_IN_PLACE ? MPI_DATATYPE_NULL : PMPI_Type_f2c(*sendtype);
  const MPI_Datatype c_rtype = PMPI_Type_f2c(*recvtype);
  const int forced = is_in_place(recvbuf) ? static_cast<int>(Reason::InvalidArgs) : sentinel_reason(sendbuf, recvbuf);
  int rc = bc::pmpi::allgather(s, static_cast<int>(*sendcount), c_stype, r, static_cast<int>(*recvcount), c_rtype,
                               c_comm, forced);
  if (rc == kPass) {
    if (AllgatherF f = pmpi_f_mpi_allgather())
      return f(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, ierr);
    rc = PMPI_Allgather(s, static_cast<int>(*sendcount), c_stype, r, static_cast<int>(*recvcount), c_rtype, c_comm);
  }
  if (ierr) *ierr = static_cast<MPI_Fint>(rc);
}

void f_iallreduce(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *datatype, MPI_Fint *op, MPI_Fint *comm,
                  MPI_Fint *request, MPI_Fint *ierr) {
  const MPI_Comm c_comm = PMPI_Comm_f2c(*comm);
  const MPI_Datatype c_type = PMPI_Type_f2c(*datatype);
  const MPI_Op c_op = PMPI_Op_f2c(*op);
  const void *s = c_sendbuf(sendbuf);
  void *r = c_recvbuf(recvbuf);
  const int forced = is_in_place(recvbuf) ? static_cast<int>(Reason::InvalidArgs) : sentinel_reason(sendbuf, recvbuf);
  MPI_Request c_req = MPI_REQUEST_NULL;
  int rc = bc::pmpi::iallreduce(s, r, static_cast<int>(*count), c_type, c_op, c_comm, &c_req, forced);
  if (rc == kPass) {
    if (IallreduceF f = pmpi_f_mpi_iallreduce()) return f(sendbuf, recvbuf, count, datatype, op, comm, request, ierr);
    rc = PMPI_Iallreduce(s, r, static_cast<int>(*count), c_type, c_op, c_comm, &c_req);
  }
  if (rc == MPI_SUCCESS) *request = PMPI_Request_c2f(c_req);
  if (ierr) *ierr = static_cast<MPI_Fint>(rc);
}

}  // namespace

extern "C" {

#define BC_FORTRAN_ENTRY(lower, upper, impl, params, args) \
  BC_PMPI_EXPORT void lower##_ params { impl args; }       \
  BC_PMPI_EXPORT void lower params { impl args; }          \
  BC_PMPI_EXPORT void lower##__ params { impl args; }      \
  BC_PMPI_EXPORT void upper params { impl args; }

BC_FORTRAN_ENTRY(mpi_allreduce, MPI_ALLREDUCE, f_allreduce,
                 (void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *datatype, MPI_Fint *op, MPI_Fint *comm,
                  MPI_Fint *ierr),
                 (sendbuf, recvbuf, count, datatype, op, comm, ierr))
BC_FORTRAN_ENTRY(mpi_reduce_scatter_block, MPI_REDUCE_SCATTER_BLOCK, f_reduce_scatter_block,
                 (void *sendbuf, void *recvbuf, MPI_Fint *recvcount, MPI_Fint *datatype, MPI_Fint *op,
                  MPI_Fint *comm, MPI_Fint *ierr),
                 (sendbuf, recvbuf, recvcount, datatype, op, comm, ierr))
BC_FORTRAN_ENTRY(mpi_allgather, MPI_ALLGATHER, f_allgather,
                 (void *sendbuf, MPI_Fint *sendcount, MPI_Fint *sendtype, void *recvbuf, MPI_Fint *recvcount,
                  MPI_Fint *recvtype, MPI_Fint *comm, MPI_Fint *ierr),
                 (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, ierr))
BC_FORTRAN_ENTRY(mpi_iallreduce, MPI_IALLREDUCE, f_iallreduce,
                 (void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *datatype, MPI_Fint *op, MPI_Fint *comm,
                  MPI_Fint *request, MPI_Fint *ierr),
                 (sendbuf, recvbuf, count, datatype, op, comm, request, ierr))

#undef BC_FORTRAN_ENTRY

}  // extern "C"
