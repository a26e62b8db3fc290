// The PMPI interposer: MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather
// and MPI_Iallreduce served by BlueConnect, everything else by the MPI library.
//
// Route of one call (the same for the Fortran entry points, pmpi_fortran.cc):
//
//   inside BlueConnect already? ── yes ──> PMPI_ (not counted: the library's own traffic)
//   BC_DISABLE / bad parameter? ── yes ──> PMPI_ (counted: disabled / init-error)
//   arguments MPI rejects?      ── yes ──> PMPI_ (MPI raises its own error)
//   op, datatype, layout, size  ── not served ──> PMPI_ (counted with the reason)
//   device buffer, (dtype, op) the GPU kernels lack ── yes ──> PMPI_ (device-op-dtype)
//   MPI_Allreduce, BC_PMPI_ROUTE=learn: MPI faster at this size, or its
//   probe turn (pmpi_route.h) ── yes ──> PMPI_ (learned)
//   communicator state (lazy, collective on first use; intercommunicators and
//   communicators BlueConnect made itself are marked pass-through)
//   bc_allreduce / bc_reduce_scatter / bc_allgather ── error ──> the
//   communicator's error handler, with an MPI error class
//
// Every input of a routing decision is an argument MPI requires to be the same
// on every rank (count, datatype, op, communicator, MPI_IN_PLACE), so all ranks
// of a communicator take the same route and the lazy, collective
// bc_comm_create is reached by all of them together.
#include "pmpi/pmpi.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "pmpi/pmpi_route.h"
#include "blueconnect.h"
#include "blueconnect_preload.h"
#include "core/log.h"
#include "core/params.h"

namespace bc {
namespace pmpi {

// True until ensure_init asks the library (preload::device_buffers_usable):
// before that, every pointer is looked at (pmpi.h).
std::atomic<bool> g_device_buffers{true};

namespace {

constexpr int kColls = static_cast<int>(Coll::Count);
constexpr int kReasons = static_cast<int>(Reason::Count);

const char *const kCollNames[kColls] = {"MPI_Allreduce", "MPI_Reduce_scatter_block", "MPI_Allgather",
                                        "MPI_Iallreduce"};
const char *const kReasonNames[kReasons] = {
    "disabled", "init-error",    "invalid-args", "user-op", "op",                "dtype",  "derived-dtype",
    "op-dtype", "type-mismatch", "intercomm",    "small",   "comm-setup-failed", "bc-comm", "fortran-sentinel",
    "device-op-dtype", "learned"};

// ---- statistics (BC_PMPI_STATS) ----
std::atomic<uint64_t> g_served[kColls];
std::atomic<uint64_t> g_errors[kColls];
std::atomic<uint64_t> g_passed[kColls][kReasons];

// ---- process state ----
enum State : int { kUninit = 0, kReady, kDisabled, kFailed, kFinalized };
std::atomic<int> g_state{kUninit};
std::mutex g_init_mutex;  // ensure_init and teardown
int64_t g_min_bytes = 0;
bool g_disabled = false;
bool g_route_learn = true;  // BC_PMPI_ROUTE=learn
// The learned routes of communicators already freed, for BC_PMPI_STATS.
std::mutex g_route_log_mutex;
std::string g_route_log;
std::string g_stats_path;
int g_comm_keyval = MPI_KEYVAL_INVALID;
int g_self_keyval = MPI_KEYVAL_INVALID;


// Predefined datatypes BlueConnect reduces, with their sizes in this MPI.
struct TypeEntry {
  MPI_Datatype dt;
  bc_dtype_t bc;
  int64_t size;
};
std::vector<TypeEntry> g_types;  // written once in ensure_init, read-only after

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
std::mutex g_comms_mutex;
std::vector<CommState *> g_comms;  // live states, in creation order

void count_pass(Coll c, Reason r) {
  g_passed[static_cast<int>(c)][static_cast<int>(r)].fetch_add(1, std::memory_order_relaxed);
}

// ---- datatypes and ops ----

void build_type_table() {
  struct Candidate {
    MPI_Datatype dt;
    char kind;  // f: floating, s: signed integer, u: unsigned integer
  };
  const Candidate candidates[] = {
      {MPI_FLOAT, 'f'},         {MPI_DOUBLE, 'f'},         {MPI_INT, 's'},
      {MPI_UNSIGNED, 'u'},      {MPI_LONG, 's'},           {MPI_UNSIGNED_LONG, 'u'},
      {MPI_INT64_T, 's'},       {MPI_UINT64_T, 'u'},       {MPI_INT32_T, 's'},
      {MPI_UINT32_T, 'u'},      {MPI_INT8_T, 's'},         {MPI_UINT8_T, 'u'},
      {MPI_LONG_LONG_INT, 's'}, {MPI_LONG_LONG, 's'},      {MPI_UNSIGNED_LONG_LONG, 'u'},
      {MPI_SIGNED_CHAR, 's'},   {MPI_UNSIGNED_CHAR, 'u'},
      // Fortran names: their sizes depend on how the MPI library was built.
      {MPI_REAL, 'f'},          {MPI_DOUBLE_PRECISION, 'f'}, {MPI_INTEGER, 's'},
#ifdef MPI_REAL4
      {MPI_REAL4, 'f'},
#endif
#ifdef MPI_REAL8
      {MPI_REAL8, 'f'},
#endif
#ifdef MPI_INTEGER1
      {MPI_INTEGER1, 's'},
#endif
#ifdef MPI_INTEGER4
      {MPI_INTEGER4, 's'},
#endif
#ifdef MPI_INTEGER8
      {MPI_INTEGER8, 's'},
#endif
  };
  g_types.clear();
  for (const Candidate &c : candidates) {
    if (c.dt == MPI_DATATYPE_NULL) continue;
    bool seen = false;
    for (const TypeEntry &e : g_types) seen = seen || e.dt == c.dt;
    if (seen) continue;
    int size = 0;
    if (PMPI_Type_size(c.dt, &size) != MPI_SUCCESS) continue;
    bc_dtype_t bt;
    if (c.kind == 'f' && size == 4) bt = BC_FLOAT32;
    else if (c.kind == 'f' && size == 8) bt = BC_FLOAT64;
    else if (c.kind == 's' && size == 1) bt = BC_INT8;
    else if (c.kind == 's' && size == 4) bt = BC_INT32;
    else if (c.kind == 's' && size == 8) bt = BC_INT64;
    else if (c.kind == 'u' && size == 1) bt = BC_UINT8;
    else if (c.kind == 'u' && size == 4) bt = BC_UINT32;
    else if (c.kind == 'u' && size == 8) bt = BC_UINT64;
    else continue;  // 16-bit integers, long double, ...: the MPI library reduces them
    g_types.push_back({c.dt, bt, size});
  }
}

const TypeEntry *find_type(MPI_Datatype dt) {
  for (const TypeEntry &e : g_types)
    if (e.dt == dt) return &e;
  return nullptr;
}

bool is_named(MPI_Datatype dt) {
  int ni = 0, na = 0, nd = 0, combiner = MPI_COMBINER_NAMED;
  if (PMPI_Type_get_envelope(dt, &ni, &na, &nd, &combiner) != MPI_SUCCESS) return true;
  return combiner == MPI_COMBINER_NAMED;
}

// A datatype that is not in the table: unsupported predefined, or derived.
Reason type_reason(MPI_Datatype dt) { return is_named(dt) ? Reason::Dtype : Reason::Derived; }

// True when the type, built only from MPI_Type_dup and MPI_Type_contiguous over
// a predefined type, keeps its bytes in signature order; a permuting indexed
// type can be dense and still reorder them.
bool in_order(MPI_Datatype dt, int depth) {
  int ni = 0, na = 0, nd = 0, combiner = MPI_COMBINER_NAMED;
  if (PMPI_Type_get_envelope(dt, &ni, &na, &nd, &combiner) != MPI_SUCCESS) return false;
  if (combiner == MPI_COMBINER_NAMED) return true;
  if (depth > 16 || (combiner != MPI_COMBINER_DUP && combiner != MPI_COMBINER_CONTIGUOUS) || nd != 1 ||
      ni > 1 || na != 0)
    return false;
  int ints[1] = {0};
  MPI_Aint addrs[1] = {0};
  MPI_Datatype inner = MPI_DATATYPE_NULL;
  if (PMPI_Type_get_contents(dt, 1, 0, 1, ints, addrs, &inner) != MPI_SUCCESS) return false;
  const bool ok = in_order(inner, depth + 1);
  if (!is_named(inner)) PMPI_Type_free(&inner);  // get_contents returns new handles for derived types
  return ok;
}

// Bytes per element when `dt` describes `size` bytes stored contiguously and in
// order from the buffer's address; 0 otherwise (then the MPI library moves it).
int64_t dense_size(MPI_Datatype dt) {
  if (const TypeEntry *e = find_type(dt)) return e->size;
  int size = 0;
  MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
  if (PMPI_Type_size(dt, &size) != MPI_SUCCESS || size <= 0) return 0;
  if (PMPI_Type_get_extent(dt, &lb, &extent) != MPI_SUCCESS) return 0;
  if (PMPI_Type_get_true_extent(dt, &true_lb, &true_extent) != MPI_SUCCESS) return 0;
  if (lb != 0 || true_lb != 0 || extent != size || true_extent != size) return 0;
  if (!in_order(dt, 0)) return 0;
  return size;
}

bool map_op(MPI_Op op, bc_op_t *out, Reason *why) {
  if (op == MPI_SUM) *out = BC_SUM;
  else if (op == MPI_MAX) *out = BC_MAX;
  else if (op == MPI_MIN) *out = BC_MIN;
  else if (op == MPI_PROD) *out = BC_PROD;
  else if (op == MPI_BAND) *out = BC_BAND;
  else if (op == MPI_BOR) *out = BC_BOR;
  else if (op == MPI_BXOR) *out = BC_BXOR;
  else {
    const bool predefined = op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR || op == MPI_MINLOC ||
                            op == MPI_MAXLOC || op == MPI_REPLACE || op == MPI_NO_OP;
    *why = predefined ? Reason::Op : Reason::UserOp;
    return false;
  }
  return true;
}

// Bitwise ops on floating types are erroneous in MPI: let MPI say so.
bool op_fits(bc_dtype_t t, bc_op_t op) {
  const bool floating = t == BC_FLOAT32 || t == BC_FLOAT64;
  return !(floating && (op == BC_BAND || op == BC_BOR || op == BC_BXOR));
}

// ---- errors ----

// The null handle, or no handle at all: Open MPI's MPI_*_f2c return a null
// pointer for an unknown Fortran handle. MPI raises its own error for both.
template <typename H>
bool bad(H handle, H null_handle) {
  return handle == null_handle || handle == H{};
}

int mpi_error_class(bc_status_t st) {
  switch (st) {
    case BC_ERR_INVALID_ARG:
    case BC_ERR_MISMATCH: return MPI_ERR_ARG;  // ranks disagree on count, datatype or op (BC_CHECK_ARGS)
    case BC_ERR_NO_MEMORY: return MPI_ERR_NO_MEM;
    case BC_ERR_NOT_SUPPORTED:   // the route should have sent it to MPI
    case BC_ERR_NOT_INITIALIZED:
    case BC_ERR_INTERNAL: return MPI_ERR_INTERN;
#ifdef MPIX_ERR_PROC_FAILED
    case BC_ERR_PEER_DEAD: return MPIX_ERR_PROC_FAILED;  // ULFM builds
#endif
    default: return MPI_ERR_OTHER;  // transport, timeout, MPI, a dead peer (no ULFM), a broken communicator
  }
}

// Hands a BlueConnect failure to the communicator's error handler, as MPI does.
int raise(Coll c, MPI_Comm comm, bc_status_t st, const char *what) {
  g_errors[static_cast<int>(c)].fetch_add(1, std::memory_order_relaxed);
  const int cls = mpi_error_class(st);
  BC_LOG(LogLevel::Error, LogSys::Pmpi, "%s: %s", kCollNames[static_cast<int>(c)], what);
  if (!bad(comm, MPI_COMM_NULL)) PMPI_Comm_call_errhandler(comm, cls);
  return cls;
}

// Keeps C++ exceptions out of the C entry points.
template <typename F>
int guarded(Coll c, MPI_Comm comm, F &&body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return raise(c, comm, BC_ERR_NO_MEMORY, "out of memory");
  } catch (const std::exception &e) {
    return raise(c, comm, BC_ERR_INTERNAL, e.what());
  } catch (...) {
    return raise(c, comm, BC_ERR_INTERNAL, "unexpected exception");
  }
}

// ---- communicator state ----

void unregister(CommState *cs) {
  std::lock_guard<std::mutex> lock(g_comms_mutex);
  for (auto it = g_comms.begin(); it != g_comms.end(); ++it) {
    if (*it == cs) {
      g_comms.erase(it);
      break;
    }
  }
}

// Keeps a communicator's learned routes for BC_PMPI_STATS.
void log_routes(const CommState *cs) {
  const std::string routes = cs->route.describe();
  if (routes.empty()) return;
  std::lock_guard<std::mutex> lock(g_route_log_mutex);
  g_route_log += "MPI_Allreduce route, communicator of " + std::to_string(cs->size) + " ranks:\n" + routes;
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

// Each thread's last communicator and its state, so that a call on the same
// communicator as the last one skips PMPI_Comm_get_attr (Open MPI: a hash
// table lookup, 13 of the 61 ns a passed 4-byte MPI_Allreduce spent in the
// preload at np 1). Valid while g_comm_generation has not moved: every state
// deletion moves it first, so a freed communicator's handle, reused by a new
// communicator, is never matched to the old state. Initial-exec TLS: the
// preload is loaded at program start, and the default model costs a
// __tls_get_addr call per access.
std::atomic<uint64_t> g_comm_generation{0};
struct CommCache {  // zero: not valid (no member initialisers, as PassMemo's below says why)
  MPI_Comm comm;
  CommState *state;
  uint64_t generation;
};
thread_local CommCache t_comm_cache __attribute__((tls_model("initial-exec")));

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

void teardown();

// MPI_Finalize deletes MPI_COMM_SELF's attributes before anything else: the
// hook for programs whose MPI_Finalize does not come through the C symbol
// (Fortran's mpi_finalize calls PMPI_Finalize directly).
int self_delete(MPI_Comm, int, void *, void *) {
  teardown();
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

std::string expand_path(const std::string &pattern, int rank) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      const char c = pattern[++i];
      if (c == 'r') out += std::to_string(rank);
      else if (c == 'p') out += std::to_string(getpid());
      else if (c == 'h') {
        char host[256] = "unknown";
        gethostname(host, sizeof host - 1);
        out += host;
      } else if (c == '%') out += '%';
      else {
        out += '%';
        out += c;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

void write_stats() {
  if (g_stats_path.empty()) return;
  int rank = 0, size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string path = expand_path(g_stats_path, rank);
  // "1" as well as "-": BC_PMPI_STATS=1 reads as "on", not as a file named 1
  // that every rank overwrites (one was committed by mistake once).
  const bool to_stderr = path == "-" || path == "1";
  // A path without %r or %p names one file for the whole job: every rank
  // would truncate and rewrite it, leaving one rank's counts (or a mix).
  // Each rank gets its own, PATH.RANK, as the parameter says.
  if (!to_stderr && size > 1 && g_stats_path.find("%r") == std::string::npos &&
      g_stats_path.find("%p") == std::string::npos)
    path += "." + std::to_string(rank);
  FILE *f = to_stderr ? stderr : std::fopen(path.c_str(), "w");
  if (!f) {
    BC_LOG(LogLevel::Error, LogSys::Pmpi, "BC_PMPI_STATS: cannot write %s: %s", path.c_str(),
           std::strerror(errno));
    return;
  }
  std::fprintf(f, "# BlueConnect PMPI statistics: world rank %d of %d, pid %d\n", rank, size,
               static_cast<int>(getpid()));
  std::fprintf(f, "# BC_DISABLE=%d BC_PMPI_MIN_BYTES=%lld\n", g_disabled ? 1 : 0,
               static_cast<long long>(g_min_bytes));
  for (int c = 0; c < kColls; ++c) {
    uint64_t passed = 0;
    for (int r = 0; r < kReasons; ++r) passed += g_passed[c][r].load(std::memory_order_relaxed);
    std::fprintf(f, "%s served %llu\n", kCollNames[c],
                 static_cast<unsigned long long>(g_served[c].load(std::memory_order_relaxed)));
    std::fprintf(f, "%s passed %llu\n", kCollNames[c], static_cast<unsigned long long>(passed));
    for (int r = 0; r < kReasons; ++r) {
      const uint64_t n = g_passed[c][r].load(std::memory_order_relaxed);
      if (n) std::fprintf(f, "%s passed:%s %llu\n", kCollNames[c], kReasonNames[r], static_cast<unsigned long long>(n));
    }
    const uint64_t e = g_errors[c].load(std::memory_order_relaxed);
    if (e) std::fprintf(f, "%s errors %llu\n", kCollNames[c], static_cast<unsigned long long>(e));
  }
  {
    std::lock_guard<std::mutex> lock(g_route_log_mutex);
    std::fputs(g_route_log.c_str(), f);
  }
  if (f == stderr) std::fflush(f);
  else std::fclose(f);
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

// ---- MPI_Iallreduce: a request that is already complete ----

int grequest_query(void *, MPI_Status *status) {
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_ANY_SOURCE;
  status->MPI_TAG = MPI_ANY_TAG;
  status->MPI_ERROR = MPI_SUCCESS;
  return MPI_SUCCESS;
}
int grequest_free(void *) { return MPI_SUCCESS; }
int grequest_cancel(void *, int) { return MPI_SUCCESS; }

int completed_request(MPI_Request *request) {
  int rc = PMPI_Grequest_start(grequest_query, grequest_free, grequest_cancel, nullptr, request);
  if (rc != MPI_SUCCESS) return rc;
  return PMPI_Grequest_complete(*request);
}

// Where a call goes: Reason::Count means BlueConnect serves it.
constexpr Reason kServe = Reason::Count;

// The start every route shares. Returns false when the MPI library takes the
// call: *reason says why, or stays kServe for calls that are not counted (the
// library's own calls, calls before MPI_Init or after finalisation).
bool route_start(int forced_reason, Reason *reason) {
  *reason = kServe;
  if (t_inside > 0) return false;
  const int s = ensure_init();
  if (s == kDisabled) *reason = Reason::Disabled;
  else if (s == kFailed) *reason = Reason::InitError;
  else if (s != kReady) return false;
  else if (forced_reason >= 0) *reason = static_cast<Reason>(forced_reason);
  return *reason == kServe;
}

int pass(Coll c, Reason reason) {
  if (reason != kServe) count_pass(c, reason);
  return kPass;
}

// The communicator's part of the route (creates the state on first use).
Reason comm_route(MPI_Comm comm, CommState **cs) {
  if (comm_state(comm, cs) != MPI_SUCCESS) return Reason::InvalidArgs;
  if ((*cs)->pass_reason >= 0) return static_cast<Reason>((*cs)->pass_reason);
  return kServe;
}

// The route of the reductions, once MPI's own argument checks passed.
// `elems` is the length of the whole vector, for BC_PMPI_MIN_BYTES.
Reason reduction_route(int64_t elems, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, const TypeEntry **t,
                       bc_op_t *bop, CommState **cs) {
  Reason why = kServe;
  if (!map_op(op, bop, &why)) return why;
  if (!(*t = find_type(dt))) return type_reason(dt);
  if (!op_fits((*t)->bc, *bop)) return Reason::OpDtype;
  if (elems * (*t)->size < g_min_bytes) return Reason::Small;
  return comm_route(comm, cs);
}

// Device buffers (detected from recvbuf; a host/device mix is refused by the
// API with a message): served only when the GPU kernels cover (dtype, op).
Reason device_route(const void *recvbuf, bc_dtype_t dtype, bc_op_t op) {
  if (!on_device(recvbuf)) return kServe;
  return preload::device_reduces(dtype, op) ? kServe : Reason::DeviceOpDtype;
}

}  // namespace

// ---- the collectives ----

namespace {

// Whether the MPI library may take this (dtype, op) when it is faster: not
// where Open MPI 4.1's own reduction is wrong, so that the learned route never
// changes a result. 8-bit sums and products saturate in its vectorised
// reduction (upstream issue 8045), and 4.1.2-4.1.4 reduce MPI_UNSIGNED_LONG as
// signed in MIN and MAX (open-mpi/ompi#10525; unsigned 64-bit types alike, to
// be safe).
bool mpi_may_take(bc_dtype_t t, bc_op_t op) {
  const bool byte = t == BC_INT8 || t == BC_UINT8;
  if (byte && (op == BC_SUM || op == BC_PROD)) return false;
  if (t == BC_UINT64 && (op == BC_MIN || op == BC_MAX)) return false;
  return true;
}

// The learned route's agreement: the slowest rank's medians, on every rank.
SizeRoute::Agree agree_on(MPI_Comm comm) {
  return [comm](double *bc_seconds, double *mpi_seconds) {
    double mine[2] = {*bc_seconds, *mpi_seconds}, slowest[2] = {0, 0};
    if (PMPI_Allreduce(mine, slowest, 2, MPI_DOUBLE, MPI_MAX, comm) != MPI_SUCCESS) return false;
    *bc_seconds = slowest[0];
    *mpi_seconds = slowest[1];
    return true;
  };
}

// The last blocking MPI_Allreduce this thread handed to MPI by a final learned
// route: the next call with the same communicator, datatype, op and size
// bucket goes to MPI without the route's checks, which it passed already.
// Why: a call the route gives to MPI is a tiny one (0.3-0.9 us at np 2 on one
// node), and the checks cost 20-30 ns of it at np 1, 0.89-0.95 of Open MPI's
// loop at np 2. Valid while no communicator state was deleted since
// (g_comm_generation), the preload is still up, the buffers are host memory,
// and the bucket stays settled on MPI (SizeRoute::count_final refuses the call
// that a late look is due at, and every call once the route went elsewhere).
// No member initialisers: MPI_COMM_NULL and the like are addresses in Open
// MPI, so they would make the thread-local dynamically initialised, with a
// guard behind __tls_get_addr on every access. Zero: state null, not valid.
struct PassMemo {
  CommState *state;
  MPI_Comm comm;
  MPI_Datatype dt;
  MPI_Op op;
  int64_t type_size;
  int bucket;
  uint64_t generation;
};
thread_local PassMemo t_pass_memo __attribute__((tls_model("initial-exec")));

// Whether the memo routes this call to MPI; counts it as the full route would.
bool pass_by_memo(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
  const PassMemo &m = t_pass_memo;
  if (!m.state || m.comm != comm || m.dt != dt || m.op != op || count < 0 || recvbuf == MPI_IN_PLACE) return false;
  if (t_inside > 0 || m.generation != g_comm_generation.load(std::memory_order_acquire) ||
      g_state.load(std::memory_order_acquire) != kReady)
    return false;
  const int64_t bytes = count * m.type_size;
  if (bytes < g_min_bytes || SizeRoute::bucket_of(bytes) != m.bucket) return false;
  if (on_device(sendbuf) || on_device(recvbuf)) return false;
  if (!m.state->route.count_final(bytes, Path::Mpi)) return false;  // a look is due, or the route changed
  ++m.state->memo_passes;  // into passed:learned when the state goes, not a locked add per call
  return true;
}

void remember_pass(CommState *cs, MPI_Comm comm, MPI_Datatype dt, MPI_Op op, const TypeEntry *t, int64_t bytes) {
  Path path;
  if (!cs->route.final_route(bytes, &path) || path != Path::Mpi) return;
  t_pass_memo = {cs, comm, dt, op, t->size, SizeRoute::bucket_of(bytes),
                 g_comm_generation.load(std::memory_order_acquire)};
}

// MPI_Allreduce and MPI_Iallreduce share the route and the call; a missing
// request (Iallreduce) is one more argument error that MPI must report itself.
// `started` (Iallreduce, when the progress hook is in): start the operation
// and hand it back instead of running it to the end.
// Not inlined into the entry points: their memo path stays a few instructions.
__attribute__((noinline)) int serve_allreduce(Coll c, const void *sendbuf, void *recvbuf, int count,
                                              MPI_Datatype dt, MPI_Op op, MPI_Comm comm, bool request_missing,
                                              int fallback_reason, bc_request_t *started = nullptr,
                                              bc_comm_t *started_on = nullptr) {
  return guarded(c, comm, [&]() -> int {
    Reason why;
    if (!route_start(fallback_reason, &why)) return pass(c, why);
    const TypeEntry *t = nullptr;
    bc_op_t bop = BC_SUM;
    CommState *cs = nullptr;
    if (bad(comm, MPI_COMM_NULL) || count < 0 || bad(dt, MPI_DATATYPE_NULL) || bad(op, MPI_OP_NULL) ||
        recvbuf == MPI_IN_PLACE || request_missing)
      why = Reason::InvalidArgs;
    else
      why = reduction_route(count, dt, op, comm, &t, &bop, &cs);
    if (why == kServe) why = device_route(recvbuf, t->bc, bop);
    if (why != kServe) return pass(c, why);
    const int64_t bytes = static_cast<int64_t>(count) * t->size;
    bool timed = false;
    Path path = Path::Bc;
    if (g_route_learn && mpi_may_take(t->bc, bop))
      path = started ? cs->route.unprobed(bytes) : cs->route.next(bytes, &timed);
    if (path == Path::Mpi) {
      if (!timed) {
        if (c == Coll::Allreduce && !started) remember_pass(cs, comm, dt, op, t, bytes);
        return pass(c, Reason::Learned);
      }
      // A timed probe of the MPI library: run here, where it can be timed.
      count_pass(c, Reason::Learned);
      const double t0 = PMPI_Wtime();
      const int rc = fallback_allreduce(sendbuf, recvbuf, count, dt, op, comm);
      if (rc == MPI_SUCCESS) cs->route.record(bytes, Path::Mpi, PMPI_Wtime() - t0, agree_on(comm));
      return rc;
    }
    bc_status_t st;
    {
      Inside in;
      const void *input = sendbuf == MPI_IN_PLACE ? BC_IN_PLACE : sendbuf;
      const double t0 = timed ? PMPI_Wtime() : 0;
      st = started ? bc_iallreduce(input, recvbuf, count, t->bc, bop, cs->bc, started)
                   : bc_allreduce(input, recvbuf, count, t->bc, bop, cs->bc);
      if (started_on) *started_on = cs->bc;
      if (timed && st == BC_OK) cs->route.record(bytes, Path::Bc, PMPI_Wtime() - t0, agree_on(comm));
    }
    if (st != BC_OK) return raise(c, comm, st, bc_last_error());
    g_served[static_cast<int>(c)].fetch_add(1, std::memory_order_relaxed);
    return MPI_SUCCESS;
  });
}

}  // namespace

int allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
              int fallback_reason) {
  if (fallback_reason < 0 && pass_by_memo(sendbuf, recvbuf, count, dt, op, comm)) return kPass;
  return serve_allreduce(Coll::Allreduce, sendbuf, recvbuf, count, dt, op, comm, false, fallback_reason);
}

int iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
               MPI_Request *request, int fallback_reason) {
  // Non-blocking where Open MPI's progress loop drives it (pmpi_requests.cc);
  // otherwise BlueConnect runs it here and the request returned is already
  // complete (a generalized request either way, so MPI_Wait/MPI_Test take it).
  const bool async = requests_async();
  bc_request_t op_started = nullptr;
  bc_comm_t on = nullptr;
  const int rc = serve_allreduce(Coll::Iallreduce, sendbuf, recvbuf, count, dt, op, comm, request == nullptr,
                                 fallback_reason, async ? &op_started : nullptr, &on);
  if (rc != MPI_SUCCESS) return rc;  // kPass, or an error already raised
  const int grc = op_started ? requests_start(op_started, on, request) : completed_request(request);
  if (grc != MPI_SUCCESS) {
    PMPI_Comm_call_errhandler(comm, grc);
    return grc;
  }
  return MPI_SUCCESS;
}

int reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype dt, MPI_Op op,
                         MPI_Comm comm, int fallback_reason) {
  const Coll c = Coll::ReduceScatterBlock;
  return guarded(c, comm, [&]() -> int {
    Reason why;
    if (!route_start(fallback_reason, &why)) return pass(c, why);
    const TypeEntry *t = nullptr;
    bc_op_t bop = BC_SUM;
    CommState *cs = nullptr;
    int p = 0;
    if (bad(comm, MPI_COMM_NULL) || recvcount < 0 || bad(dt, MPI_DATATYPE_NULL) || bad(op, MPI_OP_NULL) ||
        recvbuf == MPI_IN_PLACE || PMPI_Comm_size(comm, &p) != MPI_SUCCESS)
      why = Reason::InvalidArgs;
    else
      why = reduction_route(static_cast<int64_t>(recvcount) * p, dt, op, comm, &t, &bop, &cs);
    if (why == kServe) why = device_route(recvbuf, t->bc, bop);
    if (why != kServe) return pass(c, why);
    bc_status_t st;
    {
      Inside in;
      // In place, recvbuf holds the whole input: BC_IN_PLACE has the same convention.
      st = bc_reduce_scatter(sendbuf == MPI_IN_PLACE ? BC_IN_PLACE : sendbuf, recvbuf, recvcount, t->bc, bop,
                             cs->bc);
    }
    if (st != BC_OK) return raise(c, comm, st, bc_last_error());
    g_served[static_cast<int>(c)].fetch_add(1, std::memory_order_relaxed);
    return MPI_SUCCESS;
  });
}

int allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
              MPI_Datatype recvtype, MPI_Comm comm, int fallback_reason) {
  const Coll c = Coll::Allgather;
  return guarded(c, comm, [&]() -> int {
    Reason why;
    if (!route_start(fallback_reason, &why)) return pass(c, why);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    CommState *cs = nullptr;
    int p = 0;
    int64_t rsize = 0, ssize = 0;
    if (bad(comm, MPI_COMM_NULL) || recvcount < 0 || bad(recvtype, MPI_DATATYPE_NULL) || recvbuf == MPI_IN_PLACE ||
        (!in_place && (sendcount < 0 || bad(sendtype, MPI_DATATYPE_NULL))) ||
        PMPI_Comm_size(comm, &p) != MPI_SUCCESS)
      why = Reason::InvalidArgs;
    else if ((rsize = dense_size(recvtype)) == 0 || (!in_place && (ssize = dense_size(sendtype)) == 0))
      why = Reason::Derived;
    else if (!in_place && static_cast<int64_t>(sendcount) * ssize != static_cast<int64_t>(recvcount) * rsize)
      why = Reason::TypeMismatch;
    else if (static_cast<int64_t>(recvcount) * rsize * p < g_min_bytes)
      why = Reason::Small;
    else
      why = comm_route(comm, &cs);
    if (why != kServe) return pass(c, why);
    bc_status_t st;
    {
      Inside in;
      // Any dense datatype travels as bytes; in place, this rank's block is
      // already at recvbuf + rank * block, as BC_IN_PLACE expects.
      st = bc_allgather(in_place ? BC_IN_PLACE : sendbuf, recvbuf, static_cast<int64_t>(recvcount) * rsize,
                        BC_UINT8, cs->bc);
    }
    if (st != BC_OK) return raise(c, comm, st, bc_last_error());
    g_served[static_cast<int>(c)].fetch_add(1, std::memory_order_relaxed);
    return MPI_SUCCESS;
  });
}

void init_now() { ensure_init(); }

int error_class(bc_status_t st) { return mpi_error_class(st); }
void finalize_now() { teardown(); }

// For benchmarks of the preload (bc_bench --via mpi, found with dlsym): the
// calls of `bytes` that the learned route spends probing a communicator's
// size bucket before it decides (0 with BC_PMPI_ROUTE=bc, with BC_DISABLE,
// or before MPI_Init), so that a warm-up can cover them and the timed loop
// sees the route as a long-running program does.
extern "C" __attribute__((visibility("default"))) int bc_pmpi_probe_calls(long long bytes) {
  if (g_state.load(std::memory_order_acquire) != kReady || !g_route_learn || bytes <= 0) return 0;
  return SizeRoute::learning_calls(SizeRoute::bucket_of(bytes));
}

}  // namespace pmpi
}  // namespace bc

// ---- the C entry points ----
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

BC_PMPI_EXPORT int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                 MPI_Comm comm) {
  // Host buffers, checked by the memo: straight to the MPI library.
  if (bc::pmpi::pass_by_memo(sendbuf, recvbuf, count, datatype, op, comm))
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  const int rc = bc::pmpi::serve_allreduce(bc::pmpi::Coll::Allreduce, sendbuf, recvbuf, count, datatype, op, comm,
                                           false, -1);
  return rc != bc::pmpi::kPass ? rc : bc::pmpi::fallback_allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

BC_PMPI_EXPORT int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                                  MPI_Op op, MPI_Comm comm, MPI_Request *request) {
  const int rc = bc::pmpi::iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  return rc != bc::pmpi::kPass ? rc
                               : bc::pmpi::fallback_iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
}

BC_PMPI_EXPORT int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                                            MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  const int rc = bc::pmpi::reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
  return rc != bc::pmpi::kPass
             ? rc
             : bc::pmpi::fallback_reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
}

BC_PMPI_EXPORT int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const int rc = bc::pmpi::allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return rc != bc::pmpi::kPass
             ? rc
             : bc::pmpi::fallback_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

}  // extern "C"

