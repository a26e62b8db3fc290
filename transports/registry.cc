#include "transports/transport.h"

#include <cstring>

#include "transports/ucx/ucx_watch.h"

namespace bc {

const std::vector<TransportKind> &transport_kinds() {
  static const std::vector<TransportKind> kinds = {
      // Per peer, the first that can reach it wins: shared memory inside a node,
      // UCX across nodes, MPI point-to-point for anything else.
      {"shm", shm_transport_create},
      {"ucx", ucx_transport_create},
      {"mpi", mpi_transport_create},
  };
  return kinds;
}

Status mpi_tags_fit(const char *transport, const ParamSet &params) {
  const int mpi_ub = mpi_tag_ub();
  const int64_t test_ub = params.get_int(ParamId::MpiTagUb);
  const int64_t ub = test_ub > 0 && test_ub < mpi_ub ? test_ub : mpi_ub;
  const int64_t need = (int64_t{1} << kTagBits) - 1;
  if (ub >= need) return BC_OK;
  return BC_FAIL(BC_ERR_NOT_SUPPORTED,
                 "%s transport: MPI_TAG_UB is %#llx%s, but BlueConnect's tags need %d bits (%#llx): folded "
                 "into fewer, operations in flight could match each other's messages. Open MPI's pml ob1 "
                 "gives %#llx; under pml ucx (%#x) use BC_TRANSPORT=auto or ucx",
                 transport, static_cast<long long>(ub), ub < mpi_ub ? " (BC_MPI_TAG_UB)" : "", kTagBits,
                 static_cast<long long>(need), static_cast<long long>(need), (1 << 23) - 1);
}

void transports_release_idle() {
  ucx_release_idle();
  ucx_watch_release();
  shm_release_idle();
}

void transports_retire(std::vector<std::unique_ptr<Transport>> *transports, bool clean) {
  for (auto &t : *transports)
    if (t && std::strcmp(t->name(), "shm") == 0) shm_transport_retire(std::move(t), clean);
  transports->clear();
}

}  // namespace bc
