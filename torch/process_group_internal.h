// What the files of the torch backend share, and nothing else: the error
// helpers, the communication thread and the process-wide engine
// (comm_thread.cc), the tensor checks and conversions (tensors.cc), the Work
// of a queued operation and its enqueue (work.cc), and a group's
// communicators. The public class is in process_group.h; this header is not
// installed and only the backend's own files include it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include "process_group.h"

namespace bctorch {

// --- Errors (comm_thread.cc) -------------------------------------------------

[[noreturn]] void fail(const std::string &what);
void check_bc(bc_status_t st, const char *what);
void check_mpi(int rc, const char *what);

// --- The communication thread and the engine (comm_thread.cc) -----------------

// A communication thread and its queue. Each group has its own when MPI gives
// MPI_THREAD_MULTIPLE (as Gloo has a thread per group), so operations on
// different groups never wait for each other and processes may issue them in
// different orders; one thread serves every group under a lower level, since
// MPI then takes one thread's calls at a time (docs/TORCH.md). comm_thread.cc
// says why operations run one at a time by default.
struct CommThread {
  struct Task {
    std::function<void()> fn;     // runs the operation to completion
    std::function<void()> start;  // or starts it non-blocking (null: no such path)
  };
  // Started on this thread, advanced by the communicator's progress thread
  // (BC_PROGRESS_THREAD=1), completed here by bc_test.
  struct InFlight {
    bc_request_t req;
    std::function<void(std::exception_ptr)> done;
  };

  // The process-wide set_nonblocking() mode and count (Engine's).
  CommThread(const std::atomic<int> &nonblocking_mode, std::atomic<uint64_t> &nonblocking_started)
      : nonblocking_mode(nonblocking_mode), nonblocking_started(nonblocking_started) {}

  const std::atomic<int> &nonblocking_mode;
  std::atomic<uint64_t> &nonblocking_started;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> queue;
  std::deque<InFlight> in_flight;  // this thread's only
  std::thread thread;
  bool stopping = false;
  bool started = false;

  // How often the thread looks at the requests in flight: from kPollMin,
  // doubling while none completes, up to kPollMax. Waking every 200 us
  // throughout made a 24 MiB all-reduce on the simulated cluster of 4 nodes x
  // 2 ranks take 2.5-3.6 s instead of 1.3 s: with 8 ranks on 2 cores each
  // wake-up preempts a rank's progress thread (or a peer's) in the middle of
  // the transfer. Polling every 1 ms cost nothing measurable; the cap bounds
  // what a completion waits to be noticed.
  static constexpr std::chrono::microseconds kPollMin{200}, kPollMax{2000};

  // Tests every request in flight once; completes those done or failed.
  // Returns how many completed.
  int poll_in_flight();
  void drain_in_flight();
  static std::exception_ptr allreduce_error(bc_status_t st);
  void loop();
  // Queues a task; the thread starts with the first.
  void submit(std::function<void()> fn, std::function<void()> start = nullptr);
  // Runs `f` on this thread and waits for it; its exception comes back here.
  void run_sync(std::function<void()> f);
  // Lets the thread finish what was queued and joins it.
  void stop();
};

// The process-wide state: MPI, bc_init, the communication threads and every
// group's communicators (destroyed together at shutdown, in creation order).
struct Engine {
  std::mutex mu;
  bool initialised = false;
  bool shut_down = false;
  bool we_initialised_mpi = false;
  int thread_level = MPI_THREAD_SINGLE;
  int world_rank = 0, world_size = 1;
  std::vector<std::function<void()>> destroyers;  // per group, creation order
  // Every communication thread, in creation order (never freed: Python may
  // drop groups after the exit handlers ran). Below MPI_THREAD_MULTIPLE
  // only the first, shared by every group.
  std::vector<CommThread *> threads;
  // 0: auto (one at a time, above), 1: every all-reduce non-blocking beside
  // those in flight (tests of that path), 2: none (the same as auto today).
  std::atomic<int> nonblocking_mode{0};
  std::atomic<uint64_t> nonblocking_started{0};

  // The communication thread for a new group.
  CommThread *thread_for_group();
};

Engine &engine();
// MPI and bc_init, once per process (mpi_world says which thread level).
void ensure_init();

// --- Tensors, dtypes and ops (tensors.cc) -------------------------------------

void check_tensor(const at::Tensor &t, const char *what);
void check_one(const std::vector<at::Tensor> &ts, const char *what);
void check_same(const at::Tensor &a, const at::Tensor &b, const char *what);
bc_op_t to_bc_op(const c10d::ReduceOp &rop, const char *what);
// The BlueConnect dtype for a reduction of `s` with `op`; a clear error where
// BlueConnect cannot reduce it.
bc_dtype_t to_bc_dtype(at::ScalarType s, bc_op_t op, const char *what);
size_t nbytes(const at::Tensor &t);
int to_int(size_t n, const char *what);
char *ptr(const at::Tensor &t);
// Packs tensors back to back into one byte buffer, and back.
at::Tensor pack(const std::vector<at::Tensor> &ts);
void unpack(const char *src, const std::vector<at::Tensor> &ts);

// --- Work (work.cc) ------------------------------------------------------------

class WorkBC : public c10d::Work {
 public:
  WorkBC(c10d::OpType type, const char *name, std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout)
      : c10d::Work(-1, type), name_(name), outputs_(std::move(outputs)), timeout_(timeout),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // On the communication thread: runs the body, completes the future, then the work.
  void run();
  void complete(std::exception_ptr err);

  // For operations on BlueConnect's engine, which fails them itself after
  // BC_TIMEOUT (the group's timeout) with a message that says which peer it
  // waits for: wait() gives it time to, before its own plainer timeout.
  void on_engine() { grace_ = std::chrono::milliseconds(2000) + timeout_ / 10; }

  const char *name_;
  std::chrono::milliseconds grace_{0};
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;  // inputs, alive until done
  std::function<void()> body_;
  // Non-blocking instead: starts the operation, null when there is nothing
  // to do (count 0).
  std::function<bc_request_t()> istart_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Queues `work` on its group's communication thread `t`.
c10::intrusive_ptr<c10d::Work> enqueue(CommThread &t, c10::intrusive_ptr<WorkBC> work);
c10::intrusive_ptr<WorkBC> make_work(c10d::OpType type, const char *name, std::vector<at::Tensor> outputs,
                                     std::chrono::milliseconds timeout);

// --- A group's communicators (made in process_group.cc) ------------------------

struct ProcessGroupBlueConnect::Comms {
  CommThread *thread = nullptr;   // the group's communication thread
  MPI_Comm coll = MPI_COMM_NULL;  // MPI collectives, on that thread
  MPI_Comm p2p = MPI_COMM_NULL;   // send/recv, on the callers' threads
  bc_comm_t bc = nullptr;         // BlueConnect collectives
  int rank = 0, size = 1;
};

}  // namespace bctorch
