// The Work of an operation queued on a group's communication thread
// (WorkBC): its wait() with the group's timeout, its completion (the Future
// first, then the Work), and enqueue, which hands it to the thread blocking or,
// for an all-reduce under set_nonblocking("always"), non-blocking. Separate
// from the collectives, which only fill in its body and queue it.
#include "process_group_internal.h"

namespace bctorch {

bool WorkBC::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) timeout = timeout_ + grace_;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    TORCH_CHECK(false, "blueconnect: ", name_, " did not complete within ", timeout.count(),
                " ms (the process group's timeout); a rank may not have joined it");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void WorkBC::run() {
  std::exception_ptr err;
  try {
    body_();
  } catch (...) {
    err = std::current_exception();
  }
  complete(err);
}

void WorkBC::complete(std::exception_ptr err) {
  body_ = nullptr;  // drops scratch buffers
  istart_ = nullptr;
  keep_.clear();
  try {
    if (err)
      future_->setError(err);
    else
      future_->markCompleted(c10::IValue(outputs_));
  } catch (...) {
    // A callback chained on the future threw: it holds its own error.
  }
  finish(err);
}

c10::intrusive_ptr<c10d::Work> enqueue(CommThread &t, c10::intrusive_ptr<WorkBC> work) {
  std::function<void()> start;
  if (work->istart_) {
    CommThread *tp = &t;  // start runs on that thread, the only user of its in_flight
    start = [work, tp] {
      bc_request_t req = nullptr;
      try {
        req = work->istart_();
      } catch (...) {
        work->complete(std::current_exception());
        return;
      }
      if (!req) {
        work->complete(nullptr);
        return;
      }
      tp->in_flight.push_back({req, [work](std::exception_ptr err) { work->complete(err); }});
    };
  }
  t.submit([work] { work->run(); }, std::move(start));
  return work;
}

c10::intrusive_ptr<WorkBC> make_work(c10d::OpType type, const char *name, std::vector<at::Tensor> outputs,
                                     std::chrono::milliseconds timeout) {
  return c10::make_intrusive<WorkBC>(type, name, std::move(outputs), timeout);
}

}  // namespace bctorch
