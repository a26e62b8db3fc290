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
