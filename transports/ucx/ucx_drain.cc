#include "transports/ucx/ucx_drain.h"

#include <pthread.h>

#include <chrono>
#include <mutex>

#include "transports/ucx/ucx_transport.h"

namespace bc {
namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

void drain_loop(UcxWorker *w) {
  pthread_setname_np(pthread_self(), "bc-ucx-drain");  // for ps, top and gdb
  std::unique_lock<std::mutex> lk(w->drain_mutex);
  while (!w->drain_stop) {
    const bool recent = now_ns() - w->last_send_ns.load(std::memory_order_relaxed) < 1000000000LL;
    w->drain_cv.wait_for(lk, std::chrono::milliseconds(recent ? kDrainFastMs : kDrainSlowMs));
    if (w->drain_stop) break;
    lk.unlock();
    {
      std::unique_lock<std::recursive_mutex> wl(w->mutex, std::try_to_lock);
      if (wl.owns_lock() && w->worker) ucx_progress_burst(w);
    }
    lk.lock();
  }
}

}  // namespace

void drain_start(UcxWorker *w) {
  w->drain_stop = false;
  w->drainer = std::thread(drain_loop, w);
}

void drain_stop(UcxWorker *w) {
  {
    std::lock_guard<std::mutex> lock(w->drain_mutex);
    w->drain_stop = true;
  }
  w->drain_cv.notify_all();
  if (w->drainer.joinable()) w->drainer.join();
}

void drain_note_send(UcxWorker *w) {
  const int64_t now = now_ns();
  const int64_t before = w->last_send_ns.exchange(now, std::memory_order_relaxed);
  // The first send after a quiet second: wake the drainer from its slow wait
  // (a wake-up it misses costs at most kDrainSlowMs).
  if (now - before >= 1000000000LL) w->drain_cv.notify_one();
}

}  // namespace bc
