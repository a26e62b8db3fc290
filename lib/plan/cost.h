// The α-β cost model: predicted time of a plan, and the plan it chooses per size.
//
// Each (topology level, algorithm) pair has a fit `alpha` (seconds per step)
// and `beta` (seconds per byte a rank sends), measured at communicator creation
// (lib/api/calibrate.cc) by running that algorithm on that level's real groups,
// all of them at once, so the fit already holds what the level's groups share
// (a node's NIC, the memory bus) and what the algorithm's pattern costs (the
// ring streams to one neighbour; rhd switches partners every step).
//
// One stage of q owners (m members, so m - q extras fold in) on B bytes costs
// what its algorithm's registry entry says (AlgoImpl::shape, checked against
// the built Programs by tests/unit/test_algo.cc), for instance
//   ring      RS+AG: 2(q-1) steps, 2(q-1)/q * B bytes
//   rd (top)  the stage's whole all-reduce: log2 q steps, log2 q * B bytes
// plus
//   fold      extras in and out: 2 steps, 2 ceil((m-q)/q) * B bytes; with one
//             owner (the leader shape below the top) only the fold moves data,
//             priced with the level's cheapest step (the smallest alpha fitted)
// and a stage's B is the chunk divided by the owners of the stages below it.
//
// A pipelined all-reduce of n chunks, `depth` in flight, costs
//   T = fill + (n-1) * max(busiest level's byte time per chunk, fill / depth)
// where fill = one chunk's time through every stage: the first chunk pays the
// latency of every stage, the rest stream at the pace of the slowest link,
// unless too few chunks are in flight to hide the latency.
//
// The model is pure data, like the plans: unit tests drive it without MPI.
// Every rank evaluates it on the same fits (agreed with one allreduce), so every
// rank chooses the same plan.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plan/algo.h"
#include "plan/plan.h"
#include "plan/rules.h"

namespace bc {

struct CostFit {
  double alpha = 0;  // seconds per step
  double beta = 0;   // seconds per byte sent by one rank
};

// A whole plan timed in one piece at communicator creation: the small-buffer
// end, where the stage fits' per-step alpha, measured with every group of a
// stage busy at once, says little about a plan whose steps are single messages
// (the leader shape: one rank per node crosses the network). Serves buffers up
// to CostModel::plan_fit_max, the largest size it was timed at.
struct PlanFit {
  PlanChoice choice;  // shape, top and stage_algos; one piece (chunk 0, depth 1)
  double alpha = 0;   // seconds
  double beta = 0;    // seconds per byte of the buffer
};

struct CostModel {
  std::map<std::pair<int, Algo>, CostFit> fits;  // (level, algorithm)
  std::vector<PlanFit> plan_fits;
  int64_t plan_fit_max = 0;  // plan fits predict buffers up to this many bytes
  // The largest chunk the model may choose. Calibration sets 64 KiB, from
  // measurement (lib/api/calibrate.cc, docs/PLANS.md); a model file may say
  // otherwise (maxchunk).
  int64_t max_chunk = 1 << 20;
  // The largest buffer run in one piece. Above it the buffer is always cut
  // into at least two chunks: unpipelined 512 KiB all-reduces stalled for
  // 40-55 ms in 3 of 8 runs on the simulated cluster (scripts/bench, layout a
  // and b), pipelined ones never did.
  int64_t max_whole = 256 << 10;
  std::string source;                            // "calibrated", "file PATH", ...
  bool empty() const { return fits.empty(); }
  const CostFit *find(int level, Algo a) const;
  // The plan fit for a one-piece buffer of `bytes` with this shape and top, if any.
  const PlanFit *find_plan(Hierarchy::Shape shape, Top top, int64_t bytes) const;
};

// Steps and bytes (as a multiple of the stage's input B) of one stage's RS+AG
// (or whole all-reduce) with `algo` over q owners and m members: the
// algorithm's own (its registry entry's shape, plan/algo.h) plus the extras'
// fold.
StageShape stage_shape(Algo algo, int q, int m);

// Fits alpha and beta from two timings of one stage: t0 at b0 bytes, t1 at b1 > b0.
CostFit fit_stage(const StageShape &shape, double b0, double t0, double b1, double t1);

// Fits alpha alone from one timing t0 at b0 bytes, with a beta measured on the
// same level by another algorithm (the link's price per byte a rank sends).
CostFit fit_alpha(const StageShape &shape, double b0, double t0, double beta);

struct Prediction {
  double seconds = 0;
  bool timed_plan = false;  // from a PlanFit, not from the stage fits
  double fill = 0;     // one chunk through every stage
  double per_chunk = 0;  // the pace of the rest
  int64_t chunks = 1;
  std::vector<Algo> stage_algos;  // per stage of the hierarchy
  bool ok = false;
};

// Time of an all-reduce of `bytes` under `choice` on hierarchy h: from the plan
// fit when one serves it (same shape, top and algorithms, one piece, bytes up to
// plan_fit_max), else from the stage fits. ok = false when the model has no fit
// for a stage or the choice cannot run.
Prediction predict(const Hierarchy &h, const CostModel &m, const PlanChoice &choice, int64_t bytes);

// The fastest plan the model finds for `bytes`: shape (split, leader, flat), the top
// stage as rd or split, an algorithm per stage, chunk size and depth (at most
// 4). Within 3% of the best it keeps the earlier candidate (split before
// leader, fewer and bigger chunks, then the deeper pipeline), so calibration
// noise does not flip the choice back and forth.
// `flat` (Shape::Flat, may have no stages) competes where the model has fits
// for level 0.
PlanChoice model_choose(const Hierarchy &split, const Hierarchy &leader, const Hierarchy &flat, const CostModel &m,
                        int64_t bytes, Prediction *pred = nullptr);

// The plans worth measuring for `bytes` (the plan learning's candidates,
// lib/api/plan_learn.cc): model_choose's first, then the fastest predicted of
// another shape or top, then the fastest of the first's shape and top with
// other chunks, each only if predicted within `within` times the first.
// Empty when the model cannot price any plan; at most kMaxModelCandidates.
constexpr int kMaxModelCandidates = 3;
struct ModelCandidate {
  PlanChoice choice;
  Prediction prediction;
};
std::vector<ModelCandidate> model_candidates(const Hierarchy &split, const Hierarchy &leader, const Hierarchy &flat,
                                             const CostModel &m, int64_t bytes, double within);

// `choice` with the stage fits' cheapest algorithm per stage of h for a piece
// of `chunk` bytes (auto_candidates(level) only; the ring unless rhd is 3% faster).
PlanChoice model_stage_algos(const Hierarchy &h, const CostModel &m, PlanChoice choice, int64_t chunk);

// The model file (BC_MODEL_FILE): see docs/PLANS.md for the format.
std::string model_signature(const Hierarchy &split);
std::string model_serialize(const CostModel &m, const std::string &signature);
// Parses `text`; *matches = false (and *out empty) when the file was written for
// another layout. Syntax errors fail with BC_ERR_PARAM naming the line.
Status model_parse(const std::string &text, const std::string &signature, CostModel *out, bool *matches);
std::string model_describe(const CostModel &m);

}  // namespace bc
