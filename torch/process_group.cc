// ProcessGroupBlueConnect: see process_group.h for the threading design and
// docs/TORCH.md for which call takes which path. This file holds the
// backend's bootstrap and lifetime: MPI's world and torch's rendezvous,
// shutdown, set_nonblocking, abort_job, the group's constructor (its MPI and
// BlueConnect communicators, made on its communication thread) and describe.
// The rest: comm_thread.cc (the thread and the engine), tensors.cc, work.cc.
// Below: the collectives, on BlueConnect's engine and on MPI, and send/recv.
#include "process_group_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace bctorch {

std::pair<int, int> mpi_world() {
  ensure_init();
  return {engine().world_rank, engine().world_size};
}

std::tuple<int, int, std::string, int> mpi_rendezvous() {
  ensure_init();
  Engine &e = engine();
  // Rank 0 offers its address and a port the kernel says is free now.
  char buf[512] = {0};
  int all_local = 0;
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  int mine = node_size == e.world_size ? 1 : 0;
  check_mpi(MPI_Allreduce(&mine, &all_local, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
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
  // On the group's thread, like every later call on these communicators.
  c->thread->run_sync([c, world_ranks, options] {
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
    check_bc(bc_comm_create_with(c->coll, options.c_str(), &c->bc), "bc_comm_create");
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

// --- BlueConnect engine ----------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::allreduce(std::vector<at::Tensor> &tensors,
                                                                  const c10d::AllreduceOptions &opts) {
  check_one(tensors, "allreduce");
  bc_op_t op = to_bc_op(opts.reduceOp, "allreduce");
  bc_dtype_t dt = to_bc_dtype(tensors[0].scalar_type(), op, "allreduce");
  auto work = make_work(c10d::OpType::ALLREDUCE, "allreduce", tensors, timeout_);
  work->on_engine();
  at::Tensor t = tensors[0];
  bc_comm_t comm = comms_->bc;
  work->body_ = [t, dt, op, comm] {
    if (t.numel() == 0) return;
    check_bc(bc_allreduce(BC_IN_PLACE, t.data_ptr(), t.numel(), dt, op, comm), "allreduce");
  };
  // Behind other calls: non-blocking, several all-reduces (DDP's buckets) in
  // flight at once, moved by the communicator's progress thread.
  work->istart_ = [t, dt, op, comm]() -> bc_request_t {
    if (t.numel() == 0) return nullptr;
    bc_request_t req = nullptr;
    check_bc(bc_iallreduce(BC_IN_PLACE, t.data_ptr(), t.numel(), dt, op, comm, &req), "allreduce");
    return req;
  };
  return enqueue(*comms_->thread, work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::allreduce_coalesced(
    std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) {
  TORCH_CHECK(!tensors.empty(), "blueconnect: allreduce_coalesced: no tensors");
  bc_op_t op = to_bc_op(opts.reduceOp, "allreduce_coalesced");
  for (auto &t : tensors) {
    check_tensor(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "blueconnect: allreduce_coalesced: all tensors need "
                "one dtype (", tensors[0].scalar_type(), " and ", t.scalar_type(), ")");
  }
  bc_dtype_t dt = to_bc_dtype(tensors[0].scalar_type(), op, "allreduce_coalesced");
  auto work = make_work(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, timeout_);
  work->on_engine();
  bc_comm_t comm = comms_->bc;
  std::vector<at::Tensor> ts = tensors;
  work->body_ = [ts, dt, op, comm] {
    at::Tensor flat = pack(ts);
    int64_t count = flat.numel() / static_cast<int64_t>(ts[0].element_size());
    if (count == 0) return;
    check_bc(bc_allreduce(BC_IN_PLACE, flat.data_ptr(), count, dt, op, comm), "allreduce_coalesced");
    unpack(ptr(flat), ts);
  };
  return enqueue(*comms_->thread, work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::reduce(std::vector<at::Tensor> &tensors,
                                                               const c10d::ReduceOptions &opts) {
  check_one(tensors, "reduce");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "blueconnect: reduce: root ", opts.rootRank,
              " is not a rank of the group");
  bc_op_t op = to_bc_op(opts.reduceOp, "reduce");
  bc_dtype_t dt = to_bc_dtype(tensors[0].scalar_type(), op, "reduce");
  auto work = make_work(c10d::OpType::REDUCE, "reduce", tensors, timeout_);
  work->on_engine();
  at::Tensor t = tensors[0];
  bc_comm_t comm = comms_->bc;
  bool root = opts.rootRank == rank_;
  // An all-reduce into scratch: every dtype and op the engine has, the same
  // bits as allreduce; only the root keeps the result.
  work->body_ = [t, dt, op, comm, root] {
    if (t.numel() == 0) return;
    at::Tensor scratch = at::empty_like(t);
    check_bc(bc_allreduce(t.data_ptr(), scratch.data_ptr(), t.numel(), dt, op, comm), "reduce");
    if (root) std::memcpy(ptr(t), ptr(scratch), nbytes(t));
  };
  return enqueue(*comms_->thread, work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::_allgather_base(at::Tensor &output, at::Tensor &input,
                                                                        const c10d::AllgatherOptions &) {
  check_tensor(input, "_allgather_base");
  check_tensor(output, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "blueconnect: _allgather_base: dtypes differ");
  TORCH_CHECK(output.numel() == input.numel() * size_, "blueconnect: _allgather_base: the output has ",
              output.numel(), " elements, expected ", input.numel() * size_, " (group size x input)");
  auto work = make_work(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output}, timeout_);
  work->on_engine();
  work->keep_ = {input};
  bc_comm_t comm = comms_->bc;
  at::Tensor in = input, out = output;
  int rank = rank_;
  // Bytes: no reduction, so every dtype goes.
  work->body_ = [in, out, comm, rank] {
    size_t n = nbytes(in);
    if (n == 0) return;
    const void *send = ptr(in) == ptr(out) + rank * n ? BC_IN_PLACE : in.data_ptr();
    check_bc(bc_allgather(send, out.data_ptr(), static_cast<int64_t>(n), BC_UINT8, comm), "_allgather_base");
  };
  return enqueue(*comms_->thread, work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                                                  std::vector<at::Tensor> &inputs,
                                                                  const c10d::AllgatherOptions &) {
  check_one(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_, "blueconnect: allgather: expects ",
              size_, " output tensors (one per rank)");
  for (auto &o : outputs[0]) check_same(inputs[0], o, "allgather");
  auto work = make_work(c10d::OpType::ALLGATHER, "allgather", outputs[0], timeout_);
  work->on_engine();
  work->keep_ = inputs;
  bc_comm_t comm = comms_->bc;
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs = outputs[0];
  work->body_ = [in, outs, comm] {
    size_t n = nbytes(in);
    if (n == 0) return;
    at::Tensor flat = at::empty({static_cast<int64_t>(n * outs.size())}, at::kByte);
    check_bc(bc_allgather(in.data_ptr(), flat.data_ptr(), static_cast<int64_t>(n), BC_UINT8, comm), "allgather");
    unpack(ptr(flat), outs);
  };
  return enqueue(*comms_->thread, work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::allgather_coalesced(
    std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "blueconnect: allgather_coalesced: expects ", size_,
              " output lists (one per rank)");
  for (auto &t : inputs) check_tensor(t, "allgather_coalesced");
  std::vector<at::Tensor> flat_outs;
  for (auto &list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "blueconnect: allgather_coalesced: each output list needs ",
                inputs.size(), " tensors");
    for (size_t i = 0; i < list.size(); ++i) check_same(inputs[i], list[i], "allgather_coalesced");
    flat_outs.insert(flat_outs.end(), list.begin(), list.end());
  }
  auto work = make_work(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", flat_outs, timeout_);
  work->on_engine();
  work->keep_ = inputs;
  bc_comm_t comm = comms_->bc;
  std::vector<at::Tensor> ins = inputs;
  int p = size_;
  work->body_ = [ins, flat_outs, comm, p] {
    at::Tensor send = pack(ins);
    int64_t n = send.numel();
    if (n == 0) return;
    at::Tensor recv = at::empty({n * p}, at::kByte);
    check_bc(bc_allgather(send.data_ptr(), recv.data_ptr(), n, BC_UINT8, comm), "allgather_coalesced");
    unpack(ptr(recv), flat_outs);  // rank-major, as packed
  };
  return enqueue(*comms_->thread, work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                                                             const c10d::ReduceScatterOptions &opts) {
  check_tensor(input, "_reduce_scatter_base");
  check_tensor(output, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "blueconnect: _reduce_scatter_base: dtypes differ");
  TORCH_CHECK(input.numel() == output.numel() * size_, "blueconnect: _reduce_scatter_base: the input has ",
              input.numel(), " elements, expected ", output.numel() * size_, " (group size x output)");
  bc_op_t op = to_bc_op(opts.reduceOp, "_reduce_scatter_base");
  bc_dtype_t dt = to_bc_dtype(input.scalar_type(), op, "_reduce_scatter_base");
  auto work = make_work(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output}, timeout_);
  work->on_engine();
  work->keep_ = {input};
  bc_comm_t comm = comms_->bc;
  at::Tensor in = input, out = output;
  work->body_ = [in, out, dt, op, comm] {
    if (out.numel() == 0) return;
    check_bc(bc_reduce_scatter(in.data_ptr(), out.data_ptr(), out.numel(), dt, op, comm), "_reduce_scatter_base");
  };
  return enqueue(*comms_->thread, work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::reduce_scatter(std::vector<at::Tensor> &outputs,
                                                                       std::vector<std::vector<at::Tensor>> &inputs,
                                                                       const c10d::ReduceScatterOptions &opts) {
  check_one(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "blueconnect: reduce_scatter: expects ",
              size_, " input tensors (one per rank)");
  for (auto &t : inputs[0]) check_same(outputs[0], t, "reduce_scatter");
  bc_op_t op = to_bc_op(opts.reduceOp, "reduce_scatter");
  bc_dtype_t dt = to_bc_dtype(outputs[0].scalar_type(), op, "reduce_scatter");
  auto work = make_work(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs, timeout_);
  work->on_engine();
  work->keep_ = inputs[0];
  bc_comm_t comm = comms_->bc;
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins = inputs[0];
  work->body_ = [out, ins, dt, op, comm] {
    if (out.numel() == 0) return;
    at::Tensor flat = pack(ins);
    check_bc(bc_reduce_scatter(flat.data_ptr(), out.data_ptr(), out.numel(), dt, op, comm), "reduce_scatter");
  };
  return enqueue(*comms_->thread, work);
}

// --- MPI -------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::broadcast(std::vector<at::Tensor> &tensors,
                                                                  const c10d::BroadcastOptions &opts) {
  check_one(tensors, "broadcast");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "blueconnect: broadcast: root ", opts.rootRank,
              " is not a rank of the group");
  auto work = make_work(c10d::OpType::BROADCAST, "broadcast", tensors, timeout_);
  at::Tensor t = tensors[0];
  MPI_Comm comm = comms_->coll;
  int root = static_cast<int>(opts.rootRank);
  work->body_ = [t, comm, root] {
    size_t n = nbytes(t);
    constexpr size_t kPiece = size_t(1) << 30;
    for (size_t off = 0; off < n; off += kPiece) {
      int len = static_cast<int>(std::min(kPiece, n - off));
      check_mpi(MPI_Bcast(ptr(t) + off, len, MPI_BYTE, root, comm), "broadcast");
    }
  };
  return enqueue(*comms_->thread, work);
}

std::vector<at::Tensor> ProcessGroupBlueConnect::root_list(std::vector<std::vector<at::Tensor>> &lists,
                                                           const at::Tensor &like, int64_t root_rank,
                                                           const char *what, const char *kind) {
  TORCH_CHECK(root_rank >= 0 && root_rank < size_, "blueconnect: ", what, ": root ", root_rank,
              " is not a rank of the group");
  if (root_rank != rank_) {
    TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "blueconnect: ", what,
                ": only the root passes ", kind, " tensors");
    return {};
  }
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == size_, "blueconnect: ", what,
              ": the root needs ", size_, " ", kind, " tensors");
  for (auto &t : lists[0]) check_same(like, t, what);
  return lists[0];
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::gather(std::vector<std::vector<at::Tensor>> &outputs,
                                                               std::vector<at::Tensor> &inputs,
                                                               const c10d::GatherOptions &opts) {
  check_one(inputs, "gather");
  const std::vector<at::Tensor> outs = root_list(outputs, inputs[0], opts.rootRank, "gather", "output");
  bool root = opts.rootRank == rank_;
  auto work = make_work(c10d::OpType::GATHER, "gather", outs, timeout_);
  work->keep_ = inputs;
  at::Tensor in = inputs[0];
  MPI_Comm comm = comms_->coll;
  int r = static_cast<int>(opts.rootRank), p = size_;
  work->body_ = [in, outs, comm, r, p, root] {
    int n = to_int(nbytes(in) * p, "gather");
    at::Tensor flat = at::empty({root ? n : 0}, at::kByte);
    check_mpi(MPI_Gather(in.data_ptr(), static_cast<int>(nbytes(in)), MPI_BYTE, root ? flat.data_ptr() : nullptr,
                         static_cast<int>(nbytes(in)), MPI_BYTE, r, comm), "gather");
    if (root) unpack(ptr(flat), outs);
  };
  return enqueue(*comms_->thread, work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::scatter(std::vector<at::Tensor> &outputs,
                                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                                const c10d::ScatterOptions &opts) {
  check_one(outputs, "scatter");
  const std::vector<at::Tensor> ins = root_list(inputs, outputs[0], opts.rootRank, "scatter", "input");
  bool root = opts.rootRank == rank_;
  auto work = make_work(c10d::OpType::SCATTER, "scatter", outputs, timeout_);
  work->keep_ = ins;
  at::Tensor out = outputs[0];
  MPI_Comm comm = comms_->coll;
  int r = static_cast<int>(opts.rootRank), p = size_;
  work->body_ = [out, ins, comm, r, p, root] {
    to_int(nbytes(out) * p, "scatter");
    at::Tensor flat = root ? pack(ins) : at::empty({0}, at::kByte);
    int n = static_cast<int>(nbytes(out));
    check_mpi(MPI_Scatter(root ? flat.data_ptr() : nullptr, n, MPI_BYTE, out.data_ptr(), n, MPI_BYTE, r, comm),
              "scatter");
  };
  return enqueue(*comms_->thread, work);
}

namespace {
// Byte counts and displacements for MPI_Alltoallv from dim-0 split sizes.
void splits_to_counts(const at::Tensor &t, const std::vector<int64_t> &splits, int p, std::vector<int> &counts,
                      std::vector<int> &displs, const char *what) {
  size_t row = t.dim() == 0 || t.size(0) == 0 ? 0 : nbytes(t) / t.size(0);
  counts.assign(p, 0);
  displs.assign(p, 0);
  if (splits.empty()) {
    TORCH_CHECK(t.dim() > 0 && t.size(0) % p == 0, "blueconnect: ", what, ": dim 0 (", t.dim() ? t.size(0) : 0,
                ") is not divisible by the group size ", p);
    for (int i = 0; i < p; ++i) counts[i] = to_int(row * (t.size(0) / p), what);
  } else {
    TORCH_CHECK(static_cast<int>(splits.size()) == p, "blueconnect: ", what, ": ", splits.size(),
                " split sizes for a group of ", p);
    int64_t sum = 0;
    for (int i = 0; i < p; ++i) {
      TORCH_CHECK(splits[i] >= 0, "blueconnect: ", what, ": a negative split size");
      counts[i] = to_int(row * splits[i], what);
      sum += splits[i];
    }
    TORCH_CHECK(t.dim() > 0 && sum == t.size(0), "blueconnect: ", what, ": split sizes sum to ", sum,
                ", dim 0 is ", t.dim() ? t.size(0) : 0);
  }
  size_t off = 0;
  for (int i = 0; i < p; ++i) {
    displs[i] = to_int(off, what);
    off += counts[i];
  }
  to_int(off, what);
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::alltoall_base(at::Tensor &output, at::Tensor &input,
                                                                      std::vector<int64_t> &output_split_sizes,
                                                                      std::vector<int64_t> &input_split_sizes,
                                                                      const c10d::AllToAllOptions &) {
  check_tensor(input, "alltoall_base");
  check_tensor(output, "alltoall_base");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "blueconnect: alltoall_base: dtypes differ");
  std::vector<int> sc, sd, rc, rd;
  splits_to_counts(input, input_split_sizes, size_, sc, sd, "alltoall_base");
  splits_to_counts(output, output_split_sizes, size_, rc, rd, "alltoall_base");
  auto work = make_work(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output}, timeout_);
  work->keep_ = {input};
  at::Tensor in = input, out = output;
  MPI_Comm comm = comms_->coll;
  work->body_ = [in, out, sc, sd, rc, rd, comm] {
    check_mpi(MPI_Alltoallv(in.data_ptr(), sc.data(), sd.data(), MPI_BYTE, out.data_ptr(), rc.data(), rd.data(),
                            MPI_BYTE, comm), "alltoall_base");
  };
  return enqueue(*comms_->thread, work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::alltoall(std::vector<at::Tensor> &outputs,
                                                                 std::vector<at::Tensor> &inputs,
                                                                 const c10d::AllToAllOptions &) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "blueconnect: alltoall: expects ", size_, " input and ", size_, " output tensors");
  std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
  size_t so = 0, ro = 0;
  for (int i = 0; i < size_; ++i) {
    check_tensor(inputs[i], "alltoall");
    check_tensor(outputs[i], "alltoall");
    TORCH_CHECK(inputs[i].scalar_type() == inputs[0].scalar_type() &&
                outputs[i].scalar_type() == inputs[0].scalar_type(), "blueconnect: alltoall: dtypes differ");
    sc[i] = to_int(nbytes(inputs[i]), "alltoall");
    rc[i] = to_int(nbytes(outputs[i]), "alltoall");
    sd[i] = to_int(so, "alltoall");
    rd[i] = to_int(ro, "alltoall");
    so += sc[i];
    ro += rc[i];
  }
  to_int(so, "alltoall");
  to_int(ro, "alltoall");
  auto work = make_work(c10d::OpType::ALLTOALL, "alltoall", outputs, timeout_);
  work->keep_ = inputs;
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  MPI_Comm comm = comms_->coll;
  work->body_ = [ins, outs, sc, sd, rc, rd, ro, comm] {
    at::Tensor send = pack(ins);
    at::Tensor recv = at::empty({static_cast<int64_t>(ro)}, at::kByte);
    check_mpi(MPI_Alltoallv(send.data_ptr(), sc.data(), sd.data(), MPI_BYTE, recv.data_ptr(), rc.data(), rd.data(),
                            MPI_BYTE, comm), "alltoall");
    unpack(ptr(recv), outs);
  };
  return enqueue(*comms_->thread, work);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::barrier(const c10d::BarrierOptions &) {
  auto work = make_work(c10d::OpType::BARRIER, "barrier", {}, timeout_);
  MPI_Comm comm = comms_->coll;
  // Queued behind every earlier call on this group, as Gloo's barrier waits
  // for the group's pending work.
  work->body_ = [comm] { check_mpi(MPI_Barrier(comm), "barrier"); };
  return enqueue(*comms_->thread, work);
}

// --- Point-to-point --------------------------------------------------------
namespace {

using Clock = std::chrono::steady_clock;

// Point-to-point: posted on the caller's thread, completed by MPI_Test/MPI_Wait.
class WorkP2P : public c10d::Work {
 public:
  WorkP2P(c10d::OpType type, at::Tensor t, MPI_Request req, std::chrono::milliseconds timeout)
      : c10d::Work(-1, type), tensor_(std::move(t)), req_(req), timeout_(timeout),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  bool isCompleted() override { return poll(); }
  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout == kNoTimeout) timeout = timeout_;
    auto deadline = Clock::now() + timeout;
    while (!poll()) {
      TORCH_CHECK(Clock::now() < deadline, "blueconnect: ", c10d::opTypeToString(opType_), " did not complete within ",
                  timeout.count(), " ms (the process group's timeout)");
      std::this_thread::yield();
    }
    return true;
  }
  int sourceRank() const override { return source_; }
  std::vector<at::Tensor> result() override { return {tensor_}; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  bool poll() {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    if (done_) return true;
    int flag = 0;
    MPI_Status status;
    int rc = MPI_Test(&req_, &flag, &status);
    if (rc != MPI_SUCCESS) {
      done_ = true;
      std::exception_ptr err = std::make_exception_ptr(std::runtime_error("blueconnect: MPI_Test failed"));
      future_->setError(err);
      finish(err);
      std::rethrow_exception(err);
    }
    if (!flag) return false;
    done_ = true;
    source_ = status.MPI_SOURCE;
    future_->markCompleted(c10::IValue(std::vector<at::Tensor>{tensor_}));
    finish();
    return true;
  }
  std::mutex p2p_mu_;
  at::Tensor tensor_;
  MPI_Request req_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool done_ = false;
  int source_ = -1;
};

void check_p2p(const std::vector<at::Tensor> &tensors, const char *what) {
  check_one(tensors, what);
  TORCH_CHECK(engine().thread_level >= MPI_THREAD_MULTIPLE, "blueconnect: ", what,
              " needs MPI_THREAD_MULTIPLE, and MPI was initialised with a lower thread level");
  to_int(nbytes(tensors[0]), what);
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::send(std::vector<at::Tensor> &tensors, int dst, int tag) {
  check_p2p(tensors, "send");
  TORCH_CHECK(dst >= 0 && dst < size_, "blueconnect: send: rank ", dst, " is not in the group");
  at::Tensor t = tensors[0];
  MPI_Request req;
  check_mpi(MPI_Isend(t.data_ptr(), static_cast<int>(nbytes(t)), MPI_BYTE, dst, tag, comms_->p2p, &req), "send");
  return c10::make_intrusive<WorkP2P>(c10d::OpType::SEND, t, req, timeout_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::recv(std::vector<at::Tensor> &tensors, int src, int tag) {
  check_p2p(tensors, "recv");
  TORCH_CHECK(src >= 0 && src < size_, "blueconnect: recv: rank ", src, " is not in the group");
  at::Tensor t = tensors[0];
  MPI_Request req;
  check_mpi(MPI_Irecv(t.data_ptr(), static_cast<int>(nbytes(t)), MPI_BYTE, src, tag, comms_->p2p, &req), "recv");
  return c10::make_intrusive<WorkP2P>(c10d::OpType::RECV, t, req, timeout_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBlueConnect::recvAnysource(std::vector<at::Tensor> &tensors, int tag) {
  check_p2p(tensors, "recv");
  at::Tensor t = tensors[0];
  MPI_Request req;
  check_mpi(MPI_Irecv(t.data_ptr(), static_cast<int>(nbytes(t)), MPI_BYTE, MPI_ANY_SOURCE, tag, comms_->p2p, &req),
            "recv");
  return c10::make_intrusive<WorkP2P>(c10d::OpType::RECVANYSOURCE, t, req, timeout_);
}

}  // namespace bctorch
