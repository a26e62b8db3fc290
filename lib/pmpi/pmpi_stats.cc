// BC_PMPI_STATS: the interposer's counters (calls served, passed to MPI with
// the reason, errors) and the learned routes of freed communicators, written
// per rank at finalisation. Separate from the route: the route only counts,
// this file names and prints.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "pmpi/pmpi_internal.h"
#include "core/log.h"

namespace bc {
namespace pmpi {

const char *const kCollNames[kColls] = {"MPI_Allreduce", "MPI_Reduce_scatter_block", "MPI_Allgather",
                                        "MPI_Iallreduce"};
const char *const kReasonNames[kReasons] = {
    "disabled", "init-error",    "invalid-args", "user-op", "op",                "dtype",  "derived-dtype",
    "op-dtype", "type-mismatch", "intercomm",    "small",   "comm-setup-failed", "bc-comm", "fortran-sentinel",
    "device-op-dtype", "learned"};

std::atomic<uint64_t> g_served[kColls];
std::atomic<uint64_t> g_errors[kColls];
std::atomic<uint64_t> g_passed[kColls][kReasons];
std::string g_stats_path;

namespace {

// The learned routes of communicators already freed, for BC_PMPI_STATS, and
// how many were left out: kept only when the file is asked for, and at most
// kRouteLogMax bytes of them, because a program that makes and frees
// communicators all its life would otherwise grow by every one (0.3 KiB per
// communicator in the soak, tests/pmpi/pmpi_soak.c).
constexpr size_t kRouteLogMax = 16 << 10;
std::mutex g_route_log_mutex;
std::string g_route_log;
uint64_t g_routes_left_out = 0;

}  // namespace

// Keeps a communicator's learned routes for BC_PMPI_STATS.
void log_routes(const CommState *cs) {
  if (g_stats_path.empty()) return;
  const std::string routes = cs->route.describe();
  if (routes.empty()) return;
  const std::string entry = "MPI_Allreduce route, communicator of " + std::to_string(cs->size) + " ranks:\n" + routes;
  std::lock_guard<std::mutex> lock(g_route_log_mutex);
  if (g_route_log.size() + entry.size() > kRouteLogMax) ++g_routes_left_out;
  else g_route_log += entry;
}

namespace {

std::string expand_path(const std::string &pattern, int rank) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      const char c = pattern[++i];
      if (c == 'r') out += std::to_string(rank);
      else if (c == 'p') out += std::to_string(getpid());
      else if (c == 'h') {
        char host[256] = "unknown";
        gethostname(host, sizeof host - 1);
        out += host;
      } else if (c == '%') out += '%';
      else {
        out += '%';
        out += c;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

}  // namespace

void write_stats() {
  if (g_stats_path.empty()) return;
  int rank = 0, size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string path = expand_path(g_stats_path, rank);
  // "1" as well as "-": BC_PMPI_STATS=1 reads as "on", not as a file named 1
  // that every rank overwrites (one was committed by mistake once).
  const bool to_stderr = path == "-" || path == "1";
  // A path without %r or %p names one file for the whole job: every rank
  // would truncate and rewrite it, leaving one rank's counts (or a mix).
  // Each rank gets its own, PATH.RANK, as the parameter says.
  if (!to_stderr && size > 1 && g_stats_path.find("%r") == std::string::npos &&
      g_stats_path.find("%p") == std::string::npos)
    path += "." + std::to_string(rank);
  FILE *f = to_stderr ? stderr : std::fopen(path.c_str(), "w");
  if (!f) {
    BC_LOG(LogLevel::Error, LogSys::Pmpi, "BC_PMPI_STATS: cannot write %s: %s", path.c_str(),
           std::strerror(errno));
    return;
  }
  std::fprintf(f, "# BlueConnect PMPI statistics: world rank %d of %d, pid %d\n", rank, size,
               static_cast<int>(getpid()));
  std::fprintf(f, "# BC_DISABLE=%d BC_PMPI_MIN_BYTES=%lld\n", g_disabled ? 1 : 0,
               static_cast<long long>(g_min_bytes));
  for (int c = 0; c < kColls; ++c) {
    uint64_t passed = 0;
    for (int r = 0; r < kReasons; ++r) passed += g_passed[c][r].load(std::memory_order_relaxed);
    std::fprintf(f, "%s served %llu\n", kCollNames[c],
                 static_cast<unsigned long long>(g_served[c].load(std::memory_order_relaxed)));
    std::fprintf(f, "%s passed %llu\n", kCollNames[c], static_cast<unsigned long long>(passed));
    for (int r = 0; r < kReasons; ++r) {
      const uint64_t n = g_passed[c][r].load(std::memory_order_relaxed);
      if (n) std::fprintf(f, "%s passed:%s %llu\n", kCollNames[c], kReasonNames[r], static_cast<unsigned long long>(n));
    }
    const uint64_t e = g_errors[c].load(std::memory_order_relaxed);
    if (e) std::fprintf(f, "%s errors %llu\n", kCollNames[c], static_cast<unsigned long long>(e));
  }
  {
    std::lock_guard<std::mutex> lock(g_route_log_mutex);
    std::fputs(g_route_log.c_str(), f);
    if (g_routes_left_out)
      std::fprintf(f, "# the routes of %llu more freed communicators were not kept (%zu KiB of them are)\n",
                   static_cast<unsigned long long>(g_routes_left_out), kRouteLogMax >> 10);
  }
  if (f == stderr) std::fflush(f);
  else std::fclose(f);
}

}  // namespace pmpi
}  // namespace bc
