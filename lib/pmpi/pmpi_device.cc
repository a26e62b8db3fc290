// The MPI library's collectives on device buffers, for the calls BlueConnect
// passes on (pmpi.h). A CUDA-aware MPI gets the device pointers as they are;
// any other MPI (Debian's Open MPI: its UCX has no CUDA) would read device
// memory as host memory and crash, so the buffers go through host copies:
// copy in, PMPI_*, copy out. Host buffers go straight to PMPI_*.
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

#include <cstdint>
#include <vector>

#include "blueconnect_preload.h"
#include "pmpi/pmpi.h"

namespace bc {
namespace pmpi {
namespace {

// MPIX_Query_cuda_support() is 1 only when the MPI can take device pointers
// now (Open MPI built with CUDA, and its transport up). Asked once.
bool mpi_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  static const bool aware = MPIX_Query_cuda_support() == 1;
  return aware;
#else
  return false;
#endif
}

// The bytes `count` elements of `dt` span from the buffer pointer, and where
// they start (true lower bound), so derived datatypes stage whole.
struct Span {
  MPI_Aint lb = 0;
  size_t bytes = 0;
};
int span_of(int count, MPI_Datatype dt, Span *out) {
  MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
  int rc = PMPI_Type_get_extent(dt, &lb, &extent);
  if (rc == MPI_SUCCESS) rc = PMPI_Type_get_true_extent(dt, &tlb, &textent);
  if (rc != MPI_SUCCESS) return rc;
  out->lb = tlb;
  out->bytes = count <= 0 ? 0 : static_cast<size_t>((count - 1) * extent + textent);
  return MPI_SUCCESS;
}

// A host copy of a device buffer's span. `base()` is what PMPI_* gets.
class Staged {
 public:
  int init(void *dev, int count, MPI_Datatype dt, bool copy_in) {
    dev_ = static_cast<unsigned char *>(dev);
    int rc = span_of(count, dt, &span_);
    if (rc != MPI_SUCCESS) return rc;
    host_.resize(span_.bytes + 1);
    if (copy_in && span_.bytes && preload::copy(host_.data(), dev_ + span_.lb, span_.bytes) != BC_OK) return MPI_ERR_BUFFER;
    return MPI_SUCCESS;
  }
  void *base() { return host_.data() - span_.lb; }
  int copy_out() {
    if (span_.bytes && preload::copy(dev_ + span_.lb, host_.data(), span_.bytes) != BC_OK) return MPI_ERR_BUFFER;
    return MPI_SUCCESS;
  }

 private:
  unsigned char *dev_ = nullptr;
  Span span_;
  std::vector<unsigned char> host_;
};

bool needs_staging(const void *a, const void *b) { return (on_device(a) || on_device(b)) && !mpi_cuda_aware(); }

int error_on(MPI_Comm comm, int rc) {
  if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
  return rc;
}

}  // namespace

int fallback_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
  if (!needs_staging(sendbuf, recvbuf)) return PMPI_Allreduce(sendbuf, recvbuf, count, dt, op, comm);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  Staged s, r;
  int rc = r.init(recvbuf, count, dt, in_place);
  if (rc == MPI_SUCCESS && !in_place) rc = s.init(const_cast<void *>(sendbuf), count, dt, true);
  if (rc == MPI_SUCCESS) rc = PMPI_Allreduce(in_place ? MPI_IN_PLACE : s.base(), r.base(), count, dt, op, comm);
  if (rc == MPI_SUCCESS) rc = error_on(comm, r.copy_out());
  return rc;
}

int fallback_iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                        MPI_Request *request) {
  if (!needs_staging(sendbuf, recvbuf)) return PMPI_Iallreduce(sendbuf, recvbuf, count, dt, op, comm, request);
  // Staged copies cannot outlive this call: run it blocking and hand back a
  // completed request, as the served path does.
  int rc = fallback_allreduce(sendbuf, recvbuf, count, dt, op, comm);
  if (rc != MPI_SUCCESS) return rc;
  return PMPI_Ibarrier(MPI_COMM_SELF, request);
}

int fallback_reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype dt, MPI_Op op,
                                  MPI_Comm comm) {
  if (!needs_staging(sendbuf, recvbuf)) return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, dt, op, comm);
  int p = 0;
  int rc = PMPI_Comm_size(comm, &p);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  Staged s, r;
  // In place, recvbuf holds the whole input.
  if (rc == MPI_SUCCESS) rc = r.init(recvbuf, in_place ? recvcount * p : recvcount, dt, in_place);
  if (rc == MPI_SUCCESS && !in_place) rc = s.init(const_cast<void *>(sendbuf), recvcount * p, dt, true);
  if (rc == MPI_SUCCESS)
    rc = PMPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : s.base(), r.base(), recvcount, dt, op, comm);
  if (rc == MPI_SUCCESS) rc = error_on(comm, r.copy_out());
  return rc;
}

int fallback_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                       MPI_Datatype recvtype, MPI_Comm comm) {
  if (!needs_staging(sendbuf, recvbuf))
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  int p = 0;
  int rc = PMPI_Comm_size(comm, &p);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  Staged s, r;
  if (rc == MPI_SUCCESS) rc = r.init(recvbuf, recvcount * p, recvtype, in_place);
  if (rc == MPI_SUCCESS && !in_place) rc = s.init(const_cast<void *>(sendbuf), sendcount, sendtype, true);
  if (rc == MPI_SUCCESS)
    rc = PMPI_Allgather(in_place ? MPI_IN_PLACE : s.base(), sendcount, sendtype, r.base(), recvcount, recvtype, comm);
  if (rc == MPI_SUCCESS) rc = error_on(comm, r.copy_out());
  return rc;
}

}  // namespace pmpi
}  // namespace bc
