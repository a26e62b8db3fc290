// Topology detection at communicator creation (collective).
#pragma once

#include <mpi.h>

#include "core/params.h"
#include "topo/topo.h"

namespace bc {

// BC_TOPO when set; otherwise nodes from MPI_COMM_TYPE_SHARED, levels above them
// from BC_TOPO_FILE or else from the scheduler's address of the node
// (BC_TOPO_ADDR, or Slurm's SLURM_TOPOLOGY_ADDR under BC_TOPO_SCHEDULER=auto),
// a level inside them from hwloc (BC_TOPO_INTRA). One
// MPI_Allgather of a small record per rank carries every rank's keys, its status
// and a hash of its settings, so every rank sees the same layout (uneven and
// non-contiguous placements included) and all ranks fail together or not at all.
Status topo_detect(MPI_Comm comm, const ParamSet &params, Topology *out);

}  // namespace bc
