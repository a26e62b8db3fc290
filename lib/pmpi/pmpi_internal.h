// What the pieces of the PMPI interposer's C side share (pmpi.cc and the
// pmpi_*.cc files it was split into): the statistics, the process state, the
// datatype table, the per-communicator state and the route's steps. Internal
// to libblueconnect_mpi.so (hidden, as everything but the MPI_* entry points);
// pmpi.h is what the Fortran layer and the requests see.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "pmpi/pmpi.h"
#include "pmpi/pmpi_route.h"
#include "blueconnect.h"

// Hidden in declarations too, not only in definitions (which the build's
// -fvisibility=hidden covers): the compiler then reads these globals directly,
// not through the GOT, on the memo path of MPI_Allreduce (pmpi.cc) as when
// they were one file's statics.
#pragma GCC visibility push(hidden)

namespace bc {
namespace pmpi {

constexpr int kColls = static_cast<int>(Coll::Count);
constexpr int kReasons = static_cast<int>(Reason::Count);

// ---- statistics (BC_PMPI_STATS; pmpi_stats.cc) ----
extern const char *const kCollNames[kColls];
extern const char *const kReasonNames[kReasons];
extern std::atomic<uint64_t> g_served[kColls];
extern std::atomic<uint64_t> g_errors[kColls];
extern std::atomic<uint64_t> g_passed[kColls][kReasons];
extern std::string g_stats_path;
// Inline: every call passed to MPI counts one, and the passing path (pass(),
// pmpi.cc) stays free of calls, as when it all was one file.
inline void count_pass(Coll c, Reason r) {
  g_passed[static_cast<int>(c)][static_cast<int>(r)].fetch_add(1, std::memory_order_relaxed);
}
struct CommState;
void log_routes(const CommState *cs);
void write_stats();

// ---- process state (pmpi_init.cc) ----
enum State : int { kUninit = 0, kReady, kDisabled, kFailed, kFinalized };
extern std::atomic<int> g_state;
extern int64_t g_min_bytes;
extern bool g_disabled;
extern bool g_route_learn;  // BC_PMPI_ROUTE=learn
int ensure_init();
void teardown();

// ---- datatypes and ops (pmpi_serve.cc) ----
// Predefined datatypes BlueConnect reduces, with their sizes in this MPI.
struct TypeEntry {
  MPI_Datatype dt;
  bc_dtype_t bc;
  int64_t size;
};
extern std::vector<TypeEntry> g_types;  // written once in ensure_init, read-only after
void build_type_table();
const TypeEntry *find_type(MPI_Datatype dt);
int64_t dense_size(MPI_Datatype dt);

// ---- communicator state (pmpi_comm.cc) ----
// BlueConnect's state for one MPI communicator, cached under g_comm_keyval.
struct CommState {
  MPI_Comm comm = MPI_COMM_NULL;  // the caller's handle (for teardown)
  bc_comm_t bc = nullptr;
  int pass_reason = -1;  // >= 0: every call on this communicator goes to MPI, for this reason
  int size = 0;
  SizeRoute route;  // MPI_Allreduce: which library serves each size (BC_PMPI_ROUTE=learn)
  // Blocking MPI_Allreduce calls passed to MPI by the thread's memo
  // (pass_by_memo); MPI forbids concurrent collectives on one communicator.
  uint64_t memo_passes = 0;
};
extern std::mutex g_comms_mutex;
extern std::vector<CommState *> g_comms;  // live states, in creation order
extern std::atomic<uint64_t> g_comm_generation;
extern int g_comm_keyval;
extern int g_self_keyval;
int comm_state_delete(MPI_Comm, int, void *attr, void *);
int comm_state(MPI_Comm comm, CommState **out);

// ---- the route (pmpi_serve.cc) ----
// Where a call goes: Reason::Count means BlueConnect serves it.
constexpr Reason kServe = Reason::Count;
Reason comm_route(MPI_Comm comm, CommState **cs);
Reason reduction_route(int64_t elems, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, const TypeEntry **t,
                       bc_op_t *bop, CommState **cs);
Reason device_route(const void *recvbuf, bc_dtype_t dtype, bc_op_t op);

// ---- the learned route's glue (pmpi_learn.cc) ----
bool mpi_may_take(bc_dtype_t t, bc_op_t op);
SizeRoute::Agree agree_on(MPI_Comm comm);

}  // namespace pmpi
}  // namespace bc

#pragma GCC visibility pop
