// The torch backend's point-to-point calls (send, recv, recvAnysource) and
// their Work: posted on the caller's thread with MPI_Isend/MPI_Irecv on the
// group's p2p communicator (which needs MPI_THREAD_MULTIPLE), so that a send
// and a receive never queue behind each other on the communication thread,
// and completed by MPI_Test. Separate because nothing else here bypasses the
// queue.
#include "process_group_internal.h"

#include <stdexcept>

namespace bctorch {
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
