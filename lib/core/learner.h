// Which of a few candidates serves a call of a given size, learned from the
// program's own calls: the one mechanism behind every learned choice.
//   - The preload (lib/pmpi/pmpi_route.h): BlueConnect or the MPI library.
//   - The C API (lib/api/plan_learn.cc): which of the cost model's best plans.
//
// Sizes are grouped in power-of-two buckets; each bucket learns on its own.
// A look at a bucket runs every candidate in turn on the caller's real calls,
// back to back as the program makes them:
//
//   per candidate, in the look's order:  `warmup` untimed calls,
//                                        then `timed` samples of `calls_per_sample` calls
//
// After the look's last call every rank hands its per-candidate medians to
// one agreement (`Agree`: the largest over the ranks, in place), so every
// rank sees the same numbers and keeps the same winner. Everything that
// decides which call is a probe is a count of calls, never a time, so the
// probes line up on every rank (every rank makes the same calls of a
// communicator in the same order, as MPI requires).
//
// The winner: the incumbent (the choice without learning: MPI under the
// preload, the model's first plan in the C API) keeps the bucket unless
// another candidate is faster by both margins (min_win_seconds and
// min_win_ratio); among those that are, the fastest. With lowest_of_looks,
// each candidate's lowest median over all looks counts (noise and start-up
// only ever add time: the preload's choice); without it the latest look's
// (a plan's speed follows the network, which may change: the C API's).
//
// Later looks:
//   - A second look, in rotated order (the first look's second candidate
//     first), `recheck_after` calls after a first look whose winner was not
//     the candidate probed first, or whose runner-up was within
//     recheck_ratio: the candidate probed first pays the first touches of the
//     bucket's buffers (lib/pmpi/pmpi_route.h has the measurements).
//   - Late looks, at the bucket's late_looks[i]-th call: a job's first calls
//     run in its start-up conditions, which pass, and a network can change.
//   - A confirmation, for a winner seeded from an earlier job (seed()): after
//     `warmup` untimed calls its next `confirm` calls are timed, one
//     agreement on their median, and if the winner now takes more than
//     confirm_ratio times what it took before and more than the runner-up
//     did, the bucket is learned again at once from nothing (View::stale).
//     Both: a winner that got slower but still beats the runner-up's time is
//     still the better bet, and noise of a few percent must not send a
//     bucket whose runner-up was close back to learning.
// The learner is plain data: the agreement is injected, so unit tests drive
// it without MPI.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bc {

// How one bucket learns. It may depend on the bucket, never on a time.
struct LearnShape {
  int candidates = 2;          // 1..Learner::kMaxCandidates; 1: nothing to learn
  int incumbent = 0;           // keeps the bucket unless another is clearly faster
  int warmup = 1;              // untimed calls before each candidate's timed ones
  int timed = 3;               // samples per candidate, 1..Learner::kMaxTimed; their median counts
  int calls_per_sample = 1;    // calls timed together as one sample (their mean per call)
  double min_win_seconds = 0;  // a challenger's median must be lower than the incumbent's by this
  double min_win_ratio = 1.0;  // and at most this times the incumbent's
  double recheck_ratio = 0;    // 0: no second look (see the top of the file)
  int recheck_after = 0;
  int confirm = 3;             // timed calls that confirm a seeded winner (after `warmup` untimed)
  double confirm_ratio = 1.25;
  bool lowest_of_looks = true;  // the lowest median of all looks counts, else the latest look's
  // With one candidate: false, nothing is timed; true, one look times it (its
  // agreed time is then known, e.g. to hold against a prediction), no later look.
  bool measure_single = false;
  std::vector<uint64_t> late_looks;  // the bucket's call counts (probes included) where a late look starts
};

class Learner {
 public:
  static constexpr int kBuckets = 48;  // up to 2^47 bytes
  static constexpr int kMaxCandidates = 4;
  static constexpr int kMaxTimed = 9;
  static constexpr int kNone = -1;

  // Replaces the n local medians (seconds per call) by the largest over the
  // ranks, on every rank; false when that failed (the bucket then stays with
  // candidate 0 for good, and the failure is the caller's to report).
  using Agree = std::function<bool(double *medians, int n)>;
  using ShapeOf = std::function<LearnShape(int bucket)>;

  explicit Learner(ShapeOf shape_of) : shape_of_(std::move(shape_of)), buckets_(kBuckets) {}

  static int bucket_of(int64_t bytes) {
    if (bytes <= 1) return 0;
    const int b = 63 - __builtin_clzll(static_cast<unsigned long long>(bytes));
    return b < kBuckets - 1 ? b : kBuckets - 1;
  }
  // Calls timed together as one sample in `bucket`: about run_bytes' worth of
  // calls of its smallest size, within 1..max_calls (a preempted call then
  // spoils one sample, and alternating call times average out).
  static int calls_per_run(int bucket, int64_t run_bytes, int max_calls) {
    const int64_t calls = run_bytes >> bucket;
    return calls >= max_calls ? max_calls : calls < 1 ? 1 : static_cast<int>(calls);
  }
  // Calls of one look at a bucket of this shape.
  static int probes(const LearnShape &s) { return s.candidates * (s.warmup + s.timed * s.calls_per_sample); }
  const LearnShape &shape(int bucket) { return bucket_state(bucket).shape; }

  // The candidate of the next blocking call of `bytes`; *timed: the caller
  // times it and reports it with record().
  int next(int64_t bytes, bool *timed);
  // The time of a call that next() asked to time. After a look's last call,
  // runs `agree` (collective) and decides the bucket.
  void record(int64_t bytes, int candidate, double seconds, const Agree &agree);
  // The candidate of a call that is not probed (a non-blocking one): the
  // bucket's latest decision, also while a look runs, or candidate 0 before
  // the first.
  int unprobed(int64_t bytes);
  // Whether the bucket is decided until its next look (no look running or due
  // at the next call), and for which candidate. count_final() counts a call
  // the caller routed itself, and refuses (false, nothing counted) once a look
  // is due or the bucket went to another candidate.
  bool final_choice(int64_t bytes, int *candidate) const;
  bool count_final(int64_t bytes, int candidate);

  // An earlier job's decision: the bucket starts decided for `winner` with
  // these medians (one per candidate, seconds per call), to be confirmed.
  void seed(int bucket, int winner, const std::vector<double> &medians);

  // What a bucket knows, for logs, statistics and the cache.
  struct View {
    bool seen = false;
    bool decided = false;
    bool failed = false;         // the agreement failed: candidate 0 for good
    bool seeded = false;         // from an earlier job
    bool stale = false;          // a seeded winner failed its confirmation (the bucket learned again)
    bool confirming = false;
    int winner = 0;
    int looks = 0, late = 0;     // looks completed; late looks started
    int probes_done = 0, probes_total = 0;
    int rotation = 0;            // the running look starts at this candidate
    bool second_look_pending = false;
    double confirmed_seconds = 0;  // the confirmation's agreed median, when one ran
    std::vector<double> medians;  // per candidate, agreed, the lowest of all looks
    std::vector<uint64_t> served; // calls per candidate, probes included
  };
  View view(int bucket) const;

 private:
  struct Bucket {
    bool init = false;
    LearnShape shape;
    int calls = 0;        // calls of the running look so far
    int looks = 0;
    int late = 0;
    int rotation = 0;
    int since = 0;        // calls since a first look to recheck
    bool recheck = false;
    bool decided = false;
    bool failed = false;
    bool seeded = false, stale = false;
    int confirm_left = 0;  // timed calls of a seeded winner still to come
    int confirm_skip = 0;  // untimed calls before them
    double confirm_sum[kMaxTimed] = {};
    double confirmed = 0;
    int winner = 0;
    double samples[kMaxCandidates][kMaxTimed] = {};
    double medians[kMaxCandidates] = {};
    uint64_t served[kMaxCandidates] = {};
    uint64_t total() const {
      uint64_t t = 0;
      for (uint64_t s : served) t += s;
      return t;
    }
  };
  Bucket &bucket_state(int i);
  static bool second_look_pending(const Bucket &b) { return b.decided && b.recheck && b.looks == 1; }
  static bool late_look_due(const Bucket &b) {
    return b.decided && !second_look_pending(b) && b.confirm_left == 0 &&
           b.late < static_cast<int>(b.shape.late_looks.size()) && b.total() >= b.shape.late_looks[b.late];
  }
  static bool settled(const Bucket &b) {
    return b.decided && !second_look_pending(b) && !late_look_due(b) && b.confirm_left == 0;
  }
  static void start_look(Bucket *b, int rotation) {
    b->decided = false;
    b->rotation = rotation;
    b->calls = 0;
  }
  // Where in a look call k falls: which candidate, and whether it is timed.
  static int probe_candidate(const Bucket &b, int k);
  static bool probe_timed(const Bucket &b, int k);
  void decide(Bucket *b, const Agree &agree);

  ShapeOf shape_of_;
  std::vector<Bucket> buckets_;
};

}  // namespace bc
