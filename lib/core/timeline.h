// The timeline (BC_TIMELINE_FILE): when each collective, each step of each
// chunk and each transfer began and ended on this process, written at the last
// bc_finalize as a Chrome trace event file (Perfetto, chrome://tracing) that
// scripts/timeline-report summarises: per stage, and per host how long its
// network link had nothing to carry, inside calls and between them.
//
// Why it exists: an all-reduce that is slower than its links allow loses the
// time somewhere in its pipeline (a stage that waits for a peer not yet
// scheduled, a link idle while the node reduces), and only the steps' times on
// every rank together show where. Off by default; when off, each step costs one
// relaxed load. When on, one clock read and one 40-byte record per step and
// per transfer, into a buffer of kCapacity records allocated at bc_init
// (untouched pages cost nothing); what does not fit is counted, not recorded.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace bc {
namespace timeline {

constexpr size_t kCapacity = size_t{1} << 20;  // records per process (40 MiB of address space)

// A communicator whose calls are not recorded (the timeline was not on in
// every one of its processes).
constexpr uint32_t kUnrecorded = UINT32_MAX;

enum class Kind : uint8_t { CallBegin, CallEnd, StepPost, StepDone, RecvDone, SendDone };

extern std::atomic<bool> g_on;
inline bool on() { return g_on.load(std::memory_order_relaxed); }

// bc_init: `pattern` is BC_TIMELINE_FILE (empty: off); %h host, %p pid, %r
// world rank, and ".%r.json" is appended when it names neither %r nor %p, so
// that the ranks' files never overwrite each other.
Status configure(const std::string &pattern, int world_rank);

// A communicator as the timeline file describes it (lib/api/comm_timeline.cc
// fills it in at creation).
struct CommClock {
  std::string key;  // job-wide: "<world rank of its rank 0>:<that process's take_key_number()>"
  int size = 0;
  int rank = 0;
  std::vector<int> world_ranks;
  double offset_us = 0;  // add to this process's times to get its rank 0's clock
  double error_us = 0;   // half the best round trip of the measurement
};
// Returns the communicator's index in this process's records.
uint32_t add_comm(CommClock comm);
// Rank 0 of a new communicator: the second half of its key (0, 1, 2, ...).
uint32_t take_key_number();
int world_rank();
// CLOCK_MONOTONIC, the clock of every record.
int64_t now_ns();

// One event. Steps: `seq` is the chunk's sequence number, `what` 1 for a
// reducing step and 0 for a copying one; calls: `seq` the first chunk's,
// `peer` the number of chunks, `what` the CollKind. `lane`: the pipeline slot.
void record(Kind kind, uint32_t comm, uint32_t seq, int step, int stage, int what, int peer, uint64_t bytes,
            int lane);

// bc_finalize (the last): writes the file and frees the records. A failure to
// write is a warning, never an error of bc_finalize.
void write();

}  // namespace timeline
}  // namespace bc
