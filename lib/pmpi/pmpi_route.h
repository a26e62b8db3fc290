// Which library serves a blocking MPI_Allreduce of a given size on one
// communicator, learned from the program's own calls (BC_PMPI_ROUTE=learn).
//
// Why: a drop-in must make nothing slower. Where BlueConnect cannot beat the
// MPI library (tiny messages on one node: 175 us against Open MPI's 71 us at
// 4 B and np 8), the call should go to MPI, and the size where that changes
// depends on the machine, the layout and the MPI library: no threshold a user
// must tune (BC_PMPI_MIN_BYTES stays for those who want one).
//
// How: sizes are grouped in power-of-two buckets. The first calls of each
// bucket are probes, each library run back to back as the program calls it:
//
//   call of the bucket   0      1 .. TK      TK+1   TK+2 .. 2TK+1   2TK+2 ...
//   served by            bc     bc           mpi    mpi              the winner
//   timed                warm   yes          warm   yes
//
// with T = 9 timed samples per library below 1 MiB (cheap, and small calls
// are the noisiest) and T = 3 from 1 MiB up. A sample is the time of K calls
// in a row (their per-call mean), K = 8 up to 4 KiB, fewer up to 32 KiB
// (calls_per_sample), 1 above. Why runs and not single calls: a tiny call's
// time is not one number. Open MPI's 4-byte all-reduce at np 2 alternates a
// fast call (0.2-0.3 us) and a slow one (1.5-1.7 us) on each rank, never two
// fast in a row; its loop takes 0.85 us a call. The median of 9 single calls
// falls on either mode (above 1.2 us in a third to nearly half of the
// windows), and the MAX over ranks then prefers the slow one, so BlueConnect
// (1.25-1.35 us on every call) won probes it loses in a loop (0.66-0.82x on
// 2026-12-03). The mean of 8 calls in a row is the loop's time; the median
// of such means still drops a sample a preemption spoiled.
// T and K depend on the size alone, never on a time, so the probes line up
// on every rank.
// After the last probe every rank contributes its medians to one small
// PMPI_Allreduce (MAX) on the communicator, so every rank sees the same
// numbers and takes the same route (MPI requires every rank to call the
// collectives of a communicator in the same order with the same count, so
// the buckets advance alike on all ranks). BlueConnect takes a bucket when
// its median is lower than MPI's by at least kMinWinSeconds; otherwise the
// MPI library, which the program would have used without the preload, keeps
// it. Why a margin: below a tenth of a microsecond a probe cannot rank the
// two. It was a quarter while BlueConnect's calls allocated their operation:
// at np 2 on one node the medians then put BlueConnect ahead by 0.06-0.21 us
// where its loop took 0.1-0.3 us longer than Open MPI's. Without the
// allocations its 8-byte loop there takes 0.40-0.54 us against Open MPI's
// 0.48-0.99 and its probes lead by about 0.16 us, which the quarter gave to
// MPI; with 0.1 us it served those buckets at 1.08-1.24 of Open MPI's loop
// (docs/PMPI.md, 2026-12-03). What it can give up is 0.1 us a call: under
// 5 % of any call longer than 2 us.
//
// A first look that goes to MPI, or that BlueConnect wins by less than
// kRecheckRatio, is looked at twice: the bucket's first kRecheckAfter calls
// after it follow it, then the probes run once more with MPI first. Why: the
// library probed first (BlueConnect) pays the first touches of new buffers
// and of its own scratch; at np 4 on 2 cores one look sent 2 MiB to MPI
// (medians 2.49 against 2.40 ms) and another 1 MiB (1.75 against 1.03 ms)
// where BlueConnect's loops take 1.0 and 0.6 ms, MPI's 1.2 and 0.7 ms; at
// np 8 a 1 MiB look read 2.98 against 1.47 ms (2.7-3.0 ms in 2 of 3 jobs,
// 2026-12-05) where BlueConnect's loop takes 1.0 ms and MPI's 1.2: no factor
// bounds how much the first touches add, so MPI's win is never taken on
// one look. BlueConnect's clear win is: it won despite them. The cost, once
// per bucket of a program that makes more than kRecheckAfter calls of it:
// probes(bucket) / 2 calls of the slower library (73 up to 4 KiB, 10 from
// 32 KiB to 1 MiB, 4 above).
//
// Every decision is looked at again late, at the bucket's kLateLookCalls[i]-th
// calls (BlueConnect first), with or without a second look. Why: a job's first
// calls run in its start-up conditions, which pass. At np 2 with unbound
// ranks (mpirun --bind-to none), two ranks that have just blocked (at launch,
// or after a sleep) often share one CPU for their first 1 000-4 000 calls
// (10-30 ms): both libraries' 4-byte calls then take 6-10 us instead of 0.9
// (BlueConnect) and 1.4 (Open MPI), and the first bucket went to MPI in 2 of
// 6 jobs, where BlueConnect's loop is 1.7x faster (2026-12-04). After each
// look, each library's lowest median of all looks decides: noise and
// start-up only ever add time, so the lowest is the best estimate. A late
// look costs the same half a bucket's probes of the slower library; at the
// 4096th call that is under 2 % of the bucket's calls so far, at the 65536th
// 0.1 %. The counts are calls, never times, so every rank looks at the same
// call. The mechanism is the one every learned choice uses (core/learner.h):
// this file gives it the preload's shape (two candidates, BlueConnect probed
// first, MPI the incumbent, the margins and looks above). It is plain data:
// `agree` is injected, so a unit test drives it without MPI.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/learner.h"

namespace bc {
namespace pmpi {

enum class Path : int { Bc = 0, Mpi = 1 };

class SizeRoute {
 public:
  static constexpr int kBuckets = Learner::kBuckets;  // up to 2^47 bytes
  static constexpr int kWarmup = 1;         // untimed calls before each library's timed ones
  static constexpr int kTimedSmall = 9;     // timed samples per library below kLargeBytes (the median counts)
  static constexpr int kTimedLarge = 3;     // and from kLargeBytes up
  static constexpr int64_t kLargeBytes = 1 << 20;
  static constexpr int kRunMaxCalls = 8;           // calls in one sample, for the smallest sizes
  static constexpr int64_t kRunBytes = 32 << 10;   // a sample carries about this many bytes, up to kRunMaxCalls calls
  static constexpr double kRecheckRatio = 2.0;  // BlueConnect's win by less than this factor: a second look
  static constexpr int kRecheckAfter = 32;  // calls of the bucket between a first and a second look
  static constexpr double kMinWinSeconds = 0.1e-6;  // BlueConnect's median must be lower by this
  static constexpr int kLateLooks = 2;
  static constexpr uint64_t kLateLookCalls[kLateLooks] = {4096, 65536};  // the bucket's calls, probes included
  // The learner's shape of a bucket: BlueConnect (candidate 0) probed first, MPI (1) the incumbent.
  static LearnShape shape(int bucket);
  // Calls of a bucket that are probes.
  static int probes(int bucket) { return Learner::probes(shape(bucket)); }
  // Calls of a bucket before its first decision is final at the latest (a second look included; the late looks
  // come after).
  static int learning_calls(int bucket) { return 2 * probes(bucket) + kRecheckAfter; }
  static int timed_per_library(int bucket) { return (int64_t{1} << bucket) >= kLargeBytes ? kTimedLarge : kTimedSmall; }
  // Calls timed together as one sample: kRunBytes / the bucket's smallest size, within 1..kRunMaxCalls.
  static int calls_per_sample(int bucket) { return Learner::calls_per_run(bucket, kRunBytes, kRunMaxCalls); }

  // Replaces two local medians (seconds) by the largest over the ranks, on
  // every rank; returns false when that failed (the bucket then stays with
  // BlueConnect, and the failure is the MPI library's to report).
  using Agree = std::function<bool(double *bc_seconds, double *mpi_seconds)>;

  SizeRoute() : learner_(&SizeRoute::shape) {}
  static int bucket_of(int64_t bytes) { return Learner::bucket_of(bytes); }
  // The route of the next blocking call of `bytes`; *timed says whether the
  // caller must time it and report it with record().
  Path next(int64_t bytes, bool *timed) { return static_cast<Path>(learner_.next(bytes, timed)); }
  // The time of a call that next() asked to time; after the bucket's last
  // probe, runs `agree` (collective) and decides the bucket.
  void record(int64_t bytes, Path path, double seconds, const Agree &agree);
  // The route of a call that is not probed (MPI_Iallreduce): the bucket's
  // latest decision (also while a later look runs), or BlueConnect before
  // its first.
  Path unprobed(int64_t bytes) { return static_cast<Path>(learner_.unprobed(bytes)); }
  // Whether the bucket of `bytes` is decided until its next look (no probe
  // running and none due at this call), and for which library: a caller may
  // then route later calls of the bucket itself and count each with
  // count_final(), which refuses (false, nothing counted) once a look is due
  // or the bucket went to the other library: that call must go through next().
  bool final_route(int64_t bytes, Path *path) const {
    int c = 0;
    if (!learner_.final_choice(bytes, &c)) return false;
    *path = static_cast<Path>(c);
    return true;
  }
  bool count_final(int64_t bytes, Path path) { return learner_.count_final(bytes, static_cast<int>(path)); }

  // For BC_PMPI_STATS: one line per bucket that saw calls.
  std::string describe() const;

 private:
  Learner learner_;
};

}  // namespace pmpi
}  // namespace bc
