// The algorithm registry: everything the library knows about one algorithm
// sits in its file (algo_ring.cc, algo_rhd.cc, algo_direct.cc, algo_rd.cc,
// algo_all.cc) as one AlgoImpl, and kAlgorithms (algo.cc) lists them. The
// program builder, BC_ALGO and BC_PLAN parsing, auto's candidates, the cost
// model's step and byte counts, the model file's names and calibration's
// trials all read the entries, so adding an algorithm is an `Algo` value, a
// file and a line in kAlgorithms (and, for BC_ALGO, its choices in
// lib/core/params_table.cc, which cannot include the plan layer; a [algo] unit test
// checks that list against the registry).
//
// Two kinds of entry (AlgoImpl::top):
//   Top::Split  a stage algorithm: reduce-scatter among any stage's owners and
//               the matching all-gather; BC_ALGO and BC_PLAN algo= force it.
//   Top::Rd/All the top stage's whole all-reduce in one piece, chosen by
//               BC_PLAN top= (or the cost model), never per stage.
// Algo::Auto is no entry: it is the absence of a choice, resolved per group by
// auto_candidates(). Top::Split is no entry either: it means "run the stage
// algorithms on the top stage too".
#pragma once

#include <vector>

#include "plan/plan.h"

namespace bc {

// Steps and bytes (as a multiple of the stage's input B) of one stage's RS+AG
// (or whole all-reduce) over q owners, as the cost model prices them: steps on
// the busiest rank's path, bytes sent by the busiest rank.
struct StageShape {
  double steps = 0;
  double bytes_per_b = 0;
  bool ok = false;  // the algorithm can serve q owners
};

using AlgoSteps = Status (*)(const GroupCtx &ctx, std::vector<Step> *out);

struct AlgoImpl {
  Algo id = Algo::Auto;
  const char *name = "";         // in BC_ALGO, BC_PLAN, model files and logs
  const char *description = "";
  Top top = Top::Split;          // Split: a stage algorithm; else the top= value that selects it
  // Precondition: whether it can run a group of q owners. Its builders refuse
  // other groups with BC_ERR_NOT_SUPPORTED, and the cost model calls it not ok.
  bool (*serves)(int q) = nullptr;
  // Steps and bytes of RS+AG (or of the whole all-reduce) over q owners, for
  // the cost model; `ok` is filled from `serves`. tests/unit/test_algo.cc
  // checks them against the built Programs for q = 2..17.
  StageShape (*shape)(int q) = nullptr;
  // Stage algorithms: owner j of the group ends with sub_block(range, q, j)
  // reduced, then every owner with the whole range.
  AlgoSteps reduce_scatter = nullptr;
  AlgoSteps all_gather = nullptr;
  // Whole-top algorithms: every owner ends with the whole range reduced.
  AlgoSteps all_reduce = nullptr;
  // Auto: takes it at topology levels <= auto_max_level (-1: never; level 0 is
  // the flat shape), preferring lower auto_rank, for groups auto_serves allows
  // (nullptr: every group `serves` allows).
  int auto_max_level = -1;
  int auto_rank = 0;
  bool (*auto_serves)(int q) = nullptr;
  // Calibration times it at a stage of q owners (`top`: the split's top stage
  // or the flat one) when this says so; nullptr: never timed.
  bool (*calibrated)(int q, bool top) = nullptr;
  // An algorithm calibration does not time borrows these fits, first found first.
  Algo priced_as[2] = {Algo::Auto, Algo::Auto};
};

extern const AlgoImpl kAlgoRing;
extern const AlgoImpl kAlgoRhd;
extern const AlgoImpl kAlgoDirect;
extern const AlgoImpl kAlgoRd;
extern const AlgoImpl kAlgoAll;

// Every entry, in table order: stage algorithms first, the ring leading (the
// cost model tries them in this order and keeps the earlier one on a tie).
const std::vector<const AlgoImpl *> &algorithms();
// The entry for `a`; nullptr for Auto.
const AlgoImpl *algo_find(Algo a);
// The whole-top entry that `top` selects; nullptr for Top::Split.
const AlgoImpl *algo_for_top(Top top);
// The algorithms auto may take at a topology level (level 0: the flat shape),
// in order of preference. The cost model chooses among the same.
std::vector<Algo> auto_candidates(int level);
// BC_ALGO's choices as prose for error messages: "auto, ring, rhd or direct".
std::string algo_choices();

}  // namespace bc
