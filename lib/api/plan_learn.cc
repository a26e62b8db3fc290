// The C API's learned plans. See plan_learn.h, core/learner.h and
// docs/PLANS.md ("Learning") for what is learned, when and why.
#include "api/plan_learn.h"

#include <mpi.h>

#include <cstdio>
#include <sstream>

#include "api/comm.h"
#include "core/cache_file.h"
#include "core/hash.h"
#include "core/log.h"
#include "sched/operation.h"

namespace bc {
namespace {

// How a plan bucket learns. Samples as the preload's (pmpi_route.h): the
// smallest sizes are timed in runs of up to 8 calls, so that one preempted
// call spoils one sample; 5 samples below 1 MiB, 3 from there (a 64 MiB call
// takes seconds on a slow link). A challenger must be 3% faster, the margin
// the model's own choice keeps (cost.h), so that noise does not move a
// bucket. No second look: each candidate's first call is an untimed warm-up,
// which pays its program, scratch and first touches. Late looks at the
// bucket's 1024th and 16384th calls cost 8-12 calls each: about 1% and 0.07%;
// each decides on its own times, so a network that changed is followed.
LearnShape plan_shape(int candidates, int bucket) {
  LearnShape s;
  s.candidates = candidates;
  s.incumbent = 0;
  s.warmup = 1;
  s.timed = (int64_t{1} << bucket) >= (1 << 20) ? 3 : 5;
  s.calls_per_sample = Learner::calls_per_run(bucket, 32 << 10, 8);
  s.min_win_seconds = 1e-6;
  s.min_win_ratio = 0.97;
  s.recheck_ratio = 0;
  s.confirm = 3;
  s.confirm_ratio = 1.25;
  s.late_looks = {1024, 16384};
  s.lowest_of_looks = false;  // a late look is there to notice a network that changed
  s.measure_single = true;     // one candidate: its time is still held against the model (check_caches)
  return s;
}

// The largest of each of n doubles over the ranks, in place: one small
// all-reduce over the communicator's own transports (the same waiting, dead
// peer and timeout handling as a user's call). Under the caller's lock.
Status agree_max(bc_comm *c, double *v, int n) {
  std::shared_ptr<const Program> prog;
  BC_CHECK(comm_plan(c, CollKind::Allreduce, false, n, PlanChoice(), &prog));
  const ExecContext ctx = exec_context(c, BC_FLOAT64, BC_MAX, BC_MEM_HOST);
  Operation op(ctx, reinterpret_cast<unsigned char *>(v), n, 1, 1, prog, prog, c->seq);
  c->seq += 1;
  return op.wait();
}

std::string bucket_range(int b) {
  char s[64];
  std::snprintf(s, sizeof s, "%lld-%lld B", b == 0 ? 0LL : 1LL << b, (1LL << (b + 1)) - 1);
  return s;
}

std::string seconds_text(double s) {
  char t[32];
  if (s >= 1e-3) std::snprintf(t, sizeof t, "%.2f ms", s * 1e3);
  else std::snprintf(t, sizeof t, "%.1f us", s * 1e6);
  return t;
}

// The body of plans-KEYHASH.txt: "bcplans 1", then one line per decided bucket:
//   bucket B WINNER MEDIAN,MEDIAN[,...] PLAN;PLAN[;...]
// PLAN in BC_PLAN's settings (plan_choice_describe), MEDIAN in seconds per call.
bool parse_cached(const std::string &body, std::vector<PlanLearning::Cached> *out, std::string *why) {
  out->assign(Learner::kBuckets, PlanLearning::Cached());
  std::istringstream in(body);
  std::string line;
  bool header = false;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key == "bcplans") {
      int v = 0;
      header = (ls >> v) && v == 1;
      if (!header) return *why = "unsupported format: " + line, false;
      continue;
    }
    int b = -1, winner = -1;
    std::string meds, plans;
    if (!header || key != "bucket" || !(ls >> b >> winner >> meds >> plans) || b < 0 || b >= Learner::kBuckets) {
      *why = "line " + std::to_string(lineno) + " is not 'bucket B WINNER MEDIANS PLANS': " + line.substr(0, 80);
      return false;
    }
    PlanLearning::Cached &c = (*out)[static_cast<size_t>(b)];
    std::istringstream ms(meds), ps(plans);
    std::string item;
    while (std::getline(ms, item, ',')) c.medians.push_back(std::strtod(item.c_str(), nullptr));
    while (std::getline(ps, item, ';')) c.plans.push_back(item);
    c.winner = winner;
    const bool sane = c.plans.size() == c.medians.size() && c.plans.size() >= 2 &&
                      c.plans.size() <= static_cast<size_t>(Learner::kMaxCandidates) && winner >= 0 &&
                      winner < static_cast<int>(c.plans.size());
    if (!sane) return *why = "line " + std::to_string(lineno) + " is inconsistent", false;
    for (double m : c.medians)
      if (!(m > 0 && m < 3600)) return *why = "line " + std::to_string(lineno) + " has a time out of range", false;
  }
  if (!header) return *why = "no 'bcplans 1' line", false;
  return true;
}

// Rank 0 reads the cached verdicts; every rank gets the same text (collective).
Status load_cached(bc_comm *c, PlanLearning *l, int64_t max_age_ms) {
  std::string body;
  if (c->rank == 0) {
    std::string why;
    if (!cache_read(l->cache_dir, "plans", l->cache_key, max_age_ms, "BC_MODEL_CACHE_AGE", &body, &why)) {
      body.clear();
      if (why != "no cached plans")  // a stale, foreign or corrupt file is never trusted: learned again
        BC_WARN(Plan, "plan learning: cached plans not used, learning them again: %s", why.c_str());
    } else if (!parse_cached(body, &l->cached, &why)) {
      BC_WARN(Plan, "plan learning: %s: %s; learning the plans again",
              cache_path(l->cache_dir, "plans", l->cache_key).c_str(), why.c_str());
      body.clear();
      l->cached.clear();
    }
  }
  long long len = static_cast<long long>(body.size());
  BC_MPI_CHECK(MPI_Bcast(&len, 1, MPI_LONG_LONG, 0, c->mpi));
  body.resize(static_cast<size_t>(len));
  if (len > 0) BC_MPI_CHECK(MPI_Bcast(&body[0], static_cast<int>(len), MPI_CHAR, 0, c->mpi));
  // The others parse what rank 0 parsed and found good.
  std::string why;
  if (c->rank != 0 && len > 0 && !parse_cached(body, &l->cached, &why)) l->cached.clear();
  return BC_OK;
}

void store(const bc_comm *c, PlanLearning *l) {
  if (c->rank != 0 || l->cache_key.empty()) return;
  std::string why;
  if (!cache_write(l->cache_dir, "plans", l->cache_key, plan_learning_serialize(*l), &why))
    BC_WARN(Plan, "plan learning: the learned plans are used but not cached: %s", why.c_str());
}

void log_verdict(const bc_comm *c, const PlanLearning &l, int b) {
  if (c->rank != 0 || !log_enabled(LogLevel::Info, LogSys::Plan)) return;
  const Learner::View v = l.learner.view(b);
  const PlanLearning::Candidates &k = l.buckets[static_cast<size_t>(b)];
  std::string line;
  for (size_t i = 0; i < k.plans.size(); ++i) {
    line += " [" + std::to_string(i) + "] " + plan_choice_describe(k.plans[i]) + ": " + seconds_text(v.medians[i]);
    if (k.predicted[i] > 0) line += " (model " + seconds_text(k.predicted[i]) + ")";
    line += ";";
  }
  BC_INFO(Plan, "plan learning, %s (first call %lld B, look %d%s):%s winner [%d]", bucket_range(b).c_str(),
          static_cast<long long>(k.bytes), v.looks, v.stale ? ", after a stale cached verdict" : "", line.c_str(),
          v.winner);
}

// The cached verdicts this communicator's plans stand on, checked against
// what its own calls take, once, at its first verdict of a size of 1 MiB or
// more: the winner's agreed time against the model's prediction for it. A
// model or a rack verdict from the per-user cache was measured on the network
// these hosts had then; host names do not change with it. Measured on a racked
// cluster whose host names had run a flat network before: the cached "flat"
// and its model ran every size at 61-66 % of the bound, where discovery and
// calibration anew found the racks (98 %). So when the winner takes more than
// kStaleRatio times its prediction, rank 0 warns and removes those files: the
// next job measures the racks and calibrates again. This job keeps its plans
// (its levels are fixed; the learning already picked the best of them). Not
// done for a model calibrated by this job: its errors are its own, not a
// changed network's, and the learning makes up for them. 1.5: the freshly
// calibrated model's own error at >= 1 MiB was at most 1/0.46 = 2.2x in one
// stalled run of layout d and 1.3x otherwise (docs/BENCHMARKS.md).
constexpr double kStaleRatio = 1.5;

// `winner`: the plan whose agreed time `took` was measured (a verdict's
// winner, or a cached winner's confirmation).
void check_caches(bc_comm *c, PlanLearning *l, int b, int winner, double took) {
  const PlanLearning::Candidates &k = l->buckets[static_cast<size_t>(b)];
  if (l->caches_checked || k.bytes < (1 << 20)) return;
  l->caches_checked = true;
  const double predicted = k.predicted[static_cast<size_t>(winner)];
  if (c->rank != 0 || predicted <= 0 || took <= kStaleRatio * predicted) return;
  if (c->model_cache_file.empty() && c->topo.racks_cache.empty()) return;
  std::string removed;
  for (const std::string &path : {c->model_cache_file, c->topo.racks_cache})
    if (!path.empty() && std::remove(path.c_str()) == 0) removed += " " + path;
  BC_WARN(Plan, "plan learning, %s: the plan took %s where the cost model predicted %s (%.1fx): the cached model "
          "or racks of these hosts describe another network than today's; removed from the cache so that the "
          "next job measures anew:%s", bucket_range(b).c_str(), seconds_text(took).c_str(),
          seconds_text(predicted).c_str(), took / predicted, removed.empty() ? " (nothing removed)" : removed.c_str());
}

}  // namespace

PlanLearning::PlanLearning()
    : learner([this](int b) { return plan_shape(static_cast<int>(buckets[static_cast<size_t>(b)].plans.size()), b); }),
      buckets(Learner::kBuckets) {}

Status plan_learning_setup(bc_comm *c) {
  c->learning.reset();
  if (c->params.get_str(ParamId::PlanLearn) != "on") return BC_OK;
  // What the user pinned is run as it is (docs/PLANS.md, "Who chooses").
  for (ParamId p : {ParamId::Plan, ParamId::Algo, ParamId::Chunk, ParamId::PipelineDepth})
    if (c->params.is_set(p)) return BC_OK;
  std::unique_ptr<PlanLearning> l(new PlanLearning);
  const std::string &fixed = c->params.get_str(ParamId::PlanCandidates);
  if (!fixed.empty()) {
    std::stringstream items(fixed);
    std::string item;
    while (std::getline(items, item, '|')) {
      std::vector<PlanRule> rule;
      if (plan_rules_parse("-:" + item, &rule) != BC_OK || rule.size() != 1)
        return BC_FAIL(BC_ERR_PARAM, "BC_PLAN_CANDIDATES: '%s' is not a plan in BC_PLAN's settings: %s", item.c_str(),
                       last_error());
      l->fixed.push_back(rule[0]);
    }
    if (l->fixed.empty() || l->fixed.size() > static_cast<size_t>(Learner::kMaxCandidates))
      return BC_FAIL(BC_ERR_PARAM, "BC_PLAN_CANDIDATES: between 1 and %d plans, '|'-separated; got %zu",
                     Learner::kMaxCandidates, l->fixed.size());
  } else if (c->model.empty()) {
    return BC_OK;  // one node, or BC_MODEL=off: the fixed defaults, nothing to learn among
  }
  if (c->params.get_str(ParamId::ModelCache) == "on") {
    l->cache_dir = cache_dir(c->params);
    BC_CHECK(comm_cache_key(c, &l->cache_key));
    l->cache_key += " plans=1 cand=" + hex64(fnv1a(fixed));
    BC_CHECK(load_cached(c, l.get(), c->params.get_int(ParamId::ModelCacheAge)));
  }
  c->learning = std::move(l);
  return BC_OK;
}

namespace {
// A bucket's candidates, made at its first call (or query) from that call's
// size: the same on every rank, since every rank makes the same calls.
PlanLearning::Candidates &candidates_for(bc_comm *c, PlanLearning *l, int64_t bytes) {
  const int b = Learner::bucket_of(bytes);
  PlanLearning::Candidates &k = l->buckets[static_cast<size_t>(b)];
  if (k.plans.empty()) {  // the bucket's first call: its candidates, the same on every rank
    k.bytes = bytes;
    if (!l->fixed.empty()) {
      PlanChoice base;
      base.chunk_bytes = c->params.get_int(ParamId::Chunk);
      base.depth = static_cast<int>(c->params.get_int(ParamId::PipelineDepth));
      for (const PlanRule &r : l->fixed) {
        k.plans.push_back(plan_choose({r}, bytes, base));
        k.predicted.push_back(0);
      }
    } else {
      for (const ModelCandidate &m : model_candidates(c->hier, c->hier_leader, c->hier_flat, c->model, bytes, 1.6)) {
        k.plans.push_back(m.choice);
        k.predicted.push_back(m.prediction.seconds);
      }
      if (k.plans.empty()) {
        k.plans.push_back(comm_choose(c, bytes));
        k.predicted.push_back(0);
      }
    }
    if (b < static_cast<int>(l->cached.size())) {
      const PlanLearning::Cached &was = l->cached[static_cast<size_t>(b)];
      bool same = was.plans.size() == k.plans.size();
      for (size_t i = 0; same && i < k.plans.size(); ++i) same = was.plans[i] == plan_choice_describe(k.plans[i]);
      if (same && !was.plans.empty()) l->learner.seed(b, was.winner, was.medians);
    }
    if (c->rank == 0 && k.plans.size() > 1 && log_enabled(LogLevel::Debug, LogSys::Plan)) {
      std::string names;
      for (size_t i = 0; i < k.plans.size(); ++i)
        names += " [" + std::to_string(i) + "] " + plan_choice_describe(k.plans[i]) +
                 (k.predicted[i] > 0 ? " (model " + seconds_text(k.predicted[i]) + ")" : "");
      BC_DEBUGLOG(Plan, "plan learning, %s: %s:%s", bucket_range(b).c_str(),
                  l->learner.view(b).seeded ? "cached verdict, confirming" : "candidates", names.c_str());
    }
  }
  return k;
}
}  // namespace

const PlanChoice *plan_learning_choose(bc_comm *c, int64_t bytes, bool blocking, int *candidate, bool *timed) {
  PlanLearning *l = c->learning.get();
  *timed = false;
  *candidate = 0;
  if (!l) return nullptr;
  PlanLearning::Candidates &k = candidates_for(c, l, bytes);
  *candidate = blocking ? l->learner.next(bytes, timed) : l->learner.unprobed(bytes);
  return &k.plans[static_cast<size_t>(*candidate)];
}

Status plan_learning_record(bc_comm *c, int64_t bytes, int candidate, double seconds) {
  PlanLearning *l = c->learning.get();
  if (!l) return BC_OK;
  const int b = Learner::bucket_of(bytes);
  const Learner::View before = l->learner.view(b);
  Status agreed = BC_OK;
  l->learner.record(bytes, candidate, seconds, [&](double *medians, int n) {
    agreed = agree_max(c, medians, n);
    return agreed == BC_OK;
  });
  BC_CHECK(agreed);
  const Learner::View after = l->learner.view(b);
  // A cached winner's confirmation just ran: its time is held against the model too.
  if (before.confirming && !after.confirming && after.confirmed_seconds > 0)
    check_caches(c, l, b, before.winner, after.confirmed_seconds);
  if (after.stale && !before.stale && c->rank == 0) {
    BC_WARN(Plan, "plan learning, %s: the cached winner [%d] %s took %s, against %s when it was learned; "
            "learning the bucket again", bucket_range(b).c_str(), before.winner,
            plan_choice_describe(l->buckets[static_cast<size_t>(b)].plans[static_cast<size_t>(before.winner)]).c_str(),
            seconds_text(after.confirmed_seconds).c_str(), seconds_text(before.medians[before.winner]).c_str());
  }
  const bool verdict = after.decided && !after.confirming && (!before.decided || before.confirming);
  if (verdict && !after.failed) {
    if (!(after.seeded && !after.stale && after.looks == 1)) {  // a confirmed cached verdict is logged at DEBUG only
      log_verdict(c, *l, b);
      store(c, l);
      check_caches(c, l, b, after.winner, after.medians[static_cast<size_t>(after.winner)]);
    } else if (c->rank == 0) {
      BC_DEBUGLOG(Plan, "plan learning, %s: cached winner [%d] confirmed at %s", bucket_range(b).c_str(),
                  after.winner, seconds_text(after.confirmed_seconds).c_str());
    }
  }
  return BC_OK;
}

const PlanChoice *plan_learning_current(const bc_comm *c, int64_t bytes) {
  const PlanLearning *l = c->learning.get();
  if (!l) return nullptr;
  const int b = Learner::bucket_of(bytes);
  const PlanLearning::Candidates &k = l->buckets[static_cast<size_t>(b)];
  const Learner::View v = l->learner.view(b);
  if (k.plans.empty() || (!v.decided && v.looks == 0)) return nullptr;
  return &k.plans[static_cast<size_t>(v.winner)];
}

int plan_learning_calls_left(bc_comm *c, int64_t bytes) {
  PlanLearning *l = c->learning.get();
  if (!l) return 0;
  const int b = Learner::bucket_of(bytes);
  candidates_for(c, l, bytes);
  const LearnShape &shape = l->learner.shape(b);
  const Learner::View v = l->learner.view(b);
  if (v.confirming) return shape.warmup + shape.confirm;  // at most: some may have run
  if (v.decided) return 0;
  return v.probes_total - v.probes_done;
}

int plan_learning_max_calls(int64_t bytes, int candidates) {
  return Learner::probes(plan_shape(candidates, Learner::bucket_of(bytes)));
}

std::string plan_learning_serialize(const PlanLearning &l) {
  std::ostringstream os;
  os << "bcplans 1\n# bucket B WINNER MEDIANS(s per call) PLANS (docs/PLANS.md, Learning)\n";
  for (int b = 0; b < Learner::kBuckets; ++b) {
    const Learner::View v = l.learner.view(b);
    const PlanLearning::Candidates &k = l.buckets[static_cast<size_t>(b)];
    if (k.plans.size() < 2 || v.looks == 0 || v.failed) continue;
    char num[32];
    os << "bucket " << b << " " << v.winner << " ";
    for (size_t i = 0; i < k.plans.size(); ++i) {
      std::snprintf(num, sizeof num, "%.6e", v.medians[i]);
      os << (i ? "," : "") << num;
    }
    os << " ";
    for (size_t i = 0; i < k.plans.size(); ++i) os << (i ? ";" : "") << plan_choice_describe(k.plans[i]);
    os << "\n";
  }
  return os.str();
}

std::string plan_learning_describe(const bc_comm *c) {
  const PlanLearning *l = c->learning.get();
  if (!l) return "plan learning: off\n";
  std::ostringstream os;
  os << "plan learning: on" << (l->cache_key.empty() ? "" : ", cached in " + cache_path(l->cache_dir, "plans", l->cache_key))
     << "\n";
  for (int b = 0; b < Learner::kBuckets; ++b) {
    const PlanLearning::Candidates &k = l->buckets[static_cast<size_t>(b)];
    if (k.plans.empty()) continue;
    const Learner::View v = l->learner.view(b);
    if (v.medians.size() < k.plans.size() || v.served.size() < k.plans.size()) continue;  // not started
    os << "  " << bucket_range(b) << ": ";
    if (v.failed) os << "[0] (the agreement failed)";
    else if (!v.decided) os << "learning (" << v.probes_done << " of " << v.probes_total << " calls)";
    else os << "winner [" << v.winner << "]" << (v.seeded && !v.stale ? " from the cache" : "")
            << (v.confirming ? ", confirming" : "");
    os << "\n";
    for (size_t i = 0; i < k.plans.size(); ++i) {
      os << "    [" << i << "] " << plan_choice_describe(k.plans[i]);
      if (v.medians[i] > 0) os << ": " << seconds_text(v.medians[i]);
      if (k.predicted[i] > 0) os << " (model " << seconds_text(k.predicted[i]) << ")";
      os << ", " << v.served[i] << " calls\n";
    }
  }
  // Verdicts of an earlier job for sizes this communicator has not run yet.
  for (int b = 0; b < static_cast<int>(l->cached.size()); ++b) {
    const PlanLearning::Cached &was = l->cached[static_cast<size_t>(b)];
    if (was.plans.empty() || !l->buckets[static_cast<size_t>(b)].plans.empty()) continue;
    os << "  " << bucket_range(b) << ": cached winner [" << was.winner << "], not yet used here\n";
    for (size_t i = 0; i < was.plans.size(); ++i)
      os << "    [" << i << "] " << was.plans[i] << ": " << seconds_text(was.medians[i]) << "\n";
  }
  return os.str();
}

}  // namespace bc
