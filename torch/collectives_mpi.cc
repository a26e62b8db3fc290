// The collectives that run on MPI over the group's collective communicator:
// broadcast, gather, scatter, alltoall and its variant, barrier. Each checks
// its tensors on the caller's thread, then queues a WorkBC whose body makes
// the blocking MPI call on the group's communication thread, in order with
// the engine's collectives (collectives_bc.cc).
#include "process_group_internal.h"

#include <algorithm>

namespace bctorch {

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

}  // namespace bctorch
