// The one waiting policy (core/wait_policy.h): when a waiter rests, how long a
// sleeper may sleep, when the timeout and the liveness checks fall due, and
// the bounded teardown wait. Timings here use margins of tens of ms: the
// machine may be busy.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "core/wait_policy.h"

using namespace bc;

namespace {

// Records what rest() asked of it.
struct FakeSleeper {
  std::vector<int> asked;
  Status idle_wait(int ms) {
    asked.push_back(ms);
    return BC_OK;
  }
};

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

TEST_CASE("wait policy: a rest once every spin_count idle polls; movement starts the spin over", "[wait]") {
  // n idle polls: which of them (1-based) were rests.
  auto rests = [](WaitPolicy &p, int n) {
    std::vector<int> at;
    for (int i = 1; i <= n; ++i)
      if (p.idle()) at.push_back(i);
    return at;
  };
  WaitPolicy w(4);
  REQUIRE(w.moved(0));  // the first poll always counts as movement
  REQUIRE_FALSE(w.moved(0));
  REQUIRE(rests(w, 11) == std::vector<int>{4, 8});
  REQUIRE(w.rest_is_next());  // 3 idle polls since the last rest
  REQUIRE(w.moved(1));        // movement: the count starts over
  REQUIRE_FALSE(w.rest_is_next());
  REQUIRE(rests(w, 4) == std::vector<int>{4});
  REQUIRE(rests(w, 2).empty());
  w.restart();
  REQUIRE(rests(w, 4) == std::vector<int>{4});
  // A spin count of 1 rests after every idle poll (the PMPI drain).
  WaitPolicy every(1);
  REQUIRE(every.rest_is_next());
  REQUIRE(rests(every, 3) == std::vector<int>{1, 2, 3});
}

TEST_CASE("wait policy: BC_SPIN_COUNT=auto yields at once only where ranks outnumber their CPUs", "[wait]") {
  REQUIRE(auto_spin_count(2, 2) == kSpinCountOwnCpu);   // a CPU each
  REQUIRE(auto_spin_count(1, 1) == kSpinCountOwnCpu);
  REQUIRE(auto_spin_count(4, 64) == kSpinCountOwnCpu);
  REQUIRE(auto_spin_count(3, 2) == kSpinCountShared);   // one CPU shared by two ranks
  REQUIRE(auto_spin_count(8, 2) == kSpinCountShared);
  REQUIRE(auto_spin_count(8, 0) == kSpinCountOwnCpu);   // CPUs unknown: as before the rule
  REQUIRE(kSpinCountShared == 1);
  REQUIRE(kSpinCountOwnCpu > 1);
}

TEST_CASE("wait policy: idle work counts per request tested, as the shm transport's own wait did", "[wait]") {
  // A waiter on k requests does 1 + k units per idle poll: with spin count 64
  // and 3 requests it rests every 16 polls (the cadence of the library before
  // the one policy: shm's yield every 64 idle tests plus the waiter's own).
  WaitPolicy w(64);
  std::vector<int> at;
  for (int i = 1; i <= 40; ++i)
    if (w.idle(1 + 3)) at.push_back(i);
  REQUIRE(at == std::vector<int>{16, 32});
  // rest_is_next() assumes the next poll does as much work as the last one.
  REQUIRE_FALSE(w.rest_is_next());  // 8 polls (32 units) since the rest at 32
  for (int i = 0; i < 7; ++i) REQUIRE_FALSE(w.idle(4));
  REQUIRE(w.rest_is_next());  // 60 units: the next 4 reach 64
  REQUIRE(w.idle(4));
  // Work that overshoots the count rests, and the count starts over from 0.
  WaitPolicy big(4);
  REQUIRE(big.idle(10));
  REQUIRE_FALSE(big.idle(1));
  REQUIRE_FALSE(big.idle(2));
  REQUIRE(big.idle(1));
  // No work is counted as one unit (a poll with nothing to test is still a poll).
  WaitPolicy zero(2);
  REQUIRE_FALSE(zero.idle(0));
  REQUIRE(zero.idle(0));
}

TEST_CASE("wait policy: a sleeper sleeps at most the cap, the liveness interval and the time left", "[wait]") {
  FakeSleeper s;
  WaitPolicy plain(64);
  REQUIRE(plain.rest(&s) == BC_OK);
  REQUIRE(plain.rest(&s, 1) == BC_OK);  // the progress thread holds the lock: 1 ms
  REQUIRE(s.asked == std::vector<int>{100, 1});
  s.asked.clear();
  WaitPolicy live(64, 0, 30);
  REQUIRE(live.rest(&s) == BC_OK);
  WaitPolicy slow_live(64, 0, 500);
  REQUIRE(slow_live.rest(&s) == BC_OK);
  REQUIRE(s.asked == std::vector<int>{30, 100});
  s.asked.clear();
  // Not past the timeout (at most the 60 ms left), and at least 1 ms.
  WaitPolicy timed(64, 60);
  REQUIRE(timed.rest(&s) == BC_OK);
  REQUIRE(s.asked.back() <= 61);
  REQUIRE(s.asked.back() >= 1);
  sleep_ms(80);
  REQUIRE(timed.rest(&s) == BC_OK);
  REQUIRE(s.asked.back() == 1);
  // Without a sleeper: a yield, and BC_OK.
  FakeSleeper *none = nullptr;
  REQUIRE(timed.rest(none) == BC_OK);
}

TEST_CASE("wait policy: the timeout counts from the last movement", "[wait]") {
  WaitPolicy never(64, 0);
  WaitPolicy w(64, 30);
  REQUIRE(w.moved(0));
  REQUIRE_FALSE(w.timed_out());
  sleep_ms(50);
  REQUIRE(w.timed_out());
  REQUIRE_FALSE(never.timed_out());
  REQUIRE(w.moved(1));
  REQUIRE_FALSE(w.timed_out());
}

TEST_CASE("wait policy: stillness counts from the first rest after a movement at the latest", "[wait]") {
  // The clock is read when the wait goes idle, not on every movement (25 ns a read, several per
  // microsecond-long call): a wait that rests and then stays still times out as before.
  WaitPolicy w(4, 30);
  REQUIRE(w.moved(0));
  for (int k = 0; k < 3; ++k) REQUIRE_FALSE(w.idle());
  REQUIRE(w.idle());  // the rest: the stillness is stamped here
  sleep_ms(50);
  REQUIRE(w.timed_out());
  REQUIRE(w.moved(1));
  REQUIRE_FALSE(w.timed_out());
  // A wait that never moved counts from its first rest too.
  WaitPolicy fresh(1, 30);
  REQUIRE(fresh.idle());
  sleep_ms(50);
  REQUIRE(fresh.timed_out());
}

TEST_CASE("wait policy: liveness checks only after an interval of stillness, one per interval", "[wait]") {
  WaitPolicy off(64, 0, 0);
  WaitPolicy w(64, 0, 30);
  REQUIRE(w.moved(0));
  REQUIRE_FALSE(w.liveness_due());  // the fast path never checks
  sleep_ms(50);
  REQUIRE_FALSE(off.liveness_due());
  REQUIRE(w.liveness_due());
  REQUIRE_FALSE(w.liveness_due());  // checked just now
  sleep_ms(50);
  REQUIRE(w.liveness_due());
  REQUIRE(w.moved(1));
  REQUIRE_FALSE(w.liveness_due());
}

TEST_CASE("wait policy: a bounded wait ends when done or at its deadline", "[wait]") {
  int polls = 0;
  REQUIRE(WaitPolicy::poll_for(1000, [&] { return ++polls == 3; }, [] { return false; }));
  REQUIRE(polls == 3);
  // A deadline already passed: done() once, advance() never.
  int advanced = 0;
  REQUIRE_FALSE(WaitPolicy::poll_for(0, [] { return false; }, [&] { return ++advanced > 0; }));
  REQUIRE(advanced == 0);
  // With a pause: roughly deadline / pause polls, not thousands.
  polls = 0;
  const auto t0 = WaitPolicy::Clock::now();
  REQUIRE_FALSE(WaitPolicy::poll_for(30, [&] { return ++polls < 0; }, [] { return false; }, 5));
  REQUIRE(WaitPolicy::Clock::now() - t0 >= std::chrono::milliseconds(30));
  REQUIRE(polls <= 8);
}
