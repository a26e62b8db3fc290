// A communicator's life: creation (topology, transports, liveness, cost model,
// progress thread) and destruction; what each transport is told at creation;
// writing the detected levels as a BC_TOPO_FILE.
#include "api/comm.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sched.h>
#include <unistd.h>

#include "api/progress_thread.h"
#include "core/log.h"
#include "core/timeline.h"
#include "core/wait_policy.h"
#include "sched/liveness.h"
#include "topo/detect.h"

namespace bc {
namespace {

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

}  // namespace

// progress_thread_allowed at this process's MPI thread level.
Status progress_thread_check(const char *mpi_user) {
  int level = MPI_THREAD_SINGLE;
  BC_MPI_CHECK(MPI_Query_thread(&level));
  BC_CHECK(progress_thread_allowed(mpi_user, level));
  return BC_OK;
}

int first_mpi_peer(const bc_comm *c) {
  for (int r = 0; r < c->size; ++r)
    if (r != c->rank && std::strcmp(c->peer_transport[r]->name(), "mpi") == 0) return r;
  return -1;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

namespace {

// Last step of the creation: the thread starts once everything it uses is up.
Status progress_setup(bc_comm *c) {
  if (first_mpi_peer(c) >= 0)
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

// BC_SPIN_COUNT for this communicator's waiters. The topology's node CPUs are
// the same on every rank of a node, so the ranks that wait on each other
// there agree; ranks on other nodes may choose differently, which is right:
// their cores are their own.
void spin_count_setup(bc_comm *c) {
  const int64_t set = c->params.get_int(ParamId::SpinCount);
  if (set > 0) {
    c->spin_count = set;
    c->spin_why = "BC_SPIN_COUNT=" + std::to_string(set);
    return;
  }
  int on_node = 0;
  for (int64_t n : c->topo.node_of) on_node += n == c->topo.node_of[c->rank] ? 1 : 0;
  const int cpus = c->topo.node_cpus.empty() ? 0 : c->topo.node_cpus[c->rank];
  c->spin_count = auto_spin_count(on_node, cpus);
  c->spin_why = "BC_SPIN_COUNT=auto: " + std::to_string(on_node) + " rank(s) on this node, " +
                (cpus > 0 ? std::to_string(cpus) + " CPU(s) between them" : "their CPUs unknown") +
                (c->spin_count == kSpinCountShared ? ": they take turns, so a waiter yields at once"
                                                   : ": a waiter spins, then yields");
}

// Where a creation's time goes, phase by phase, for the INIT log line: each
// phase may wait for the slowest rank, so the phases say which step to make
// cheaper (a later communicator's budget is a few milliseconds).
class PhaseTimes {
 public:
  PhaseTimes(const char *made_by, double made_ms) : last_(std::chrono::steady_clock::now()) {
    add(made_by, made_ms);
  }
  void mark(const char *phase) {
    const auto now = std::chrono::steady_clock::now();
    add(phase, std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }
  double total_ms() const { return total_ms_; }
  const std::string &text() const { return text_; }

 private:
  void add(const char *phase, double ms) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.1f", text_.empty() ? "" : ", ", phase, ms);
    text_ += buf;
    total_ms_ += ms;
  }
  std::chrono::steady_clock::time_point last_;
  double total_ms_ = 0;
  std::string text_;
};

// Completes the background duplicate of mpi_close, if one was started; keeps
// it when a transport needs the quiesce. Safe on a failed creation too: every
// rank posted it at the same point, so it completes.
Status finish_close_dup(bc_comm *c, bool keep) {
  if (c->mpi_close_dup == MPI_REQUEST_NULL) return BC_OK;
  BC_MPI_CHECK(MPI_Wait(&c->mpi_close_dup, MPI_STATUS_IGNORE));
  if (keep) c->mpi_close = c->mpi_close_pending;
  else BC_MPI_CHECK(MPI_Comm_free(&c->mpi_close_pending));
  c->mpi_close_pending = MPI_COMM_NULL;
  return BC_OK;
}

// made_by, made_ms: what made the private communicator and how long it took
// (for the INIT log line).
Status comm_setup(bc_comm *c, const char *made_by, double made_ms) {
  PhaseTimes phases(made_by, made_ms);
  BC_CHECK(topo_detect(c->mpi, c->params, &c->topo));
  phases.mark("topology");
  spin_count_setup(c);
  if (c->rank == 0) BC_INFO(Sched, "waiting: %lld idle poll(s) per yield (%s)", static_cast<long long>(c->spin_count),
                            c->spin_why.c_str());
  c->hier = Hierarchy::build(c->topo);
  c->hier_leader = Hierarchy::build(c->topo, Hierarchy::Shape::Leader);
  c->hier_flat = Hierarchy::build(c->topo, Hierarchy::Shape::Flat);
  BC_CHECK(algo_parse(c->params.get_str(ParamId::Algo), &c->algo));
  BC_CHECK(plan_rules_parse(c->params.get_str(ParamId::Plan), &c->plan_rules));
  phases.mark("hierarchies");
  // Across nodes UCX carries a stage and destroy needs mpi_close. A blocking
  // MPI_Comm_dup there took 4-5 ms at np 8 on the simulated hosts, a sixth of
  // a later communicator's creation; started now, it completes while the
  // collectives below run. Every rank sees the same node_of, so every rank
  // posts it, or none.
  if (spans_nodes(c)) BC_MPI_CHECK(MPI_Comm_idup(c->mpi, &c->mpi_close_pending, &c->mpi_close_dup));
  BC_CHECK(agree_status(c->mpi, select_transports(c), "transport selection"));
  bool quiesce = false;
  for (auto &t : c->transports) quiesce = quiesce || t->needs_quiesce();  // the same on every rank
  // (UCX on one node, BC_TRANSPORT=ucx: no duplicate was started.)
  if (quiesce && c->mpi_close_dup == MPI_REQUEST_NULL) BC_MPI_CHECK(MPI_Comm_dup(c->mpi, &c->mpi_close));
  std::string names;
  for (auto &t : c->transports) names += std::string(names.empty() ? "" : ",") + t->name();
  phases.mark(("transports (" + names + ")").c_str());
  // Its status is the same on every rank already (it fails only where MPI does).
  BC_CHECK(Liveness::create(transport_setup(c), &c->liveness));
  phases.mark("liveness");
  if (c->rank == 0 && log_enabled(LogLevel::Info, LogSys::Plan))
    BC_INFO(Plan, "%s", c->hier.describe(c->size * 1024, 4).c_str());
  // On one node the model is off and model_setup is local: no agreement needed.
  if (model_is_local(c)) BC_CHECK(model_setup(c));
  else BC_CHECK(agree_status(c->mpi, model_setup(c), "cost model"));
  phases.mark("cost model");
  // Collective where it may learn (the cache's key and text): the same on every rank.
  if (!c->model.empty() || !c->params.get_str(ParamId::PlanCandidates).empty()) {
    BC_CHECK(agree_status(c->mpi, plan_learning_setup(c), "plan learning"));
    phases.mark("plan learning");
  }
  // Before the progress thread starts: from then on this thread is not the
  // only one that may call MPI.
  BC_CHECK(finish_close_dup(c, quiesce));
  phases.mark("closing communicator");
  if (c->params.get_int(ParamId::ProgressThread)) {
    BC_CHECK(agree_status(c->mpi, progress_setup(c), "BC_PROGRESS_THREAD"));
    phases.mark("progress thread");
  }
  BC_CHECK(comm_timeline_setup(c));
  if (c->rank == 0 && log_enabled(LogLevel::Info, LogSys::Init))
    BC_INFO(Init, "communicator of %d ranks created in %.1f ms (rank 0): %s", c->size, phases.total_ms(),
            phases.text().c_str());
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

Status comm_create(MPI_Comm comm, const char *options, bc_comm **out) {
  if (!out) return BC_FAIL(BC_ERR_INVALID_ARG, "the output pointer is NULL");
  *out = nullptr;
  if (!api_initialized()) return BC_FAIL(BC_ERR_NOT_INITIALIZED, "call bc_init before bc_comm_create");
  if (comm == MPI_COMM_NULL) return BC_FAIL(BC_ERR_INVALID_ARG, "the MPI communicator is MPI_COMM_NULL");
  int inter = 0;
  BC_MPI_CHECK(MPI_Comm_test_inter(comm, &inter));
  if (inter) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "intercommunicators are not supported");
  ParamSet params = global_params();
  // Bad options fail on every rank alike (every rank must pass the same string).
  BC_CHECK(params.apply_overrides(options));
  const auto t0 = std::chrono::steady_clock::now();
  MPI_Comm dup = MPI_COMM_NULL;
  BC_MPI_CHECK(MPI_Comm_dup(comm, &dup));
  return comm_create_owned(dup, params, "private MPI_Comm_dup", ms_since(t0), nullptr, out);
}

Status comm_create_owned(MPI_Comm owned, const ParamSet &params, const char *made_by, double made_ms,
                         const CostModel *inherit, bc_comm **out) {
  *out = nullptr;
  std::unique_ptr<bc_comm> c(new bc_comm);
  c->params = params;
  c->check_args = c->params.get_int(ParamId::CheckArgs) != 0;
  c->mpi = owned;
  if (inherit) c->inherited_model = *inherit;
  Status st = private_comm_setup(c.get());
  if (st == BC_OK) st = comm_setup(c.get(), made_by, made_ms);
  c->inherited_model = CostModel();  // for the creation only
  if (st != BC_OK) {
    trail(st, __FILE__, __LINE__);
    c->progress.reset();
    c->transports.clear();
    finish_close_dup(c.get(), false);
    if (c->mpi_close != MPI_COMM_NULL) BC_MPI_WARN(MPI_Comm_free(&c->mpi_close));
    BC_MPI_WARN(MPI_Comm_free(&c->mpi));
    return st;
  }
  c->magic = kCommMagic;
  comm_live_add(c.get());
  *out = c.release();
  return BC_OK;
}

namespace {

// A destroy's quiesce (Transport::quiesce_start): every rank polls its
// transports until its own part is done, then joins a non-blocking barrier and
// keeps polling until every rank has joined. So no rank stops serving the
// transports while a peer's flush still needs it (without this, the last rank
// to finish waited out UCX's flush bound on every destroy: 100 ms of a later
// communicator's 135 ms on layout a). Collective, as bc_comm_destroy is
// documented to be; a late peer is waited for (BC_TIMEOUT), a dead one ends
// the wait with a warning that names it.
//
// The barrier runs on c->mpi_close, which carries nothing else, and every
// rank posts it, a broken communicator's too: on c->mpi a barrier paired with
// argument agreements that timed-out ranks had abandoned (mpi_np5_ucx: every
// rank waited out BC_TIMEOUT), and a rank that skipped it let MPI free and
// reuse the context id while its peers' barrier messages were on the way
// (Open MPI crashed in the next MPI_Comm_dup). Returns false when the wait was
// given up: the barrier stays posted (a collective request cannot be
// cancelled) and mpi_close must not be freed, so that its context id is never
// reused under it.
bool quiesce_transports(bc_comm *c) {
  if (c->mpi_close == MPI_COMM_NULL) return true;  // made at creation iff a transport needs the quiesce
  std::vector<Transport *> quiescing;
  for (auto &t : c->transports)
    if (t->needs_quiesce()) quiescing.push_back(t.get());
  MPI_Request barrier = MPI_REQUEST_NULL;
  if (c->liveness && !c->liveness->dead().empty()) {  // posted for the living peers' sake, not waited for
    BC_MPI_WARN(MPI_Ibarrier(c->mpi_close, &barrier));
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (Transport *t : quiescing) t->quiesce_start();
  const bool checks = c->liveness && c->liveness->enabled();
  WaitPolicy wait(c->spin_count, c->params.get_int(ParamId::Timeout),
                  checks ? c->liveness->interval_ms() : 0);
  bool joined = false;
  auto give_up = [&]() {
    if (!joined) BC_MPI_WARN(MPI_Ibarrier(c->mpi_close, &barrier));
    return false;
  };
  for (;;) {
    bool mine_done = true;
    for (Transport *t : quiescing) mine_done = t->quiesce_poll() && mine_done;
    if (mine_done && !joined) {
      if (MPI_Ibarrier(c->mpi_close, &barrier) != MPI_SUCCESS) {
        BC_WARN(Transport, "destroy: MPI_Ibarrier failed; leaving without waiting for the peers' flushes");
        return false;
      }
      joined = true;
    }
    if (joined) {
      int complete = 0;
      if (MPI_Test(&barrier, &complete, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        BC_WARN(Transport, "destroy: MPI_Test on the closing barrier failed; leaving without waiting");
        return false;
      }
      if (complete) break;
    }
    if (!wait.idle()) continue;
    wait.rest();
    if (wait.timed_out()) {
      BC_WARN(Transport, "destroy: not every rank reached bc_comm_destroy within %lld ms (BC_TIMEOUT); leaving "
              "without waiting for them", static_cast<long long>(c->params.get_int(ParamId::Timeout)));
      return give_up();
    }
    if (checks && wait.liveness_due() && c->liveness->check()) {
      const std::vector<int> dead = c->liveness->dead();
      BC_WARN(Transport, "destroy: %s died (%s) before reaching bc_comm_destroy; the other ranks leave without it",
              c->liveness->who(dead[0]).c_str(), c->liveness->how(dead[0]));
      return give_up();
    }
  }
  BC_DEBUGLOG(Transport, "destroy: rank %d quiesced its transports in %.1f ms", c->rank, ms_since(t0));
  return true;
}

}  // namespace

Status comm_destroy(bc_comm *comm) {
  BC_CHECK(comm_check(comm));
  if (comm->inflight > 0)
    return BC_FAIL(BC_ERR_INVALID_ARG, "%d non-blocking operation(s) still in flight; complete them with bc_wait first",
                   comm->inflight);
  comm_live_remove(comm);
  comm->magic = 0;
  const auto t0 = std::chrono::steady_clock::now();
  comm->progress.reset();  // joins the thread: nothing uses the transports after this
  const bool quiesced = quiesce_transports(comm);
  comm->dev_transports.clear();  // they wrap the host transports: first
  comm->dev_pool.clear();
  comm->host_pool.clear();
  // A communicator that never failed leaves its shm node setup to the next one
  // over the same processes (transports/shm/shm_reuse.cc).
  transports_retire(&comm->transports, comm->broken_by == BC_OK);
  comm->liveness.reset();  // its TCP watch connections stay with the process until bc_finalize
  // Local in Open MPI 4.1 (no synchronisation): safe after a peer died.
  const double transports_ms = ms_since(t0);
  if (comm->mpi_close != MPI_COMM_NULL && quiesced) BC_MPI_WARN(MPI_Comm_free(&comm->mpi_close));
  const int rc = comm->mpi != MPI_COMM_NULL ? MPI_Comm_free(&comm->mpi) : MPI_SUCCESS;
  if (comm->rank == 0 && log_enabled(LogLevel::Info, LogSys::Init))
    BC_INFO(Init, "communicator of %d ranks destroyed in %.1f ms (rank 0): transports %.1f", comm->size,
            ms_since(t0), transports_ms);
  delete comm;
  BC_MPI_CHECK(rc);
  return BC_OK;
}

Status comm_write_topology(bc_comm *c, const char *path) {
  BC_CHECK(comm_check(c));
  if (!path || !*path) return BC_FAIL(BC_ERR_INVALID_ARG, "path is NULL or empty");
  // The name BC_TOPO_FILE matches lines against: gethostname's.
  constexpr int kHostLen = 256;
  char mine[kHostLen] = "";
  gethostname(mine, kHostLen - 1);
  std::vector<char> all(static_cast<size_t>(kHostLen) * static_cast<size_t>(c->size));
  BC_MPI_CHECK(MPI_Allgather(mine, kHostLen, MPI_CHAR, all.data(), kHostLen, MPI_CHAR, c->mpi));
  Status st = BC_OK;
  if (c->rank == 0) {
    std::vector<std::string> hosts;
    for (int r = 0; r < c->size; ++r) hosts.emplace_back(all.data() + static_cast<size_t>(r) * kHostLen);
    std::string text;
    st = topo_to_file(c->topo, hosts, &text);
    if (st == BC_OK) {
      std::FILE *f = std::fopen(path, "w");
      const bool written = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
      const bool closed = f && std::fclose(f) == 0;
      if (!written || !closed)
        st = BC_FAIL(BC_ERR_INVALID_ARG, "cannot write the topology to %s: %s", path, std::strerror(errno));
    }
  }
  return agree_status(c->mpi, st, "writing the topology");
}

}  // namespace bc

bc_comm::~bc_comm() { progress.reset(); }
