// BC_PROGRESS_THREAD: one thread per communicator that advances the
// non-blocking all-reduces while the caller computes.
//
// bc_iallreduce starts the operation (under the communicator's lock) and hands
// it here. With BC_CHECK_ARGS and MPI_THREAD_MULTIPLE the thread also advances
// the calls' argument agreements (comm->agreeing) and starts each operation
// once its ranks agree. The thread sleeps on a condition variable while nothing is in
// flight; otherwise it takes the lock, progresses every active request once,
// finishes those that are done or failed, lets go of the lock, and rests under
// the policy of Operation::wait (core/wait_policy.h: BC_SPIN_COUNT passes
// without movement, then a yield, or a sleep of at most 1 ms on the event fd
// when every request may), with the same BC_TIMEOUT per request. bc_test only
// reads the request's done flag; bc_wait sleeps until the thread sets it. Blocking calls on the
// communicator take the lock for their whole run: the thread yields it to any
// caller that asks (CommLock), so a caller never starves behind its passes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/comm.h"
#include "sched/operation.h"

namespace bc {

// The thread calls the transports, so a transport that calls MPI while it
// progresses (mpi; cuda, for its descriptors) needs MPI_THREAD_MULTIPLE.
// `mpi_user` names what would call MPI from the thread (null: nothing);
// BC_ERR_NOT_SUPPORTED naming it when `mpi_thread_level` is below MULTIPLE.
Status progress_thread_allowed(const char *mpi_user, int mpi_thread_level);

class ProgressThread {
 public:
  explicit ProgressThread(bc_comm *comm);
  ~ProgressThread();  // stop()
  ProgressThread(const ProgressThread &) = delete;
  ProgressThread &operator=(const ProgressThread &) = delete;

  Status start();
  // Joins the thread. Requests still active (only when a communicator is
  // freed with operations in flight, by bc_finalize) fail with BC_ERR_INVALID_COMM.
  void stop();
  // Hands a started request over. The caller holds the lock (CommLock).
  void submit(bc_request *req);
  // An argument agreement was posted (comm->thread_agrees). The caller holds the lock.
  void wake() { work_cv_.notify_one(); }
  // Blocks until the thread has finished `req`; `lock` is the caller's, held.
  void wait_done(bc_request *req, std::unique_lock<std::mutex> &lock);
  // The communicator's lock for a calling thread: announced, so that the
  // thread lets it go to the caller between two passes.
  std::unique_lock<std::mutex> caller_lock();

 private:
  struct Active {
    bc_request *req;
    WaitPolicy wait;  // its own movement, liveness checks and timeout
  };
  void loop();
  // One pass over the active requests; true when any of them moved. With
  // `check_timeouts`, the ones that did not move and waited past BC_TIMEOUT fail.
  // *tested: the transport requests the pass tested (WaitPolicy::idle's work).
  bool pass(bool check_timeouts, uint64_t *tested);
  // Records the outcome in the request, drops it from the list and sets its
  // done flag: after that the caller may free it at any moment.
  void finish(size_t index, Status st);
  void fail_all(Status st, const std::string &why);

  bc_comm *comm_;
  WaitPolicy wait_;  // the thread's spin and rests, over all its requests
  bool check_missed_ = false;  // the last rest came without a timeout check: check in the next pass
  std::condition_variable work_cv_;  // a request arrived, or stop
  std::condition_variable done_cv_;  // a request finished
  std::vector<Active> active_;       // under comm_->mutex
  bool stop_ = false;                // under comm_->mutex
  int device_ = -1;                  // the CUDA device this thread last set
  std::atomic<int> callers_{0};      // callers waiting for the lock
  std::thread thread_;
};

// Held by a caller while it touches the communicator's transports and
// operations; takes nothing (one null check) when there is no progress thread.
class CommLock {
 public:
  CommLock() = default;
  void take(bc_comm *c) {
    if (c->progress) lock_ = c->progress->caller_lock();
  }
  std::unique_lock<std::mutex> &get() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace bc
