// ProcessGroupBlueConnect: a torch.distributed (c10d, torch 1.13) process group
// whose all-reduce, reduce-scatter and all-gather run on BlueConnect's engine
// and whose other collectives and point-to-point calls run on MPI, over one
// MPI communicator per group (docs/TORCH.md says which call takes which path).
//
// Threading. Every collective is checked on the caller's thread (a bad tensor,
// dtype or op raises there, as a Python RuntimeError), then queued to the
// group's communication thread, which takes its queue in order and completes
// each Work and its Future. With MPI_THREAD_MULTIPLE each group has its own
// thread (as Gloo has), so processes may issue operations on different groups
// in different orders; under a lower thread level one thread serves every
// group (MPI then takes one thread's calls at a time) and they may not. An
// all-reduce runs with BlueConnect's blocking call, or, with
// set_nonblocking("always"), starts non-blocking (bc_iallreduce, moved by the
// communicator's BC_PROGRESS_THREAD) beside those in flight; everything else
// runs with BlueConnect's and MPI's blocking calls once nothing is in flight.
// So every call returns at once (async_op=True overlaps the caller's compute)
// and async_op=False is the same call followed by wait(). Point-to-point calls
// (send/recv) are posted on the caller's thread (MPI_Isend/MPI_Irecv, which
// needs MPI_THREAD_MULTIPLE) so that a send and a receive never queue behind
// each other.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <mpi.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <blueconnect.h>

namespace bctorch {

// MPI (MPI_Init_thread with MPI_THREAD_MULTIPLE unless MPI is already up) and
// bc_init, once per process. Returns {world rank, world size}.
std::pair<int, int> mpi_world();
// What the Python package needs for torch's env:// rendezvous, agreed by an
// MPI broadcast from world rank 0: {rank, size, master address, free port}.
std::tuple<int, int, std::string, int> mpi_rendezvous();
// Stops the communication threads (each finishes its queue), destroys the
// communicators in creation order (collective), bc_finalize, and
// MPI_Finalize when this module initialised MPI. Called by the Python package
// at exit; idempotent.
void shutdown();
// Which all-reduces start non-blocking: "always" (every one, beside those in
// flight), "auto" and "never" (none: one at a time, measured faster); ""
// changes nothing. Returns how many have started non-blocking so far. For
// tests.
uint64_t set_nonblocking(const std::string &mode);
// MPI_Abort(MPI_COMM_WORLD, code) when MPI is initialised and not finalised.
void abort_job(int code);

class ProcessGroupBlueConnect : public c10d::ProcessGroup {
 public:
  // `world_ranks`: the MPI_COMM_WORLD rank of each group rank, in group-rank
  // order (empty: the whole world, in world order). Collective over the group.
  ProcessGroupBlueConnect(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                          std::vector<int64_t> world_ranks, std::chrono::milliseconds timeout);
  ~ProcessGroupBlueConnect() override;

  const std::string getBackendName() const override { return "blueconnect"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                                     const c10d::AllreduceCoalescedOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                 const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                                     std::vector<at::Tensor> &inputs,
                                                     const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                                      const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::GatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                               std::vector<int64_t> &output_split_sizes,
                                               std::vector<int64_t> &input_split_sizes,
                                               const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors, int tag) override;

  // The BlueConnect communicator's description (topology and plan) for
  // `count` float32 elements: for users and tests.
  std::string describe(int64_t count);
  // bc_comm_learning_calls: the blocking all-reduces of `bytes` still to run
  // before that size's plan is learned (0 once it is, or where none is).
  int learning_calls(int64_t bytes);

 private:
  // gather's outputs, scatter's inputs: on the root one list of size_ tensors
  // shaped like `like`, elsewhere none. Checks both, returns the root's list
  // (empty elsewhere). `kind`: "output" or "input", for the messages.
  std::vector<at::Tensor> root_list(std::vector<std::vector<at::Tensor>> &lists, const at::Tensor &like,
                                    int64_t root_rank, const char *what, const char *kind);

  struct Comms;  // the group's MPI and BlueConnect communicators
  Comms *comms_;
  std::chrono::milliseconds timeout_;
};

}  // namespace bctorch
