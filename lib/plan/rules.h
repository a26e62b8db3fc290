// Plan choice per message size: BC_PLAN rules, and the defaults.
//
// BC_PLAN is a '|'-separated list of rules, the first match winning:
//   RANGE:SETTING[,SETTING...]
// RANGE is MIN-MAX in bytes of the whole buffer, MAX excluded, either side may
// be left out ("-64K", "64K-", "1M-16M"); SETTINGs are
//   shape=split|leader|flat  BlueConnect's split, reduce to node leaders
//                        (small), or all ranks as one level
//   algo=auto|ring|rhd|direct, or one per stage: algo=rhd/ring (stage 1 first)
//   top=rd|all|split     the top stage as one whole-range all-reduce: recursive
//                        doubling (rd, a power-of-two top group) or one step to
//                        all (all, any group); or as RS + AG (split)
//   chunk=BYTES          pipelining chunk (0 = none), in BC_CHUNK's range
//   depth=N              chunks in flight, in BC_PIPELINE_DEPTH's range
// (the ranges are the registry's, lib/core/params_table.cc: the same rule as the
// environment's)
// e.g. BC_PLAN="-32K:shape=leader,algo=direct|32K-:chunk=4M,depth=2".
// Settings a rule leaves out come from BC_ALGO, BC_CHUNK, BC_PIPELINE_DEPTH.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace bc {

struct PlanChoice {
  Hierarchy::Shape shape = Hierarchy::Shape::Split;
  Algo algo = Algo::Auto;
  std::vector<Algo> stage_algos;  // per stage, overriding `algo` where not Auto
  Top top = Top::Split;
  int64_t chunk_bytes = 0;
  int depth = 1;
};

struct PlanRule {
  int64_t min_bytes = 0;
  int64_t max_bytes = INT64_MAX;  // excluded
  bool has_shape = false, has_algo = false, has_top = false, has_chunk = false, has_depth = false;
  PlanChoice choice;
};

Status plan_rules_parse(const std::string &text, std::vector<PlanRule> *out);
// The first rule whose range holds `bytes` overrides what it sets in `base`.
PlanChoice plan_choose(const std::vector<PlanRule> &rules, int64_t bytes, const PlanChoice &base);
std::string plan_choice_describe(const PlanChoice &c);
// The algorithms of a choice as one number, for the plan cache's key.
uint64_t plan_choice_algo_key(const PlanChoice &c);

}  // namespace bc
