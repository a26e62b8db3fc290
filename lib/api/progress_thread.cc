#include "api/progress_thread.h"

#include <mpi.h>

#include <exception>
#include <new>

#include "core/log.h"
#include "cuda/cuda_rt.h"

namespace bc {

Status progress_thread_allowed(const char *mpi_user, int mpi_thread_level) {
  if (!mpi_user || mpi_thread_level >= MPI_THREAD_MULTIPLE) return BC_OK;
  return BC_FAIL(BC_ERR_NOT_SUPPORTED,
                 "BC_PROGRESS_THREAD needs MPI_THREAD_MULTIPLE with %s; initialise MPI with "
                 "MPI_Init_thread(MPI_THREAD_MULTIPLE)", mpi_user);
}

ProgressThread::ProgressThread(bc_comm *comm)
    : comm_(comm), wait_(comm->spin_count) {}

ProgressThread::~ProgressThread() { stop(); }

Status ProgressThread::start() {
  try {
    thread_ = std::thread([this] { loop(); });
  } catch (const std::exception &e) {
    return BC_FAIL(BC_ERR_INTERNAL, "BC_PROGRESS_THREAD: cannot start the thread: %s", e.what());
  }
  return BC_OK;
}

void ProgressThread::stop() {
  if (!thread_.joinable()) return;
  {
    std::unique_lock<std::mutex> lock = caller_lock();
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
  fail_all(BC_ERR_INVALID_COMM, "the communicator was freed with the operation in flight");
}

std::unique_lock<std::mutex> ProgressThread::caller_lock() {
  callers_.fetch_add(1, std::memory_order_acq_rel);
  std::unique_lock<std::mutex> lock(comm_->mutex);
  callers_.fetch_sub(1, std::memory_order_acq_rel);
  return lock;
}

void ProgressThread::submit(bc_request *req) {
  active_.push_back(Active{req, req->op->wait_policy()});
  work_cv_.notify_one();
}

void ProgressThread::wait_done(bc_request *req, std::unique_lock<std::mutex> &lock) {
  done_cv_.wait(lock, [req] { return req->done.load(std::memory_order_acquire); });
}

void ProgressThread::finish(size_t index, Status st) {
  bc_request *req = active_[index].req;
  if (st == BC_OK) {
    req->stage_seconds = req->op->stage_seconds();
  } else {
    // The thread's message, for the caller to raise again (its "code: " head is added back then).
    req->error = last_error_body(st);
    comm_mark_broken_on(comm_, st);  // before clear_error: it keeps the message
    clear_error();
  }
  req->status = st;
  req->op.reset();  // cancels what is left, gives device scratch back to the pool
  active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(index));
  req->done.store(true, std::memory_order_release);  // the last touch: the caller may free it now
  done_cv_.notify_all();
}

void ProgressThread::fail_all(Status st, const std::string &why) {
  while (!active_.empty()) {
    BC_FAIL(st, "progress thread: %s", why.c_str());
    finish(active_.size() - 1, st);
  }
}

bool ProgressThread::pass(bool check_timeouts, uint64_t *tested) {
  bool moved = false;
  *tested = 0;
  for (size_t i = 0; i < active_.size();) {
    Active &a = active_[i];
    Status st = BC_OK;
    bool done = false;
    try {
      if (a.req->device >= 0 && a.req->device != device_) {
        st = cuda_set_device(a.req->device);
        if (st == BC_OK) device_ = a.req->device;
      }
      if (st == BC_OK) {
        const uint64_t before = a.req->op->tests();
        st = a.req->op->progress(&done);
        *tested += a.req->op->tests() - before;
        if (st != BC_OK) st = a.req->op->explain_failure(st);
      }
      if (st == BC_OK && !done) {
        if (a.wait.moved(a.req->op->completions())) {
          moved = true;
        } else if (check_timeouts) {
          st = a.req->op->check_still(&a.wait);
        }
      }
    } catch (const std::bad_alloc &) {
      st = BC_FAIL(BC_ERR_NO_MEMORY, "progress thread: out of memory");
    } catch (const std::exception &e) {
      st = BC_FAIL(BC_ERR_INTERNAL, "progress thread: unexpected exception: %s", e.what());
    } catch (...) {
      st = BC_FAIL(BC_ERR_INTERNAL, "progress thread: unexpected exception");
    }
    if (st == BC_OK && !done) {
      ++i;
      continue;
    }
    if (st != BC_OK) trail(st, __FILE__, __LINE__);
    moved = true;
    finish(i, st);
  }
  return moved;
}

void ProgressThread::loop() {
  std::unique_lock<std::mutex> lock(comm_->mutex, std::defer_lock);
  for (;;) {
    try {
      // Agreements first, without the communicator's lock (starting an
      // operation takes it); a caller advancing them meanwhile is as good.
      const bool agreeing = comm_->thread_agrees && comm_->agreeing_count.load(std::memory_order_acquire) > 0;
      if (agreeing) {
        std::unique_lock<std::mutex> agree(comm_->agree_mutex, std::try_to_lock);
        if (agree.owns_lock()) comm_advance_agreements_locked(comm_);
      }
      // A caller asked for the lock: let it have it before the next pass.
      while (callers_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
      lock.lock();
      auto has_work = [this] {
        return stop_ || !active_.empty() ||
               (comm_->thread_agrees && comm_->agreeing_count.load(std::memory_order_acquire) > 0);
      };
      if (!has_work()) {
        wait_.restart();
        work_cv_.wait(lock, has_work);
      }
      if (stop_) return;  // requests still active are failed by stop()
      // The thread waits on all its requests at once under one policy
      // (core/wait_policy.h; each request keeps its own for its timeout and
      // liveness). The last pass of a spin also checks the timeouts; a rest
      // follows it when nothing moved. A pass that tested more requests than
      // the one before can reach the rest unchecked: the next pass checks
      // (without that, a peer that never came was never timed out).
      uint64_t tested = 0;
      const bool check = check_missed_ || wait_.rest_is_next();
      const bool moved = pass(check, &tested);
      if (moved) wait_.restart();
      const bool rest = !moved && wait_.idle(1 + tested);
      check_missed_ = rest && !check;
      Transport *sleeper = nullptr;
      if (rest) {
        // Sleep on the event fd (briefly: the lock is held) only when every
        // active request may; otherwise yield the core without the lock.
        for (size_t i = 0; i < active_.size(); ++i) {
          Transport *t = active_[i].req->op->context().sleeper;
          if (!t || (i > 0 && t != sleeper)) {
            sleeper = nullptr;
            break;
          }
          sleeper = t;
        }
        if (sleeper) {
          Status ws = wait_.rest(sleeper, 1);
          if (ws != BC_OK) fail_all(ws, std::string("waiting on the transport: ") + last_error());
        }
      }
      lock.unlock();
      if (rest && !sleeper) wait_.rest();
    } catch (...) {
      // Nothing may escape the thread: whatever is in flight fails instead.
      if (!lock.owns_lock()) lock.lock();
      fail_all(BC_ERR_INTERNAL, "unexpected exception in the progress thread");
      lock.unlock();
    }
  }
}

}  // namespace bc
