// The PMPI preload's learned route (lib/pmpi/pmpi_route.h), driven without MPI:
// the agreement is a fake that stands for the other ranks.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "pmpi/pmpi_route.h"

using namespace bc::pmpi;

namespace {

// Runs one bucket's probes with the given per-call times; returns the calls' routes.
std::vector<Path> probe(SizeRoute *r, int64_t bytes, double bc_s, double mpi_s, const SizeRoute::Agree &agree) {
  std::vector<Path> paths;
  for (int k = 0; k < SizeRoute::probes(SizeRoute::bucket_of(bytes)); ++k) {
    bool timed = false;
    const Path p = r->next(bytes, &timed);
    paths.push_back(p);
    if (timed) r->record(bytes, p, p == Path::Bc ? bc_s : mpi_s, agree);
  }
  return paths;
}

SizeRoute::Agree as_is() {
  return [](double *, double *) { return true; };
}

// A bucket whose first look went to MPI: its next kRecheckAfter calls follow that, then the second look probes MPI
// first and finds BlueConnect at its loop's 1.0 ms against MPI's 1.2, and BlueConnect takes the bucket.
void second_look_finds_bc(SizeRoute *r, int64_t bytes) {
  const int b = SizeRoute::bucket_of(bytes);
  bool timed = true;
  for (int k = 0; k < SizeRoute::kRecheckAfter; ++k) {
    CHECK(r->next(bytes, &timed) == Path::Mpi);
    CHECK_FALSE(timed);
  }
  std::vector<Path> second = probe(r, bytes, 1.0e-3, 1.2e-3, as_is());
  std::vector<Path> want(SizeRoute::probes(b) / 2, Path::Mpi);
  want.resize(SizeRoute::probes(b), Path::Bc);
  CHECK(second == want);
  CHECK(r->next(bytes, &timed) == Path::Bc);
  CHECK_FALSE(timed);
  CHECK_THAT(r->describe(), Catch::Matchers::Contains("blueconnect (slowest rank's median, lower of two looks: "
                                                      "blueconnect 1000.00 us, mpi 1200.00 us)"));
}

}  // namespace

TEST_CASE("SizeRoute: buckets are powers of two", "[pmpi]") {
  CHECK(SizeRoute::bucket_of(0) == 0);
  CHECK(SizeRoute::bucket_of(1) == 0);
  CHECK(SizeRoute::bucket_of(4) == 2);
  CHECK(SizeRoute::bucket_of(7) == 2);
  CHECK(SizeRoute::bucket_of(8) == 3);
  CHECK(SizeRoute::bucket_of(int64_t{1} << 62) == SizeRoute::kBuckets - 1);
}

TEST_CASE("SizeRoute: probes each library back to back, then keeps the faster", "[pmpi]") {
  SizeRoute r;
  const std::vector<Path> paths = probe(&r, 4, 100e-6, 40e-6, as_is());
  // Tiny: 1 + 9 runs of 8 calls through BlueConnect, then the same through MPI.
  std::vector<Path> want(73, Path::Bc);
  want.resize(146, Path::Mpi);
  CHECK(paths == want);
  // Runs shorten up to 32 KiB; from there 1 + 9 single calls, and from 1 MiB 1 + 3.
  CHECK(SizeRoute::probes(SizeRoute::bucket_of(4096)) == 146);
  CHECK(SizeRoute::probes(SizeRoute::bucket_of(8191)) == 146);
  CHECK(SizeRoute::probes(SizeRoute::bucket_of(8192)) == 74);
  CHECK(SizeRoute::probes(SizeRoute::bucket_of(16384)) == 38);
  CHECK(SizeRoute::probes(SizeRoute::bucket_of(32768)) == 20);
  CHECK(SizeRoute::probes(SizeRoute::bucket_of((1 << 20) - 1)) == 20);
  CHECK(SizeRoute::probes(SizeRoute::bucket_of(1 << 20)) == 8);
  bool timed = true;
  CHECK(r.next(5, &timed) == Path::Mpi);  // same bucket (4..7): MPI was faster
  CHECK_FALSE(timed);
  CHECK(r.unprobed(6) == Path::Mpi);
  // Another bucket learns on its own, and BlueConnect keeps it when it is faster.
  probe(&r, 1 << 20, 1e-3, 2e-3, as_is());
  CHECK(r.next(1 << 20, &timed) == Path::Bc);
  CHECK_FALSE(timed);
  const std::string d = r.describe();
  CHECK_THAT(d, Catch::Matchers::Contains("bytes 4-7: blueconnect 73, mpi 75; mpi (slowest rank's median: blueconnect 100.00 us, mpi 40.00 us)"));
  CHECK_THAT(d, Catch::Matchers::Contains("bytes 1048576-2097151: blueconnect 5, mpi 4; blueconnect"));
}

TEST_CASE("SizeRoute: the agreed (slowest rank's) numbers decide; BlueConnect needs a clear win", "[pmpi]") {
  SizeRoute r;
  // Locally MPI looks faster, but another rank saw it slower: all ranks follow the agreement.
  probe(&r, 64, 50e-6, 30e-6, [](double *bc, double *mpi) {
    *bc = 50e-6;
    *mpi = 90e-6;
    return true;
  });
  bool timed = false;
  CHECK(r.next(64, &timed) == Path::Bc);
  // A tie, or a lead under kMinWinSeconds (what a probe cannot resolve), stays with MPI ...
  SizeRoute tie;
  probe(&tie, 64, 50e-6, 50e-6, as_is());
  CHECK(tie.next(64, &timed) == Path::Mpi);
  SizeRoute close;
  probe(&close, 8, 0.55e-6, 0.55e-6 + 0.5 * SizeRoute::kMinWinSeconds, as_is());
  CHECK(close.next(8, &timed) == Path::Mpi);
  // ... and a lead of at least kMinWinSeconds goes to BlueConnect, at any size:
  SizeRoute tiny;
  probe(&tiny, 8, 0.50e-6, 0.66e-6, as_is());  // np 2, 8 B, as measured once its calls stopped allocating
  CHECK(tiny.next(8, &timed) == Path::Bc);
  SizeRoute clear;
  probe(&clear, 512, 0.9e-6, 1.2e-6, as_is());  // 0.3 us ahead
  CHECK(clear.next(512, &timed) == Path::Bc);
  SizeRoute big;
  probe(&big, 64 << 20, 10.0e-3, 10.001e-3, as_is());  // 0.01 % ahead, but 1 us
  CHECK(big.next(64 << 20, &timed) == Path::Bc);
}

TEST_CASE("SizeRoute: medians ignore one outlier; a failed agreement keeps BlueConnect", "[pmpi]") {
  SizeRoute r;
  for (int k = 0; k < SizeRoute::probes(SizeRoute::bucket_of(128)); ++k) {
    bool timed = false;
    const Path p = r.next(128, &timed);
    // BlueConnect: 10 us, but 500 us once (a hiccup); MPI: 20 us each.
    if (timed) r.record(128, p, p == Path::Bc ? (k == 2 ? 500e-6 : 10e-6) : 20e-6, as_is());
  }
  bool timed = false;
  CHECK(r.next(128, &timed) == Path::Bc);
  SizeRoute failed;
  probe(&failed, 128, 100e-6, 1e-6, [](double *, double *) { return false; });
  CHECK(failed.next(128, &timed) == Path::Bc);
  CHECK_THAT(failed.describe(), Catch::Matchers::Contains("the agreement failed"));
  // While learning, a non-blocking call goes to BlueConnect and does not advance the probes.
  SizeRoute learning;
  CHECK(learning.unprobed(256) == Path::Bc);
  CHECK(learning.next(256, &timed) == Path::Bc);
  CHECK_FALSE(timed);  // still the untimed first probe
  CHECK_THAT(learning.describe(), Catch::Matchers::Contains("learning (1 of 146 probes)"));
}

TEST_CASE("SizeRoute: a tiny call is timed as a run of calls, so alternating call times average out", "[pmpi]") {
  // Open MPI's 4-byte all-reduce at np 2 (2026-12-03): a slow call (1.6 us) and a fast one (0.3 us)
  // in turn on each rank, 0.95 us a call on average; BlueConnect 1.3 us on every call. Single calls
  // gave a median on either mode, and the slowest rank's slow one sent the bucket to BlueConnect.
  for (int slow_first = 0; slow_first < 2; ++slow_first) {
    SizeRoute r;
    int mpi_calls = 0;
    double want_mpi = 0;
    const int64_t bytes = 4;
    for (int k = 0; k < SizeRoute::probes(SizeRoute::bucket_of(bytes)); ++k) {
      bool timed = false;
      const Path p = r.next(bytes, &timed);
      if (!timed) continue;
      double s = 1.3e-6;
      if (p == Path::Mpi) s = (mpi_calls++ % 2 == 0) == (slow_first == 1) ? 1.6e-6 : 0.3e-6;
      if (p == Path::Mpi) want_mpi += s;
      r.record(bytes, p, s, [](double *bc, double *mpi) {
        // Two ranks out of step: the other rank's runs are the same calls, so its per-call mean is too.
        *bc = std::max(*bc, 1.3e-6);
        *mpi = std::max(*mpi, 0.95e-6);
        return true;
      });
    }
    CHECK(mpi_calls == 72);
    CHECK(want_mpi / mpi_calls == Approx(0.95e-6));
    bool timed = true;
    CHECK(r.next(bytes, &timed) == Path::Mpi);
    CHECK_FALSE(timed);
    CHECK_THAT(r.describe(), Catch::Matchers::Contains("mpi (slowest rank's median: blueconnect 1.30 us, mpi 0.95 us)"));
  }
  // One preempted call spoils one run, not the decision: BlueConnect 10 us with a 500 us call, MPI 20 us.
  SizeRoute r;
  int bc_calls = 0;
  for (int k = 0; k < SizeRoute::probes(SizeRoute::bucket_of(64)); ++k) {
    bool timed = false;
    const Path p = r.next(64, &timed);
    if (timed) r.record(64, p, p == Path::Bc ? (bc_calls++ == 30 ? 500e-6 : 10e-6) : 20e-6, as_is());
  }
  bool timed = true;
  CHECK(r.next(64, &timed) == Path::Bc);
  CHECK_THAT(r.describe(), Catch::Matchers::Contains("blueconnect 10.00 us, mpi 20.00 us"));
}

TEST_CASE("SizeRoute: a close call gets a second look with MPI first; the lower medians decide", "[pmpi]") {
  const int64_t bytes = 2 << 20;
  SizeRoute r;
  // Round 0: BlueConnect's probes pay first touches (2.49 ms), MPI 2.40 ms: MPI, but close.
  std::vector<Path> first = probe(&r, bytes, 2.49e-3, 2.40e-3, as_is());
  CHECK(first.front() == Path::Bc);
  CHECK_THAT(r.describe(), Catch::Matchers::Contains("mpi 2400.00 us); a second look follows"));
  // Round 1: MPI first this time, and BlueConnect at its loop's 1.0 ms.
  second_look_finds_bc(&r, bytes);
  bool timed = true;
  // Decided until the first late look: no third look soon after.
  for (int k = 0; k < 3 * SizeRoute::kRecheckAfter; ++k) {
    CHECK(r.next(bytes, &timed) == Path::Bc);
    CHECK_FALSE(timed);
  }
  // The lower medians: a second look that is slower for both keeps the first's numbers.
  SizeRoute s;
  probe(&s, bytes, 1.1e-3, 1.0e-3, as_is());
  for (int k = 0; k < SizeRoute::kRecheckAfter; ++k) s.next(bytes, &timed);
  probe(&s, bytes, 5e-3, 5e-3, as_is());
  CHECK(s.next(bytes, &timed) == Path::Mpi);
}

TEST_CASE("SizeRoute: final_route says when a caller may route a bucket itself", "[pmpi]") {
  SizeRoute r;
  Path path = Path::Bc;
  CHECK_FALSE(r.final_route(1 << 20, &path));  // never seen
  probe(&r, 1 << 20, 1e-3, 3e-3, as_is());      // BlueConnect three times as fast: final at once
  REQUIRE(r.final_route(1 << 20, &path));
  CHECK(path == Path::Bc);
  r.count_final(1 << 20, Path::Bc);
  CHECK_THAT(r.describe(), Catch::Matchers::Contains("bytes 1048576-2097151: blueconnect 5, mpi 4;"));
  // MPI's clear win is not final until its second look is done.
  probe(&r, 4 << 20, 3e-3, 1e-3, as_is());
  CHECK_FALSE(r.final_route(4 << 20, &path));
  // A close call is not final until its second look is done.
  const int64_t bytes = 2 << 20;
  probe(&r, bytes, 1.1e-3, 1.0e-3, as_is());
  CHECK_FALSE(r.final_route(bytes, &path));
  bool timed = false;
  for (int k = 0; k < SizeRoute::kRecheckAfter; ++k) r.next(bytes, &timed);
  CHECK_FALSE(r.final_route(bytes, &path));  // the second look's probes are next
  probe(&r, bytes, 1.1e-3, 1.0e-3, as_is());
  REQUIRE(r.final_route(bytes, &path));
  CHECK(path == Path::Mpi);
  // bucket_of agrees with the powers of two at every boundary.
  for (int b = 1; b < 62; ++b) {
    CHECK(SizeRoute::bucket_of((int64_t{1} << b) - 1) == std::min(b - 1, SizeRoute::kBuckets - 1));
    CHECK(SizeRoute::bucket_of(int64_t{1} << b) == std::min(b, SizeRoute::kBuckets - 1));
  }
}

TEST_CASE("SizeRoute: BlueConnect's clear win gets no second look; MPI's, however clear, does", "[pmpi]") {
  const int64_t bytes = 1 << 20;
  SizeRoute r;
  probe(&r, bytes, 1e-3, 3e-3, as_is());  // BlueConnect three times as fast, though probed first
  CHECK_THAT(r.describe(), !Catch::Matchers::Contains("second look"));
  bool timed = true;
  for (int k = 0; k < 4 * SizeRoute::kRecheckAfter; ++k) {
    CHECK(r.next(bytes, &timed) == Path::Bc);
    CHECK_FALSE(timed);
  }
  // np 8 on 2 cores, 1 MiB (2026-12-05): BlueConnect's first probes read 2.98 ms where its loop takes 1.0 ms,
  // MPI's 1.47 ms. The first look gives the bucket to MPI; the second, MPI first, finds BlueConnect's loop time.
  SizeRoute s;
  probe(&s, bytes, 2.98e-3, 1.47e-3, as_is());
  CHECK_THAT(s.describe(), Catch::Matchers::Contains("blueconnect 2980.00 us, mpi 1470.00 us); a second look follows"));
  second_look_finds_bc(&s, bytes);
  // Where MPI is faster in both looks it keeps the bucket, and no third look follows before the late ones.
  SizeRoute t;
  probe(&t, bytes, 3e-3, 1e-3, as_is());
  for (int k = 0; k < SizeRoute::kRecheckAfter; ++k) t.next(bytes, &timed);
  probe(&t, bytes, 2.5e-3, 1.1e-3, as_is());
  for (int k = 0; k < 4 * SizeRoute::kRecheckAfter; ++k) {
    CHECK(t.next(bytes, &timed) == Path::Mpi);
    CHECK_FALSE(timed);
  }
  CHECK_THAT(t.describe(), Catch::Matchers::Contains("mpi (slowest rank's median, lower of two looks: "
                                                     "blueconnect 2500.00 us, mpi 1000.00 us)"));
}

namespace {

// Calls of a settled bucket until it has seen `total` calls: every one follows the route, untimed, and a caller
// may route each itself (final_route, count_final) but the last, at which a look is due.
void follow_until(SizeRoute *r, int64_t bytes, uint64_t total, uint64_t *calls, Path want) {
  bool timed = true;
  Path path = want == Path::Bc ? Path::Mpi : Path::Bc;
  while (*calls + 1 < total) {
    REQUIRE(r->final_route(bytes, &path));
    REQUIRE(path == want);
    if (*calls % 2 == 0) {
      REQUIRE(r->count_final(bytes, want));  // as the preload's memo does
    } else {
      REQUIRE(r->next(bytes, &timed) == want);
      REQUIRE_FALSE(timed);
    }
    ++*calls;
  }
  REQUIRE(r->final_route(bytes, &path));  // the call before the look
  REQUIRE(r->count_final(bytes, want));
  ++*calls;
  CHECK_FALSE(r->final_route(bytes, &path));  // the look is due at the next call
  CHECK_FALSE(r->count_final(bytes, want));   // refused, not counted
}

}  // namespace

TEST_CASE("SizeRoute: late looks revisit a decision taken in start-up conditions; the lowest medians decide",
          "[pmpi]") {
  // np 2, 4 B, unbound ranks sharing one CPU for their first calls (2026-12-04): both libraries slow, BlueConnect
  // more (7.4 against 5.8 us), then 0.9 against 1.4 us once the ranks run on a CPU each.
  const int64_t bytes = 4;
  const int b = SizeRoute::bucket_of(bytes);
  SizeRoute r;
  uint64_t calls = 0;
  probe(&r, bytes, 7.4e-6, 5.8e-6, as_is());  // close: the second look follows, in the same conditions
  calls += SizeRoute::probes(b);
  bool timed = true;
  for (int k = 0; k < SizeRoute::kRecheckAfter; ++k) r.next(bytes, &timed);
  calls += SizeRoute::kRecheckAfter;
  probe(&r, bytes, 7.5e-6, 5.9e-6, as_is());
  calls += SizeRoute::probes(b);
  CHECK(calls == static_cast<uint64_t>(SizeRoute::learning_calls(b)));
  CHECK_THAT(r.describe(), Catch::Matchers::Contains("mpi (slowest rank's median, lower of two looks: blueconnect "
                                                     "7.40 us, mpi 5.80 us)"));
  follow_until(&r, bytes, SizeRoute::kLateLookCalls[0], &calls, Path::Mpi);
  // The first late look, at the bucket's 4096th call: BlueConnect first, as a first look.
  std::vector<Path> late = probe(&r, bytes, 0.9e-6, 1.4e-6, as_is());
  std::vector<Path> want(SizeRoute::probes(b) / 2, Path::Bc);
  want.resize(SizeRoute::probes(b), Path::Mpi);
  CHECK(late == want);
  calls += SizeRoute::probes(b);
  CHECK(r.next(bytes, &timed) == Path::Bc);
  CHECK_FALSE(timed);
  ++calls;
  CHECK_THAT(r.describe(), Catch::Matchers::Contains("bytes 4-7: blueconnect"));
  CHECK_THAT(r.describe(), Catch::Matchers::Contains(
                               "blueconnect (slowest rank's median, lowest of 3 looks, 1 late: blueconnect 0.90 us, mpi 1.40 us)"));
  // The second, at the 65536th: slower for both (a busy machine), so the lowest medians keep BlueConnect.
  follow_until(&r, bytes, SizeRoute::kLateLookCalls[1], &calls, Path::Bc);
  probe(&r, bytes, 3e-6, 2e-6, as_is());
  calls += SizeRoute::probes(b);
  CHECK(r.next(bytes, &timed) == Path::Bc);
  ++calls;
  CHECK_THAT(r.describe(), Catch::Matchers::Contains("lowest of 4 looks, 2 late: blueconnect 0.90 us, mpi 1.40 us"));
  // And no look after the last late one: twice as many calls again, all settled.
  Path path = Path::Mpi;
  for (uint64_t k = 0; k < 2 * SizeRoute::kLateLookCalls[1]; ++k) {
    REQUIRE(r.final_route(bytes, &path));
    REQUIRE(r.count_final(bytes, Path::Bc));
  }
  CHECK(path == Path::Bc);
  // Every call is counted once, the refused ones included (they went through next()).
  const std::string d = r.describe();
  const uint64_t want_total = calls + 2 * SizeRoute::kLateLookCalls[1];
  unsigned long long bc = 0, mpi = 0;
  REQUIRE(std::sscanf(d.c_str(), "bytes 4-7: blueconnect %llu, mpi %llu", &bc, &mpi) == 2);
  CHECK(bc + mpi == want_total);
}

TEST_CASE("SizeRoute: a late look that finds the same keeps the route; count_final refuses the other library",
          "[pmpi]") {
  const int64_t bytes = 1 << 20;
  SizeRoute r;
  uint64_t calls = 0;
  probe(&r, bytes, 3e-3, 1e-3, as_is());  // MPI three times as fast: a second look (MPI first) finds the same
  calls += SizeRoute::probes(SizeRoute::bucket_of(bytes));
  bool timed = false;
  for (int k = 0; k < SizeRoute::kRecheckAfter; ++k) r.next(bytes, &timed);
  calls += SizeRoute::kRecheckAfter;
  probe(&r, bytes, 3e-3, 1e-3, as_is());
  calls += SizeRoute::probes(SizeRoute::bucket_of(bytes));
  CHECK_FALSE(r.count_final(bytes, Path::Bc));  // the route is MPI's: a memo for BlueConnect is stale
  follow_until(&r, bytes, SizeRoute::kLateLookCalls[0], &calls, Path::Mpi);
  CHECK(r.next(bytes, &timed) == Path::Bc);  // the late look's first (untimed) probe
  CHECK_FALSE(timed);
  CHECK(r.unprobed(bytes) == Path::Mpi);  // a non-blocking call keeps the decision while the look runs
  CHECK_THAT(r.describe(), Catch::Matchers::Contains("learning (1 of 8 probes, a late look)"));
  for (int k = 1; k < SizeRoute::probes(SizeRoute::bucket_of(bytes)); ++k) {
    const Path p = r.next(bytes, &timed);
    if (timed) r.record(bytes, p, p == Path::Bc ? 2.9e-3 : 1.1e-3, as_is());
  }
  Path path = Path::Bc;
  REQUIRE(r.final_route(bytes, &path));
  CHECK(path == Path::Mpi);
  CHECK_THAT(r.describe(), Catch::Matchers::Contains("mpi (slowest rank's median, lowest of 3 looks, 1 late: "
                                                     "blueconnect 2900.00 us, mpi 1000.00 us)"));
  // A failed agreement keeps BlueConnect for good: no late look follows it.
  SizeRoute failed;
  probe(&failed, bytes, 1e-3, 3e-3, [](double *, double *) { return false; });
  for (uint64_t k = 0; k < 2 * SizeRoute::kLateLookCalls[1]; ++k) REQUIRE(failed.count_final(bytes, Path::Bc));
  REQUIRE(failed.final_route(bytes, &path));
  CHECK(path == Path::Bc);
}
