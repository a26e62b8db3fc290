// The transports for device buffers (CUDA builds only).
//
// cuda: same-node peers. The receiver pulls from the sender's buffer through
// a CUDA IPC mapping; descriptors and acks travel over MPI point-to-point.
// staging: other-node peers. Device data goes through pinned host bounce
// buffers and the peer's host transport (ucx or mpi): Debian's UCX has no
// CUDA support, and the MPI underneath is not assumed CUDA-aware.
#pragma once

#include <memory>
#include <vector>

#include "transports/transport.h"

namespace bc {

// Collective over setup.bootstrap. NotSupported on every rank when any rank
// has no usable device.
Status cuda_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out);
// Local. `host[peer]` is the host transport that reaches peer; it must outlive
// the staging transport.
Status staging_transport_create(const TransportSetup &setup, const std::vector<Transport *> &host,
                                std::unique_ptr<Transport> *out);

}  // namespace bc
