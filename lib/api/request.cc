// Non-blocking collectives: starting a request, its BC_CHECK_ARGS agreement
// (advanced in call order), and its progress until bc_test/bc_wait completes it.
#include "api/comm.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include "api/argcheck.h"
#include "api/progress_thread.h"
#include "core/log.h"
#include "sched/operation.h"

namespace bc {
namespace {

// The progress thread takes a device request: it needs the starting thread's
// device, and the cuda transport exchanges its descriptors over MPI.
Status prepare_threaded_device(bc_request *req) {
  BC_CHECK(progress_thread_check("device buffers (the cuda transport sends its descriptors over MPI)"));
  BC_CHECK(cuda_current_device(&req->device));
  return BC_OK;
}

// Starts a request's operation (at the call, or once its agreement passed):
// hands it to the progress thread or to the communicator's open requests.
Status launch(bc_comm *c, bc_request *req, bool agreed_before) {
  CommLock lock;  // declared first: a failed start's operation goes before it is released
  unsigned char *work = nullptr;
  Status st = start(c, req->args, &lock, &req->op, &work, nullptr, agreed_before);
  if (st == BC_OK && req->op && c->progress) {
    if (c->cur_mem == BC_MEM_CUDA && req->device < 0) st = prepare_threaded_device(req);
    if (st == BC_OK) {
      req->threaded = true;
      c->progress->submit(req);
    }
  }
  if (st != BC_OK) {
    req->op.reset();
    BC_CHECK(st);
  }
  if (req->op && !req->threaded) {
    c->open.push_back(req);
    req->polls = WaitPolicy(req->op->context().spin_count);
  }
  if (req->op && !req->counted) {
    req->counted = true;
    ++c->inflight;
  }
  return BC_OK;
}

// A request that failed outside its own bc_test/bc_wait: the failure is kept
// for them, without its "code: " head, which BC_FAIL adds back when raised.
void keep_failure(bc_request *req, Status st) {
  req->failed = true;
  req->status = st;
  req->error = last_error_body(st);
  clear_error();
}

}  // namespace

Status comm_start_allreduce(bc_comm *c, const CollArgs &a, bc_request **out) {
  if (!out) return BC_FAIL(BC_ERR_INVALID_ARG, "the request pointer is NULL");
  *out = nullptr;
  std::unique_ptr<bc_request> req(new bc_request);
  req->magic = kRequestMagic;
  req->comm = c;
  req->args = a;
  if (c && comm_check(c) == BC_OK && c->check_args) {
    // The agreement is the request's first phase (comm->agreeing): the call
    // returns at once, so calls on different communicators may be made in
    // different orders on different ranks. Any verdict but agreement,
    // including this rank's own refusal, comes from bc_test/bc_wait.
    BC_CHECK(refuse_if_broken(c));
    // Started by the progress thread: device buffers need this thread's device.
    bc_memtype_t mem = BC_MEM_HOST;
    if (c->thread_agrees && resolve_memtype(a.sendbuf, a.recvbuf, a.mem, &mem) == BC_OK && mem == BC_MEM_CUDA)
      BC_CHECK(prepare_threaded_device(req.get()));
    const Status own = check_own_args(c, a);
    std::lock_guard<std::mutex> agree(c->agree_mutex);
    BC_CHECK(ArgAgreement::post(c, a, own, &req->agreement));
    clear_error();
    CommLock lock;
    lock.take(c);
    req->counted = true;
    ++c->inflight;
    c->agreeing.push_back(req.get());
    c->agreeing_count.store(static_cast<int>(c->agreeing.size()), std::memory_order_release);
    if (c->thread_agrees) c->progress->wake();
    *out = req.release();
    return BC_OK;
  }
  BC_CHECK(launch(c, req.get(), false));
  *out = req.release();
  return BC_OK;
}

void comm_advance_agreements(bc_comm *c) {
  std::lock_guard<std::mutex> agree(c->agree_mutex);
  comm_advance_agreements_locked(c);
}

void comm_advance_agreements_locked(bc_comm *c) {
  while (!c->agreeing.empty()) {
    bc_request *req = c->agreeing.front();
    bool done = true;
    Status st = BC_OK;
    if (c->broken) {
      req->agreement->abandon();
      st = refuse_broken(c);
    } else {
      st = req->agreement->test(c, &done);
    }
    if (!done && st == BC_OK) return;
    c->agreeing.pop_front();
    c->agreeing_count.store(static_cast<int>(c->agreeing.size()), std::memory_order_release);
    req->agreement.reset();
    if (st == BC_OK) {
      st = launch(c, req, true);
    } else {
      CommLock lock;
      lock.take(c);
      comm_mark_broken_on(c, st);  // a round that timed out or failed in MPI
    }
    if (st != BC_OK) keep_failure(req, st);
  }
}

void comm_wait_pass(bc_comm *c, WaitPolicy *wait) {
  if (!c->progress) comm_progress_open(c);
  wait->pause();
}

void comm_progress_open(bc_comm *c) {
  for (bc_request *req : c->open) {
    if (req->failed || !req->op) continue;
    bool finished = false;  // a finished operation just says so again when its own bc_test comes
    const Status st = req->op->progress(&finished);
    if (st == BC_OK) continue;
    req->op->cancel();
    keep_failure(req, st);
  }
}

namespace {

// A request the progress thread works on: done once the thread has set its
// flag; bc_wait sleeps until then. Touches no transport.
Status threaded_progress(bc_request *req, bool block, bool *finished) {
  if (block && !req->done.load(std::memory_order_acquire)) {
    CommLock lock;
    lock.take(req->comm);
    req->comm->progress->wait_done(req, lock.get());
  }
  *finished = req->done.load(std::memory_order_acquire);
  if (!*finished || req->status == BC_OK) return BC_OK;
  // The thread's message, raised again on the caller's thread for bc_last_error().
  return BC_FAIL(req->status, "%s", req->error.c_str());
}

}  // namespace

Status request_progress(bc_request **reqp, bool block, bool *done) {
  if (!reqp || !*reqp) return BC_FAIL(BC_ERR_INVALID_ARG, "the request is NULL");
  bc_request *req = *reqp;
  if (req->magic != kRequestMagic) return BC_FAIL(BC_ERR_INVALID_ARG, "not a live request");
  if (req->comm && comm_check(req->comm) == BC_OK && req->comm->check_args) {
    // Its argument agreement may be pending: advance it (and those of earlier
    // calls) first. The progress thread may be advancing them too: the
    // request's phase is read under the agreement mutex.
    bc_comm *c = req->comm;
    WaitPolicy wait(c->spin_count);
    for (;;) {
      bool pending = true;
      {
        // bc_test only tries: it may run inside MPI's progress loop (the
        // preload's requests) on a thread that holds the mutex already.
        std::unique_lock<std::mutex> agree(c->agree_mutex, std::defer_lock);
        if (block) agree.lock();
        else agree.try_lock();  // not had: still pending for now, its phase unread
        if (agree.owns_lock()) {
          comm_advance_agreements_locked(c);
          pending = req->agreement != nullptr;
        }
      }
      if (!pending) break;
      if (!block) {
        if (done) *done = false;
        return BC_OK;
      }
      comm_wait_pass(c, &wait);
    }
  }
  Status st = BC_OK;
  bool finished = true;
  if (req->threaded) {
    BC_CHECK(comm_check(req->comm));
    st = threaded_progress(req, block, &finished);
    if (finished && st == BC_OK) req->comm->last_stage_seconds = req->stage_seconds;
  } else if (req->failed) {
    // Failed while another call progressed it, or in its argument agreement.
    BC_CHECK(comm_check(req->comm));
    st = BC_FAIL(req->status, "%s", req->error.c_str());
    comm_mark_broken_on(req->comm, st);
  } else if (req->op) {
    BC_CHECK(comm_check(req->comm));
    const uint64_t tested_before = req->op->tests();
    st = block ? req->op->wait() : req->op->progress(&finished);
    if (block) {
      finished = true;
    } else if (st == BC_OK && !finished && !req->polls.moved(req->op->completions())) {
      // bc_test: the caller's loop is the wait. Never a sleep (a test returns
      // at once), never a timeout (bc_test has none).
      req->polls.pause(req->op->tests() - tested_before);  // per request tested, as shm's test() did
    }
    if (st != BC_OK || finished) {
      comm_mark_broken_on(req->comm, st);
      if (st == BC_OK) req->comm->last_stage_seconds = req->op->stage_seconds();
    }
  }
  if (st != BC_OK || finished) {
    // Without the thread nothing else touches the communicator meanwhile:
    // the operation becomes its idle one again (comm.h, spare_op).
    if (!req->threaded) comm_keep_idle(req->comm, &req->op);
    if (req->counted) --req->comm->inflight;
    auto &open = req->comm->open;
    open.erase(std::remove(open.begin(), open.end(), req), open.end());
    req->magic = 0;
    delete req;
    *reqp = nullptr;
  }
  if (done) *done = finished;
  BC_CHECK(st);
  return BC_OK;
}

}  // namespace bc

bc_request::~bc_request() = default;
