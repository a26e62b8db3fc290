// The glue between MPI_Allreduce's learned route (BC_PMPI_ROUTE=learn; the
// route's own logic is pmpi_route.cc) and the MPI library: which (dtype, op)
// MPI may take without changing a result, the ranks' agreement on the
// measured times, and the probe count that benchmarks warm up with.
#include <mpi.h>

#include <atomic>

#include "pmpi/pmpi_internal.h"
#include "pmpi/pmpi_route.h"
#include "blueconnect.h"

namespace bc {
namespace pmpi {

// Whether the MPI library may take this (dtype, op) when it is faster: not
// where Open MPI 4.1's own reduction is wrong, so that the learned route never
// changes a result. 8-bit sums and products saturate in its vectorised
// reduction (upstream issue 8045), and 4.1.2-4.1.4 reduce MPI_UNSIGNED_LONG as
// signed in MIN and MAX (open-mpi/ompi#10525; unsigned 64-bit types alike, to
// be safe).
bool mpi_may_take(bc_dtype_t t, bc_op_t op) {
  const bool byte = t == BC_INT8 || t == BC_UINT8;
  if (byte && (op == BC_SUM || op == BC_PROD)) return false;
  if (t == BC_UINT64 && (op == BC_MIN || op == BC_MAX)) return false;
  return true;
}

// The learned route's agreement: the slowest rank's medians, on every rank.
SizeRoute::Agree agree_on(MPI_Comm comm) {
  return [comm](double *bc_seconds, double *mpi_seconds) {
    double mine[2] = {*bc_seconds, *mpi_seconds}, slowest[2] = {0, 0};
    if (PMPI_Allreduce(mine, slowest, 2, MPI_DOUBLE, MPI_MAX, comm) != MPI_SUCCESS) return false;
    *bc_seconds = slowest[0];
    *mpi_seconds = slowest[1];
    return true;
  };
}

// For benchmarks of the preload (bc_bench --via mpi, found with dlsym): the
// calls of `bytes` that the learned route spends probing a communicator's
// size bucket before it decides (0 with BC_PMPI_ROUTE=bc, with BC_DISABLE,
// or before MPI_Init), plus the calls BlueConnect itself may spend learning
// its plan for the size, so that a warm-up can cover them and the timed loop
// sees the route and the plan as a long-running program does.
extern "C" __attribute__((visibility("default"))) int bc_pmpi_probe_calls(long long bytes) {
  if (g_state.load(std::memory_order_acquire) != kReady || bytes <= 0) return 0;
  return (g_route_learn ? SizeRoute::learning_calls(SizeRoute::bucket_of(bytes)) : 0) +
         preload::learning_calls(bytes);
}

}  // namespace pmpi
}  // namespace bc
