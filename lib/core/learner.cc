// The learner's bookkeeping. See learner.h for what it does and why.
#include "core/learner.h"

#include <algorithm>

namespace bc {
namespace {

double median(const double *v, int n) {
  double a[Learner::kMaxTimed];
  n = std::min(std::max(n, 1), Learner::kMaxTimed);
  std::copy(v, v + n, a);
  std::sort(a, a + n);
  return a[n / 2];
}

int per_candidate(const LearnShape &s) { return s.warmup + s.timed * s.calls_per_sample; }

}  // namespace

Learner::Bucket &Learner::bucket_state(int i) {
  Bucket &b = buckets_[static_cast<size_t>(i)];
  if (!b.init) {
    b.init = true;
    b.shape = shape_of_(i);
    LearnShape &s = b.shape;
    s.candidates = std::min(std::max(s.candidates, 1), kMaxCandidates);
    s.incumbent = std::min(std::max(s.incumbent, 0), s.candidates - 1);
    s.timed = std::min(std::max(s.timed, 1), kMaxTimed);
    s.warmup = std::max(s.warmup, 0);
    s.calls_per_sample = std::max(s.calls_per_sample, 1);
    s.confirm = std::min(std::max(s.confirm, 0), kMaxTimed);
    if (s.candidates == 1) {  // nothing to learn: decided from the start, or one look that times it
      b.decided = !s.measure_single;
      s.late_looks.clear();
    }
  }
  return b;
}

int Learner::probe_candidate(const Bucket &b, int k) {
  return (k / per_candidate(b.shape) + b.rotation) % b.shape.candidates;
}

bool Learner::probe_timed(const Bucket &b, int k) { return k % per_candidate(b.shape) >= b.shape.warmup; }

int Learner::next(int64_t bytes, bool *timed) {
  Bucket &b = bucket_state(bucket_of(bytes));
  *timed = false;
  if (second_look_pending(b)) {
    if (++b.since > b.shape.recheck_after) start_look(&b, 1);
  } else if (late_look_due(b)) {
    ++b.late;
    start_look(&b, 0);
  }
  int c = b.winner;
  if (!b.decided) {
    c = probe_candidate(b, b.calls);
    *timed = probe_timed(b, b.calls);
    if (!*timed) ++b.calls;  // a warm-up call counts now; a timed one when it is recorded
  } else if (b.confirm_left > 0) {
    if (b.confirm_skip > 0) --b.confirm_skip;
    else *timed = true;
  }
  ++b.served[c];
  return c;
}

void Learner::record(int64_t bytes, int candidate, double seconds, const Agree &agree) {
  Bucket &b = bucket_state(bucket_of(bytes));
  const LearnShape &s = b.shape;
  if (b.decided) {
    if (b.confirm_left <= 0 || b.confirm_skip > 0 || candidate != b.winner) return;
    const int k = s.confirm - b.confirm_left;
    b.confirm_sum[k] = seconds;
    if (--b.confirm_left > 0) return;
    double now = median(b.confirm_sum, s.confirm);
    if (!agree(&now, 1)) return;  // kept as it is: the failure is the caller's to report
    b.confirmed = now;
    double runner_up = 0;
    for (int c = 0; c < s.candidates; ++c)
      if (c != b.winner && b.medians[c] > 0 && (runner_up == 0 || b.medians[c] < runner_up)) runner_up = b.medians[c];
    if (now > s.confirm_ratio * b.medians[b.winner] && now > runner_up) {
      b.stale = true;  // learned again from nothing: the old numbers describe another network
      b.looks = 0;
      b.late = 0;
      b.recheck = false;
      std::fill(b.medians, b.medians + kMaxCandidates, 0.0);
      start_look(&b, 0);
    }
    return;
  }
  if (probe_candidate(b, b.calls) != candidate || !probe_timed(b, b.calls)) return;  // not the probe asked for
  const int run = s.calls_per_sample;
  const int call = b.calls % per_candidate(s) - s.warmup;  // among this candidate's timed calls
  double *sample = &b.samples[candidate][call / run];
  *sample = call % run == 0 ? seconds : *sample + seconds;
  if (++b.calls < probes(s)) return;
  decide(&b, agree);
}

void Learner::decide(Bucket *bp, const Agree &agree) {
  Bucket &b = *bp;
  const LearnShape &s = b.shape;
  const int n = s.candidates;
  double meds[kMaxCandidates] = {};
  for (int c = 0; c < n; ++c) meds[c] = median(b.samples[c], s.timed) / s.calls_per_sample;
  b.decided = true;
  if (!agree(meds, n)) {  // candidate 0 for good: no look follows
    b.failed = true;
    b.winner = 0;
    std::fill(b.medians, b.medians + kMaxCandidates, 0.0);
    b.recheck = false;
    b.late = static_cast<int>(s.late_looks.size());
    return;
  }
  if (b.looks > 0 && s.lowest_of_looks)
    for (int c = 0; c < n; ++c) meds[c] = std::min(meds[c], b.medians[c]);
  ++b.looks;
  std::copy(meds, meds + n, b.medians);
  const int inc = s.incumbent;
  int w = inc;
  for (int c = 0; c < n; ++c) {
    if (c == inc) continue;
    const bool clear = meds[c] + s.min_win_seconds <= meds[inc] && meds[c] <= meds[inc] * s.min_win_ratio;
    if (clear && (w == inc || meds[c] < meds[w])) w = c;
  }
  b.winner = w;
  // The candidate probed first paid the bucket's first touches: a first look
  // that it did not win, or won narrowly, is looked at again (learner.h).
  if (b.looks == 1 && s.recheck_ratio > 0) {
    double other = 0;
    for (int c = 0; c < n; ++c)
      if (c != w && (other == 0 || meds[c] < other)) other = meds[c];
    b.recheck = w != probe_candidate(b, 0) || std::max(other, meds[w]) < s.recheck_ratio * std::min(other, meds[w]);
  }
}

int Learner::unprobed(int64_t bytes) {
  Bucket &b = bucket_state(bucket_of(bytes));
  ++b.served[b.winner];
  return b.winner;
}

bool Learner::final_choice(int64_t bytes, int *candidate) const {
  const Bucket &b = buckets_[static_cast<size_t>(bucket_of(bytes))];
  if (!b.init || !settled(b)) return false;
  *candidate = b.winner;
  return true;
}

bool Learner::count_final(int64_t bytes, int candidate) {
  Bucket &b = buckets_[static_cast<size_t>(bucket_of(bytes))];
  if (!b.init || !settled(b) || b.winner != candidate) return false;
  ++b.served[candidate];
  return true;
}

void Learner::seed(int bucket, int winner, const std::vector<double> &medians) {
  if (bucket < 0 || bucket >= kBuckets) return;
  Bucket &b = bucket_state(bucket);
  const int n = b.shape.candidates;
  if (n < 2 || static_cast<int>(medians.size()) != n || winner < 0 || winner >= n || b.looks > 0) return;
  for (double m : medians)
    if (!(m > 0)) return;
  b.decided = true;
  b.seeded = true;
  b.winner = winner;
  b.looks = 1;
  b.recheck = false;
  std::copy(medians.begin(), medians.end(), b.medians);
  b.confirm_left = b.shape.confirm;
  b.confirm_skip = b.shape.warmup;
}

Learner::View Learner::view(int bucket) const {
  View v;
  if (bucket < 0 || bucket >= kBuckets) return v;
  const Bucket &b = buckets_[static_cast<size_t>(bucket)];
  if (!b.init) return v;
  v.seen = b.total() > 0;
  v.decided = b.decided;
  v.failed = b.failed;
  v.seeded = b.seeded;
  v.stale = b.stale;
  v.confirming = b.confirm_left > 0;
  v.winner = b.winner;
  v.looks = b.looks;
  v.late = b.late;
  v.probes_done = b.calls;
  v.probes_total = probes(b.shape);
  v.rotation = b.rotation;
  v.second_look_pending = second_look_pending(b);
  v.confirmed_seconds = b.confirmed;
  v.medians.assign(b.medians, b.medians + b.shape.candidates);
  v.served.assign(b.served, b.served + b.shape.candidates);
  return v;
}

}  // namespace bc
