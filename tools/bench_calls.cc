// bc_bench's calls: one call of BlueConnect's collective or of the MPI
// library's on the same buffers, and the glue of --via mpi, where BlueConnect
// is reached through MPI_Allreduce etc. of the PMPI preload and the MPI
// library through PMPI_*. See bench_run.h.
#include <dlfcn.h>

#include "bench_run.h"

namespace bcbench {

// --via mpi: the file whose MPI_Allreduce the program calls, when that is not
// the MPI library's own (Open MPI's MPI_Allreduce is an alias of PMPI_Allreduce).
std::string g_interposer;

// Under the preload's learned route (docs/PMPI.md) the first calls of each
// size are probes, half of them through the MPI library, and a close call
// is probed again later: the warm-up covers them all, so that the timed loop
// sees the route a long-running program gets.
// 0 without the preload or with BC_PMPI_ROUTE=bc.
int preload_probe_calls(int64_t bytes) {
  using ProbeCalls = int (*)(long long);
  static const auto fn = reinterpret_cast<ProbeCalls>(dlsym(RTLD_DEFAULT, "bc_pmpi_probe_calls"));
  return fn ? fn(static_cast<long long>(bytes)) : 0;
}

bool find_interposer() {
  void *mpi = dlsym(RTLD_DEFAULT, "MPI_Allreduce"), *pmpi = dlsym(RTLD_DEFAULT, "PMPI_Allreduce");
  Dl_info info;
  if (!mpi || mpi == pmpi || !dladdr(mpi, &info) || !info.dli_fname) return false;
  g_interposer = info.dli_fname;
  return true;
}

bc_status_t Bench::call_bc() {
  if (o_.via_mpi) {
    call_mpi_entry(false);  // MPI_*: served by the preload
    return BC_OK;
  }
  void *rb = o_.mem_cuda ? drecv_.data() : recv_.data();
  const void *s = o_.inplace ? BC_IN_PLACE : o_.mem_cuda ? dsend_.data() : send_.data();
  switch (o_.coll) {
    case Coll::Allreduce: return bc_allreduce(s, rb, sh_.call, o_.dtype, o_.op, comm_);
    case Coll::ReduceScatter: return bc_reduce_scatter(s, rb, sh_.call, o_.dtype, o_.op, comm_);
    case Coll::Allgather: return bc_allgather(s, rb, sh_.call, o_.dtype, comm_);
  }
  return BC_ERR_INTERNAL;
}

// The MPI library's collective: through PMPI_* with --via mpi, so that the
// preload does not serve it.
void Bench::call_mpi() { call_mpi_entry(o_.via_mpi); }

// MPI's default error handler aborts the job on a failure.
void Bench::call_mpi_entry(bool pmpi) {
  const void *s = o_.inplace ? MPI_IN_PLACE : send_.data();
  const MPI_Datatype t = mpi_datatype(o_.dtype);
  const int n = static_cast<int>(sh_.call);
  const MPI_Comm c = pmpi || !o_.via_mpi ? mpi_comm_ : bc_mpi_comm_;
  const MPI_Op op = mpi_op(o_.op);
  switch (o_.coll) {
    case Coll::Allreduce:
      pmpi ? PMPI_Allreduce(s, recv_.data(), n, t, op, c) : MPI_Allreduce(s, recv_.data(), n, t, op, c);
      break;
    case Coll::ReduceScatter:
      pmpi ? PMPI_Reduce_scatter_block(s, recv_.data(), n, t, op, c)
           : MPI_Reduce_scatter_block(s, recv_.data(), n, t, op, c);
      break;
    case Coll::Allgather: {
      const int sn = o_.inplace ? 0 : n;
      const MPI_Datatype st = o_.inplace ? MPI_DATATYPE_NULL : t;
      pmpi ? PMPI_Allgather(s, sn, st, recv_.data(), n, t, c) : MPI_Allgather(s, sn, st, recv_.data(), n, t, c);
      break;
    }
  }
}

}  // namespace bcbench
