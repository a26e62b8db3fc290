// The one waiting policy: what a thread does while it polls for something
// that is not there yet.
//
// Every waiter polls something that never blocks (Operation::progress,
// bc_test, an agreement's MPI_Test) and, while nothing moves:
//
//   1. spins: BC_SPIN_COUNT polls, with a pause instruction between two
//      (cpu_relax): the answer usually comes within microseconds, sooner than
//      a system call would return;
//   2. rests, once every BC_SPIN_COUNT polls: sleeps on the transport's event
//      fd when every peer uses one transport that can (Transport::idle_wait:
//      UCX with BC_UCX_WAIT=event), bounded so that the timeout and the
//      liveness checks still get their turn; otherwise yields the core
//      (sched_yield), as MPI's yield_when_idle does: when ranks outnumber
//      cores, the peer it waits for may need this very core;
//   3. gives up: after a rest the waiter asks liveness_due() (check the peers
//      every BC_LIVENESS_INTERVAL of stillness) and timed_out() (BC_TIMEOUT
//      without movement).
//
// Its users: Operation::wait (blocking calls, bc_wait), the progress thread,
// bc_test (the caller's loop is the wait; the policy rides on the request),
// the BC_CHECK_ARGS agreement waits and the PMPI preload's drain. Transports
// never yield or sleep on their own: test() returns at once, and their bounded
// teardown loops go through poll_until().
//
// In core, not sched: the transports (below sched) and the PMPI preload (which
// reaches only the C API and core headers) use it too. Header-only for the
// preload: its library cannot call libblueconnect.so's hidden symbols.
#pragma once

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "core/status.h"

namespace bc {

// A polite spin: lets a sibling hardware thread (often the peer) use the core.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// BC_SPIN_COUNT=auto (0, the default): how many idle polls a waiter spins
// before it yields, from how many of the communicator's ranks share this node
// and how many CPUs they may run on between them (the union of their affinity
// masks; 0: unknown). While every rank has a CPU of its own, a wait spins
// kSpinCountOwnCpu polls: the answer usually comes within microseconds, and a
// sched_yield costs a system call. When ranks outnumber those CPUs, the peer a
// rank waits for may need this very core, and every idle poll yields
// (kSpinCountShared), as Open MPI's mpi_yield_when_idle does. Measured on 2
// cores (bc_bench back to back, 8 B-2 KiB, against Open MPI with yield): 4
// ranks took 9-15 us a call spinning 64 polls, 7-9 yielding at once (Open
// MPI 6-8); 8 ranks 40-45 against 21-34 (Open MPI 20-27).
constexpr int64_t kSpinCountOwnCpu = 64;
constexpr int64_t kSpinCountShared = 1;
inline int64_t auto_spin_count(int ranks_on_node, int cpus_on_node) {
  return cpus_on_node > 0 && ranks_on_node > cpus_on_node ? kSpinCountShared : kSpinCountOwnCpu;
}

class WaitPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  // The longest rest on a sleeper: the longest a wait can be late to notice
  // a timeout or liveness check that fell due during the sleep.
  static constexpr int64_t kRestCapMs = 100;

  // spin_count: BC_SPIN_COUNT, idle polls per rest (1: rest after every idle
  // poll); timeout_ms: BC_TIMEOUT (0: never); liveness_ms:
  // BC_LIVENESS_INTERVAL when the checks are on (0: never due).
  explicit WaitPolicy(int64_t spin_count, int64_t timeout_ms = 0, int64_t liveness_ms = 0)
      : spin_count_(spin_count), timeout_ms_(timeout_ms), liveness_ms_(liveness_ms) {}

  // Progress detection, after a poll that saw `progress`, a count that grows
  // whenever anything moved (Operation::completions): true when it grew; the
  // spin then starts over and the timeout counts from now (stamp_move).
  bool moved(uint64_t progress) {
    if (progress == last_seen_) return false;
    last_seen_ = progress;
    move_unstamped_ = true;
    idle_polls_ = 0;
    return true;
  }
  // The spin starts over: for a poller that only knows that something moved
  // (the progress thread: a pass over several requests), or that slept.
  void restart() { idle_polls_ = 0; }
  // After a poll where nothing moved: false while spinning (after a pause per
  // unit of `work`), true once spin_count units of idle work have added up:
  // then rest(). `work` is what the poll did: 1 for a poll of one thing;
  // Operation::wait passes 1 + the transport requests it tested, which is the
  // cadence the library had before this policy (the shm transport paused per
  // idle test and yielded every BC_SPIN_COUNT of them, on top of the
  // waiter's yield every BC_SPIN_COUNT polls). Counting polls alone yielded
  // k+1 times less often with k requests pending, and at np 8 on 2 cores,
  // where the peer waited for needs this core, 4-16 KiB all-reduces took
  // 1.3-1.5x longer.
  bool idle(uint64_t work = 1) {
    const int64_t units = work > 0 ? static_cast<int64_t>(work) : 1;
    last_work_ = units;
    idle_polls_ += units;
    if (idle_polls_ < spin_count_) {
      for (int64_t i = 0; i < units; ++i) cpu_relax();
      return false;
    }
    idle_polls_ = 0;
    stamp_move();  // the stillness starts counting, at the latest, here
    return true;
  }
  // Whether the next idle poll will be a rest, if it does as much work as the
  // last: the progress thread checks the requests' timeouts in that pass.
  bool rest_is_next() const { return idle_polls_ + last_work_ >= spin_count_; }

  // A rest: sleeps on `sleeper` (Transport::idle_wait) for at most cap_ms, the
  // liveness interval and the time left before the timeout; without one,
  // yields the core. A sleeper's failure is returned. (A template: the
  // sleeper is a Transport, which core may not include.)
  template <class Sleeper>
  Status rest(Sleeper *sleeper, int64_t cap_ms = kRestCapMs) {
    if (!sleeper) {
      rest();
      return BC_OK;
    }
    if (liveness_ms_ > 0) cap_ms = std::min(cap_ms, liveness_ms_);
    return sleeper->idle_wait(static_cast<int>(rest_ms(cap_ms)));
  }
  // A rest that yields the core: for a poller with nothing to sleep on.
  void rest() { sched_yield(); }
  // After a poll where nothing moved, for a poller that may not sleep nor
  // time out (bc_test must return at once; MPI_Test gives no progress count):
  // spins, and yields once every spin_count such polls.
  void pause(uint64_t work = 1) {
    if (idle(work)) rest();
  }

  // Nothing has moved for longer than the timeout.
  bool timed_out() const { return timeout_ms_ > 0 && since_move_ms() > timeout_ms_; }
  // True once nothing has moved for the liveness interval and the last check
  // was at least that long ago: then check the peers. Never on the fast path:
  // it takes an interval of stillness.
  bool liveness_due() {
    if (liveness_ms_ <= 0 || since_move_ms() < liveness_ms_) return false;
    const Clock::time_point now = Clock::now();
    if (last_check_ != Clock::time_point{} && now - last_check_ < std::chrono::milliseconds(liveness_ms_))
      return false;
    last_check_ = now;
    return true;
  }

  // The bounded waits of teardown and failure (a cancel that gives a request
  // a moment to finish while its buffer is still there, a worker's last
  // flush, the liveness watch catching up with a transport error): until
  // done() or `deadline`, calls advance() (true when it moved anything) and,
  // when nothing moved, yields the core, or sleeps pause_ms for a done() too
  // costly to repeat at once. No spin: nothing here is on the fast path, and
  // the peer that would finish the request may need the core. True when done.
  template <class Done, class Advance>
  static bool poll_until(Clock::time_point deadline, Done done, Advance advance, int64_t pause_ms = 0) {
    for (;;) {
      if (done()) return true;
      if (Clock::now() >= deadline) return false;
      if (advance()) continue;
      if (pause_ms <= 0) {
        sched_yield();
      } else {
        const struct timespec ts = {static_cast<time_t>(pause_ms / 1000), (pause_ms % 1000) * 1000000L};
        nanosleep(&ts, nullptr);
      }
    }
  }
  template <class Done, class Advance>
  static bool poll_for(int64_t ms, Done done, Advance advance, int64_t pause_ms = 0) {
    return poll_until(Clock::now() + std::chrono::milliseconds(ms), done, advance, pause_ms);
  }

 private:
  // The time of the last movement (or of the start), read from the clock when
  // it is first needed: at the first rest after it (at most spin_count idle
  // polls later, microseconds) or when a timeout or liveness question asks.
  // Why not at once: a clock read costs 25 ns here, and a blocking 4-byte
  // all-reduce at np 2 (about 1 us) read it in the constructor and on every
  // movement, 4-5 times a call with the stage times (10 % of its samples in
  // __vdso_clock_gettime); only a wait that goes idle needs the time.
  void stamp_move() const {
    if (!move_unstamped_) return;
    last_move_ = Clock::now();
    move_unstamped_ = false;
  }
  int64_t since_move_ms() const {
    stamp_move();
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_move_).count();
  }
  // How long a rest may sleep: at most cap_ms, and not past the timeout.
  int64_t rest_ms(int64_t cap_ms) const {
    if (timeout_ms_ <= 0) return cap_ms;
    return std::max<int64_t>(1, std::min<int64_t>(cap_ms, timeout_ms_ - since_move_ms() + 1));
  }

  int64_t spin_count_;
  int64_t timeout_ms_;
  int64_t liveness_ms_;
  int64_t idle_polls_ = 0;
  int64_t last_work_ = 1;
  uint64_t last_seen_ = UINT64_MAX;
  mutable Clock::time_point last_move_{};
  mutable bool move_unstamped_ = true;  // the start counts as a movement
  Clock::time_point last_check_{};
};

}  // namespace bc
