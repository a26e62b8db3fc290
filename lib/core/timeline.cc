#include "core/timeline.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/log.h"

namespace bc {
namespace timeline {

std::atomic<bool> g_on{false};

namespace {

struct Record {
  int64_t t_ns;
  uint32_t comm;
  uint32_t seq;
  uint16_t step;
  int8_t stage;
  Kind kind;
  uint8_t what;
  uint8_t lane;  // pipeline slots beyond 255 share lane 255 (BC_PIPELINE_DEPTH allows 1024)
  int32_t peer;
  uint64_t bytes;
};

Record *g_records = nullptr;
std::atomic<size_t> g_next{0};
std::atomic<uint64_t> g_dropped{0};
std::string g_path;
int g_world_rank = 0;
std::mutex g_comms_mutex;
std::vector<CommClock> g_comms;
uint32_t g_created = 0;  // communicators this process created as rank 0: the keys' second half

const char *coll_name(int what) {
  switch (what) {
    case 1: return "reduce_scatter";
    case 2: return "allgather";
    default: return "allreduce";
  }
}

}  // namespace

Status configure(const std::string &pattern, int world_rank) {
  g_world_rank = world_rank;
  if (pattern.empty() || g_records) return BC_OK;  // off, or on since an earlier bc_init
  std::string p = pattern;
  if (p.find("%r") == std::string::npos && p.find("%p") == std::string::npos) p += ".%r.json";
  g_path = log_expand_path(p);
  g_records = static_cast<Record *>(std::calloc(kCapacity, sizeof(Record)));
  if (!g_records) return BC_FAIL(BC_ERR_NO_MEMORY, "BC_TIMELINE_FILE: no memory for %zu records", kCapacity);
  g_next = 0;
  g_dropped = 0;
  g_on.store(true, std::memory_order_release);
  return BC_OK;
}

uint32_t add_comm(CommClock c) {
  std::lock_guard<std::mutex> lock(g_comms_mutex);
  g_comms.push_back(std::move(c));
  return static_cast<uint32_t>(g_comms.size() - 1);
}

uint32_t take_key_number() {
  std::lock_guard<std::mutex> lock(g_comms_mutex);
  return g_created++;
}

int world_rank() { return g_world_rank; }

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void record(Kind kind, uint32_t comm, uint32_t seq, int step, int stage, int what, int peer, uint64_t bytes,
            int lane) {
  if (comm == kUnrecorded) return;
  const size_t i = g_next.fetch_add(1, std::memory_order_relaxed);
  if (i >= kCapacity) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  g_records[i] = Record{now_ns(), comm, seq, static_cast<uint16_t>(step), static_cast<int8_t>(stage), kind,
                        static_cast<uint8_t>(what), static_cast<uint8_t>(lane < 255 ? lane : 255),
                        static_cast<int32_t>(peer), bytes};
}

namespace {

uint64_t begin_key(uint32_t comm, uint32_t seq, int step) {
  return (static_cast<uint64_t>(comm) << 48) ^ (static_cast<uint64_t>(seq) << 16) ^ static_cast<uint16_t>(step);
}

// Track ids: one for each communicator's calls, one per pipeline lane. Every
// event follows the metadata, so each starts with a comma.
long call_tid(uint32_t comm) { return (static_cast<long>(comm) + 1) * 1000; }
long lane_tid(uint32_t comm, int lane) { return call_tid(comm) + 1 + lane; }

void write_events(FILE *f, size_t n) {
  // Each end finds its beginning: the call's first chunk, or the step's post.
  std::unordered_map<uint64_t, int64_t> began;
  std::unordered_map<uint64_t, const Record *> calls;
  for (size_t i = 0; i < n; ++i) {
    const Record &r = g_records[i];
    const double ts = static_cast<double>(r.t_ns) / 1e3;
    const char *comm = g_comms[r.comm].key.c_str();
    switch (r.kind) {
      case Kind::CallBegin:
        calls[begin_key(r.comm, r.seq, 0)] = &r;
        break;
      case Kind::StepPost:
        began[begin_key(r.comm, r.seq, r.step)] = r.t_ns;
        break;
      case Kind::CallEnd: {
        auto it = calls.find(begin_key(r.comm, r.seq, 0));
        if (it == calls.end()) break;  // began before the records ran out
        const Record &b = *it->second;
        std::fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"call\",\"name\":\"%s\",\"pid\":%d,\"tid\":%ld,\"ts\":%.3f,"
                     "\"dur\":%.3f,\"args\":{\"comm\":\"%s\",\"seq\":%u,\"chunks\":%d,\"bytes\":%llu}}",
                     coll_name(b.what), g_world_rank, call_tid(r.comm), static_cast<double>(b.t_ns) / 1e3,
                     static_cast<double>(r.t_ns - b.t_ns) / 1e3, comm, b.seq, b.peer,
                     static_cast<unsigned long long>(b.bytes));
        calls.erase(it);
        break;
      }
      case Kind::StepDone:
      case Kind::RecvDone:
      case Kind::SendDone: {
        auto it = began.find(begin_key(r.comm, r.seq, r.step));
        if (it == began.end()) break;
        const double start = static_cast<double>(it->second) / 1e3;
        if (r.kind == Kind::StepDone) {
          char name[64];
          if (r.stage < 0) std::snprintf(name, sizeof name, "step");
          else std::snprintf(name, sizeof name, "stage %d %s", r.stage + 1, r.what ? "reduce-scatter" : "all-gather");
          std::fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"%s\",\"pid\":%d,\"tid\":%ld,\"ts\":%.3f,"
                       "\"dur\":%.3f,\"args\":{\"comm\":\"%s\",\"seq\":%u,\"step\":%u,\"stage\":%d}}",
                       name, g_world_rank, lane_tid(r.comm, r.lane), start, ts - start, comm, r.seq, r.step,
                       r.stage < 0 ? -1 : r.stage + 1);  // kept: a send may end after its step
        } else {
          const bool recv = r.kind == Kind::RecvDone;
          std::fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"%s\",\"name\":\"%s %d\",\"pid\":%d,\"tid\":%ld,\"ts\":%.3f,"
                       "\"dur\":%.3f,\"args\":{\"comm\":\"%s\",\"seq\":%u,\"step\":%u,\"peer\":%d,\"bytes\":%llu}}",
                       recv ? "recv" : "send", recv ? "recv from" : "send to", r.peer, g_world_rank,
                       lane_tid(r.comm, r.lane), start, ts - start, comm, r.seq, r.step, r.peer,
                       static_cast<unsigned long long>(r.bytes));
        }
        break;
      }
    }
  }
}

}  // namespace

void write() {
  if (!g_records) return;
  g_on.store(false, std::memory_order_release);
  const size_t n = std::min(g_next.load(), kCapacity);
  FILE *f = std::fopen(g_path.c_str(), "w");
  if (!f) {
    BC_WARN(Init, "BC_TIMELINE_FILE: cannot write %s: %s", g_path.c_str(), std::strerror(errno));
  } else {
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    for (char *h = host; *h; ++h)
      if (*h == '"' || *h == '\\' || static_cast<unsigned char>(*h) < 0x20) *h = '_';  // stays valid JSON
    std::lock_guard<std::mutex> lock(g_comms_mutex);
    std::fprintf(f, "{\"otherData\":{\"format\":\"blueconnect-timeline-1\",\"world_rank\":%d,\"host\":\"%s\","
                 "\"pid\":%d,\"dropped_events\":%llu,\"comms\":[",
                 g_world_rank, host, static_cast<int>(getpid()), static_cast<unsigned long long>(g_dropped.load()));
    for (size_t i = 0; i < g_comms.size(); ++i) {
      const CommClock &c = g_comms[i];
      std::fprintf(f, "%s{\"key\":\"%s\",\"size\":%d,\"rank\":%d,\"clock_offset_us\":%.3f,\"clock_error_us\":%.3f,"
                   "\"world_ranks\":[", i ? "," : "", c.key.c_str(), c.size, c.rank, c.offset_us, c.error_us);
      for (size_t k = 0; k < c.world_ranks.size(); ++k) std::fprintf(f, "%s%d", k ? "," : "", c.world_ranks[k]);
      std::fprintf(f, "]}");
    }
    std::fprintf(f, "]},\n\"traceEvents\":[");
    std::fprintf(f, "\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d (%s)\"}}",
                 g_world_rank, g_world_rank, host);
    for (size_t i = 0; i < g_comms.size(); ++i)
      std::fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%ld,\"name\":\"thread_name\",\"args\":{\"name\":\"comm %s "
                   "calls\"}}", g_world_rank, call_tid(static_cast<uint32_t>(i)), g_comms[i].key.c_str());
    write_events(f, n);
    std::fprintf(f, "\n]}\n");
    if (std::fclose(f) != 0) BC_WARN(Init, "BC_TIMELINE_FILE: writing %s failed", g_path.c_str());
  }
  std::free(g_records);
  g_records = nullptr;
  g_comms.clear();
}

}  // namespace timeline
}  // namespace bc
