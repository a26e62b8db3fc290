// The interposer's life: MPI_Init and MPI_Init_thread start it (reading the
// BC_* parameters through libblueconnect.so, building the datatype table and
// the attribute keys), MPI_Finalize, or MPI_COMM_SELF's attribute hook inside
// PMPI_Finalize, end it (every communicator state freed, the statistics
// written, the library finalised). Separate from the route, which only asks
// ensure_init() on each call.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "pmpi/pmpi_internal.h"
#include "blueconnect.h"
#include "blueconnect_preload.h"
#include "core/log.h"
#include "core/params.h"

namespace bc {
namespace pmpi {

// True until ensure_init asks the library (preload::device_buffers_usable):
// before that, every pointer is looked at (pmpi.h).
std::atomic<bool> g_device_buffers{true};

std::atomic<int> g_state{kUninit};
int64_t g_min_bytes = 0;
bool g_disabled = false;
bool g_route_learn = true;  // BC_PMPI_ROUTE=learn

namespace {

std::mutex g_init_mutex;  // ensure_init and teardown

// MPI_Finalize deletes MPI_COMM_SELF's attributes before anything else: the
// hook for programs whose MPI_Finalize does not come through the C symbol
// (Fortran's mpi_finalize calls PMPI_Finalize directly).
int self_delete(MPI_Comm, int, void *, void *) {
  teardown();
  return MPI_SUCCESS;
}

}  // namespace

// ---- lifecycle ----

int ensure_init() {
  int s = g_state.load(std::memory_order_acquire);
  if (s != kUninit) return s;
  std::lock_guard<std::mutex> lock(g_init_mutex);
  s = g_state.load(std::memory_order_acquire);
  if (s != kUninit) return s;
  int up = 0, down = 0;
  PMPI_Initialized(&up);
  PMPI_Finalized(&down);
  if (!up || down) return kUninit;  // MPI raises its own error for calls outside MPI
  bc_status_t st;
  {
    Inside in;
    st = preload::init(true);  // silent unless BC_DEBUG asks
  }
  if (st != BC_OK) {
    // A BC_* variable is invalid: the program still runs, on MPI alone. This
    // is the one line the interposer prints without being asked.
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
      const std::string why = bc_last_error();  // its first line; the trail follows
      std::fprintf(stderr, "BlueConnect: %s\nBlueConnect: interception is off; every call goes to MPI unchanged\n",
                   why.substr(0, why.find('\n')).c_str());
    }
    g_state.store(kFailed, std::memory_order_release);
    return kFailed;
  }
  g_disabled = preload::param_int(ParamId::Disable) != 0;
  g_min_bytes = preload::param_int(ParamId::PmpiMinBytes);
  g_route_learn = preload::param_str(ParamId::PmpiRoute) == "learn";
  g_device_buffers.store(preload::device_buffers_usable(), std::memory_order_relaxed);
  g_stats_path = preload::param_str(ParamId::PmpiStats);
  build_type_table();
  if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_state_delete, &g_comm_keyval, nullptr) !=
          MPI_SUCCESS ||
      PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete, &g_self_keyval, nullptr) != MPI_SUCCESS ||
      PMPI_Comm_set_attr(MPI_COMM_SELF, g_self_keyval, nullptr) != MPI_SUCCESS) {
    BC_LOG(LogLevel::Error, LogSys::Pmpi, "cannot create attribute keys; interception is off");
    Inside in;
    preload::finalize();
    g_state.store(kFailed, std::memory_order_release);
    return kFailed;
  }
  BC_INFO(Pmpi, "interposer ready: %s, BC_PMPI_MIN_BYTES=%lld, %zu datatypes mapped",
          g_disabled ? "disabled (BC_DISABLE=1)" : "enabled", static_cast<long long>(g_min_bytes),
          g_types.size());
  s = g_disabled ? kDisabled : kReady;
  if (s == kReady) requests_init();
  g_state.store(s, std::memory_order_release);
  return s;
}

// Frees every communicator state, writes the statistics and finalises the
// library. Runs once: from MPI_Finalize before PMPI_Finalize, or from the
// MPI_COMM_SELF hook inside PMPI_Finalize. Calls no MPI_Initialized or
// MPI_Finalized: Open MPI holds its init lock around the MPI_COMM_SELF hook.
void teardown() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  const int s = g_state.load(std::memory_order_acquire);
  if (s == kUninit || s == kFinalized) return;
  g_state.store(kFinalized, std::memory_order_release);
  if (s == kFailed) return;
  requests_finalize();  // every MPI_Iallreduce still in flight, finished; the progress hook out
  std::vector<CommState *> comms;
  {
    std::lock_guard<std::mutex> guard(g_comms_mutex);
    comms = g_comms;
  }
  // Creation order, the same on every rank of each communicator.
  for (CommState *cs : comms) PMPI_Comm_delete_attr(cs->comm, g_comm_keyval);  // -> comm_state_delete
  PMPI_Comm_free_keyval(&g_comm_keyval);
  write_stats();
  Inside in;
  preload::finalize();
}

void init_now() { ensure_init(); }
void finalize_now() { teardown(); }

}  // namespace pmpi
}  // namespace bc

// ---- the C entry points that start and end the interposer ----
extern "C" {

BC_PMPI_EXPORT int MPI_Init(int *argc, char ***argv) {
  const int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) bc::pmpi::init_now();
  return rc;
}

BC_PMPI_EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) bc::pmpi::init_now();
  return rc;
}

BC_PMPI_EXPORT int MPI_Finalize(void) {
  bc::pmpi::finalize_now();  // frees MPI_COMM_WORLD's state (and every other) first
  return PMPI_Finalize();
}

}  // extern "C"
