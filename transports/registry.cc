#include "transports/transport.h"

namespace bc {

const std::vector<TransportKind> &transport_kinds() {
  static const std::vector<TransportKind> kinds = {
      {"mpi", mpi_transport_create},
  };
  return kinds;
}

}  // namespace bc
