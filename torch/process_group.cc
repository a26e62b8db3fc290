// ProcessGroupBlueConnect: see process_group.h for the threading design and
// docs/TORCH.md for which call takes which path. This file holds the
// backend's bootstrap and lifetime: MPI's world and torch's rendezvous,
// shutdown, set_nonblocking, abort_job, the group's constructor (its MPI and
// BlueConnect communicators, made on its communication thread) and describe.
// The rest: comm_thread.cc (the thread and the engine), tensors.cc, work.cc,
// collectives_bc.cc, collectives_mpi.cc and p2p.cc.
#include "process_group_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace bctorch {

namespace {

// What a group whose ranks span nodes gets unless the user set BC_TRANSPORT or
// BC_UCX_WAIT: every peer over UCX (inside the node too, through UCX's own
// shared memory), and waits that sleep on UCX's event fd instead of yielding
// the core. DDP reduces its buckets on the group's thread while the backward
// pass computes on the same cores; a waiter that yields after every idle poll
// (BC_SPIN_COUNT auto with more ranks than cores, and the only choice while
// shm serves some peers: shm has no fd to sleep on) competed with the compute
// for the cores and came back late to a link that had gone idle. Measured on
// the simulated 2 nodes x 4 ranks at 250 Mbit/s (resnet18, docs/TORCH.md):
// DDP step 3.29 s with shm + yield against 2.17 s (Gloo 2.97-3.06 s); the
// three buckets at 29-67 % of the link against 69-89 %.
constexpr char kAcrossNodesOptions[] = "BC_TRANSPORT=ucx;BC_UCX_WAIT=event";

// Whether the communicator's ranks are on more than one node. Collective.
bool spans_nodes(MPI_Comm comm) {
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int node_size = 0, size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_size(comm, &size);
  MPI_Comm_free(&node);
  int all_one_node = node_size == size ? 1 : 0, every = 0;
  check_mpi(MPI_Allreduce(&all_one_node, &every, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  return every == 0;
}

}  // namespace

std::pair<int, int> mpi_world() {
  ensure_init();
  return {engine().world_rank, engine().world_size};
}

std::tuple<int, int, std::string, int> mpi_rendezvous() {
  ensure_init();
  Engine &e = engine();
  // Rank 0 offers its address and a port the kernel says is free now.
  char buf[512] = {0};
  const bool all_local = !spans_nodes(MPI_COMM_WORLD);
  int port = 0;
  if (e.world_rank == 0) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = 0;
      socklen_t len = sizeof a;
      if (::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
          ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
        port = ntohs(a.sin_port);
      ::close(fd);
    }
    if (all_local)
      std::snprintf(buf, sizeof buf, "127.0.0.1");
    else
      ::gethostname(buf, sizeof buf - 1);
  }
  check_mpi(MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  check_mpi(MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  if (port == 0) fail("rank 0 could not find a free TCP port for torch's rendezvous; set MASTER_PORT");
  return {e.world_rank, e.world_size, std::string(buf), port};
}

void shutdown() {
  Engine &e = engine();
  std::vector<CommThread *> threads;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    if (e.shut_down || !e.initialised) {
      e.shut_down = true;
      return;
    }
    e.shut_down = true;  // no new groups
    threads = e.threads;
  }
  for (CommThread *t : threads) t->stop();  // each drains what was queued
  std::lock_guard<std::mutex> lock(e.mu);
  for (auto &d : e.destroyers) d();
  e.destroyers.clear();
  bc_finalize();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (e.we_initialised_mpi && !finalized) MPI_Finalize();
}

uint64_t set_nonblocking(const std::string &mode) {
  Engine &e = engine();
  if (mode == "auto")
    e.nonblocking_mode = 0;
  else if (mode == "always")
    e.nonblocking_mode = 1;
  else if (mode == "never")
    e.nonblocking_mode = 2;
  else if (mode != "")
    fail("set_nonblocking: '" + mode + "' is none of auto, always, never");
  return e.nonblocking_started.load();
}

void abort_job(int code) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

ProcessGroupBlueConnect::ProcessGroupBlueConnect(const c10::intrusive_ptr<c10d::Store> & /*store*/, int rank, int size,
                                                 std::vector<int64_t> world_ranks, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size), comms_(new Comms()), timeout_(timeout) {
  ensure_init();
  Engine &e = engine();
  TORCH_CHECK(e.thread_level >= MPI_THREAD_SERIALIZED, "blueconnect: MPI gives thread level ", e.thread_level,
              "; the backend needs at least MPI_THREAD_SERIALIZED (MPI_THREAD_MULTIPLE for send/recv)");
  if (world_ranks.empty()) {
    TORCH_CHECK(size == e.world_size, "blueconnect: world_size ", size, " given to init_process_group disagrees with "
                "MPI's world size ", e.world_size, " (launch with mpirun -np ", size, ", or drop world_size)");
    TORCH_CHECK(rank == e.world_rank, "blueconnect: rank ", rank, " given to init_process_group disagrees with "
                "this process's MPI rank ", e.world_rank, " (drop rank, or unset RANK)");
  } else {
    TORCH_CHECK(static_cast<int>(world_ranks.size()) == size, "blueconnect: the group has ", size, " ranks but ",
                world_ranks.size(), " global ranks were given");
    TORCH_CHECK(world_ranks[rank] == e.world_rank, "blueconnect: group rank ", rank, " is global rank ",
                world_ranks[rank], " for torch but this process is MPI rank ", e.world_rank);
  }
  Comms *c = comms_;
  c->thread = e.thread_for_group();
  // The group's timeout for the engine, and a progress thread that advances
  // the non-blocking all-reduces while the caller computes.
  std::string options =
      "BC_TIMEOUT=" + std::to_string(std::max<int64_t>(1000, std::min<int64_t>(timeout.count(), 24LL * 3600 * 1000))) +
      "ms;BC_PROGRESS_THREAD=1";
  // Across nodes, waits that sleep on the network's event fd (kAcrossNodesOptions).
  const bool user_chose_wait = std::getenv("BC_TRANSPORT") || std::getenv("BC_UCX_WAIT");
  // On the group's thread, like every later call on these communicators.
  c->thread->run_sync([c, world_ranks, options, user_chose_wait] {
    if (world_ranks.empty()) {
      check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &c->coll), "MPI_Comm_dup");
    } else {
      MPI_Group world_group, group;
      std::vector<int> ranks(world_ranks.begin(), world_ranks.end());
      check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group");
      check_mpi(MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &group), "MPI_Group_incl");
      // Collective over the group's members only: ranks outside it never call.
      int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, 0x6263, &c->coll);
      MPI_Group_free(&group);
      MPI_Group_free(&world_group);
      check_mpi(rc, "MPI_Comm_create_group");
    }
    check_mpi(MPI_Comm_dup(c->coll, &c->p2p), "MPI_Comm_dup");
    MPI_Comm_rank(c->coll, &c->rank);
    MPI_Comm_size(c->coll, &c->size);
    std::string opts = options;
    if (!user_chose_wait && spans_nodes(c->coll)) opts += std::string(";") + kAcrossNodesOptions;
    check_bc(bc_comm_create_with(c->coll, opts.c_str(), &c->bc), "bc_comm_create");
  });
  TORCH_CHECK(comms_->rank == rank && comms_->size == size, "blueconnect: the MPI communicator has rank ", comms_->rank,
              " of ", comms_->size, ", torch expects ", rank, " of ", size);
  std::lock_guard<std::mutex> lock(e.mu);
  e.destroyers.push_back([c] {
    if (c->bc) bc_comm_destroy(&c->bc);
    if (c->p2p != MPI_COMM_NULL) MPI_Comm_free(&c->p2p);
    if (c->coll != MPI_COMM_NULL) MPI_Comm_free(&c->coll);
    delete c;
  });
}

// The communicators stay alive until shutdown (freeing them is collective,
// and Python drops groups at arbitrary times).
ProcessGroupBlueConnect::~ProcessGroupBlueConnect() = default;

int ProcessGroupBlueConnect::learning_calls(int64_t bytes) {
  int calls = 0;
  bc_comm_t comm = comms_->bc;
  comms_->thread->run_sync([&] { check_bc(bc_comm_learning_calls(comm, bytes, &calls), "learning_calls"); });
  return calls;
}

std::string ProcessGroupBlueConnect::describe(int64_t count) {
  std::string out;
  bc_comm_t comm = comms_->bc;
  comms_->thread->run_sync([&] {
    size_t needed = 0;
    bc_comm_describe(comm, count, BC_FLOAT32, nullptr, 0, &needed);
    std::vector<char> buf(needed + 1);
    check_bc(bc_comm_describe(comm, count, BC_FLOAT32, buf.data(), buf.size(), &needed), "describe");
    out = buf.data();
  });
  return out;
}

}  // namespace bctorch
