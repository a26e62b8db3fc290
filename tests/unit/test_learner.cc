// The learner behind every learned choice (lib/core/learner.h), driven
// without MPI: the agreement is a fake that stands for the other ranks. The
// preload's two-candidate shape is covered by test_pmpi_route.cc; these cover
// what the plan learning adds: three candidates, the incumbent's margin,
// seeded verdicts confirmed or found stale, and the rotation of a second look.
#include <catch2/catch.hpp>

#include <vector>

#include "core/learner.h"

using bc::LearnShape;
using bc::Learner;

namespace {

LearnShape three(int incumbent = 0) {
  LearnShape s;
  s.candidates = 3;
  s.incumbent = incumbent;
  s.warmup = 1;
  s.timed = 3;
  s.min_win_ratio = 0.97;
  s.confirm = 3;
  s.confirm_ratio = 1.25;
  s.late_looks = {100};
  return s;
}

Learner::Agree as_is() {
  return [](double *, int) { return true; };
}

// One look with these per-candidate call times; returns the candidates in call order.
std::vector<int> look(Learner *l, int64_t bytes, const std::vector<double> &secs, const Learner::Agree &agree) {
  std::vector<int> order;
  const int n = Learner::probes(l->shape(Learner::bucket_of(bytes)));
  for (int k = 0; k < n; ++k) {
    bool timed = false;
    const int c = l->next(bytes, &timed);
    order.push_back(c);
    if (timed) l->record(bytes, c, secs[static_cast<size_t>(c)], agree);
  }
  return order;
}

}  // namespace

TEST_CASE("Learner: three candidates take turns; the fastest wins when clearly faster than the incumbent",
          "[learner]") {
  Learner l([](int) { return three(); });
  const std::vector<int> order = look(&l, 1 << 20, {3e-3, 1e-3, 2e-3}, as_is());
  CHECK(order == std::vector<int>({0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  bool timed = true;
  CHECK(l.next(1 << 20, &timed) == 1);
  CHECK_FALSE(timed);
  const Learner::View v = l.view(Learner::bucket_of(1 << 20));
  CHECK(v.decided);
  CHECK(v.medians == std::vector<double>({3e-3, 1e-3, 2e-3}));
  CHECK(v.served == std::vector<uint64_t>({4, 5, 4}));
  // Within the margin (2 % faster), the incumbent keeps the bucket.
  Learner close([](int) { return three(); });
  look(&close, 4096, {1.00e-3, 0.98e-3, 1.5e-3}, as_is());
  CHECK(close.next(4096, &timed) == 0);
}

TEST_CASE("Learner: the agreed (slowest rank's) times decide; a failed agreement keeps candidate 0 for good",
          "[learner]") {
  Learner l([](int) { return three(2); });
  // Locally candidate 0 looks fastest; another rank saw it slowest.
  look(&l, 64, {1e-3, 2e-3, 3e-3}, [](double *m, int n) {
    REQUIRE(n == 3);
    m[0] = 9e-3;
    return true;
  });
  bool timed = false;
  CHECK(l.next(64, &timed) == 1);
  Learner failed([](int) { return three(2); });
  look(&failed, 64, {3e-3, 2e-3, 1e-3}, [](double *, int) { return false; });
  CHECK(failed.next(64, &timed) == 0);
  CHECK(failed.view(Learner::bucket_of(64)).failed);
  for (int k = 0; k < 300; ++k) REQUIRE(failed.count_final(64, 0));  // no late look after a failure
}

TEST_CASE("Learner: a seeded verdict is confirmed by its own calls, or learned again when it went stale",
          "[learner]") {
  const int64_t bytes = 8 << 20;
  const int b = Learner::bucket_of(bytes);
  Learner l([](int) { return three(); });
  l.seed(b, 2, {3e-3, 2e-3, 1e-3});
  bool timed = true;
  CHECK(l.next(bytes, &timed) == 2);  // the warm-up call: untimed
  CHECK_FALSE(timed);
  for (int k = 0; k < 3; ++k) {
    CHECK(l.next(bytes, &timed) == 2);
    CHECK(timed);
    l.record(bytes, 2, 1.2e-3, as_is());  // 1.2x: within confirm_ratio
  }
  Learner::View v = l.view(b);
  CHECK(v.seeded);
  CHECK_FALSE(v.stale);
  CHECK_FALSE(v.confirming);
  CHECK(v.confirmed_seconds == Approx(1.2e-3));
  int c = -1;
  CHECK(l.final_choice(bytes, &c));
  CHECK(c == 2);
  // Slower than 1.25x its time but still faster than the runner-up was: kept.
  Learner slower([](int) { return three(); });
  slower.seed(b, 2, {3e-3, 2e-3, 1e-3});
  slower.next(bytes, &timed);
  for (int k = 0; k < 3; ++k) {
    slower.next(bytes, &timed);
    slower.record(bytes, 2, 1.8e-3, as_is());
  }
  CHECK_FALSE(slower.view(b).stale);
  // Slower than both: stale, and the bucket learns from nothing (candidate 0 first), its old numbers gone.
  Learner stale([](int) { return three(); });
  stale.seed(b, 2, {3e-3, 2e-3, 1e-3});
  stale.next(bytes, &timed);
  for (int k = 0; k < 3; ++k) {
    stale.next(bytes, &timed);
    stale.record(bytes, 2, 2.5e-3, as_is());
  }
  v = stale.view(b);
  CHECK(v.stale);
  CHECK_FALSE(v.decided);
  const std::vector<int> order = look(&stale, bytes, {4e-3, 2.6e-3, 2.5e-3}, as_is());
  CHECK(order.front() == 0);
  v = stale.view(b);
  CHECK(v.decided);
  CHECK(v.winner == 2);
  CHECK(v.medians == std::vector<double>({4e-3, 2.6e-3, 2.5e-3}));  // not the lowest with the stale ones
  // A seed for other candidates (another count) is not taken.
  Learner other([](int) { return three(); });
  other.seed(b, 1, {1e-3, 2e-3});
  CHECK_FALSE(other.view(b).decided);
}

TEST_CASE("Learner: a second look runs in rotated order; a late look at the set call count", "[learner]") {
  LearnShape s = three();
  s.recheck_ratio = 1.5;
  s.recheck_after = 2;
  Learner l([s](int) { return s; });
  look(&l, 1024, {1.0e-3, 1.2e-3, 3e-3}, as_is());  // candidate 0 wins, but narrowly: a second look
  CHECK(l.view(Learner::bucket_of(1024)).second_look_pending);
  bool timed = false;
  for (int k = 0; k < 2; ++k) CHECK(l.next(1024, &timed) == 0);
  const std::vector<int> second = look(&l, 1024, {1.0e-3, 0.8e-3, 3e-3}, as_is());
  CHECK(second == std::vector<int>({1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0}));
  CHECK(l.next(1024, &timed) == 1);
  // One candidate: nothing to learn, never timed.
  Learner one([](int) {
    LearnShape o;
    o.candidates = 1;
    return o;
  });
  for (int k = 0; k < 200; ++k) {
    REQUIRE(one.next(8, &timed) == 0);
    REQUIRE_FALSE(timed);
  }
  // A late look at the 100th call of the bucket: its own times decide (the
  // plans' shape); with lowest_of_looks (the preload's), each candidate's lowest
  // of both looks, and candidate 0's earlier 1 ms keeps the bucket.
  for (bool lowest : {false, true}) {
  LearnShape ls = three();
  ls.lowest_of_looks = lowest;
  Learner late([ls](int) { return ls; });
  look(&late, 512, {1e-3, 2e-3, 3e-3}, as_is());
  uint64_t calls = 12;
  while (calls + 1 < 100) {
    REQUIRE(late.count_final(512, 0));
    ++calls;
  }
  REQUIRE(late.count_final(512, 0));
  CHECK_FALSE(late.count_final(512, 0));  // the 100th: a look is due
  const std::vector<int> again = look(&late, 512, {3e-3, 2e-3, 1e-3}, as_is());
  CHECK(again.front() == 0);
  CHECK(late.next(512, &timed) == (lowest ? 0 : 2));
  CHECK(late.view(Learner::bucket_of(512)).looks == 2);
  }
}
