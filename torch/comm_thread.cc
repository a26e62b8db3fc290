// The torch backend's machinery under every call: its error helpers, the
// communication thread that takes a group's queue in order (and moves the
// non-blocking all-reduces in flight), and the process-wide engine (MPI and
// bc_init once per process, the threads, the groups' destroyers). Separate
// from the collectives, which only queue onto it.
#include "process_group_internal.h"

#include <algorithm>
#include <future>
#include <memory>
#include <stdexcept>

namespace bctorch {

[[noreturn]] void fail(const std::string &what) { throw std::runtime_error("blueconnect: " + what); }

void check_bc(bc_status_t st, const char *what) {
  // bc_last_error() starts with the status's name already ("timeout: ...").
  if (st != BC_OK) fail(std::string(what) + ": " + (*bc_last_error() ? bc_last_error() : bc_strerror(st)));
}

void check_mpi(int rc, const char *what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fail(std::string(what) + ": MPI error: " + std::string(msg, len));
  }
}

int CommThread::poll_in_flight() {
  int completed = 0;
  for (auto it = in_flight.begin(); it != in_flight.end();) {
    int done = 0;
    bc_status_t st = bc_test(&it->req, &done);
    if (st != BC_OK || done) {
      auto finish = std::move(it->done);
      it = in_flight.erase(it);
      finish(allreduce_error(st));
      ++completed;
    } else {
      ++it;
    }
  }
  return completed;
}

void CommThread::drain_in_flight() {
  while (!in_flight.empty()) {
    InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    f.done(allreduce_error(bc_wait(&f.req)));
  }
}

std::exception_ptr CommThread::allreduce_error(bc_status_t st) {
  if (st == BC_OK) return nullptr;
  try {
    check_bc(st, "allreduce");
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// By default every operation runs to completion on its group's thread, one at
// a time, in the order issued (all-reduces with bc_allreduce): the caller's
// thread goes on meanwhile, so DDP's bucket all-reduces still overlap the
// backward pass. Several all-reduces in flight at once (bc_iallreduce, moved
// by the communicator's progress thread; set_nonblocking("always")) were
// slower wherever measured (2026-12-02, 8 ranks on 2 cores): DDP resnet18 on
// the simulated 4 nodes x 2 ranks took 2.8-3.2 s per step against 2.69 s one
// at a time (Gloo: 3.07 s); on one node 479 against 436 ms; 14 small async
// all-reduces (4-256 KiB) 0.9-1.1 against 0.51-0.55 ms at np 2 and a wash at
// np 8. The buckets share the same links and cores, so running them together
// only delays the first.
void CommThread::loop() {
  std::chrono::microseconds poll = kPollMin;
  for (;;) {
    Task task;
    bool have = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (in_flight.empty()) {
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        poll = kPollMin;
      } else {
        // The progress thread moves the data; look at the flags now and then.
        cv.wait_for(lock, poll, [&] { return !queue.empty(); });
        poll = std::min(poll * 2, kPollMax);
      }
      if (!queue.empty()) {
        task = std::move(queue.front());
        queue.pop_front();
        have = true;
      } else if (stopping && in_flight.empty()) {
        return;  // drained
      }
    }
    if (have) {  // neither throws: each task catches its own exceptions
      if (task.start && nonblocking_mode.load() == 1) {
        ++nonblocking_started;
        task.start();
      } else {
        drain_in_flight();
        task.fn();
      }
    }
    if (poll_in_flight() > 0 || have) poll = kPollMin;
  }
}

void CommThread::submit(std::function<void()> fn, std::function<void()> start) {
  std::lock_guard<std::mutex> lock(mu);
  if (stopping) fail("the backend was shut down (at interpreter exit); no more calls");
  if (!started) {
    thread = std::thread([this] { loop(); });
    started = true;
  }
  queue.push_back(Task{std::move(fn), std::move(start)});
  cv.notify_one();
}

void CommThread::run_sync(std::function<void()> f) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> fut = done->get_future();
  submit([f = std::move(f), done] {
    try {
      f();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  fut.get();
}

void CommThread::stop() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
    cv.notify_all();
  }
  if (started) thread.join();
}

CommThread *Engine::thread_for_group() {
  std::lock_guard<std::mutex> lock(mu);
  if (shut_down) fail("the backend was shut down (at interpreter exit)");
  if (thread_level < MPI_THREAD_MULTIPLE && !threads.empty()) return threads.front();
  threads.push_back(new CommThread(nonblocking_mode, nonblocking_started));
  return threads.back();
}

Engine &engine() {
  static Engine *e = new Engine();  // never destroyed: Python may drop groups after exit handlers
  return *e;
}

void ensure_init() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (e.shut_down) fail("the backend was shut down (at interpreter exit)");
  if (e.initialised) return;
  int inited = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) fail("MPI was already finalised");
  MPI_Initialized(&inited);
  if (!inited) {
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &e.thread_level), "MPI_Init_thread");
    e.we_initialised_mpi = true;
  } else {
    MPI_Query_thread(&e.thread_level);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &e.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &e.world_size);
  check_bc(bc_init(), "bc_init");
  e.initialised = true;
}

}  // namespace bctorch
