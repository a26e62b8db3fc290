// bc_sim's event engine: every rank runs its Program's steps in order, chunk
// after chunk through `depth` slots, as lib/sched/operation.cc and
// executor.cc do:
//   - a slot runs one chunk's Program; when it ends, the slot takes the next
//     chunk not yet started (chunks are cut with block_count, as comm_start);
//   - a step posts all its receives and sends at once and completes when all
//     of them have; then its Reduce (the received bytes, at reduce_bw, one
//     reduction at a time per rank: the rank's one progress thread) and
//     finish_avg run, and the slot posts its next step;
//   - a message is matched by (source, destination, tag, chunk) as the
//     transports match (tag | chunk sequence); it starts when both sides
//     have posted (rendezvous), waits its path's latency, then sends its
//     bytes at the max-min fair rate of its links, recomputed whenever a flow
//     starts or ends; send and receive complete when the last byte arrives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "sim/net.h"

namespace bcsim {

struct SimXfer {
  int peer;
  int64_t offset, count;  // elements of the chunk
};

// A Program compacted for the simulator (a Step costs ~200 bytes on the heap;
// this ~40 plus 20 per transfer), built from the library's own Program.
struct SimStep {
  uint32_t tag = 0;
  bool reduce = false, avg = false;
  uint32_t first = 0, nsends = 0, nrecvs = 0;  // xfers[first ...]: sends, then recvs
  int64_t avg_offset = 0, avg_count = 0;
};
struct SimProgram {
  int64_t count = 0;
  std::vector<SimStep> steps;
  std::vector<SimXfer> xfers;
};
SimProgram compact(const bc::Program &prog);

struct SimJob {
  std::vector<SimProgram> big, small;  // per rank; small: for chunks of one element fewer (may be empty)
  int64_t count = 0;                   // elements of the whole buffer
  int64_t nchunks = 1;
  int depth = 1;
  size_t elem = 4;  // bytes per element
  std::vector<bc::Algo> stage_algos;  // what rank 0's Program ended up with, per stage
};

// Optional exact data, for tests: per rank the whole buffer, moved and
// combined (integer sum; finish_avg negates, as test_plan.cc's simulator does).
struct SimData {
  std::vector<std::vector<int64_t>> work;
};

struct SimResult {
  bool ok = false;
  std::string error;        // deadlock, unmatched or mismatched messages
  double seconds = 0;       // when the last rank finished
  int64_t messages = 0;
  int64_t rate_solves = 0;  // fair-share recomputations
};

SimResult simulate(const Network &net, const SimJob &job, SimData *data = nullptr);

}  // namespace bcsim
