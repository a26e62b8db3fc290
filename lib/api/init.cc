// Library-wide state: bc_init/bc_finalize's count, the global parameters, and the
// registry of live communicators with comm_check, which reads it under the same lock.
#include "api/comm.h"

#include <mutex>
#include <set>

#include "core/log.h"
#include "core/timeline.h"

namespace bc {
namespace {

std::mutex g_mutex;
int g_init_count = 0;
ParamSet g_params;
std::set<const bc_comm *> g_live;  // every communicator not yet destroyed

}  // namespace

Status api_init(bool quiet_by_default) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_init_count > 0) {
    ++g_init_count;
    return BC_OK;
  }
  int mpi_up = 0, mpi_down = 0;
  MPI_Initialized(&mpi_up);
  MPI_Finalized(&mpi_down);
  if (!mpi_up || mpi_down)
    return BC_FAIL(BC_ERR_NOT_INITIALIZED, "bc_init needs MPI to be initialised (call MPI_Init first)");
  ParamSet ps;
  BC_CHECK(ParamSet::from_environment(&ps));
  const char *bad = nullptr;
  if (!log_configure(ps.get_str(ParamId::Debug).c_str(), ps.get_str(ParamId::DebugFile).c_str(),
                     quiet_by_default, &bad))
    return BC_FAIL(BC_ERR_PARAM, "BC_DEBUG: unknown token '%s'; expected a level (NONE ERROR WARN INFO DEBUG TRACE) "
                   "or a subsystem (INIT TOPO PLAN SCHED TRANSPORT API PMPI)", bad);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  log_set_rank(world_rank);
  BC_CHECK(timeline::configure(ps.get_str(ParamId::TimelineFile), world_rank));
  g_params = ps;
  g_init_count = 1;
  BC_INFO(Init, "BlueConnect %d.%d.%d initialised", BC_VERSION_MAJOR, BC_VERSION_MINOR, BC_VERSION_PATCH);
  return BC_OK;
}

Status api_finalize() {
  std::set<const bc_comm *> leftovers;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_init_count == 0) return BC_FAIL(BC_ERR_NOT_INITIALIZED, "bc_finalize without bc_init");
    if (--g_init_count > 0) return BC_OK;
    leftovers.swap(g_live);
  }
  for (const bc_comm *c : leftovers) {
    BC_WARN(Api, "bc_finalize: a communicator of %d ranks was not destroyed; freeing it", c->size);
    bc_comm *m = const_cast<bc_comm *>(c);
    if (m->mpi != MPI_COMM_NULL) BC_MPI_WARN(MPI_Comm_free(&m->mpi));
    m->magic = 0;
    delete m;
  }
  transports_release_idle();
  timeline::write();
  return BC_OK;
}

bool api_initialized() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_init_count > 0;
}

const ParamSet &global_params() { return g_params; }

Status comm_check(const bc_comm *comm) {
  if (!comm) return BC_FAIL(BC_ERR_INVALID_COMM, "the communicator is NULL");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_init_count == 0) return BC_FAIL(BC_ERR_NOT_INITIALIZED, "call bc_init first");
  if (!g_live.count(comm) || comm->magic != kCommMagic)
    return BC_FAIL(BC_ERR_INVALID_COMM, "not a live communicator (destroyed, or never created)");
  return BC_OK;
}

void comm_live_add(const bc_comm *c) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_live.insert(c);
}

void comm_live_remove(const bc_comm *c) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_live.erase(c);
}

}  // namespace bc
