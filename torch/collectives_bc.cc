// The collectives that run on BlueConnect's engine: allreduce (blocking, or
// non-blocking under set_nonblocking("always")), allreduce_coalesced, reduce,
// allgather and its variants, reduce_scatter and its variant. Each checks its
// tensors on the caller's thread, then queues a WorkBC whose body calls the
// engine on the group's communication thread. Separate from those on MPI
// (collectives_mpi.cc), which take another communicator and no engine timeout.
#include "process_group_internal.h"

#include <cstring>

namespace bctorch {

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

}  // namespace bctorch
