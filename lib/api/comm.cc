#include "api/comm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sched.h>
#include <set>
#include <sstream>

#include "api/argcheck.h"
#include "api/progress_thread.h"
#include "core/log.h"
#include "reduce/reduce.h"
#include "core/blocks.h"
#include "sched/liveness.h"
#include "sched/operation.h"
#include "topo/detect.h"

namespace bc {
namespace {

std::mutex g_mutex;
int g_init_count = 0;
ParamSet g_params;
std::set<const bc_comm *> g_live;  // every communicator not yet destroyed

// Every rank learns whether any rank failed, so that all fail together rather
// than some waiting forever in the next collective.
Status agree(MPI_Comm comm, Status mine, const char *what) {
  int local = mine, worst = 0;
  BC_MPI_CHECK(MPI_Allreduce(&local, &worst, 1, MPI_INT, MPI_MAX, comm));
  if (worst == BC_OK) return BC_OK;
  if (mine != BC_OK) return mine;
  return BC_FAIL(static_cast<Status>(worst), "%s failed on another rank", what);
}

// Whether any rank of `c` has a peer that none of the transports created so far
// reaches. Collective: all ranks get the same answer, so that all of them go on
// to create the next transport, or none.
Status someone_unreached(bc_comm *c, bool *out) {
  int mine = 0;
  for (int peer = 0; peer < c->size && !mine; ++peer) {
    if (peer == c->rank) continue;
    bool reached = false;
    for (auto &t : c->transports) reached = reached || t->can_connect(peer, BC_MEM_HOST);
    mine = reached ? 0 : 1;
  }
  int any = 0;
  BC_MPI_CHECK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, c->mpi));
  *out = any != 0;
  return BC_OK;
}

Status select_transports(bc_comm *c) {
  const std::string want = c->params.get_str(ParamId::Transport);
  const TransportSetup setup = transport_setup(c);
  bool known = false;
  for (const TransportKind &kind : transport_kinds()) {
    if (want != "auto" && want != kind.name) continue;
    known = true;
    if (want == "auto" && !c->transports.empty()) {
      // Only what some peer needs: on one node, shm reaches every peer and UCX
      // (about 150 ms to start at np 8, most of a communicator's creation) is
      // never started.
      bool needed = true;
      BC_CHECK(someone_unreached(c, &needed));
      if (!needed) break;  // nor any later one: the transports so far reach every peer
    }
    std::unique_ptr<Transport> t;
    Status st = kind.create(setup, &t);
    if (st == BC_ERR_NOT_SUPPORTED && want == "auto") {
      BC_INFO(Transport, "transport %s is not available here: %s", kind.name, last_error());
      clear_error();
      continue;
    }
    BC_CHECK(st);
    c->transports.push_back(std::move(t));
  }
  if (!known) {
    std::string avail;
    for (const TransportKind &kind : transport_kinds()) avail += std::string(" ") + kind.name;
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "BC_TRANSPORT=%s is not in this build (available: auto%s)",
                   want.c_str(), avail.c_str());
  }
  c->peer_transport.assign(c->size, nullptr);
  for (int peer = 0; peer < c->size; ++peer) {
    for (auto &t : c->transports) {
      if (peer == c->rank || t->can_connect(peer, BC_MEM_HOST)) {
        c->peer_transport[peer] = t.get();
        break;
      }
    }
    if (!c->peer_transport[peer])
      return BC_FAIL(BC_ERR_NOT_SUPPORTED, "BC_TRANSPORT=%s cannot reach rank %d from rank %d", want.c_str(),
                     peer, c->rank);
  }
  return BC_OK;
}

// progress_thread_allowed at this process's MPI thread level.
Status progress_thread_check(const char *mpi_user) {
  int level = MPI_THREAD_SINGLE;
  BC_MPI_CHECK(MPI_Query_thread(&level));
  BC_CHECK(progress_thread_allowed(mpi_user, level));
  return BC_OK;
}

// Last step of the creation: the thread starts once everything it uses is up.
Status progress_setup(bc_comm *c) {
  bool mpi_peers = false;
  for (int r = 0; r < c->size; ++r)
    if (r != c->rank && std::strcmp(c->peer_transport[r]->name(), "mpi") == 0) mpi_peers = true;
  if (mpi_peers)
    BC_CHECK(progress_thread_check("the mpi transport (its thread calls MPI; the shm and ucx transports do not)"));
  int level = MPI_THREAD_SINGLE;
  BC_MPI_CHECK(MPI_Query_thread(&level));
  // The argument agreements call MPI: the thread may advance them only where
  // MPI lets two threads call it at once.
  c->thread_agrees = c->check_args && level >= MPI_THREAD_MULTIPLE;
  c->progress.reset(new ProgressThread(c));
  BC_CHECK(c->progress->start());
  return BC_OK;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The private duplicate: MPI errors on it come back as codes (and become
// BlueConnect errors) instead of aborting the job, whatever handler the
// caller's communicator has.
Status private_comm_setup(bc_comm *c) {
  BC_MPI_CHECK(MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN));
  BC_MPI_CHECK(MPI_Comm_set_name(c->mpi, "blueconnect"));
  BC_MPI_CHECK(MPI_Comm_rank(c->mpi, &c->rank));
  BC_MPI_CHECK(MPI_Comm_size(c->mpi, &c->size));
  return BC_OK;
}

// dup_ms: how long the private duplicate took (for the INIT log line).
Status comm_setup(bc_comm *c, double dup_ms) {
  const auto t0 = std::chrono::steady_clock::now();
  BC_CHECK(topo_detect(c->mpi, c->params, &c->topo));
  const double topo_ms = ms_since(t0);
  c->hier = Hierarchy::build(c->topo);
  c->hier_leader = Hierarchy::build(c->topo, Hierarchy::Shape::Leader);
  c->hier_flat = Hierarchy::build(c->topo, Hierarchy::Shape::Flat);
  BC_CHECK(algo_parse(c->params.get_str(ParamId::Algo), &c->algo));
  BC_CHECK(plan_rules_parse(c->params.get_str(ParamId::Plan), &c->plan_rules));
  const auto t1 = std::chrono::steady_clock::now();
  BC_CHECK(agree(c->mpi, select_transports(c), "transport selection"));
  const double transports_ms = ms_since(t1);
  // Its status is the same on every rank already (it fails only where MPI does).
  BC_CHECK(Liveness::create(transport_setup(c), &c->liveness));
  if (c->rank == 0 && log_enabled(LogLevel::Info, LogSys::Plan))
    BC_INFO(Plan, "%s", c->hier.describe(c->size * 1024, 4).c_str());
  const auto t2 = std::chrono::steady_clock::now();
  // On one node the model is off and model_setup is local: no agreement needed.
  if (model_is_local(c)) BC_CHECK(model_setup(c));
  else BC_CHECK(agree(c->mpi, model_setup(c), "cost model"));
  const double model_ms = ms_since(t2);
  if (c->params.get_int(ParamId::ProgressThread)) BC_CHECK(agree(c->mpi, progress_setup(c), "BC_PROGRESS_THREAD"));
  if (c->rank == 0 && log_enabled(LogLevel::Info, LogSys::Init)) {
    std::string names;
    for (auto &t : c->transports) names += std::string(names.empty() ? "" : ",") + t->name();
    BC_INFO(Init, "communicator of %d ranks created in %.1f ms (rank 0): private MPI_Comm_dup %.1f, topology %.1f, "
            "transports %.1f (%s), cost model %.1f", c->size, dup_ms + ms_since(t0), dup_ms, topo_ms, transports_ms,
            names.c_str(), model_ms);
  }
  return BC_OK;
}

}  // namespace

TransportSetup transport_setup(const bc_comm *c) {
  TransportSetup setup;
  setup.bootstrap = c->mpi;
  setup.rank = c->rank;
  setup.size = c->size;
  setup.node_of = c->topo.node_of;
  setup.params = &c->params;
  return setup;
}

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

Status comm_create(MPI_Comm comm, const char *options, bc_comm **out) {
  if (!out) return BC_FAIL(BC_ERR_INVALID_ARG, "the output pointer is NULL");
  *out = nullptr;
  if (!api_initialized()) return BC_FAIL(BC_ERR_NOT_INITIALIZED, "call bc_init before bc_comm_create");
  if (comm == MPI_COMM_NULL) return BC_FAIL(BC_ERR_INVALID_ARG, "the MPI communicator is MPI_COMM_NULL");
  int inter = 0;
  BC_MPI_CHECK(MPI_Comm_test_inter(comm, &inter));
  if (inter) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "intercommunicators are not supported");

  std::unique_ptr<bc_comm> c(new bc_comm);
  c->params = global_params();
  // Bad options fail on every rank alike (every rank must pass the same string).
  BC_CHECK(c->params.apply_overrides(options));
  c->check_args = c->params.get_int(ParamId::CheckArgs) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  BC_MPI_CHECK(MPI_Comm_dup(comm, &c->mpi));
  const double dup_ms = ms_since(t0);
  Status st = private_comm_setup(c.get());
  if (st == BC_OK) st = comm_setup(c.get(), dup_ms);
  if (st != BC_OK) {
    trail(st, __FILE__, __LINE__);
    c->progress.reset();
    c->transports.clear();
    BC_MPI_WARN(MPI_Comm_free(&c->mpi));
    return st;
  }
  c->magic = kCommMagic;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_live.insert(c.get());
  }
  *out = c.release();
  return BC_OK;
}

Status comm_destroy(bc_comm *comm) {
  BC_CHECK(comm_check(comm));
  if (comm->inflight > 0)
    return BC_FAIL(BC_ERR_INVALID_ARG, "%d non-blocking operation(s) still in flight; complete them with bc_wait first",
                   comm->inflight);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_live.erase(comm);
  }
  comm->magic = 0;
  const auto t0 = std::chrono::steady_clock::now();
  comm->progress.reset();  // joins the thread: nothing uses the transports after this
  comm->dev_transports.clear();  // they wrap the host transports: first
  comm->dev_pool.clear();
  comm->host_pool.clear();
  // A communicator that never failed leaves its shm node setup to the next one
  // over the same processes (transports/shm/shm_reuse.cc).
  transports_retire(&comm->transports, comm->broken_by == BC_OK);
  comm->liveness.reset();  // its TCP watch connections stay with the process until bc_finalize
  // Local in Open MPI 4.1 (no synchronisation): safe after a peer died.
  const double transports_ms = ms_since(t0);
  const int rc = comm->mpi != MPI_COMM_NULL ? MPI_Comm_free(&comm->mpi) : MPI_SUCCESS;
  if (comm->rank == 0 && log_enabled(LogLevel::Info, LogSys::Init))
    BC_INFO(Init, "communicator of %d ranks destroyed in %.1f ms (rank 0): transports %.1f", comm->size,
            ms_since(t0), transports_ms);
  delete comm;
  BC_MPI_CHECK(rc);
  return BC_OK;
}

namespace {



// Chunks a buffer of `total` elements is cut into under `choice` (at least 1).
int64_t chunk_count(const PlanChoice &choice, int64_t total, size_t elem) {
  if (choice.chunk_bytes <= 0 || total == 0) return 1;
  const int64_t chunk_elems = std::max<int64_t>(1, choice.chunk_bytes / static_cast<int64_t>(elem));
  return (total + chunk_elems - 1) / chunk_elems;
}

}  // namespace

const Hierarchy &hierarchy_for(const bc_comm *c, Hierarchy::Shape shape) {
  switch (shape) {
    case Hierarchy::Shape::Leader: return c->hier_leader;
    case Hierarchy::Shape::Flat: return c->hier_flat;
    default: return c->hier;
  }
}

PlanChoice comm_choose(const bc_comm *c, int64_t bytes) {
  PlanChoice base;
  base.algo = c->algo;
  base.chunk_bytes = c->params.get_int(ParamId::Chunk);
  base.depth = static_cast<int>(c->params.get_int(ParamId::PipelineDepth));  // 1..1024: the registry's range
  if (c->model.empty()) return plan_choose(c->plan_rules, bytes, base);
  auto it = c->model_choices.find(bytes);
  if (it == c->model_choices.end()) {
    if (c->model_choices.size() >= 256) c->model_choices.clear();
    PlanChoice m = model_choose(c->hier, c->hier_leader, c->hier_flat, c->model, bytes);
    // What the user set explicitly wins over the model.
    if (c->params.is_set(ParamId::Algo)) {
      m.algo = c->algo;
      m.stage_algos.clear();
    }
    if (c->params.is_set(ParamId::Chunk)) m.chunk_bytes = base.chunk_bytes;
    if (c->params.is_set(ParamId::PipelineDepth)) m.depth = base.depth;
    it = c->model_choices.emplace(bytes, m).first;
  }
  // BC_PLAN's default rules are the model-less choice; rules the user set apply on top.
  return c->params.is_set(ParamId::Plan) ? plan_choose(c->plan_rules, bytes, it->second) : it->second;
}

BufferPool &buffer_pool(bc_comm *c, bc_memtype_t mem) { return mem == BC_MEM_CUDA ? c->dev_pool : c->host_pool; }

ExecContext exec_context(const bc_comm *c, bc_dtype_t dtype, bc_op_t op, bc_memtype_t mem) {
  const bool dev = mem == BC_MEM_CUDA;
  ExecContext ctx;
  ctx.peer_transport = dev ? &c->dev_peer_transport : &c->peer_transport;
  ctx.mem = mem;
  ctx.scratch_pool = &buffer_pool(const_cast<bc_comm *>(c), mem);
  ctx.dtype = dtype;
  ctx.op = op == BC_AVG ? BC_SUM : op;
  ctx.nranks = c->size;
  ctx.timeout_ms = c->params.get_int(ParamId::Timeout);
  ctx.spin_count = c->params.get_int(ParamId::SpinCount);  // at least 1: the registry's range
  ctx.liveness = c->liveness.get();
  // Sleeping on one transport's event fd is only safe when every peer uses it.
  for (int r = 0; r < c->size && !dev; ++r) {
    if (r == c->rank) continue;
    Transport *t = c->peer_transport[r];
    if (!t->can_sleep() || (ctx.sleeper && ctx.sleeper != t)) {
      ctx.sleeper = nullptr;
      break;
    }
    ctx.sleeper = t;
  }
  return ctx;
}

Status comm_plan(bc_comm *c, CollKind kind, bool average, int64_t count, const PlanChoice &choice,
                 std::shared_ptr<const Program> *out) {
  bc_comm::PlanKey key{static_cast<int>(kind), average, count, static_cast<int>(choice.shape),
                       plan_choice_algo_key(choice), static_cast<int>(choice.top)};
  for (auto it = c->plans.begin(); it != c->plans.end(); ++it) {
    if (it->first == key) {
      c->plans.splice(c->plans.end(), c->plans, it);  // most recently used last
      *out = c->plans.back().second;
      return BC_OK;
    }
  }
  std::shared_ptr<Program> prog(new Program);
  BC_CHECK(build_program(hierarchy_for(c, choice.shape), c->rank, kind, count, choice.algo, average, prog.get(),
                         choice.top, &choice.stage_algos));
  if (log_enabled(LogLevel::Debug, LogSys::Plan))
    BC_DEBUGLOG(Plan, "rank %d %s", c->rank, describe_program(*prog, 1).c_str());
  const size_t max_plans = static_cast<size_t>(c->params.get_int(ParamId::MaxPlanCache));
  while (c->plans.size() >= max_plans) c->plans.pop_front();
  c->plans.emplace_back(key, prog);
  *out = prog;
  return BC_OK;
}

namespace {

// A call on a communicator an earlier failure broke: the cause again, at once
// (a dead peer stays BC_ERR_PEER_DEAD, so a caller can tell death from misuse).
Status refuse_broken(const bc_comm *c) {
  return BC_FAIL(c->broken_by == BC_ERR_PEER_DEAD ? BC_ERR_PEER_DEAD : BC_ERR_INVALID_COMM,
                 "the communicator is broken by an earlier failure (%s: %s); destroy it", bc_strerror(c->broken_by),
                 c->broken_why.c_str());
}

// One rank's own arguments, before anything is sent (with BC_CHECK_ARGS the
// verdict goes into the agreement, so that every rank fails together).
Status check_own_args(const bc_comm *c, const CollArgs &a) {
  if (a.count < 0)
    return BC_FAIL(BC_ERR_INVALID_ARG, "count is negative (%lld)", static_cast<long long>(a.count));
  if (!dtype_is_valid(a.dtype)) return BC_FAIL(BC_ERR_INVALID_ARG, "unknown dtype %d", static_cast<int>(a.dtype));
  if (a.kind != CollKind::Allgather) BC_CHECK(reduce_check(a.dtype, a.op));
  if (a.mem < 0 || a.mem >= BC_MEM_COUNT)
    return BC_FAIL(BC_ERR_INVALID_ARG, "unknown memory type %d", static_cast<int>(a.mem));
  const size_t elem = bc_dtype_size(a.dtype);
  const int64_t p = c->size;
  const int64_t limit = INT64_MAX / static_cast<int64_t>(elem) / p;
  if (a.count > limit) return BC_FAIL(BC_ERR_INVALID_ARG, "count %lld overflows", static_cast<long long>(a.count));
  if (a.count == 0) return BC_OK;
  const bool in_place = a.sendbuf == BC_IN_PLACE || (a.kind == CollKind::Allreduce && a.sendbuf == a.recvbuf);
  if (!a.recvbuf) return BC_FAIL(BC_ERR_INVALID_ARG, "recvbuf is NULL with count %lld", static_cast<long long>(a.count));
  if (!a.sendbuf) return BC_FAIL(BC_ERR_INVALID_ARG, "sendbuf is NULL with count %lld (use BC_IN_PLACE for in-place)",
                                 static_cast<long long>(a.count));
  const int64_t total = a.kind == CollKind::Allreduce ? a.count : a.count * p;
  const size_t send_bytes = static_cast<size_t>(a.kind == CollKind::Allgather ? a.count : total) * elem;
  const size_t recv_bytes = static_cast<size_t>(a.kind == CollKind::ReduceScatter ? a.count : total) * elem;
  if (!in_place) {
    const auto *s = static_cast<const unsigned char *>(a.sendbuf);
    const auto *r = static_cast<const unsigned char *>(a.recvbuf);
    if (s < r + recv_bytes && r < s + send_bytes)
      return BC_FAIL(BC_ERR_INVALID_ARG, "sendbuf and recvbuf overlap; use BC_IN_PLACE for in-place");
  }
  return BC_OK;
}

// Checks the arguments, takes `lock` once `c` is known to be live (nothing is
// taken without a progress thread), places the input in the work buffer and
// builds the started Operation. *work_out: the work buffer (for
// reduce_scatter's finish). *pooled_work_out: a work buffer from the pool of
// the buffers' memory type (reduce_scatter out of place), for the caller to
// release; set before any failure after it is taken.
// With BC_CHECK_ARGS: a broken communicator may have a collective still
// posted on c->mpi (an agreement that timed out): no new one may follow it.
Status refuse_if_broken(bc_comm *c) {
  CommLock peek;
  peek.take(c);
  if (c->broken) return refuse_broken(c);
  return BC_OK;
}

// `agreed`: a non-blocking call whose agreement has already passed (comm_advance_agreements).
Status start(bc_comm *c, const CollArgs &a, CommLock *lock, std::unique_ptr<Operation> *op_out,
             unsigned char **work_out, void **pooled_work_out = nullptr, bool agreed_before = false) {
  BC_CHECK(comm_check(c));
  if (c->check_args && !agreed_before) {
    BC_CHECK(refuse_if_broken(c));
    // Unlocked: the progress thread keeps driving requests in flight meanwhile.
    const Status agreed = args_agree(c, a, check_own_args(c, a));
    // Earlier non-blocking calls start their operations first, so that every
    // rank numbers the operations in call order. Their agreements were posted
    // before this one, which has completed: they complete too.
    const int64_t spin = c->params.get_int(ParamId::SpinCount);
    for (int64_t polls = 1; agreed == BC_OK && !c->agreeing.empty(); ++polls) {
      comm_advance_agreements(c);
      comm_wait_pass(c, polls, spin);
    }
    lock->take(c);
    comm_mark_broken_on(c, agreed);  // a round that timed out or failed in MPI
    BC_CHECK(agreed);
  } else {
    lock->take(c);
  }
  if (c->broken) return refuse_broken(c);
  if (!c->check_args) BC_CHECK(check_own_args(c, a));  // else passed on every rank above
  bc_memtype_t mem = BC_MEM_HOST;
  BC_CHECK(resolve_memtype(a.sendbuf, a.recvbuf, a.mem, &mem));
  c->cur_mem = mem;
  if (mem == BC_MEM_CUDA) {
    if (a.kind != CollKind::Allgather) BC_CHECK(reduce_check_cuda(a.dtype, a.op));
    BC_CHECK(comm_ensure_device(c));
  }
  if (a.count == 0) return BC_OK;
  const size_t elem = bc_dtype_size(a.dtype);
  const int64_t p = c->size;
  const bool in_place = a.sendbuf == BC_IN_PLACE || (a.kind == CollKind::Allreduce && a.sendbuf == a.recvbuf);
  const int64_t total = a.kind == CollKind::Allreduce ? a.count : a.count * p;
  const size_t send_bytes = static_cast<size_t>(a.kind == CollKind::Allgather ? a.count : total) * elem;

  // Only the all-reduce is cut into chunks: reduce_scatter and allgather tie
  // blocks to ranks across the whole buffer.
  const PlanChoice choice = comm_choose(c, total * static_cast<int64_t>(elem));
  const int64_t nchunks = a.kind == CollKind::Allreduce ? chunk_count(choice, total, elem) : 1;
  std::shared_ptr<const Program> big, small;
  BC_CHECK(comm_plan(c, a.kind, a.op == BC_AVG, block_count(total, nchunks, 0), choice, &big));
  small = big;
  if (total % nchunks != 0) BC_CHECK(comm_plan(c, a.kind, a.op == BC_AVG, total / nchunks, choice, &small));

  unsigned char *work = nullptr;
  const unsigned char *lazy_input = nullptr;
  auto *recv = static_cast<unsigned char *>(a.recvbuf);
  const bool dev = mem == BC_MEM_CUDA;
  // Device buffers: the same placement with device copies. The reduce-
  // scatter's work buffer comes from the communicator's pool of that memory.
  auto copy = [dev](void *dst, const void *src, size_t n) -> Status {
    if (dev) return cuda_copy(dst, src, n);
    std::memcpy(dst, src, n);
    return BC_OK;
  };
  switch (a.kind) {
    case CollKind::Allreduce:
      work = recv;
      // Host buffers out of place: the executor reads the input where it is
      // needed instead of copying it all first (executor.cc, "Lazy input").
      if (!in_place && dev) BC_CHECK(copy(work, a.sendbuf, send_bytes));
      if (!in_place && !dev) lazy_input = static_cast<const unsigned char *>(a.sendbuf);
      break;
    case CollKind::ReduceScatter:
      if (in_place) {
        work = recv;
      } else {
        if (!pooled_work_out) return BC_FAIL(BC_ERR_INTERNAL, "reduce_scatter started without a work buffer slot");
        void *p = nullptr;
        BC_CHECK(buffer_pool(c, mem).acquire(send_bytes, &p));
        *pooled_work_out = p;
        work = static_cast<unsigned char *>(p);
        BC_CHECK(copy(work, a.sendbuf, send_bytes));
      }
      break;
    case CollKind::Allgather:
      work = recv;
      if (!in_place) BC_CHECK(copy(work + c->rank * a.count * elem, a.sendbuf, a.count * elem));
      break;
  }

  const ExecContext ctx = exec_context(c, a.dtype, a.op, mem);
  op_out->reset(new Operation(ctx, work, total, nchunks, choice.depth, big, small, c->seq, lazy_input));
  c->seq += static_cast<uint32_t>(nchunks);
  *work_out = work;
  return BC_OK;
}

}  // namespace

void comm_mark_broken_on(bc_comm *c, Status st) {
  if (c->broken || !(st == BC_ERR_TIMEOUT || st == BC_ERR_TRANSPORT || st == BC_ERR_MPI || st == BC_ERR_PEER_DEAD))
    return;
  c->broken = true;
  c->broken_by = st;
  // The first line of the message, without its "code: " head and the trail.
  const std::string why = last_error_body(st);
  const size_t cut = why.find(" (at ");
  c->broken_why = why.substr(0, std::min(cut, why.find('\n')));
}

Status comm_run(bc_comm *c, const CollArgs &a) {
  CommLock lock;  // held to the end, past the pool's release
  std::unique_ptr<Operation> op;
  unsigned char *work = nullptr;
  void *pooled_work = nullptr;
  Status st = start(c, a, &lock, &op, &work, &pooled_work);
  if (st == BC_OK && op) {
    st = op->wait();
    comm_mark_broken_on(c, st);
    if (st == BC_OK) c->last_stage_seconds = op->stage_seconds();
    op.reset();  // gives its scratch back to the pool
    if (st == BC_OK && a.kind == CollKind::ReduceScatter) {
      const size_t elem = bc_dtype_size(a.dtype);
      unsigned char *from = work + c->rank * a.count * elem;
      // In place, rank r's block never overlaps block 0 unless r = 0 (equal).
      if (from != a.recvbuf) {
        if (c->cur_mem == BC_MEM_CUDA) st = cuda_copy(a.recvbuf, from, a.count * elem);
        else std::memmove(a.recvbuf, from, a.count * elem);
      }
    }
  }
  if (pooled_work) buffer_pool(c, c->cur_mem).release(pooled_work);
  BC_CHECK(st);
  return BC_OK;
}

namespace {

// The progress thread takes a device request: it needs the starting thread's
// device, and the cuda transport exchanges its descriptors over MPI.
Status prepare_threaded_device(bc_request *req) {
  BC_CHECK(progress_thread_check("device buffers (the cuda transport sends its descriptors over MPI)"));
  BC_CHECK(cuda_current_device(&req->device));
  return BC_OK;
}

}  // namespace

namespace {

// Starts a request's operation (at the call, or once its agreement passed):
// hands it to the progress thread or to the communicator's open requests.
Status launch(bc_comm *c, bc_request *req, bool agreed_before) {
  CommLock lock;  // declared first: a failed start's operation goes before it is released
  unsigned char *work = nullptr;
  Status st = start(c, req->args, &lock, &req->op, &work, nullptr, agreed_before);
  if (st == BC_OK && req->op && c->progress) {
    if (c->cur_mem == BC_MEM_CUDA && req->device < 0) st = prepare_threaded_device(req);
    if (st == BC_OK) {
      req->threaded = true;
      c->progress->submit(req);
    }
  }
  if (st != BC_OK) {
    req->op.reset();
    BC_CHECK(st);
  }
  if (req->op && !req->threaded) c->open.push_back(req);
  if (req->op && !req->counted) {
    req->counted = true;
    ++c->inflight;
  }
  return BC_OK;
}

// A request that failed outside its own bc_test/bc_wait: the failure is kept
// for them, without its "code: " head, which BC_FAIL adds back when raised.
void keep_failure(bc_request *req, Status st) {
  req->failed = true;
  req->status = st;
  req->error = last_error_body(st);
  clear_error();
}

}  // namespace

Status comm_start_allreduce(bc_comm *c, const CollArgs &a, bc_request **out) {
  if (!out) return BC_FAIL(BC_ERR_INVALID_ARG, "the request pointer is NULL");
  *out = nullptr;
  std::unique_ptr<bc_request> req(new bc_request);
  req->magic = kRequestMagic;
  req->comm = c;
  req->args = a;
  if (c && comm_check(c) == BC_OK && c->check_args) {
    // The agreement is the request's first phase (comm->agreeing): the call
    // returns at once, so calls on different communicators may be made in
    // different orders on different ranks. Any verdict but agreement,
    // including this rank's own refusal, comes from bc_test/bc_wait.
    BC_CHECK(refuse_if_broken(c));
    // Started by the progress thread: device buffers need this thread's device.
    bc_memtype_t mem = BC_MEM_HOST;
    if (c->thread_agrees && resolve_memtype(a.sendbuf, a.recvbuf, a.mem, &mem) == BC_OK && mem == BC_MEM_CUDA)
      BC_CHECK(prepare_threaded_device(req.get()));
    const Status own = check_own_args(c, a);
    std::lock_guard<std::mutex> agree(c->agree_mutex);
    BC_CHECK(ArgAgreement::post(c, a, own, &req->agreement));
    clear_error();
    CommLock lock;
    lock.take(c);
    req->counted = true;
    ++c->inflight;
    c->agreeing.push_back(req.get());
    c->agreeing_count.store(static_cast<int>(c->agreeing.size()), std::memory_order_release);
    if (c->thread_agrees) c->progress->wake();
    *out = req.release();
    return BC_OK;
  }
  BC_CHECK(launch(c, req.get(), false));
  *out = req.release();
  return BC_OK;
}

void comm_advance_agreements(bc_comm *c) {
  std::lock_guard<std::mutex> agree(c->agree_mutex);
  comm_advance_agreements_locked(c);
}

void comm_advance_agreements_locked(bc_comm *c) {
  while (!c->agreeing.empty()) {
    bc_request *req = c->agreeing.front();
    bool done = true;
    Status st = BC_OK;
    if (c->broken) {
      req->agreement->abandon();
      st = refuse_broken(c);
    } else {
      st = req->agreement->test(c, &done);
    }
    if (!done && st == BC_OK) return;
    c->agreeing.pop_front();
    c->agreeing_count.store(static_cast<int>(c->agreeing.size()), std::memory_order_release);
    req->agreement.reset();
    if (st == BC_OK) {
      st = launch(c, req, true);
    } else {
      CommLock lock;
      lock.take(c);
      comm_mark_broken_on(c, st);  // a round that timed out or failed in MPI
    }
    if (st != BC_OK) keep_failure(req, st);
  }
}

void comm_wait_pass(bc_comm *c, int64_t polls, int64_t spin) {
  if (!c->progress) comm_progress_open(c);
  if (polls % spin == 0) sched_yield();
}

void comm_progress_open(bc_comm *c) {
  for (bc_request *req : c->open) {
    if (req->failed || !req->op) continue;
    bool finished = false;  // a finished operation just says so again when its own bc_test comes
    const Status st = req->op->progress(&finished);
    if (st == BC_OK) continue;
    req->op->cancel();
    keep_failure(req, st);
  }
}

namespace {

// A request the progress thread works on: done once the thread has set its
// flag; bc_wait sleeps until then. Touches no transport.
Status threaded_progress(bc_request *req, bool block, bool *finished) {
  if (block && !req->done.load(std::memory_order_acquire)) {
    CommLock lock;
    lock.take(req->comm);
    req->comm->progress->wait_done(req, lock.get());
  }
  *finished = req->done.load(std::memory_order_acquire);
  if (!*finished || req->status == BC_OK) return BC_OK;
  // The thread's message, raised again on the caller's thread for bc_last_error().
  return BC_FAIL(req->status, "%s", req->error.c_str());
}

}  // namespace

Status request_progress(bc_request **reqp, bool block, bool *done) {
  if (!reqp || !*reqp) return BC_FAIL(BC_ERR_INVALID_ARG, "the request is NULL");
  bc_request *req = *reqp;
  if (req->magic != kRequestMagic) return BC_FAIL(BC_ERR_INVALID_ARG, "not a live request");
  if (req->comm && comm_check(req->comm) == BC_OK && req->comm->check_args) {
    // Its argument agreement may be pending: advance it (and those of earlier
    // calls) first. The progress thread may be advancing them too: the
    // request's phase is read under the agreement mutex.
    bc_comm *c = req->comm;
    const int64_t spin = c->params.get_int(ParamId::SpinCount);
    for (int64_t polls = 1;; ++polls) {
      bool pending = true;
      {
        // bc_test only tries: it may run inside MPI's progress loop (the
        // preload's requests) on a thread that holds the mutex already.
        std::unique_lock<std::mutex> agree(c->agree_mutex, std::defer_lock);
        if (block) agree.lock();
        else agree.try_lock();  // not had: still pending for now, its phase unread
        if (agree.owns_lock()) {
          comm_advance_agreements_locked(c);
          pending = req->agreement != nullptr;
        }
      }
      if (!pending) break;
      if (!block) {
        if (done) *done = false;
        return BC_OK;
      }
      comm_wait_pass(c, polls, spin);
    }
  }
  Status st = BC_OK;
  bool finished = true;
  if (req->threaded) {
    BC_CHECK(comm_check(req->comm));
    st = threaded_progress(req, block, &finished);
    if (finished && st == BC_OK) req->comm->last_stage_seconds = req->stage_seconds;
  } else if (req->failed) {
    // Failed while another call progressed it, or in its argument agreement.
    BC_CHECK(comm_check(req->comm));
    st = BC_FAIL(req->status, "%s", req->error.c_str());
    comm_mark_broken_on(req->comm, st);
  } else if (req->op) {
    BC_CHECK(comm_check(req->comm));
    st = block ? req->op->wait() : req->op->progress(&finished);
    if (block) finished = true;
    if (st != BC_OK || finished) {
      comm_mark_broken_on(req->comm, st);
      if (st == BC_OK) req->comm->last_stage_seconds = req->op->stage_seconds();
    }
  }
  if (st != BC_OK || finished) {
    if (req->counted) --req->comm->inflight;
    auto &open = req->comm->open;
    open.erase(std::remove(open.begin(), open.end(), req), open.end());
    req->magic = 0;
    delete req;
    *reqp = nullptr;
  }
  if (done) *done = finished;
  BC_CHECK(st);
  return BC_OK;
}

Status comm_describe(bc_comm *c, int64_t count, bc_dtype_t dtype, std::string *out) {
  BC_CHECK(comm_check(c));
  if (count < 0) return BC_FAIL(BC_ERR_INVALID_ARG, "count is negative");
  if (!dtype_is_valid(dtype)) return BC_FAIL(BC_ERR_INVALID_ARG, "unknown dtype %d", static_cast<int>(dtype));
  const size_t elem = bc_dtype_size(dtype);
  const PlanChoice choice = comm_choose(c, count * static_cast<int64_t>(elem));
  const int64_t nchunks = chunk_count(choice, count, elem);
  std::shared_ptr<const Program> prog;
  BC_CHECK(comm_plan(c, CollKind::Allreduce, false, block_count(count, nchunks, 0), choice, &prog));
  const Hierarchy &h = hierarchy_for(c, choice.shape);
  std::ostringstream os;
  os << c->topo.describe() << "choice for " << count * static_cast<int64_t>(elem) << " bytes: "
     << plan_choice_describe(choice) << " -> " << nchunks << " chunk(s)\n";
  if (!c->model.empty()) {
    const Prediction p = predict(h, c->model, choice, count * static_cast<int64_t>(elem));
    os << model_describe(c->model) << "\n";
    if (p.ok) os << "predicted: " << p.seconds * 1e6 << " us (first chunk " << p.fill * 1e6 << " us, then "
                 << p.per_chunk * 1e6 << " us per chunk)\n";
  } else {
    os << "cost model: off (BC_MODEL=" << c->params.get_str(ParamId::Model) << ")\n";
  }
  os << h.describe(block_count(count, nchunks, 0), elem);
  os << "transports:";
  for (auto &t : c->transports) os << " " << t->name();
  os << "\nrank " << c->rank << " " << describe_program(*prog, elem);
  *out = os.str();
  return BC_OK;
}

}  // namespace bc

bc_request::~bc_request() = default;
bc_comm::~bc_comm() { progress.reset(); }
