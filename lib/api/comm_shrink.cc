// bc_comm_shrink: after a death, the survivors make a communicator of their
// own and go on (docs/FAILURES.md, "Shrink and go on").
//
// 1. The survivors agree on who is dead over the old communicator's shm and
//    ucx transports, with the liveness checks as the failure detector
//    (sched/dead_agreement.h): no MPI, which a death can leave unusable.
// 2. They build an MPI communicator of themselves with MPI_Comm_create_group
//    on the old private one. It is collective over the group alone: Open MPI
//    4.1 agrees on its context id by point-to-point messages among the
//    group's members, so nothing is sent to the dead. Only now, when every
//    survivor knows exactly who takes part, is MPI used.
// 3. The new communicator is created on it as any other (topology, plan,
//    transports, liveness), except that it inherits the old one's cost model
//    instead of calibrating: the links are the same.
//
// The old communicator only serves bc_comm_destroy afterwards: the agreement's
// messages went over its transports, and its tags may be used once, so a
// communicator is shrunk once.
#include <chrono>
#include <string>

#include "api/comm.h"
#include "api/progress_thread.h"
#include "core/log.h"
#include "sched/dead_agreement.h"
#include "sched/liveness.h"

namespace bc {
namespace {

// MPI_Comm_create_group's tag on the private communicator, which carries no
// other point-to-point message when shrink is allowed (no mpi transport).
constexpr int kShrinkGroupTag = 0x5B1C;

// The agreement needs a transport that can be mended after a failure for
// every peer, and a failure detector that watches every peer.
Status check_shrinkable(const bc_comm *c) {
  const int mpi_peer = first_mpi_peer(c);
  if (mpi_peer >= 0)
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "bc_comm_shrink: rank %d is reached through the mpi transport; after a "
                   "death Open MPI 4.1 (no ULFM) may abort a process whose send to the dead fails, so the "
                   "survivors cannot agree over it. Shrink needs the shm and ucx transports (BC_TRANSPORT=auto, "
                   "shm or ucx)", mpi_peer);
  if (!c->liveness || !c->liveness->enabled())
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "bc_comm_shrink: BC_LIVENESS=off: nothing tells the survivors who is dead");
  if (c->liveness->unwatched() > 0)
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "bc_comm_shrink: %d peer(s) are not watched (the TCP watch could not "
                   "start: BC_DEBUG=WARN says why), so their deaths cannot be agreed on", c->liveness->unwatched());
  return BC_OK;
}

// The survivors' MPI communicator, in their old rank order.
Status survivors_comm(MPI_Comm parent, const std::vector<int> &dead, MPI_Comm *out) {
  MPI_Group all = MPI_GROUP_NULL, alive = MPI_GROUP_NULL;
  BC_MPI_CHECK(MPI_Comm_group(parent, &all));
  int rc = MPI_Group_excl(all, static_cast<int>(dead.size()), dead.empty() ? nullptr : dead.data(), &alive);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(parent, alive, kShrinkGroupTag, out);
  if (alive != MPI_GROUP_NULL) MPI_Group_free(&alive);
  MPI_Group_free(&all);
  BC_MPI_CHECK(rc);
  return BC_OK;
}

}  // namespace

Status comm_shrink(bc_comm *c, bc_comm **out) {
  if (!out) return BC_FAIL(BC_ERR_INVALID_ARG, "bc_comm_shrink: the output pointer is NULL");
  *out = nullptr;
  BC_CHECK(comm_check(c));
  if (c->inflight > 0)
    return BC_FAIL(BC_ERR_INVALID_ARG, "bc_comm_shrink: %d non-blocking operation(s) still in flight; complete them "
                   "with bc_wait first (on a broken communicator they fail at once)", c->inflight);
  if (c->shrunk)
    return BC_FAIL(BC_ERR_INVALID_ARG, "bc_comm_shrink: this communicator was shrunk already (or a shrink of it "
                   "failed); shrink the communicator that shrink made, or destroy this one");
  BC_CHECK(check_shrinkable(c));
  c->shrunk = true;
  const auto t0 = std::chrono::steady_clock::now();
  DeadAgreementResult agreed;
  {
    CommLock lock;
    lock.take(c);  // the progress thread, if any, keeps off the transports
    DeadAgreementSetup setup;
    setup.rank = c->rank;
    setup.size = c->size;
    setup.peer_transport = c->peer_transport;
    Liveness *liveness = c->liveness.get();
    setup.dead_now = [liveness] {
      liveness->check();
      return liveness->dead();
    };
    setup.liveness_interval_ms = liveness->interval_ms();
    setup.spin_count = c->spin_count;
    setup.timeout_ms = c->params.get_int(ParamId::Timeout);
    const Status st = agree_on_dead(setup, &agreed);
    if (!c->broken) {
      c->broken = true;
      c->broken_by = BC_ERR_INVALID_COMM;
      c->broken_why = "bc_comm_shrink was called on it";
    } else {
      c->broken_why += "; bc_comm_shrink was called on it";
    }
    BC_CHECK(st);
  }
  const double agree_ms = ms_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  MPI_Comm survivors = MPI_COMM_NULL;
  BC_CHECK(survivors_comm(c->mpi, agreed.dead, &survivors));
  const double group_ms = ms_since(t1);
  const auto t2 = std::chrono::steady_clock::now();
  BC_CHECK(comm_create_owned(survivors, c->params, "the survivors' MPI_Comm_create_group", group_ms,
                             c->model.empty() ? nullptr : &c->model, out));
  if ((*out)->rank == 0 && log_enabled(LogLevel::Info, LogSys::Init)) {
    BC_INFO(Init, "bc_comm_shrink: %d of %d ranks go on without %s; agreed in %d instance(s), %d round(s)%s%s, %.1f ms; "
            "MPI_Comm_create_group %.1f ms; new communicator %.1f ms", c->size - static_cast<int>(agreed.dead.size()),
            c->size, agreed.dead.empty() ? "anyone" : c->liveness->who_list(agreed.dead).c_str(), agreed.instances, agreed.rounds,
            agreed.relayed ? " (relayed)" : "", agreed.resends > 0 ? " with messages sent again" : "", agree_ms,
            group_ms, ms_since(t2));
  }
  return BC_OK;
}

}  // namespace bc
