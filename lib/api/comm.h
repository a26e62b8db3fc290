// The communicator behind bc_comm_t, the library's global state, and the helpers the files of lib/api share.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "api/plan_learn.h"
#include "core/params.h"
#include "core/timeline.h"
#include "core/wait_policy.h"
#include "plan/cost.h"
#include "cuda/cuda_rt.h"
#include "plan/plan.h"
#include "plan/rules.h"
#include "sched/executor.h"
#include "sched/operation.h"
#include "topo/topo.h"
#include "transports/transport.h"

namespace bc {
class ArgAgreement;
class CommLock;
class Liveness;
class Operation;
class ProgressThread;

struct CollArgs {
  CollKind kind;
  const void *sendbuf;  // BC_IN_PLACE allowed
  void *recvbuf;
  int64_t count;        // allreduce: elements; reduce_scatter: recvcount; allgather: sendcount
  bc_dtype_t dtype;
  bc_op_t op;           // ignored for allgather
  bc_memtype_t mem;
};
}  // namespace bc

struct bc_comm {
  ~bc_comm();  // stops the progress thread first
  uint64_t magic = 0;
  MPI_Comm mpi = MPI_COMM_NULL;  // private duplicate: our traffic never meets the caller's
  // A second one, for nothing but destroy's closing barrier (comm_setup.cc,
  // quiesce_transports), so that barrier never pairs with a collective some
  // rank abandoned on `mpi`. Only when a transport needs the quiesce (UCX).
  MPI_Comm mpi_close = MPI_COMM_NULL;
  // Creation duplicates mpi_close in the background (MPI_Comm_idup) while it
  // sets up the rest; the request and the duplicate until it completes.
  MPI_Request mpi_close_dup = MPI_REQUEST_NULL;
  MPI_Comm mpi_close_pending = MPI_COMM_NULL;
  int rank = 0;
  int size = 0;
  bc::ParamSet params;
  bc::Topology topo;
  bc::Hierarchy hier;         // BlueConnect's split
  bc::Hierarchy hier_leader;  // one owner per unit below the top, for small messages
  bc::Hierarchy hier_flat;    // every rank one level, for the cost model's latency plans
  bc::Algo algo = bc::Algo::Auto;
  // BC_SPIN_COUNT as every waiter on this communicator uses it: the parameter,
  // or where it is 0 (auto) the choice made at creation (spin_count_setup),
  // with why, for bc_comm_describe and BC_DEBUG=INFO.
  int64_t spin_count = bc::kSpinCountOwnCpu;
  std::string spin_why;
  std::vector<bc::PlanRule> plan_rules;
  // The per-user cache file the model was loaded from; "" when calibrated,
  // given by BC_MODEL_FILE or taken from this process (plan_learn.cc checks it).
  std::string model_cache_file;
  std::string cache_key;  // comm_cache_key's answer, once asked (it is collective)
  bc::CostModel model;  // empty: BC_MODEL off, or one node (lib/api/model_setup.cc)
  // A shrunk communicator's parent's model, which model_setup takes instead of
  // loading or calibrating one; cleared once the creation is over.
  bc::CostModel inherited_model;
  // bc_comm_shrink ran on it: once per communicator (comm_shrink.cc says why).
  bool shrunk = false;
  // The choice per buffer size (comm_choose; every rank computes the same),
  // kept: a PlanChoice copied per call allocates its stage algorithms.
  mutable std::map<int64_t, bc::PlanChoice> choices;
  std::vector<std::unique_ptr<bc::Transport>> transports;
  std::vector<bc::Transport *> peer_transport;  // per rank
  uint32_t seq = 0;
  uint32_t timeline_id = bc::timeline::kUnrecorded;  // its index in the timeline (BC_TIMELINE_FILE; core/timeline.h)
  bool broken = false;  // after a timeout, a dead peer or a transport failure: refuse further calls
  bc::Status broken_by = BC_OK;  // the failure that broke it
  std::string broken_why;        // its message, for the refusals that follow
  // Peer checks while a collective waits (sched/liveness.h); set up after the
  // transports, closed after them (its goodbyes tell peers this rank left).
  std::unique_ptr<bc::Liveness> liveness;
  std::unique_ptr<bc::PlanLearning> learning;  // BC_PLAN_LEARN; null: the plan is chosen, not learned
  std::vector<double> last_stage_seconds;
  // Host scratch and reduce-scatter work buffers, kept across collectives
  // (cuda/cuda_rt.h says why), freed at destroy.
  bc::BufferPool host_pool{BC_MEM_HOST};

  // Device buffers, set up by the first device collective (collective itself):
  // cuda for same-node peers, staging through host buffers for the others.
  enum class DevState { Unknown, Ready, Unavailable } dev_state = DevState::Unknown;
  std::string dev_reason;  // why Unavailable
  std::vector<std::unique_ptr<bc::Transport>> dev_transports;
  std::vector<bc::Transport *> dev_peer_transport;  // per rank
  bc::BufferPool dev_pool{BC_MEM_CUDA};  // device scratch and work buffers, freed at destroy
  bc_memtype_t cur_mem = BC_MEM_HOST;  // of the collective being started

  // Plans by (collective, average?, count, shape, algorithms, top: rd, all or split), least recently used first.
  using PlanKey = std::tuple<int, bool, int64_t, int, uint64_t, int>;
  // Shared: an operation in flight keeps its plans alive if the cache drops them.
  std::list<std::pair<PlanKey, std::shared_ptr<const bc::Program>>> plans;
  int inflight = 0;  // non-blocking operations not yet completed (by bc_test/bc_wait)
  // An idle Operation, with its Executions and their vectors, that the next
  // start() takes: a blocking collective gives it back (a non-blocking one
  // too, when no progress thread runs it), so that the loop of
  // small all-reduces a training step makes allocates nothing per call (nine
  // mallocs and frees each before: an 8-byte all-reduce at np 2 took
  // 0.62-0.70 us, 0.47-0.54 without them).
  std::unique_ptr<bc::Operation> spare_op;
  // BC_CHECK_ARGS, read at creation: agree on the arguments before each collective (api/argcheck.h).
  bool check_args = false;
  // Non-blocking requests in flight that no progress thread drives: the
  // argument agreement progresses them while it waits (comm_progress_open).
  std::vector<bc_request *> open;
  // Non-blocking requests whose argument agreement is pending, in call order
  // (the same on every rank): each starts its operation only after those
  // before it, so operations take their sequence numbers in call order.
  // Advanced by the callers (bc_test, bc_wait, later calls) and, where MPI
  // allows a second thread to call it (MPI_THREAD_MULTIPLE), by the progress
  // thread, so that a call overlaps the caller's computation with the check
  // too. agree_mutex guards the list and the requests' agreement phase; it is
  // taken before the communicator's lock, never while holding it.
  std::deque<bc_request *> agreeing;
  std::atomic<int> agreeing_count{0};  // agreeing.size(), read by the progress thread without the mutex
  std::mutex agree_mutex;
  bool thread_agrees = false;  // the progress thread advances agreements (MPI_THREAD_MULTIPLE)

  // BC_PROGRESS_THREAD (lib/api/progress_thread.h). While the thread runs, the
  // mutex guards the transports, the operations and the buffer pools; callers
  // take it with a CommLock. Null: no thread, no locking.
  std::mutex mutex;
  std::unique_ptr<bc::ProgressThread> progress;  // last: stopped before the rest goes
};

// A non-blocking collective (bc_iallreduce), until bc_test/bc_wait completes it.
struct bc_request {
  uint64_t magic = 0;
  bc_comm *comm = nullptr;
  std::unique_ptr<bc::Operation> op;
  // Handed to the progress thread: it fills status, error and stage_seconds,
  // frees op, then sets done (release); the caller reads them after done.
  bool threaded = false;
  std::atomic<bool> done{false};
  bc::Status status = BC_OK;
  std::string error;  // the thread's bc_last_error() text, without its status prefix
  std::vector<double> stage_seconds;
  int device = -1;  // device buffers: the starting thread's CUDA device
  // Without the thread: failed while another call progressed it
  // (comm_progress_open); status and error say how, for bc_test/bc_wait.
  bool failed = false;
  // Without the thread: the waiting policy of bc_test (core/wait_policy.h).
  // A caller that polls bc_test in a loop is waiting; this counts the polls
  // that saw nothing move, so that bc_test pauses, and yields the core once
  // every BC_SPIN_COUNT of them to the peers that may share it.
  bc::WaitPolicy polls{1};
  // BC_CHECK_ARGS: the argument agreement, the request's first phase, and the
  // arguments it starts the operation with once the ranks agree (comm->agreeing).
  std::unique_ptr<bc::ArgAgreement> agreement;
  bc::CollArgs args{};
  bool counted = false;  // in comm->inflight
  ~bc_request();
};

namespace bc {

constexpr uint64_t kCommMagic = 0xB1DEC0111EC7ULL;
constexpr uint64_t kRequestMagic = 0xB1DE4E0E57ULL;

// Global state.
Status api_init(bool quiet_by_default);
Status api_finalize();
bool api_initialized();
const ParamSet &global_params();
// The registry of live communicators that comm_check consults (init.cc):
// comm_create adds each it makes, comm_destroy removes it before tearing it down.
void comm_live_add(const bc_comm *comm);
void comm_live_remove(const bc_comm *comm);

Status comm_create(MPI_Comm comm, const char *options, bc_comm **out);
// The creation proper, on `owned`: a private MPI communicator the new one
// takes over and frees (comm_create's duplicate, or bc_comm_shrink's
// communicator of the survivors), with `params` as given. made_by, made_ms:
// what made `owned` and how long it took, for the INIT log line. `inherit`: a
// cost model to take instead of loading or calibrating one (bc_comm_shrink),
// or null.
Status comm_create_owned(MPI_Comm owned, const ParamSet &params, const char *made_by, double made_ms,
                         const CostModel *inherit, bc_comm **out);
// bc_comm_shrink (lib/api/comm_shrink.cc).
Status comm_shrink(bc_comm *comm, bc_comm **out);
Status comm_destroy(bc_comm *comm);
// BC_ERR_INVALID_COMM unless `comm` is a live communicator.
Status comm_check(const bc_comm *comm);
// Device buffers: creates the device transports on the first call (collective:
// every rank must pass device buffers to the same calls); NotSupported with the
// reason, cached, where no device is usable (comm_device.cc).
Status comm_ensure_device(bc_comm *comm);
// The plan choice for a buffer of `bytes`: the cost model's when there is one,
// else the defaults; BC_PLAN rules and explicitly set knobs override either.
// Made once per size and kept: valid until the next comm_choose.
const PlanChoice &comm_choose(const bc_comm *comm, int64_t bytes);
// What a transport is told at creation, for this communicator.
TransportSetup transport_setup(const bc_comm *comm);
// The hierarchy a plan shape runs on.
const Hierarchy &hierarchy_for(const bc_comm *comm, Hierarchy::Shape shape);
// Calibrates or loads the communicator's cost model (BC_MODEL, BC_MODEL_FILE;
// lib/api/model_setup.cc). Collective over comm->mpi, after the transports are up.
Status model_setup(bc_comm *comm);
// Measures the cost model's fits on this communicator (lib/api/model_setup.cc):
// what model_setup runs when no file or cache has the model. Collective.
Status calibrate(bc_comm *comm, CostModel *out);
// The per-user cache's key of this communicator: layout, transports, hosts in
// rank order, calibration version (lib/api/model_setup.cc). Collective the
// first time; later calls on the communicator answer from comm->cache_key.
Status comm_cache_key(bc_comm *comm, std::string *key);
// Whether model_setup has nothing to measure or load (BC_MODEL off, one level,
// or auto on one node): then it is local and cannot fail. The same on every rank.
bool model_is_local(const bc_comm *comm);
// Whether the communicator's ranks are on more than one node (the same on every rank).
bool spans_nodes(const bc_comm *comm);
// The communicator's pool of scratch and work buffers of memory type `mem`.
BufferPool &buffer_pool(bc_comm *comm, bc_memtype_t mem);
// The execution context of a collective on `comm` (transports, timeouts, waiting).
ExecContext exec_context(const bc_comm *comm, bc_dtype_t dtype, bc_op_t op, bc_memtype_t mem);
// The communicator's entry in the timeline (BC_TIMELINE_FILE), where every
// rank has it on (comm_timeline.cc). Collective, at creation.
Status comm_timeline_setup(bc_comm *c);
Status comm_plan(bc_comm *comm, CollKind kind, bool average, int64_t count, const PlanChoice &choice,
                 std::shared_ptr<const Program> *out);
// Blocking: start, wait, finish.
Status comm_run(bc_comm *comm, const CollArgs &args);
// Non-blocking all-reduce: the operation is returned started.
Status comm_start_allreduce(bc_comm *comm, const CollArgs &args, bc_request **out);
// Progresses every open request of `comm` (those no progress thread drives)
// once, without blocking; a failure is kept in the request for bc_test/bc_wait.
void comm_progress_open(bc_comm *comm);
// One pass of a caller's wait for an argument agreement: progresses the open
// requests (no progress thread: nobody else would), then pauses as `wait`
// says (core/wait_policy.h): the agreement's MPI round gives no progress
// count, so every pass counts as idle and the core is yielded every
// BC_SPIN_COUNT passes.
void comm_wait_pass(bc_comm *comm, WaitPolicy *wait);
// Advances the argument agreements of `comm`'s non-blocking calls, once, in
// call order, without blocking; each that agrees starts its operation, each
// that fails keeps its failure in the request for bc_test/bc_wait. Takes
// comm->agree_mutex (the _locked form: the caller holds it); never call it
// holding the communicator's lock.
void comm_advance_agreements(bc_comm *comm);
void comm_advance_agreements_locked(bc_comm *comm);
// After a failure of an operation on `comm`: timeouts, transport and MPI errors break it.
void comm_mark_broken_on(bc_comm *comm, Status st);
// Progresses a request; *done when finished (then the request is freed and
// *req set to NULL). With `block`, waits for it (BC_TIMEOUT applies).
Status request_progress(bc_request **req, bool block, bool *done);

Status comm_describe(bc_comm *comm, int64_t count, bc_dtype_t dtype, std::string *out);
// bc_comm_write_topology: every rank's host name gathered, rank 0 writes the
// levels above the host as a BC_TOPO_FILE, the status agreed.
Status comm_write_topology(bc_comm *comm, const char *path);

// Helpers shared by the files of lib/api (the file that defines each in brackets).
// progress_thread_allowed at this process's MPI thread level (comm_setup.cc).
Status progress_thread_check(const char *mpi_user);
// The lowest rank `comm` reaches through the mpi transport, or -1 (comm_setup.cc).
int first_mpi_peer(const bc_comm *comm);
// Milliseconds since `t` (comm_setup.cc).
double ms_since(std::chrono::steady_clock::time_point t);
// Chunks a buffer of `total` elements is cut into under `choice`, at least 1 (comm_plan.cc).
int64_t chunk_count(const PlanChoice &choice, int64_t total, size_t elem);
// A call on a broken communicator: its earlier failure again (comm_start.cc).
Status refuse_broken(const bc_comm *comm);
// One rank's own checks of a collective's arguments, before anything is sent (comm_start.cc).
Status check_own_args(const bc_comm *comm, const CollArgs &args);
// refuse_broken when `comm` is broken, read under its lock (comm_start.cc).
Status refuse_if_broken(bc_comm *comm);
// Checks a collective's arguments, takes `lock` and builds its started Operation (comm_start.cc).
// A blocking all-reduce's turn in the plan learning (api/plan_learn.h):
// start() fills it, comm_run times the call when `timed`.
struct LearnTurn {
  bool timed = false;
  int candidate = 0;
  int64_t bytes = 0;
};
Status start(bc_comm *comm, const CollArgs &args, CommLock *lock, std::unique_ptr<Operation> *op_out,
             unsigned char **work_out, void **pooled_work_out = nullptr, bool agreed_before = false,
             LearnTurn *turn = nullptr);
// Finishes a done operation (its scratch back to the pool) and keeps it as the
// communicator's idle one, unless one is kept already (comm_start.cc). Only
// where nothing else can touch the communicator: under its lock, or with no
// progress thread.
void comm_keep_idle(bc_comm *comm, std::unique_ptr<Operation> *op);

}  // namespace bc
