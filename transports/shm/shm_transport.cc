// Placeholder until the shared-memory transport lands: not available.
#include "transports/transport.h"

namespace bc {
Status shm_transport_create(const TransportSetup &, std::unique_ptr<Transport> *) {
  return BC_FAIL(BC_ERR_NOT_SUPPORTED, "the shm transport is not built yet");
}
}  // namespace bc
