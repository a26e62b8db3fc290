// BlueConnect's state per MPI communicator: created lazily and collectively on
// a communicator's first call, cached under an attribute key (and per thread
// for the last communicator used), freed by MPI_Comm_free's attribute callback
// or at teardown. Separate from the route: the route asks comm_state() and
// reads pass_reason, this file owns the state's life.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "pmpi/pmpi_internal.h"
#include "blueconnect.h"
#include "core/log.h"

namespace bc {
namespace pmpi {

int g_comm_keyval = MPI_KEYVAL_INVALID;
int g_self_keyval = MPI_KEYVAL_INVALID;
std::mutex g_comms_mutex;
std::vector<CommState *> g_comms;  // live states, in creation order

namespace {

void unregister(CommState *cs) {
  std::lock_guard<std::mutex> lock(g_comms_mutex);
  for (auto it = g_comms.begin(); it != g_comms.end(); ++it) {
    if (*it == cs) {
      g_comms.erase(it);
      break;
    }
  }
}

void destroy_state(CommState *cs) {
  log_routes(cs);
  g_passed[static_cast<int>(Coll::Allreduce)][static_cast<int>(Reason::Learned)].fetch_add(
      cs->memo_passes, std::memory_order_relaxed);
  if (cs->bc) requests_drain(cs->bc);  // MPI lets a communicator go with operations in flight
  if (cs->bc) {
    Inside in;
    bc_status_t st = bc_comm_destroy(&cs->bc);
    if (st != BC_OK) BC_LOG(LogLevel::Warn, LogSys::Pmpi, "bc_comm_destroy failed: %s", bc_last_error());
  }
  delete cs;
}

}  // namespace

// Each thread's last communicator and its state, so that a call on the same
// communicator as the last one skips PMPI_Comm_get_attr (Open MPI: a hash
// table lookup, 13 of the 61 ns a passed 4-byte MPI_Allreduce spent in the
// preload at np 1). Valid while g_comm_generation has not moved: every state
// deletion moves it first, so a freed communicator's handle, reused by a new
// communicator, is never matched to the old state. Initial-exec TLS: the
// preload is loaded at program start, and the default model costs a
// __tls_get_addr call per access.
std::atomic<uint64_t> g_comm_generation{0};

namespace {

struct CommCache {  // zero: not valid (no member initialisers, as PassMemo's in pmpi.cc says why)
  MPI_Comm comm;
  CommState *state;
  uint64_t generation;
};
thread_local CommCache t_comm_cache __attribute__((tls_model("initial-exec")));

}  // namespace

// Runs inside MPI_Comm_free (and MPI_Comm_delete_attr at teardown).
// bc_comm_destroy frees BlueConnect's own duplicate, never `comm`.
int comm_state_delete(MPI_Comm, int, void *attr, void *) {
  auto *cs = static_cast<CommState *>(attr);
  if (!cs) return MPI_SUCCESS;
  g_comm_generation.fetch_add(1, std::memory_order_acq_rel);
  unregister(cs);
  destroy_state(cs);
  return MPI_SUCCESS;
}

// The state of `comm`, created on first use. Collective on `comm` when it
// creates a BlueConnect communicator: every rank gets here on the same call.
int comm_state(MPI_Comm comm, CommState **out) {
  CommCache &cache = t_comm_cache;
  const uint64_t generation = g_comm_generation.load(std::memory_order_acquire);
  if (cache.state && cache.comm == comm && cache.generation == generation) {
    *out = cache.state;
    return MPI_SUCCESS;
  }
  void *value = nullptr;
  int flag = 0;
  int rc = PMPI_Comm_get_attr(comm, g_comm_keyval, &value, &flag);
  if (rc != MPI_SUCCESS) return rc;
  if (flag) {
    *out = static_cast<CommState *>(value);
    cache = {comm, *out, generation};
    return MPI_SUCCESS;
  }
  auto *cs = new CommState;
  cs->comm = comm;
  PMPI_Comm_size(comm, &cs->size);
  int inter = 0;
  rc = PMPI_Comm_test_inter(comm, &inter);
  if (rc != MPI_SUCCESS) {
    delete cs;
    return rc;
  }
  char name[MPI_MAX_OBJECT_NAME] = "";
  int len = 0;
  if (inter) {
    cs->pass_reason = static_cast<int>(Reason::Intercomm);
  } else if (PMPI_Comm_get_name(comm, name, &len) == MPI_SUCCESS && std::strcmp(name, "blueconnect") == 0) {
    // BlueConnect's own duplicate, reached when a program also calls the C API.
    cs->pass_reason = static_cast<int>(Reason::BcComm);
  } else {
    Inside in;
    bc_status_t st = bc_comm_create(comm, &cs->bc);
    if (st != BC_OK) {
      BC_LOG(LogLevel::Error, LogSys::Pmpi,
             "bc_comm_create failed; this communicator's calls go to MPI unchanged: %s", bc_last_error());
      cs->bc = nullptr;
      cs->pass_reason = static_cast<int>(Reason::CommSetup);
    }
  }
  rc = PMPI_Comm_set_attr(comm, g_comm_keyval, cs);
  if (rc != MPI_SUCCESS) {
    destroy_state(cs);
    return rc;
  }
  {
    std::lock_guard<std::mutex> lock(g_comms_mutex);
    g_comms.push_back(cs);
  }
  if (log_enabled(LogLevel::Info, LogSys::Pmpi)) {
    int size = 0;
    PMPI_Comm_size(comm, &size);
    BC_INFO(Pmpi, "communicator of %d ranks: %s", size,
            cs->pass_reason < 0 ? "served by BlueConnect" : kReasonNames[cs->pass_reason]);
  }
  *out = cs;
  return MPI_SUCCESS;
}

}  // namespace pmpi
}  // namespace bc
