// The preload's learned route: the learner (core/learner.h) with the
// preload's shape, and the BC_PMPI_STATS lines. pmpi_route.h says why each
// number is what it is.
#include "pmpi/pmpi_route.h"

#include <cstdio>
#include <cstring>

namespace bc {
namespace pmpi {

LearnShape SizeRoute::shape(int bucket) {
  LearnShape s;
  s.candidates = 2;                    // Path::Bc, Path::Mpi
  s.incumbent = static_cast<int>(Path::Mpi);  // what the program would have used: BlueConnect needs a clear win
  s.warmup = kWarmup;
  s.timed = timed_per_library(bucket);
  s.calls_per_sample = calls_per_sample(bucket);
  s.min_win_seconds = kMinWinSeconds;
  s.min_win_ratio = 1.0;
  s.recheck_ratio = kRecheckRatio;
  s.recheck_after = kRecheckAfter;
  s.confirm = 0;  // nothing is seeded: the preload's routes are learned per job
  s.late_looks.assign(kLateLookCalls, kLateLookCalls + kLateLooks);
  return s;
}

void SizeRoute::record(int64_t bytes, Path path, double seconds, const Agree &agree) {
  learner_.record(bytes, static_cast<int>(path), seconds, [&agree](double *medians, int n) {
    return n == 2 && agree(&medians[0], &medians[1]);
  });
}

std::string SizeRoute::describe() const {
  std::string out;
  char line[200];
  for (int i = 0; i < kBuckets; ++i) {
    const Learner::View b = learner_.view(i);
    if (!b.seen) continue;
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
      std::snprintf(line + n, sizeof line - n, "learning (%d of %d probes%s)", b.probes_done, b.probes_total,
                    b.looks == 0 ? "" : b.rotation != 0 ? ", second look" : ", a late look");
    else if (b.failed)
      std::snprintf(line + n, sizeof line - n, "blueconnect (the agreement failed)");
    else
      std::snprintf(line + n, sizeof line - n, "%s (slowest rank's median%s: blueconnect %.2f us, mpi %.2f us)%s",
                    b.winner == static_cast<int>(Path::Bc) ? "blueconnect" : "mpi", looks, b.medians[0] * 1e6,
                    b.medians[1] * 1e6, b.second_look_pending ? "; a second look follows" : "");
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace pmpi
}  // namespace bc
