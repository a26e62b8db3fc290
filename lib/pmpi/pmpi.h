// The PMPI interposer (libblueconnect_mpi.so): shared between the C entry
// points (pmpi.cc) and the Fortran ones (pmpi_fortran.cc).
//
// Every entry point runs the same route: the call is checked against what
// BlueConnect serves (op, datatype, layout, communicator, size), and either
// goes to BlueConnect or to the PMPI_ function unchanged. See docs/PMPI.md.
#pragma once

#include <mpi.h>

#include <atomic>

#include "blueconnect.h"
#include "blueconnect_preload.h"

#define BC_PMPI_EXPORT __attribute__((visibility("default")))

namespace bc {
namespace pmpi {

// Why a call went to the MPI library instead of BlueConnect. Each has a row in
// the BC_PMPI_STATS file; keep kReasonNames (pmpi_stats.cc) in this order.
enum class Reason : int {
  Disabled = 0,   // BC_DISABLE=1
  InitError,      // a BC_* parameter was invalid: the interposer turned itself off
  InvalidArgs,    // MPI_COMM_NULL, a negative count, ...: MPI raises its own error
  UserOp,         // a user-defined MPI_Op
  Op,             // a predefined op BlueConnect does not have (MINLOC, LAND, ...)
  Dtype,          // a predefined datatype BlueConnect does not reduce (MPI_SHORT, MPI_2INT, ...)
  Derived,        // a derived datatype (reductions), or a non-contiguous one (allgather)
  OpDtype,        // an op the datatype does not support (bitwise on floats): MPI decides
  TypeMismatch,   // allgather whose send and receive sides differ in bytes
  Intercomm,      // an intercommunicator
  Small,          // below BC_PMPI_MIN_BYTES
  CommSetup,      // bc_comm_create failed on this communicator (BC_DEBUG=PMPI says why)
  BcComm,         // a communicator BlueConnect itself created
  FortranSentinel,  // Fortran MPI_BOTTOM as a buffer, or an MPI whose Fortran sentinels are unknown
  DeviceOpDtype,  // device buffers with a (dtype, op) the GPU kernels do not have (integers, bitwise)
  Learned,        // BC_PMPI_ROUTE=learn: the MPI library was faster at this size (or is being probed)
  Count
};

// Whether any buffer can be device memory: preload::device_buffers_usable,
// asked once at start (pmpi_init.cc); true before, so that every pointer is asked.
// Without a usable device each call the preload sees skips the calls into
// libblueconnect.so that ask a buffer's memory type (5 of the 50 ns a passed
// 4-byte MPI_Allreduce spent in the preload at np 1).
extern std::atomic<bool> g_device_buffers;
// Whether `p` is device (or managed) memory; false for null and MPI_IN_PLACE.
// Inline: the memo path of MPI_Allreduce asks it twice per call.
inline bool on_device(const void *p) {
  return g_device_buffers.load(std::memory_order_relaxed) && p && p != MPI_IN_PLACE &&
         preload::memtype_of(p) == BC_MEM_CUDA;
}

// The MPI library's own collectives on buffers that may live on the GPU: the
// pointers go to PMPI_* as they are when the MPI is CUDA-aware
// (MPIX_Query_cuda_support), else through host copies (in, PMPI_*, out).
int fallback_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm);
int fallback_iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                        MPI_Request *request);
int fallback_reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype dt, MPI_Op op,
                                  MPI_Comm comm);
int fallback_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                       MPI_Datatype recvtype, MPI_Comm comm);

enum class Coll : int { Allreduce = 0, ReduceScatterBlock, Allgather, Iallreduce, Count };

// The routes. Called with C handles, after the Fortran layer translated its
// arguments (MPI_IN_PLACE is MPI_IN_PLACE here). Each returns the MPI result
// when BlueConnect served the call (or raised its error), or kPass when the
// caller must hand the call, unchanged, to the MPI library (the C entry points
// to PMPI_*, the Fortran ones to MPI's own Fortran binding). `fallback_reason`
// >= 0 forces kPass, counted under that reason.
constexpr int kPass = -1;

// > 0 while this thread runs BlueConnect code: the library's own
// MPI_Allreduce / MPI_Allgather (communicator setup) go straight to MPI, and
// the progress callback (pmpi_requests.cc) stays out. Initial-exec: read on
// every call the preload sees, and the preload is loaded at program start.
inline thread_local int t_inside __attribute__((tls_model("initial-exec"))) = 0;
struct Inside {
  Inside() { ++t_inside; }
  ~Inside() { --t_inside; }
  Inside(const Inside &) = delete;
  Inside &operator=(const Inside &) = delete;
};

// The MPI error class of a BlueConnect status.
int error_class(bc_status_t st);

// Non-blocking MPI_Iallreduce (pmpi_requests.cc). requests_init hooks Open
// MPI's progress loop; requests_async says whether that worked (otherwise
// MPI_Iallreduce completes inside the call). requests_start wraps a started
// bc_iallreduce in a generalized request; requests_drain finishes the
// operations of one communicator (NULL: all) before it goes.
void requests_init();
bool requests_async();
int requests_start(bc_request_t op, bc_comm_t comm, MPI_Request *request);
void requests_drain(bc_comm_t comm);
void requests_finalize();
int allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
              int fallback_reason = -1);
int reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype dt, MPI_Op op,
                         MPI_Comm comm, int fallback_reason = -1);
int allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
              MPI_Datatype recvtype, MPI_Comm comm, int fallback_reason = -1);
int iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
               MPI_Request *request, int fallback_reason = -1);

}  // namespace pmpi
}  // namespace bc
