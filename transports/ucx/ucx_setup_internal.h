// The UCX transport's setup pieces shared by its files, not for other code
// (ucx_transport.h is the interface): the process's shared worker, which a
// transport takes at creation (ucx_worker.cc), and the tcp settings of its
// context (ucx_tcp.cc).
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>

#include "transports/ucx/ucx_transport.h"

namespace bc {

// ucx_worker.cc: the shared worker for these settings, counting a user.
Status worker_acquire(bool event_mode, int64_t rndv_thresh, bool network_only, int rank, UcxWorker **out);

// Where tcp is the network, the context sends by copy (ucx_tcp.cc says why).
Status avoid_tcp_zcopy(ucp_config_t *config);

}  // namespace bc
