#include "pmpi/pmpi_route.h"

#include <algorithm>
#include <cstdio>

namespace bc {
namespace pmpi {
namespace {

double median3(const double *v) {
  double a[SizeRoute::kTimed];
  std::copy(v, v + SizeRoute::kTimed, a);
  std::sort(a, a + SizeRoute::kTimed);
  return a[SizeRoute::kTimed / 2];
}

// Where in the probe sequence call `k` of a bucket falls.
Path probe_path(int k) { return k < SizeRoute::kProbes / 2 ? Path::Bc : Path::Mpi; }
bool probe_timed(int k) { return k % (SizeRoute::kProbes / 2) >= SizeRoute::kWarmup; }

}  // namespace

int SizeRoute::bucket_of(int64_t bytes) {
  int b = 0;
  while (bytes > 1 && b < kBuckets - 1) {
    bytes >>= 1;
    ++b;
  }
  return b;
}

Path SizeRoute::next(int64_t bytes, bool *timed) {
  Bucket &b = buckets_[bucket_of(bytes)];
  *timed = false;
  Path p = b.path;
  if (!b.decided) {
    p = probe_path(b.calls);
    *timed = probe_timed(b.calls);
    if (!*timed) ++b.calls;  // a warm-up call counts now; a timed one when it is recorded
  }
  ++b.served[static_cast<int>(p)];
  return p;
}

void SizeRoute::record(int64_t bytes, Path path, double seconds, const Agree &agree) {
  Bucket &b = buckets_[bucket_of(bytes)];
  if (b.decided || probe_path(b.calls) != path || !probe_timed(b.calls)) return;  // not the probe asked for
  const int slot = b.calls % (kProbes / 2) - kWarmup;
  (path == Path::Bc ? b.bc : b.mpi)[slot] = seconds;
  if (++b.calls < kProbes) return;
  double bc = median3(b.bc), mpi = median3(b.mpi);
  b.decided = true;
  if (!agree(&bc, &mpi)) return;  // stays with BlueConnect
  b.bc_median = bc;
  b.mpi_median = mpi;
  b.path = mpi < bc ? Path::Mpi : Path::Bc;
}

Path SizeRoute::unprobed(int64_t bytes) {
  Bucket &b = buckets_[bucket_of(bytes)];
  const Path p = b.decided ? b.path : Path::Bc;
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
    if (!b.decided)
      std::snprintf(line + n, sizeof line - n, "learning (%d of %d probes)", b.calls, kProbes);
    else if (b.bc_median == 0 && b.mpi_median == 0)
      std::snprintf(line + n, sizeof line - n, "blueconnect (the agreement failed)");
    else
      std::snprintf(line + n, sizeof line - n, "%s (slowest rank's median: blueconnect %.1f us, mpi %.1f us)",
                    b.path == Path::Bc ? "blueconnect" : "mpi", b.bc_median * 1e6, b.mpi_median * 1e6);
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace pmpi
}  // namespace bc
