#include "pmpi/pmpi_route.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace bc {
namespace pmpi {
namespace {

double median(const double *v, int n) {
  double a[SizeRoute::kTimedSmall];
  std::copy(v, v + n, a);
  std::sort(a, a + n);
  return a[n / 2];
}

// Where in bucket b's probe sequence its call `k` falls: BlueConnect's half
// first, but for a second look.
Path probe_path(int b, int k, bool mpi_first) {
  const bool first_half = k < SizeRoute::probes(b) / 2;
  return first_half != mpi_first ? Path::Bc : Path::Mpi;
}
bool probe_timed(int b, int k) { return k % (SizeRoute::probes(b) / 2) >= SizeRoute::kWarmup; }

}  // namespace

Path SizeRoute::next(int64_t bytes, bool *timed) {
  const int i = bucket_of(bytes);
  Bucket &b = buckets_[i];
  *timed = false;
  if (second_look_pending(b)) {
    if (++b.since > kRecheckAfter) start_look(&b, true);
  } else if (late_look_due(b)) {
    ++b.late;
    start_look(&b, false);
  }
  Path p = b.path;
  if (!b.decided) {
    p = probe_path(i, b.calls, b.mpi_first);
    *timed = probe_timed(i, b.calls);
    if (!*timed) ++b.calls;  // a warm-up call counts now; a timed one when it is recorded
  }
  ++b.served[static_cast<int>(p)];
  return p;
}

void SizeRoute::record(int64_t bytes, Path path, double seconds, const Agree &agree) {
  const int i = bucket_of(bytes);
  Bucket &b = buckets_[i];
  if (b.decided || probe_path(i, b.calls, b.mpi_first) != path || !probe_timed(i, b.calls))
    return;  // not the probe asked for
  const int run = calls_per_sample(i);
  const int call = b.calls % (probes(i) / 2) - kWarmup;  // among this library's timed calls
  double *sample = (path == Path::Bc ? b.bc : b.mpi) + call / run;
  *sample = call % run == 0 ? seconds : *sample + seconds;
  if (++b.calls < probes(i)) return;
  const int n = timed_per_library(i);
  double bc = median(b.bc, n) / run, mpi = median(b.mpi, n) / run;
  b.decided = true;
  if (!agree(&bc, &mpi)) {  // stays with BlueConnect, for good: no look follows
    b.path = Path::Bc;
    b.bc_median = b.mpi_median = 0;
    b.recheck = false;
    b.late = kLateLooks;
    return;
  }
  if (b.looks > 0) {
    bc = std::min(bc, b.bc_median);
    mpi = std::min(mpi, b.mpi_median);
  }
  ++b.looks;
  b.bc_median = bc;
  b.mpi_median = mpi;
  b.path = bc + kMinWinSeconds <= mpi ? Path::Bc : Path::Mpi;
  // The first look probed BlueConnect first, so its medians carry the first
  // touches: one given to MPI is looked at again however clear (the header says why).
  if (b.looks == 1) b.recheck = b.path == Path::Mpi || std::max(bc, mpi) < kRecheckRatio * std::min(bc, mpi);
}

bool SizeRoute::final_route(int64_t bytes, Path *path) const {
  const Bucket &b = buckets_[bucket_of(bytes)];
  if (!settled(b)) return false;
  *path = b.path;
  return true;
}

Path SizeRoute::unprobed(int64_t bytes) {
  Bucket &b = buckets_[bucket_of(bytes)];
  const Path p = b.path;  // BlueConnect until the first decision; the latest one during a later look
  ++b.served[static_cast<int>(p)];
  return p;
}

std::string SizeRoute::describe() const {
  std::string out;
  char line[200];
  for (int i = 0; i < kBuckets; ++i) {
    const Bucket &b = buckets_[i];
    if (b.served[0] + b.served[1] == 0) continue;
    const long long lo = i == 0 ? 0 : 1LL << i, hi = (1LL << (i + 1)) - 1;
    int n = std::snprintf(line, sizeof line, "bytes %lld-%lld: blueconnect %llu, mpi %llu; ", lo, hi,
                          static_cast<unsigned long long>(b.served[0]), static_cast<unsigned long long>(b.served[1]));
    char looks[48] = "";  // and how many of them were late ones (kLateLookCalls)
    const int late_done = b.decided ? b.late : b.late - 1;
    if (b.looks == 2) std::snprintf(looks, sizeof looks, ", lower of two looks");
    if (b.looks > 2) std::snprintf(looks, sizeof looks, ", lowest of %d looks", b.looks);
    if (late_done > 0 && b.looks >= 2)
      std::snprintf(looks + std::strlen(looks), sizeof looks - std::strlen(looks), ", %d late", late_done);
    if (!b.decided)
      std::snprintf(line + n, sizeof line - n, "learning (%d of %d probes%s)", b.calls, probes(i),
                    b.looks == 0 ? "" : b.mpi_first ? ", second look" : ", a late look");
    else if (b.bc_median == 0 && b.mpi_median == 0)
      std::snprintf(line + n, sizeof line - n, "blueconnect (the agreement failed)");
    else
      std::snprintf(line + n, sizeof line - n, "%s (slowest rank's median%s: blueconnect %.2f us, mpi %.2f us)%s",
                    b.path == Path::Bc ? "blueconnect" : "mpi", looks, b.bc_median * 1e6, b.mpi_median * 1e6,
                    second_look_pending(b) ? "; a second look follows" : "");
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace pmpi
}  // namespace bc
