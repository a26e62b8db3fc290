#include "plan/cost.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace bc {
namespace {

// A fold is one message per step: the level's smallest fitted alpha prices it.
const CostFit *cheapest_step(const CostModel &m, int level) {
  const CostFit *best = nullptr;
  for (const auto &kv : m.fits)
    if (kv.first.first == level && (!best || kv.second.alpha < best->alpha)) best = &kv.second;
  return best;
}

// An algorithm's name in the model file: any registry entry's, rd and all
// included (which algo_parse, for BC_ALGO, does not accept).
bool fit_parse(const std::string &s, Algo *a) {
  for (const AlgoImpl *impl : algorithms())
    if (s == impl->name) { *a = impl->id; return true; }
  return false;
}

}  // namespace

const CostFit *CostModel::find(int level, Algo a) const {
  auto it = fits.find({level, a});
  return it == fits.end() ? nullptr : &it->second;
}

const PlanFit *CostModel::find_plan(Hierarchy::Shape shape, Top top, int64_t bytes) const {
  if (bytes > plan_fit_max) return nullptr;
  for (const PlanFit &f : plan_fits)
    if (f.choice.shape == shape && f.choice.top == top) return &f;
  return nullptr;
}

namespace {
// The fit that prices `a` at `level`: its own, else those of the algorithms its
// entry borrows from (AlgoImpl::priced_as: all, which calibration does not time).
const CostFit *fit_for(const CostModel &m, int level, Algo a) {
  const CostFit *f = m.find(level, a);
  const AlgoImpl *impl = algo_find(a);
  for (int k = 0; k < 2 && !f && impl; ++k)
    if (impl->priced_as[k] != Algo::Auto) f = m.find(level, impl->priced_as[k]);
  return f;
}
}  // namespace

StageShape stage_shape(Algo algo, int q, int m) {
  const AlgoImpl *impl = algo_find(algo);
  if (!impl) return StageShape{};  // Auto: the caller picks per stage
  StageShape s = impl->shape(q);
  s.ok = impl->serves(q);
  if (m > q && q > 0) {  // the extras' fold in and result out
    s.steps += 2;
    s.bytes_per_b += 2.0 * ((m - q + q - 1) / q);
  }
  return s;
}

CostFit fit_stage(const StageShape &shape, double b0, double t0, double b1, double t1) {
  // Floors: a measurement in the noise must not give a free step or free bytes.
  const double bytes = shape.bytes_per_b * (b1 - b0);
  return fit_alpha(shape, b0, t0, bytes > 0 ? std::max((t1 - t0) / bytes, 1e-12) : 1e-12);
}

CostFit fit_alpha(const StageShape &shape, double b0, double t0, double beta) {
  CostFit f;
  f.beta = beta;
  const double steps = std::max(shape.steps, 1.0);
  f.alpha = std::max((t0 - shape.bytes_per_b * b0 * f.beta) / steps, 1e-7);
  return f;
}

Prediction predict(const Hierarchy &h, const CostModel &m, const PlanChoice &choice, int64_t bytes) {
  Prediction p;
  const bool one_piece = choice.chunk_bytes <= 0 || choice.chunk_bytes >= bytes;
  if (const PlanFit *pf = one_piece ? m.find_plan(choice.shape, choice.top, bytes) : nullptr) {
    if (pf->choice.stage_algos == choice.stage_algos) {
      p.seconds = p.fill = p.per_chunk = pf->alpha + pf->beta * static_cast<double>(bytes);
      p.stage_algos = pf->choice.stage_algos;
      p.timed_plan = p.ok = true;
      return p;
    }
  }
  const int64_t chunk = one_piece ? bytes : choice.chunk_bytes;
  p.chunks = chunk > 0 ? (bytes + chunk - 1) / chunk : 1;
  double b = static_cast<double>(chunk);
  std::map<int, double> level_bytes_time;  // per level: the byte part of one chunk
  double step_time = 0;                    // the alpha part of one chunk, all stages
  for (size_t s = 0; s < h.stages.size(); ++s) {
    const StageGroups &sg = h.stages[s];
    const int q = sg.owners, mm = sg.max_members();
    const bool top = s + 1 == h.stages.size();
    Algo a = choice.algo;
    if (s < choice.stage_algos.size() && choice.stage_algos[s] != Algo::Auto) a = choice.stage_algos[s];
    if (top && top_whole(choice.top, q)) a = algo_for_top(choice.top)->id;
    if (q == 1) a = Algo::Ring;  // the leader shape below the top: only the fold
    if (a == Algo::Auto) return p;  // the caller picks per stage
    const StageShape shape = stage_shape(a, q, mm);
    const CostFit *fit = q == 1 ? cheapest_step(m, sg.level) : fit_for(m, sg.level, a);
    if (!shape.ok || !fit) return p;
    const double byte_time = shape.bytes_per_b * b * fit->beta;
    p.fill += shape.steps * fit->alpha + byte_time;
    step_time += shape.steps * fit->alpha;
    level_bytes_time[sg.level] += byte_time;
    p.stage_algos.push_back(a);
    b /= q;
  }
  double busiest = 0;
  for (const auto &kv : level_bytes_time) busiest = std::max(busiest, kv.second);
  // Chunks stream at the busiest link's pace, but no faster than a rank can
  // take each chunk through all of its steps: the calibrated alpha is mostly
  // the rank's own time per step (posting, polling, being scheduled: 0.1-0.7
  // ms per step with 8 ranks on 2 cores), which the chunks in flight share
  // rather than overlap. Without this term the model cut 4 MiB into 64-256 KiB
  // chunks that took 1.5-2.2x the measured time of 1 MiB chunks at 1 Gbit/s.
  p.per_chunk = std::max({busiest, step_time, p.fill / std::max(1, choice.depth)});
  p.seconds = p.fill + static_cast<double>(p.chunks - 1) * p.per_chunk;
  p.ok = true;
  return p;
}

PlanChoice model_stage_algos(const Hierarchy &h, const CostModel &m, PlanChoice c, int64_t chunk) {
  c.stage_algos.assign(h.stages.size(), Algo::Auto);
  double b = static_cast<double>(chunk);
  for (size_t s = 0; s < h.stages.size(); ++s) {
    const StageGroups &sg = h.stages[s];
    const int q = sg.owners, mm = sg.max_members();
    double best = -1;
    // Auto's candidates for the level: across nodes only the ring. rhd's
    // partner switching costs what a short calibration does not see (TCP
    // restarts an idle connection's window at every switch). On the simulated
    // cluster, 8 MiB with rhd across nodes took 552 ms and with the ring 446 ms,
    // while the fits predicted the opposite; allowing rhd only for small stage
    // inputs made the model cut large buffers into small chunks to keep it.
    // Small buffers get the top stage as recursive doubling instead.
    // Tried in registry order, where the ring comes first: rhd must be clearly faster.
    const std::vector<Algo> allowed = auto_candidates(sg.level);
    for (const AlgoImpl *impl : algorithms()) {
      const Algo a = impl->id;
      if (std::find(allowed.begin(), allowed.end(), a) == allowed.end()) continue;
      const StageShape shape = stage_shape(a, q, mm);
      const CostFit *fit = m.find(sg.level, a);
      if (!shape.ok || !fit) continue;
      const double t = shape.steps * fit->alpha + shape.bytes_per_b * b * fit->beta;
      if (best < 0 || t < best * 0.97) {  // ring unless rhd is clearly faster
        best = t;
        c.stage_algos[s] = a;
      }
    }
    if (c.stage_algos[s] == Algo::Auto) c.stage_algos[s] = Algo::Ring;
    b /= std::max(q, 1);
  }
  return c;
}

namespace {
// Every plan the model may choose for `bytes`, in order of preference when the
// model calls them even, with its prediction (only those it can price).
// Candidates: one chunk before many; then 256 KiB chunks, larger ones, and
// 64 KiB last; and the deeper pipeline, which costs only scratch memory but
// absorbs the jitter that the model's steady pace leaves out.
// Why 256 KiB before 1 MiB: where the links set the pace the model prices
// them within 1% (only the pipeline's fill differs), and 256 KiB measured
// 3-10% faster at 4-16 MiB on 4 x 2 and 2 x 4 ranks at 250 Mbit/s
// (scripts/bench-chunks; docs/BENCHMARKS.md as of 6d346a9), while 1 MiB first left the
// model 4-13% slower than the best fixed chunking there. Where
// each step's alpha sets the pace, the larger chunk is 3% faster by the
// model's own measure and still wins.
template <typename Fn>
void for_each_plan(const Hierarchy &split, const Hierarchy &leader, const Hierarchy &flat, const CostModel &m,
                   int64_t bytes, Fn fn) {
  static const int64_t kChunks[] = {0, 256 << 10, 1 << 20, 4 << 20, 64 << 10};
  static const int kDepths[] = {4, 2, 1};
  for (int shape = 0; shape < 3; ++shape) {
    const Hierarchy &h = shape == 0 ? split : shape == 1 ? leader : flat;
    if (shape > 0 && split.stages.size() < 2) continue;  // one level: the same plan as the split
    if (h.stages.empty()) continue;
    for (Top top : {Top::Split, Top::Rd, Top::All}) {
      if (top != Top::Split && !top_whole(top, h.stages.back().owners)) continue;
      for (int64_t chunk : kChunks) {
        if (chunk != 0 && chunk * 2 > bytes) continue;  // fewer than two chunks: no pipeline
        if (chunk == 0 ? bytes > m.max_whole : chunk > m.max_chunk) continue;  // beyond what was measured
        for (int depth : kDepths) {
          if (chunk == 0 && depth != 1) continue;
          PlanChoice c;
          c.shape = static_cast<Hierarchy::Shape>(shape);
          c.top = top;
          c.chunk_bytes = chunk;
          c.depth = depth;
          // One piece that a timed plan covers runs with the algorithms it was timed with.
          const PlanFit *pf = chunk == 0 ? m.find_plan(c.shape, top, bytes) : nullptr;
          c = pf ? pf->choice : model_stage_algos(h, m, c, chunk > 0 ? chunk : bytes);
          const Prediction p = predict(h, m, c, bytes);
          if (p.ok) fn(c, p);
        }
      }
    }
  }
}
}  // namespace

namespace {
// The model's pick among the plans for_each_plan offers, in its order: a
// later one must be 3% faster than the best so far.
struct Pick {
  ModelCandidate best;
  void offer(const PlanChoice &c, const Prediction &p) {
    if (!best.prediction.ok || p.seconds < best.prediction.seconds * 0.97) best = {c, p};
  }
};
}  // namespace

PlanChoice model_choose(const Hierarchy &split, const Hierarchy &leader, const Hierarchy &flat, const CostModel &m,
                        int64_t bytes, Prediction *pred) {
  Pick pick;
  for_each_plan(split, leader, flat, m, bytes, [&](const PlanChoice &c, const Prediction &p) { pick.offer(c, p); });
  if (pred) *pred = pick.best.prediction;
  return pick.best.choice;
}

std::vector<ModelCandidate> model_candidates(const Hierarchy &split, const Hierarchy &leader, const Hierarchy &flat,
                                             const CostModel &m, int64_t bytes, double within) {
  // One pass: every plan with its prediction, and model_choose's pick among them.
  std::vector<ModelCandidate> all;
  Pick pick;
  for_each_plan(split, leader, flat, m, bytes, [&](const PlanChoice &c, const Prediction &p) {
    all.push_back({c, p});
    pick.offer(c, p);
  });
  if (!pick.best.prediction.ok) return {};
  const PlanChoice &first = pick.best.choice;
  const double limit = pick.best.prediction.seconds * within;
  // The best of another shape or top, and the best of the first's shape and
  // top with other chunks: the two ways the model has been wrong.
  ModelCandidate other_kind, other_chunk;
  for (const ModelCandidate &c : all) {
    if (c.prediction.seconds > limit) continue;
    const bool same_kind = c.choice.shape == first.shape && c.choice.top == first.top;
    ModelCandidate *slot = !same_kind ? &other_kind : c.choice.chunk_bytes != first.chunk_bytes ? &other_chunk : nullptr;
    if (slot && (!slot->prediction.ok || c.prediction.seconds < slot->prediction.seconds)) *slot = c;
  }
  std::vector<ModelCandidate> out{pick.best};
  for (const ModelCandidate *c : {&other_kind, &other_chunk})
    if (c->prediction.ok) out.push_back(*c);
  return out;
}

std::string model_signature(const Hierarchy &h) {
  std::ostringstream os;
  os << "p" << h.nranks;
  for (const StageGroups &sg : h.stages)
    os << "/L" << sg.level << ":g" << sg.groups.size() << "q" << sg.owners << "m" << sg.max_members();
  return os.str();
}

std::string model_serialize(const CostModel &m, const std::string &signature) {
  std::ostringstream os;
  os << "# BlueConnect cost model (docs/PLANS.md). time = steps * alpha + bytes * beta\n"
     << "bcmodel 1\n"
     << "layout " << signature << "\n"
     << "maxchunk " << m.max_chunk << "\n"
     << "maxwhole " << m.max_whole << "\n";
  char line[160];
  if (!m.plan_fits.empty()) os << "planmax " << m.plan_fit_max << "\n";
  for (const PlanFit &f : m.plan_fits) {
    std::snprintf(line, sizeof line, "plan %.9e %.9e ", f.alpha, f.beta);
    os << line << plan_choice_describe(f.choice) << "\n";
  }
  for (const auto &kv : m.fits) {
    std::snprintf(line, sizeof line, "fit %d %s %.9e %.9e\n", kv.first.first, algo_name(kv.first.second),
                  kv.second.alpha, kv.second.beta);
    os << line;
  }
  return os.str();
}

Status model_parse(const std::string &text, const std::string &signature, CostModel *out, bool *matches) {
  out->fits.clear();
  *matches = false;
  std::istringstream in(text);
  std::string line, layout;
  int lineno = 0;
  bool header = false;
  CostModel m;
  while (std::getline(in, line)) {
    ++lineno;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    std::istringstream ls(line);
    std::string key;
    if (!(ls >> key)) continue;
    if (key == "bcmodel") {
      int version = 0;
      if (!(ls >> version) || version != 1)
        return BC_FAIL(BC_ERR_PARAM, "model file line %d: unsupported format '%s' (this build reads bcmodel 1)",
                       lineno, line.c_str());
      header = true;
    } else if (key == "layout") {
      if (!(ls >> layout)) return BC_FAIL(BC_ERR_PARAM, "model file line %d: 'layout' needs a value", lineno);
    } else if (key == "maxwhole") {
      if (!(ls >> m.max_whole) || m.max_whole < 0)
        return BC_FAIL(BC_ERR_PARAM, "model file line %d: 'maxwhole' needs a byte count", lineno);
    } else if (key == "maxchunk") {
      if (!(ls >> m.max_chunk) || m.max_chunk < 1)
        return BC_FAIL(BC_ERR_PARAM, "model file line %d: 'maxchunk' needs a positive byte count", lineno);
    } else if (key == "planmax") {
      if (!(ls >> m.plan_fit_max) || m.plan_fit_max < 0)
        return BC_FAIL(BC_ERR_PARAM, "model file line %d: 'planmax' needs a byte count", lineno);
    } else if (key == "plan") {
      PlanFit f;
      std::string settings;
      std::vector<PlanRule> rules;
      if (!(ls >> f.alpha >> f.beta >> settings) || !(f.alpha >= 0) || !(f.beta >= 0) ||
          plan_rules_parse("-:" + settings, &rules) != BC_OK || rules.size() != 1) {
        clear_error();
        return BC_FAIL(BC_ERR_PARAM,
                       "model file line %d: expected 'plan ALPHA_S BETA_S_PER_BYTE shape=S,algo=A[/A...],top=T', got '%s'",
                       lineno, line.c_str());
      }
      f.choice = rules[0].choice;
      if (f.choice.stage_algos.empty()) f.choice.stage_algos.assign(1, f.choice.algo);
      f.choice.algo = Algo::Auto;
      f.choice.chunk_bytes = 0;
      f.choice.depth = 1;
      m.plan_fits.push_back(f);
    } else if (key == "fit") {
      int level = 0;
      std::string name;
      CostFit f;
      Algo a;
      if (!(ls >> level >> name >> f.alpha >> f.beta) || level < 1 || !fit_parse(name, &a) || !(f.alpha >= 0) ||
          !(f.beta >= 0))
        return BC_FAIL(BC_ERR_PARAM,
                       "model file line %d: expected 'fit LEVEL ring|rhd|direct|rd ALPHA_S BETA_S_PER_BYTE', got '%s'",
                       lineno, line.c_str());
      m.fits[{level, a}] = f;
    } else {
      return BC_FAIL(BC_ERR_PARAM, "model file line %d: unknown key '%s'", lineno, key.c_str());
    }
  }
  if (!header) return BC_FAIL(BC_ERR_PARAM, "model file: no 'bcmodel 1' line; not a BlueConnect model file");
  if (layout != signature) return BC_OK;
  *matches = true;
  *out = m;
  return BC_OK;
}

std::string model_describe(const CostModel &m) {
  std::ostringstream os;
  os << "cost model (" << m.source << ", one piece up to " << m.max_whole << " B, chunks up to " << m.max_chunk
     << " B):";
  char buf[256];
  for (const auto &kv : m.fits) {
    std::snprintf(buf, sizeof buf, " L%d/%s a=%.1fus b=%.3fns/B (%.0f MB/s)", kv.first.first,
                  algo_name(kv.first.second), kv.second.alpha * 1e6, kv.second.beta * 1e9,
                  kv.second.beta > 0 ? 1e-6 / kv.second.beta : 0.0);
    os << buf;
  }
  for (const PlanFit &f : m.plan_fits) {
    std::snprintf(buf, sizeof buf, " [%s up to %lld B: %.1fus + %.3fns/B]", plan_choice_describe(f.choice).c_str(),
                  static_cast<long long>(m.plan_fit_max), f.alpha * 1e6, f.beta * 1e9);
    os << buf;
  }
  return os.str();
}

}  // namespace bc
