// The α-β cost model (lib/plan/cost.h): shapes, fits, predictions, the choice
// per size, and the model file. The plans it chooses are run by the simulator
// in test_plan.cc ("plans the cost model chooses ...").
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "plan/cost.h"

using namespace bc;

namespace {

Hierarchy hier(const char *spec, int p, Hierarchy::Shape shape = Hierarchy::Shape::Split) {
  Topology t;
  REQUIRE(topo_parse(spec, p, &t) == BC_OK);
  return Hierarchy::build(t, shape);
}

// A fast level 1 and a slow level 2: alpha in seconds, beta in seconds per byte.
CostModel two_levels(double a1, double b1, double a2, double b2) {
  CostModel m;
  for (Algo a : {Algo::Ring, Algo::Rhd, Algo::Rd}) {
    m.fits[{1, a}] = {a1, b1};
    m.fits[{2, a}] = {a2, b2};
  }
  m.source = "test";
  return m;
}

}  // namespace

TEST_CASE("stage shapes: steps and bytes of each algorithm", "[cost]") {
  StageShape s = stage_shape(Algo::Ring, 4, 4);
  REQUIRE(s.ok);
  REQUIRE(s.steps == 6);
  REQUIRE(s.bytes_per_b == Approx(1.5));
  s = stage_shape(Algo::Rhd, 4, 4);
  REQUIRE(s.steps == 4);
  REQUIRE(s.bytes_per_b == Approx(1.5));
  s = stage_shape(Algo::Rhd, 6, 6);  // folds 2 pairs into 4
  REQUIRE(s.ok);
  REQUIRE(s.steps == 2 * 2 + 4);
  REQUIRE(s.bytes_per_b == Approx(2 * 3.0 / 4 + 1 + 1.0 / 6));
  s = stage_shape(Algo::Rd, 8, 8);
  REQUIRE(s.steps == 3);
  REQUIRE(s.bytes_per_b == 3);
  REQUIRE_FALSE(stage_shape(Algo::Rd, 6, 6).ok);
  // 2 owners, 3 members: one extra folds in and gets the result back.
  s = stage_shape(Algo::Ring, 2, 3);
  REQUIRE(s.steps == 2 + 2);
  REQUIRE(s.bytes_per_b == Approx(1 + 2));
  // The leader shape below the top: one owner, everything folds.
  s = stage_shape(Algo::Ring, 1, 4);
  REQUIRE(s.steps == 2);
  REQUIRE(s.bytes_per_b == 2 * 3);
}

TEST_CASE("fit_stage recovers alpha and beta from two timings", "[cost]") {
  const StageShape s = stage_shape(Algo::Ring, 4, 4);
  const double alpha = 50e-6, beta = 4e-9;
  auto t = [&](double b) { return s.steps * alpha + s.bytes_per_b * b * beta; };
  const CostFit f = fit_stage(s, 256, t(256), 262144, t(262144));
  REQUIRE(f.alpha == Approx(alpha).epsilon(1e-9));
  REQUIRE(f.beta == Approx(beta).epsilon(1e-9));
  // Noise that makes the large run look faster must not give free bytes or steps.
  const CostFit g = fit_stage(s, 256, 1e-3, 262144, 0.5e-3);
  REQUIRE(g.beta > 0);
  REQUIRE(g.alpha > 0);
}

TEST_CASE("fit_alpha: one timing and the level's beta give another algorithm's alpha", "[cost]") {
  // Calibration across nodes times rd's small point only and prices its bytes
  // with the ring's beta on the same level (lib/api/calibrate.cc).
  const StageShape rd = stage_shape(Algo::Rd, 4, 4);
  const double alpha = 700e-6, beta = 66e-9, b0 = 256;
  const CostFit f = fit_alpha(rd, b0, rd.steps * alpha + rd.bytes_per_b * b0 * beta, beta);
  REQUIRE(f.beta == beta);
  REQUIRE(f.alpha == Approx(alpha).epsilon(1e-9));
  // A timing below what the bytes alone take must not give a free step.
  REQUIRE(fit_alpha(rd, 1 << 20, 1e-6, beta).alpha > 0);
}

TEST_CASE("predict: one chunk is the sum of the stages; chunks stream at the busiest level", "[cost]") {
  const Hierarchy h = hier("2x4", 8);  // stage 1: 2 owners; stage 2: 4 owners
  const CostModel m = two_levels(10e-6, 0.1e-9, 500e-6, 32e-9);
  PlanChoice c;
  c.stage_algos = {Algo::Ring, Algo::Ring};
  const int64_t S = 16 << 20;
  Prediction p = predict(h, m, c, S);
  REQUIRE(p.ok);
  REQUIRE(p.chunks == 1);
  const double stage1 = 2 * 10e-6 + 1.0 * S * 0.1e-9;       // ring q=2: 2 steps, B bytes
  const double stage2 = 6 * 500e-6 + 1.5 * (S / 2) * 32e-9;  // ring q=4 on S/2
  REQUIRE(p.seconds == Approx(stage1 + stage2));
  c.chunk_bytes = 1 << 20;
  c.depth = 4;
  p = predict(h, m, c, S);
  REQUIRE(p.chunks == 16);
  const double b2 = 1.5 * (1 << 19) * 32e-9;  // the network's bytes per chunk
  const double fill = 2 * 10e-6 + (1 << 20) * 0.1e-9 + 6 * 500e-6 + b2;
  REQUIRE(p.fill == Approx(fill));
  const double steps = 2 * 10e-6 + 6 * 500e-6;  // a rank takes each chunk through its steps in turn
  REQUIRE(p.per_chunk == Approx(std::max({b2, steps, fill / 4})));
  REQUIRE(p.seconds == Approx(fill + 15 * p.per_chunk));
  // Depth 1: no overlap, 16 times one chunk.
  c.depth = 1;
  REQUIRE(predict(h, m, c, S).seconds == Approx(16 * fill));
  // No fit for a level: no prediction.
  CostModel partial = m;
  partial.fits.erase({2, Algo::Ring});
  REQUIRE_FALSE(predict(h, partial, c, S).ok);
}

TEST_CASE("model_choose: 256 KiB chunks unless larger ones are clearly faster", "[cost]") {
  // 2 ranks per node, 4 nodes. Links set the pace (250 Mbit/s, 32 ns/B, 0.5 ms
  // per step): 256 KiB and 1 MiB chunks are priced within 3%, and the smaller
  // one is taken (it measured 3-10% faster at 4-16 MiB; lib/plan/cost.cc).
  const Hierarchy split = hier("2x4", 8), leader = hier("2x4", 8, Hierarchy::Shape::Leader);
  const Hierarchy flat = hier("2x4", 8, Hierarchy::Shape::Flat);
  const CostModel link_paced = two_levels(100e-6, 1e-9, 0.5e-3, 32e-9);
  Prediction p;
  for (int64_t mib : {4, 16, 64}) {
    const PlanChoice c = model_choose(split, leader, flat, link_paced, mib << 20, &p);
    INFO(mib << " MiB");
    REQUIRE(c.chunk_bytes == 256 << 10);
    PlanChoice larger = c;
    larger.chunk_bytes = 1 << 20;
    REQUIRE(predict(split, link_paced, larger, mib << 20).seconds >= p.seconds * 0.97);
  }
  // Steps slow against the link (3 ms each): a 256 KiB chunk's six steps across
  // nodes take longer than its bytes, and 1 MiB is clearly faster.
  const CostModel step_paced = two_levels(100e-6, 1e-9, 3e-3, 32e-9);
  const PlanChoice c = model_choose(split, leader, flat, step_paced, 16 << 20, &p);
  REQUIRE(c.chunk_bytes >= 1 << 20);
  PlanChoice smaller = c;
  smaller.chunk_bytes = 256 << 10;
  REQUIRE(predict(split, step_paced, smaller, 16 << 20).seconds > p.seconds * 1.03);
}

TEST_CASE("model_choose: latency plan when small, pipelined split when large", "[cost]") {
  const Hierarchy split = hier("2x4", 8), leader = hier("2x4", 8, Hierarchy::Shape::Leader);
  const Hierarchy flat = hier("2x4", 8, Hierarchy::Shape::Flat);
  const CostModel m = two_levels(20e-6, 0.2e-9, 1e-3, 64e-9);  // no level-0 fits: flat does not compete
  Prediction p;
  PlanChoice small = model_choose(split, leader, flat, m, 4096, &p);
  REQUIRE(p.ok);
  // Slow steps across nodes: recursive doubling at the top (2 steps, not 6).
  REQUIRE(small.top != Top::Split);
  REQUIRE(small.chunk_bytes == 0);
  PlanChoice large = model_choose(split, leader, flat, m, 64 << 20, &p);
  REQUIRE(large.shape == Hierarchy::Shape::Split);
  REQUIRE(large.top == Top::Split);  // rd sends the whole range log2 q times
  REQUIRE(large.chunk_bytes > 0);
  REQUIRE(large.depth > 1);
  // Above max_whole (256 KiB) the buffer is always pipelined; at or below it may not be.
  REQUIRE(model_choose(split, leader, flat, m, 512 << 10).chunk_bytes > 0);
  REQUIRE(model_choose(split, leader, flat, m, 512 << 10).chunk_bytes <= m.max_whole);
  // 4 ranks per node, steps inside as slow as across: the leader's fold (1 step
  // in, 1 out) beats the split's rhd (2 + 2 steps) for small buffers.
  CostModel slow_node = two_levels(300e-6, 1e-9, 300e-6, 30e-9);
  slow_node.fits[{1, Algo::Ring}] = {900e-6, 1e-9};  // the fold is priced with the cheapest step, not the ring's
  const Hierarchy split4 = hier("4x2", 8), leader4 = hier("4x2", 8, Hierarchy::Shape::Leader);
  REQUIRE(model_choose(split4, leader4, hier("4x2", 8, Hierarchy::Shape::Flat), slow_node, 4096).shape ==
          Hierarchy::Shape::Leader);
  // The choice beats every fixed alternative the model knows by its own measure.
  for (int64_t chunk : {int64_t{0}, int64_t{64 << 10}, int64_t{4 << 20}}) {
    PlanChoice alt = large;
    alt.chunk_bytes = chunk;
    REQUIRE(predict(split, m, alt, 64 << 20).seconds >= p.seconds * 0.97);
  }
}

TEST_CASE("model_choose: a flat whole-range plan when every step costs the same", "[cost]") {
  const Hierarchy split = hier("2x4", 8), leader = hier("2x4", 8, Hierarchy::Shape::Leader);
  const Hierarchy flat = hier("2x4", 8, Hierarchy::Shape::Flat);
  REQUIRE(flat.stages.size() == 1);
  REQUIRE(flat.stages[0].level == 0);
  REQUIRE(flat.stages[0].owners == 8);
  // Steps inside the node cost as much as across (a small, loaded machine):
  // a tiny buffer goes flat in one step (all), not 2 + 1 steps through the
  // hierarchy nor 3 of flat rd.
  CostModel m = two_levels(300e-6, 1e-9, 300e-6, 30e-9);
  for (Algo a : {Algo::Ring, Algo::Rhd, Algo::Rd}) m.fits[{0, a}] = {300e-6, 30e-9};
  Prediction pr;
  PlanChoice c = model_choose(split, leader, flat, m, 64, &pr);
  INFO(plan_choice_describe(c) << " " << pr.seconds);
  REQUIRE(c.shape == Hierarchy::Shape::Flat);
  REQUIRE(c.top == Top::All);
  // At 4 KiB all's 7 copies of the buffer cost more than the split's first
  // step saves: the split with the one-step top (2 + 1 steps, 1.09 ms) beats
  // flat all (1.16 ms) and flat rd (1.27 ms).
  c = model_choose(split, leader, flat, m, 4096, &pr);
  REQUIRE(c.shape == Hierarchy::Shape::Split);
  REQUIRE(c.top == Top::All);
  PlanChoice flat_rd;
  flat_rd.shape = Hierarchy::Shape::Flat;
  flat_rd.top = Top::Rd;
  flat_rd.stage_algos = {Algo::Rd};
  REQUIRE(pr.seconds < predict(flat, m, flat_rd, 4096).seconds);
  // Large buffers still take the split: the flat plan moves everything over the slow level.
  c = model_choose(split, leader, flat, m, 16 << 20);
  REQUIRE(c.shape == Hierarchy::Shape::Split);
  std::vector<PlanRule> rules;
  REQUIRE(plan_rules_parse("-8K:shape=flat,top=rd", &rules) == BC_OK);
  REQUIRE(plan_choose(rules, 100, PlanChoice()).shape == Hierarchy::Shape::Flat);
  REQUIRE(plan_choice_describe(plan_choose(rules, 100, PlanChoice())).find("shape=flat") != std::string::npos);
}

TEST_CASE("model_choose: the algorithm per stage follows the fits", "[cost]") {
  const Hierarchy split = hier("4x4", 16), leader = hier("4x4", 16, Hierarchy::Shape::Leader);
  const Hierarchy flat = hier("4x4", 16, Hierarchy::Shape::Flat);
  CostModel m = two_levels(20e-6, 0.2e-9, 1e-3, 64e-9);
  // rhd measured slower per byte across nodes (partner switching), equal inside.
  m.fits[{2, Algo::Rhd}] = {1e-3, 80e-9};
  PlanChoice c = model_choose(split, leader, flat, m, 16 << 20);
  REQUIRE(c.stage_algos.size() == 2);
  REQUIRE(c.stage_algos[1] == Algo::Ring);
  // Across nodes the ring even where the fits favour rhd (partner switching
  // on TCP is not in a short calibration).
  m.fits[{2, Algo::Rhd}] = {1e-4, 10e-9};
  c = model_choose(split, leader, flat, m, 16 << 20);
  REQUIRE(c.stage_algos[1] == Algo::Ring);
  // rhd's fewer steps win inside the node when its bytes cost the same.
  m.fits[{1, Algo::Rhd}] = {20e-6, 0.2e-9};
  m.fits[{1, Algo::Ring}] = {40e-6, 0.2e-9};
  c = model_choose(split, leader, flat, m, 64 << 10);
  REQUIRE(c.stage_algos[0] == Algo::Rhd);
  // A group of 3: rhd must fold a pair first; with the same fits the ring wins.
  m.fits[{1, Algo::Ring}] = {20e-6, 0.2e-9};
  const Hierarchy odd = hier("3x2", 6), odd_leader = hier("3x2", 6, Hierarchy::Shape::Leader);
  c = model_choose(odd, odd_leader, hier("3x2", 6, Hierarchy::Shape::Flat), m, 1 << 20);
  REQUIRE(c.stage_algos[0] == Algo::Ring);
}

TEST_CASE("the model file: round trip, other layouts, bad lines", "[cost]") {
  const Hierarchy h = hier("2x4", 8);
  const std::string sig = model_signature(h);
  REQUIRE(sig == "p8/L1:g4q2m2/L2:g2q4m4");
  REQUIRE(model_signature(hier("3,2,3", 8)) != model_signature(hier("4x2", 8)));
  const CostModel m = two_levels(12.5e-6, 0.25e-9, 900e-6, 61e-9);
  const std::string text = model_serialize(m, sig);
  CostModel back;
  bool matches = false;
  REQUIRE(model_parse(text, sig, &back, &matches) == BC_OK);
  REQUIRE(matches);
  REQUIRE(back.fits.size() == m.fits.size());
  REQUIRE(back.max_chunk == m.max_chunk);
  REQUIRE(back.max_whole == m.max_whole);
  for (const auto &kv : m.fits) {
    const CostFit *f = back.find(kv.first.first, kv.first.second);
    REQUIRE(f);
    REQUIRE(f->alpha == Approx(kv.second.alpha).epsilon(1e-8));
    REQUIRE(f->beta == Approx(kv.second.beta).epsilon(1e-8));
  }
  // Written for another layout: not an error, just not used.
  REQUIRE(model_parse(text, model_signature(hier("4x2", 8)), &back, &matches) == BC_OK);
  REQUIRE_FALSE(matches);
  REQUIRE(back.empty());
  for (const char *bad : {"fit 1 ring 1e-5 1e-9\n", "bcmodel 2\n", "bcmodel 1\nfit 0 ring 1 1\n",
                          "bcmodel 1\nfit 1 fast 1 1\n", "bcmodel 1\nfit 1 ring -1 1\n", "bcmodel 1\nfit 1 ring\n",
                          "bcmodel 1\ncolour red\n"}) {
    INFO(bad);
    REQUIRE(model_parse(bad, sig, &back, &matches) == BC_ERR_PARAM);
    REQUIRE(std::string(last_error()).find("model file") != std::string::npos);
  }
}

TEST_CASE("plan fits decide one-piece buffers up to the size they were timed at", "[cost]") {
  const Hierarchy split = hier("2x4", 8), leader = hier("2x4", 8, Hierarchy::Shape::Leader);
  const Hierarchy flat = hier("2x4", 8, Hierarchy::Shape::Flat);
  // Stage fits that price the leader shape far too high (its top stage's beta
  // measured with every group of the stage on the link), as calibration did.
  CostModel m = two_levels(50e-6, 1e-9, 580e-6, 145e-9);
  REQUIRE(model_choose(split, leader, flat, m, 4096).shape == Hierarchy::Shape::Split);
  // Timed whole (numbers of the simulated 2 nodes x 4 ranks at 4 and 64 KiB).
  auto timed = [&](const Hierarchy &h, Hierarchy::Shape shape, double alpha, double beta) {
    PlanFit f;
    f.choice.shape = shape;
    f.choice.top = Top::Rd;
    f.choice = model_stage_algos(h, m, f.choice, 4096);
    f.alpha = alpha;
    f.beta = beta;
    return f;
  };
  m.plan_fits = {timed(split, Hierarchy::Shape::Split, 800e-6, 11e-9),
                 timed(leader, Hierarchy::Shape::Leader, 500e-6, 18e-9)};
  m.plan_fit_max = 64 << 10;
  Prediction p;
  const PlanChoice small = model_choose(split, leader, flat, m, 4096, &p);
  REQUIRE(small.shape == Hierarchy::Shape::Leader);
  REQUIRE(small.top != Top::Split);
  REQUIRE(small.chunk_bytes == 0);
  REQUIRE(small.stage_algos == m.plan_fits[1].choice.stage_algos);
  REQUIRE(p.timed_plan);
  REQUIRE(p.seconds == Approx(500e-6 + 4096 * 18e-9));
  // The fitted lines cross at 300 us / 7 ns/B = 43 KiB.
  REQUIRE(model_choose(split, leader, flat, m, 32 << 10).shape == Hierarchy::Shape::Leader);
  REQUIRE(model_choose(split, leader, flat, m, 60 << 10, &p).shape == Hierarchy::Shape::Split);
  REQUIRE(p.timed_plan);
  // Beyond the largest timed size, and for other algorithms or chunked plans, the stage fits.
  model_choose(split, leader, flat, m, 128 << 10, &p);
  REQUIRE_FALSE(p.timed_plan);
  PlanChoice other = small;
  other.stage_algos.assign(other.stage_algos.size(), Algo::Direct);
  REQUIRE_FALSE(predict(leader, m, other, 4096).timed_plan);
  PlanChoice chunked = small;
  chunked.chunk_bytes = 1024;
  REQUIRE_FALSE(predict(leader, m, chunked, 4096).timed_plan);

  // The model file keeps them.
  const std::string sig = model_signature(split);
  CostModel back;
  bool matches = false;
  REQUIRE(model_parse(model_serialize(m, sig), sig, &back, &matches) == BC_OK);
  REQUIRE(matches);
  REQUIRE(back.plan_fit_max == m.plan_fit_max);
  REQUIRE(back.plan_fits.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    REQUIRE(back.plan_fits[i].choice.shape == m.plan_fits[i].choice.shape);
    REQUIRE(back.plan_fits[i].choice.top == m.plan_fits[i].choice.top);
    REQUIRE(back.plan_fits[i].choice.stage_algos == m.plan_fits[i].choice.stage_algos);
    REQUIRE(back.plan_fits[i].alpha == Approx(m.plan_fits[i].alpha).epsilon(1e-8));
    REQUIRE(back.plan_fits[i].beta == Approx(m.plan_fits[i].beta).epsilon(1e-8));
  }
  REQUIRE(model_choose(split, leader, flat, back, 4096).shape == Hierarchy::Shape::Leader);
  for (const char *bad : {"bcmodel 1\nplan 1e-4 1e-9\n", "bcmodel 1\nplan 1e-4 1e-9 shape=round\n",
                          "bcmodel 1\nplan -1 1e-9 shape=split,algo=ring/ring,top=rd\n", "bcmodel 1\nplanmax -4\n"}) {
    INFO(bad);
    REQUIRE(model_parse(bad, sig, &back, &matches) == BC_ERR_PARAM);
    REQUIRE(std::string(last_error()).find("model file line 2") != std::string::npos);
  }
}

TEST_CASE("BC_PLAN rules take one algorithm per stage", "[cost][rules]") {
  std::vector<PlanRule> rules;
  REQUIRE(plan_rules_parse("1M-:algo=rhd/ring,chunk=1M", &rules) == BC_OK);
  PlanChoice c = plan_choose(rules, 4 << 20, PlanChoice());
  REQUIRE(c.stage_algos == std::vector<Algo>{Algo::Rhd, Algo::Ring});
  REQUIRE(plan_choice_describe(c).find("algo=rhd/ring") != std::string::npos);
  PlanChoice d = c;
  d.stage_algos = {Algo::Ring, Algo::Ring};
  REQUIRE(plan_choice_algo_key(c) != plan_choice_algo_key(d));
  REQUIRE(plan_rules_parse("-1K:algo=rhd/fast", &rules) == BC_ERR_PARAM);
  // A per-stage algorithm that cannot serve its group is an error, not a silent fallback.
  Topology t;
  REQUIRE(topo_parse("3x2", 6, &t) == BC_OK);
  const Hierarchy h = Hierarchy::build(t);
  Program prog;
  const std::vector<Algo> rhd_first{Algo::Rhd, Algo::Direct};
  REQUIRE(build_program(h, 0, CollKind::Allreduce, 60, Algo::Auto, false, &prog, Top::Split, &rhd_first) == BC_OK);
  REQUIRE(prog.stage_algos == rhd_first);
}
