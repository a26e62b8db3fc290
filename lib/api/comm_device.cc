// Device buffers on a communicator: the transports that move them, created
// by the first device collective (see comm.h, comm_ensure_device).
#include "api/comm.h"
#include "bc_config.h"
#include "core/log.h"
#if BC_HAVE_CUDA
#include "transports/cuda/cuda_transports.h"
#endif

namespace bc {
namespace {

#if BC_HAVE_CUDA
Status create_device_transports(bc_comm *c) {
  const TransportSetup setup = transport_setup(c);
  std::unique_ptr<Transport> ipc, staging;
  // Every rank of a communicator has the same parameters: all or none create
  // the (collective) IPC transport; comm_ensure_device agrees on the outcome.
  if (c->params.get_int(ParamId::CudaIpc)) BC_CHECK(cuda_transport_create(setup, &ipc));
  else BC_CHECK(cuda_usable());
  BC_CHECK(staging_transport_create(setup, c->peer_transport, &staging));
  c->dev_peer_transport.assign(c->size, nullptr);
  for (int peer = 0; peer < c->size; ++peer) {
    if (peer == c->rank) continue;
    c->dev_peer_transport[peer] = ipc && ipc->can_connect(peer, BC_MEM_CUDA) ? ipc.get() : staging.get();
  }
  if (ipc) c->dev_transports.push_back(std::move(ipc));
  c->dev_transports.push_back(std::move(staging));
  return BC_OK;
}
#endif

}  // namespace

// The device transports, created by the first collective on device buffers:
// a communicator that never sees one never touches the GPU. Collective; every
// rank must pass device buffers to the same calls (as with MPI datatypes).
Status comm_ensure_device(bc_comm *c) {
  if (c->dev_state == bc_comm::DevState::Ready) return BC_OK;
  if (c->dev_state == bc_comm::DevState::Unknown) {
#if BC_HAVE_CUDA
    Status st = agree_status(c->mpi, create_device_transports(c), "device transport setup");
    if (st == BC_OK) {
      c->dev_state = bc_comm::DevState::Ready;
      BC_INFO(Transport, "device buffers: cuda (CUDA IPC) inside the node, staging through pinned host "
              "buffers across nodes");
      return BC_OK;
    }
    c->dev_reason = last_error();
    c->dev_transports.clear();
    if (st != BC_ERR_NOT_SUPPORTED) return st;
#else
    c->dev_reason = "built without CUDA (meson -Dcuda=enabled)";
#endif
    c->dev_state = bc_comm::DevState::Unavailable;
  }
  return BC_FAIL(BC_ERR_NOT_SUPPORTED, "device buffers are not usable on this communicator: %s", c->dev_reason.c_str());
}

}  // namespace bc
