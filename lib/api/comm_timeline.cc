// A new communicator's entry in the timeline (BC_TIMELINE_FILE; core/timeline.h):
// a key that names it across the job, its ranks' world ranks, and each rank's
// clock against its rank 0, so that scripts/timeline-report can put the times
// of different hosts on one axis. Collective: one small all-reduce with the
// timeline off.
#include <vector>

#include "api/comm.h"
#include "core/log.h"
#include "core/timeline.h"
#include "topo/detect.h"

namespace bc {
namespace {

// Rank 0 pings each other rank 8 times; the other rank answers with its clock.
// Offset = the midpoint of rank 0's send and receive minus the answer, from
// the round with the shortest trip (the least room for error). Sequential:
// p x 8 round trips, paid only with the timeline on.
Status measure_offsets(MPI_Comm comm, int rank, int size, double *offset_us, double *error_us) {
  constexpr int kRounds = 8, kTag = 7301;
  std::vector<double> offsets(static_cast<size_t>(size), 0.0), errors(static_cast<size_t>(size), 0.0);
  if (rank == 0) {
    for (int r = 1; r < size; ++r) {
      double best_rtt = 1e300;
      for (int i = 0; i < kRounds; ++i) {
        int64_t theirs = 0;
        const int64_t sent = timeline::now_ns();
        BC_MPI_CHECK(MPI_Send(&i, 1, MPI_INT, r, kTag, comm));
        BC_MPI_CHECK(MPI_Recv(&theirs, 1, MPI_INT64_T, r, kTag, comm, MPI_STATUS_IGNORE));
        const double rtt = static_cast<double>(timeline::now_ns() - sent);
        if (rtt < best_rtt) {
          best_rtt = rtt;
          offsets[static_cast<size_t>(r)] = (static_cast<double>(sent) + rtt / 2 - static_cast<double>(theirs)) / 1e3;
          errors[static_cast<size_t>(r)] = rtt / 2e3;
        }
      }
    }
  } else {
    for (int i = 0; i < kRounds; ++i) {
      int ping = 0;
      BC_MPI_CHECK(MPI_Recv(&ping, 1, MPI_INT, 0, kTag, comm, MPI_STATUS_IGNORE));
      const int64_t mine = timeline::now_ns();
      BC_MPI_CHECK(MPI_Send(&mine, 1, MPI_INT64_T, 0, kTag, comm));
    }
  }
  BC_MPI_CHECK(MPI_Scatter(offsets.data(), 1, MPI_DOUBLE, offset_us, 1, MPI_DOUBLE, 0, comm));
  BC_MPI_CHECK(MPI_Scatter(errors.data(), 1, MPI_DOUBLE, error_us, 1, MPI_DOUBLE, 0, comm));
  return BC_OK;
}

}  // namespace

Status comm_timeline_setup(bc_comm *c) {
  // Whether every rank records: one that does not would never join the
  // measurement below, so a job that sets BC_TIMELINE_FILE on some ranks only
  // records nothing of this communicator, and says so.
  int on[2] = {timeline::on() ? 1 : 0, timeline::on() ? 0 : 1};
  int any[2] = {0, 0};
  BC_MPI_CHECK(MPI_Allreduce(on, any, 2, MPI_INT, MPI_MAX, c->mpi));
  if (!any[0]) return BC_OK;
  if (any[1]) {
    if (timeline::on())
      BC_WARN(Init, "BC_TIMELINE_FILE is set on some ranks of a communicator of %d but not on others: its calls "
              "are not recorded", c->size);
    return BC_OK;
  }
  timeline::CommClock clock;
  clock.rank = c->rank;
  clock.size = c->size;
  // Where a member is not in MPI_COMM_WORLD (spawned), its entry stays
  // MPI_UNDEFINED and the report finds no file for it; an MPI failure leaves
  // the list empty and fails the creation.
  if (!world_ranks_of(c->mpi, &clock.world_ranks) && clock.world_ranks.size() != static_cast<size_t>(c->size))
    return BC_FAIL(BC_ERR_MPI, "timeline: the communicator's group could not be mapped to MPI_COMM_WORLD");
  int key[2] = {timeline::world_rank(), 0};
  if (c->rank == 0) key[1] = static_cast<int>(timeline::take_key_number());
  BC_MPI_CHECK(MPI_Bcast(key, 2, MPI_INT, 0, c->mpi));
  clock.key = std::to_string(key[0]) + ":" + std::to_string(key[1]);
  BC_CHECK(measure_offsets(c->mpi, c->rank, c->size, &clock.offset_us, &clock.error_us));
  c->timeline_id = timeline::add_comm(std::move(clock));
  return BC_OK;
}

}  // namespace bc
