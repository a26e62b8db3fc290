// Topology detection at communicator creation (collective).
#pragma once

#include <mpi.h>

#include <vector>

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

// The members of `comm` as ranks of MPI_COMM_WORLD, in communicator order.
// False when some are not in it (spawned processes: those entries are
// MPI_UNDEFINED, the others filled) or MPI failed (`out` empty). Local: no
// communication.
bool world_ranks_of(MPI_Comm comm, std::vector<int> *out);

}  // namespace bc
