// MPI_Iallreduce that really runs in the background.
//
// BlueConnect's bc_iallreduce is started at the call and a generalized
// request (MPI_Grequest_start) stands for it. Its progress is driven from
// Open MPI's own progress loop: opal_progress_register() adds a callback that
// every blocking or testing MPI call runs (MPI_Wait, MPI_Test, MPI_Recv,
// MPI_Barrier, Fortran's mpi_wait, ...), exactly as Open MPI's own
// non-blocking collectives (libnbc) are progressed. When an operation finishes
// the callback completes its generalized request, and MPI_Wait returns.
//
// Where that hook is not there (another MPI, or a stripped Open MPI), nothing
// would drive the operation while the program waits inside MPI, so
// MPI_Iallreduce stays blocking: it runs to completion and returns a completed
// request (requests_async() says which).
//
// Reentrancy: the callback does nothing while this thread is inside
// BlueConnect (t_inside: our own transports may call MPI, which runs
// opal_progress), and it only try-locks, so concurrent MPI calls of a
// THREAD_MULTIPLE program never block on each other here.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "core/log.h"
#include "core/wait_policy.h"
#include "pmpi/pmpi.h"

namespace bc {
namespace pmpi {
namespace {

using ProgressCallback = int (*)(void);
using RegisterFn = int (*)(ProgressCallback);

struct Pending {
  bc_request_t op = nullptr;  // null once finished
  MPI_Request request = MPI_REQUEST_NULL;
  bc_comm_t comm = nullptr;
  int error = MPI_SUCCESS;
  bool released = false;  // MPI freed the request (free_fn ran)
};

std::recursive_mutex g_mutex;
std::vector<Pending *> g_pending;
std::atomic<int> g_active{0};  // operations not yet finished
RegisterFn g_unregister = nullptr;
bool g_async = false;
thread_local bool t_progressing = false;

int query_fn(void *state, MPI_Status *status) {
  const auto *p = static_cast<const Pending *>(state);
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_ANY_SOURCE;
  status->MPI_TAG = MPI_ANY_TAG;
  status->MPI_ERROR = p->error;
  return p->error;
}

void drop_released() {
  g_pending.erase(std::remove_if(g_pending.begin(), g_pending.end(),
                                 [](Pending *p) {
                                   if (!p->released || p->op) return false;
                                   delete p;
                                   return true;
                                 }),
                  g_pending.end());
}

int free_fn(void *state) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  static_cast<Pending *>(state)->released = true;
  if (!t_progressing) drop_released();
  return MPI_SUCCESS;
}

// A collective cannot be taken back once other ranks may be in it.
int cancel_fn(void *, int) { return MPI_SUCCESS; }

// Advances every operation once; `comm` (if set) limits it to one communicator.
void progress_once(bc_comm_t only) {
  t_progressing = true;
  for (Pending *p : g_pending) {
    if (!p->op || (only && p->comm != only)) continue;
    int done = 0;
    bc_status_t st;
    {
      Inside in;
      st = bc_test(&p->op, &done);
    }
    if (st != BC_OK) {
      BC_LOG(LogLevel::Error, LogSys::Pmpi, "MPI_Iallreduce failed: %s", bc_last_error());
      p->error = error_class(st);
      p->op = nullptr;  // bc_test freed it
      done = 1;
    }
    if (done) {
      p->op = nullptr;
      g_active.fetch_sub(1, std::memory_order_release);
      PMPI_Grequest_complete(p->request);  // may run free_fn if MPI_Request_free came first
    }
  }
  t_progressing = false;
  drop_released();
}

int progress_callback() {
  if (g_active.load(std::memory_order_acquire) == 0 || t_inside > 0 || t_progressing) return 0;
  std::unique_lock<std::recursive_mutex> lock(g_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return 0;
  progress_once(nullptr);
  return 0;
}

}  // namespace

void requests_init() {
  // Open MPI's progress engine, from libopen-pal (already loaded with libmpi).
  auto reg = reinterpret_cast<RegisterFn>(dlsym(RTLD_DEFAULT, "opal_progress_register"));
  auto unreg = reinterpret_cast<RegisterFn>(dlsym(RTLD_DEFAULT, "opal_progress_unregister"));
  g_async = reg && unreg && reg(progress_callback) == 0;
  if (g_async) g_unregister = unreg;
  BC_LOG(LogLevel::Info, LogSys::Pmpi, "MPI_Iallreduce: %s",
         g_async ? "non-blocking, progressed from Open MPI's progress loop (opal_progress_register)"
                 : "blocking (no opal_progress_register in this MPI): completes inside the call");
}

bool requests_async() { return g_async; }

int requests_start(bc_request_t op, bc_comm_t comm, MPI_Request *request) {
  auto *p = new Pending;
  p->op = op;
  p->comm = comm;
  const int rc = PMPI_Grequest_start(query_fn, free_fn, cancel_fn, p, request);
  if (rc != MPI_SUCCESS) {
    Inside in;
    bc_wait(&p->op);  // nothing would ever complete it: finish it here
    delete p;
    return rc;
  }
  p->request = *request;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  g_pending.push_back(p);
  g_active.fetch_add(1, std::memory_order_release);
  return MPI_SUCCESS;
}

void requests_drain(bc_comm_t comm) {
  if (!g_async) return;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  // The one waiting policy (core/wait_policy.h), with a spin count of 1: the
  // drain yields after every pass, as it always has. It runs only when a
  // communicator is freed, or MPI finalised, with operations in flight: a
  // spin gains nothing there, and the peers may share this core. (bc_test
  // also counts its own idle polls per request, as any caller's loop.)
  WaitPolicy wait(1);
  for (;;) {
    bool left = false;
    for (Pending *p : g_pending) left = left || (p->op && (!comm || p->comm == comm));
    if (!left) break;
    progress_once(comm);
    wait.pause();
  }
}

void requests_finalize() {
  requests_drain(nullptr);
  if (g_unregister) g_unregister(progress_callback);
  g_unregister = nullptr;
  g_async = false;
}

}  // namespace pmpi
}  // namespace bc
