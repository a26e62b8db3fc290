// The C API's learned plans (BC_PLAN_LEARN, docs/PLANS.md "Learning"): per
// power-of-two size bucket, the cost model's 2-3 best plans (or the user's
// BC_PLAN_CANDIDATES) run in turn on the first blocking all-reduces, and the
// fastest, agreed by every rank, keeps the bucket. The mechanism is the
// learner every learned choice uses (core/learner.h); this file gives it the
// plans, runs the agreement over the communicator's own transports, logs the
// verdicts and keeps them in the per-user cache (plans-KEYHASH.txt).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/learner.h"
#include "core/status.h"
#include "plan/cost.h"

struct bc_comm;

namespace bc {

class PlanLearning {
 public:
  // One bucket's candidates, fixed at its first call (the call's size).
  struct Candidates {
    std::vector<PlanChoice> plans;
    std::vector<double> predicted;  // seconds for the first call's size; 0 without a model
    int64_t bytes = 0;               // the size they were made for
  };
  PlanLearning();
  PlanLearning(const PlanLearning &) = delete;  // the learner's shape function holds `this`
  PlanLearning &operator=(const PlanLearning &) = delete;
  Learner learner;
  std::vector<Candidates> buckets;       // per bucket; empty until its first call
  std::vector<PlanRule> fixed;           // BC_PLAN_CANDIDATES, one rule each; empty: the model's
  std::string cache_key;                 // "" : nothing is kept across jobs
  std::string cache_dir;
  // Cached verdicts by bucket, from an earlier job: the candidates' descriptions, winner, medians.
  struct Cached {
    std::vector<std::string> plans;
    int winner = 0;
    std::vector<double> medians;
  };
  std::vector<Cached> cached;
  bool caches_checked = false;  // the cached model and racks were checked against a verdict
};

// At communicator creation (collective): whether plans are learned, and the
// cached verdicts of an earlier job. Sets c->learning (null: not learned).
Status plan_learning_setup(bc_comm *c);

// The plan of an all-reduce of `bytes`: blocking calls take the learner's
// turn (*candidate, *timed for plan_learning_record), non-blocking ones the
// bucket's latest verdict. Null when the communicator does not learn.
const PlanChoice *plan_learning_choose(bc_comm *c, int64_t bytes, bool blocking, int *candidate, bool *timed);

// The time of a call plan_learning_choose asked to time. At the end of a look
// the ranks agree (an all-reduce of a few doubles on the communicator, under
// the caller's lock); a failed agreement is returned (the call's own result is
// already complete and exact).
Status plan_learning_record(bc_comm *c, int64_t bytes, int candidate, double seconds);

// The plan a bucket's calls run now, once it has a verdict (the learned or
// cached winner); null before, or when the communicator does not learn.
const PlanChoice *plan_learning_current(const bc_comm *c, int64_t bytes);

// Blocking all-reduces of `bytes` still to be spent on learning that size's
// plan on this communicator (turns not yet run, or a cached verdict's
// confirmation); 0 when the size has its verdict or nothing is learned.
int plan_learning_calls_left(bc_comm *c, int64_t bytes);

// At most how many calls learning a size takes: n candidates (3 from the model)
// through their turns. For benchmarks' warm-ups under the preload.
int plan_learning_max_calls(int64_t bytes, int candidates);

// Per bucket seen: its candidates, their agreed times and the winner.
std::string plan_learning_describe(const bc_comm *c);

// The body of the plans cache for bc_info --plans: every decided bucket.
std::string plan_learning_serialize(const PlanLearning &l);

}  // namespace bc
