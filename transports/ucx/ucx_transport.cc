// Placeholder until the UCX transport lands: not available.
#include "transports/transport.h"

namespace bc {
Status ucx_transport_create(const TransportSetup &, std::unique_ptr<Transport> *) {
  return BC_FAIL(BC_ERR_NOT_SUPPORTED, "the ucx transport is not built yet");
}
}  // namespace bc
