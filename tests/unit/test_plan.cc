// Plans, checked without MPI: a simulator runs every rank's Program with exact
// integer data, matching messages by (source, destination, tag) as a transport
// does, and finds deadlocks, overlapping buffers and wrong results.
#include <catch2/catch.hpp>

#include <deque>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <tuple>

#include "plan/cost.h"
#include "plan/plan.h"

using namespace bc;

namespace {

using Data = std::vector<int64_t>;

bool overlap(const Range &a, const Range &b) { return a.count > 0 && b.count > 0 && a.offset < b.end() && b.offset < a.end(); }

// Runs all programs; returns each rank's work buffer. Fails the test on deadlock.
std::vector<Data> simulate(const std::vector<Program> &progs, std::vector<Data> work, int p) {
  std::map<std::tuple<int, int, uint32_t>, std::deque<Data>> wire;
  std::vector<size_t> pc(p, 0);
  std::vector<bool> posted(p, false);
  for (;;) {
    bool moved = false, all_done = true;
    for (int r = 0; r < p; ++r) {
      const Program &pr = progs[r];
      if (pc[r] >= pr.steps.size()) continue;
      all_done = false;
      const Step &st = pr.steps[pc[r]];
      if (!posted[r]) {
        for (const Xfer &s : st.sends) {
          REQUIRE(s.peer != r);
          REQUIRE(s.range.end() <= pr.count);
          wire[{r, s.peer, st.tag}].push_back(Data(work[r].begin() + s.range.offset, work[r].begin() + s.range.end()));
          // Receives written straight into the buffer must not touch what is being sent.
          if (st.combine == Combine::Copy)
            for (const Xfer &v : st.recvs) REQUIRE_FALSE(overlap(v.range, s.range));
        }
        if (st.combine == Combine::Copy)
          for (size_t a = 0; a < st.recvs.size(); ++a)
            for (size_t b = a + 1; b < st.recvs.size(); ++b) REQUIRE_FALSE(overlap(st.recvs[a].range, st.recvs[b].range));
        posted[r] = true;
        moved = true;
      }
      bool ready = true;
      std::map<std::tuple<int, int, uint32_t>, size_t> want;
      for (const Xfer &v : st.recvs) {
        auto key = std::make_tuple(v.peer, r, st.tag);
        auto it = wire.find(key);
        if (it == wire.end() || it->second.size() <= want[key]) ready = false;
        ++want[key];
      }
      if (!ready) continue;
      for (const Xfer &v : st.recvs) {
        auto &q = wire[{v.peer, r, st.tag}];
        Data msg = q.front();
        q.pop_front();
        REQUIRE(static_cast<int64_t>(msg.size()) == v.range.count);
        for (int64_t i = 0; i < v.range.count; ++i) {
          int64_t &dst = work[r][v.range.offset + i];
          dst = st.combine == Combine::Reduce ? dst + msg[i] : msg[i];
        }
      }
      if (st.finish_avg)
        for (int64_t i = st.avg_range.offset; i < st.avg_range.end(); ++i) work[r][i] = -work[r][i];  // marks "divided"
      ++pc[r];
      posted[r] = false;
      moved = true;
    }
    if (all_done) break;
    if (!moved) {
      std::ostringstream os;
      for (int r = 0; r < p; ++r) os << " rank" << r << "@step" << pc[r] << "/" << progs[r].steps.size();
      FAIL("deadlock:" << os.str());
    }
  }
  for (auto &kv : wire) REQUIRE(kv.second.empty());  // no message left unreceived
  return work;
}

// Contribution of rank r to element i: distinct powers of two per rank, so a
// missing or doubled contribution changes the sum.
int64_t contrib(int r, int64_t i) { return (int64_t{1} << r) * (1 + i % 5); }

void check_all(const Topology &topo, Algo algo, const std::vector<int64_t> &counts,
               Hierarchy::Shape shape = Hierarchy::Shape::Split, Top top = Top::Split,
               const std::vector<Algo> *stage_algos = nullptr) {
  const int p = topo.nranks;
  const Hierarchy h = Hierarchy::build(topo, shape);
  const int64_t full = (int64_t{1} << p) - 1;
  for (int64_t n : counts) {
    INFO("topology " << topo.source << " p=" << p << " count=" << n << " algo=" << algo_name(algo)
                     << " shape=" << static_cast<int>(shape) << " top=" << top_name(top));
    for (bool avg : {false, true}) {
      // allreduce
      std::vector<Program> progs(p);
      std::vector<Data> work(p, Data(n));
      for (int r = 0; r < p; ++r) {
        REQUIRE(build_program(h, r, CollKind::Allreduce, n, algo, avg, &progs[r], top, stage_algos) == BC_OK);
        for (int64_t i = 0; i < n; ++i) work[r][i] = contrib(r, i);
      }
      auto out = simulate(progs, work, p);
      for (int r = 0; r < p; ++r)
        for (int64_t i = 0; i < n; ++i) {
          const int64_t want = full * (1 + i % 5) * (avg && p > 1 ? -1 : 1);
          if (out[r][i] != want) FAIL("allreduce rank " << r << " element " << i << ": " << out[r][i] << " != " << want);
        }
    }
    // reduce_scatter, equal blocks of rc = n / p (at least one)
    const int64_t rc = std::max<int64_t>(1, n / std::max(p, 1));
    {
      const int64_t total = rc * p;
      std::vector<Program> progs(p);
      std::vector<Data> work(p, Data(total));
      for (int r = 0; r < p; ++r) {
        REQUIRE(build_program(h, r, CollKind::ReduceScatter, total, algo, false, &progs[r]) == BC_OK);
        for (int64_t i = 0; i < total; ++i) work[r][i] = contrib(r, i);
      }
      auto out = simulate(progs, work, p);
      for (int r = 0; r < p; ++r)
        for (int64_t i = r * rc; i < (r + 1) * rc; ++i)
          if (out[r][i] != full * (1 + i % 5)) FAIL("reduce_scatter rank " << r << " element " << i);
    }
    // allgather: rank r gives rc elements; poison the rest
    {
      const int64_t total = rc * p;
      std::vector<Program> progs(p);
      std::vector<Data> work(p, Data(total, -7));
      for (int r = 0; r < p; ++r) {
        REQUIRE(build_program(h, r, CollKind::Allgather, total, algo, false, &progs[r]) == BC_OK);
        for (int64_t i = r * rc; i < (r + 1) * rc; ++i) work[r][i] = 1000 + i;
      }
      auto out = simulate(progs, work, p);
      for (int r = 0; r < p; ++r)
        for (int64_t i = 0; i < total; ++i)
          if (out[r][i] != 1000 + i) FAIL("allgather rank " << r << " element " << i);
    }
  }
}

std::vector<int64_t> counts_for(int p) {
  return {0, 1, 2, std::max(p - 1, 0), p + 1, 13, 97, 1009};
}

}  // namespace

TEST_CASE("the worked example: 12 ranks = 4 per node x 3 nodes", "[plan]") {
  Topology t;
  REQUIRE(topo_parse("4x3", 12, &t) == BC_OK);
  Hierarchy h = Hierarchy::build(t);
  REQUIRE(h.stages.size() == 2);
  REQUIRE(h.stages[0].groups == std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}});
  REQUIRE(h.stages[1].groups == std::vector<std::vector<int>>{{0, 4, 8}, {1, 5, 9}, {2, 6, 10}, {3, 7, 11}});
  // Per rank: n -> n/4 -> n/12.
  REQUIRE(h.range_before(1, 5, 1200).count == 300);
  REQUIRE(h.final_range(5, 1200).count == 100);
  // The slowest fabric carries n/4 per rank in, n/12 out.
  Program prog;
  REQUIRE(build_program(h, 5, CollKind::Allreduce, 1200, Algo::Ring, false, &prog) == BC_OK);
  int64_t inter = 0;
  for (const Step &s : prog.steps)
    for (const Xfer &x : s.sends)
      if (x.peer / 4 != 5 / 4) inter += x.range.count;
  REQUIRE(inter == 2 * 2 * 100);  // ring over 3 nodes: 2 steps each way of n/12
}

TEST_CASE("plans give exact results on even hierarchies, every algorithm", "[plan]") {
  for (const char *spec : {"1", "2", "3", "2x2", "4", "5", "6", "7", "8", "2x2x2", "4x2", "2x4", "3x3", "2x3", "3x2x2", "1x4", "4x1x2"}) {
    Topology t;
    int p = 1;
    for (char c : std::string(spec))
      if (c >= '0' && c <= '9') p *= c - '0';
    if (std::string(spec).find('x') == std::string::npos) {
      p = std::stoi(spec);
      REQUIRE(topo_parse("", p, &t) != BC_OK);  // empty spec is not a topology
      REQUIRE(topo_parse(std::to_string(p), p, &t) == BC_OK);
    } else {
      REQUIRE(topo_parse(spec, p, &t) == BC_OK);
    }
    for (Algo a : {Algo::Auto, Algo::Ring, Algo::Direct}) check_all(t, a, counts_for(p));
    check_all(t, Algo::Auto, counts_for(p), Hierarchy::Shape::Leader);
    for (Top top : {Top::Rd, Top::All}) {
      check_all(t, Algo::Auto, counts_for(p), Hierarchy::Shape::Leader, top);
      check_all(t, Algo::Ring, counts_for(p), Hierarchy::Shape::Split, top);
      check_all(t, Algo::Auto, counts_for(p), Hierarchy::Shape::Flat, top);
    }
    check_all(t, Algo::Rhd, counts_for(p), Hierarchy::Shape::Flat);
  }
}

TEST_CASE("rhd: power-of-two groups directly, other sizes with the fold", "[plan]") {
  Topology t;
  REQUIRE(topo_parse("2x4", 8, &t) == BC_OK);
  check_all(t, Algo::Rhd, counts_for(8));
  REQUIRE(topo_parse("4x2x2", 16, &t) == BC_OK);
  check_all(t, Algo::Rhd, {0, 1, 15, 17, 101});
  for (int q : {3, 5, 6, 7, 11, 12}) {
    REQUIRE(topo_parse(std::to_string(q), q, &t) == BC_OK);
    check_all(t, Algo::Rhd, counts_for(q));
  }
  for (const char *spec : {"3x2", "3x3", "2x3", "5x2"}) {
    int p = (spec[0] - '0') * (spec[2] - '0');
    REQUIRE(topo_parse(spec, p, &t) == BC_OK);
    check_all(t, Algo::Rhd, counts_for(p));
  }
  REQUIRE(topo_parse("3,2,3", 8, &t) == BC_OK);
  check_all(t, Algo::Rhd, counts_for(8));
  // Steps for q = 6: fold, 2 halvings, hand back; the folded owner only gives and takes.
  REQUIRE(topo_parse("6", 6, &t) == BC_OK);
  Hierarchy h6 = Hierarchy::build(t);
  Program p6;
  REQUIRE(build_program(h6, 0, CollKind::ReduceScatter, 60, Algo::Rhd, false, &p6) == BC_OK);
  REQUIRE(p6.steps.size() == 1 + 2 + 1);  // owned blocks are already in rank order
  REQUIRE(build_program(h6, 1, CollKind::ReduceScatter, 60, Algo::Rhd, false, &p6) == BC_OK);
  REQUIRE(p6.steps.size() == 2);
  REQUIRE(topo_parse("3x2", 6, &t) == BC_OK);
  Hierarchy h = Hierarchy::build(t);
  Program prog;
  // auto: the group of 3 inside the node falls back to the ring; above the node
  // auto always takes the ring
  REQUIRE(build_program(h, 0, CollKind::Allreduce, 60, Algo::Auto, false, &prog) == BC_OK);
  REQUIRE(prog.stage_algos == std::vector<Algo>{Algo::Ring, Algo::Ring});
  // a power-of-two group inside the node gets rhd, the nodes the ring
  REQUIRE(topo_parse("4x4", 16, &t) == BC_OK);
  h = Hierarchy::build(t);
  REQUIRE(build_program(h, 5, CollKind::Allreduce, 160, Algo::Auto, false, &prog) == BC_OK);
  REQUIRE(prog.stage_algos == std::vector<Algo>{Algo::Rhd, Algo::Ring});
}

TEST_CASE("plans give exact results on uneven hierarchies", "[plan]") {
  struct Case { const char *spec; int p; };
  for (Case c : {Case{"3,2,3", 8}, Case{"1,3", 4}, Case{"3,1", 4}, Case{"2,2,2/2,1", 6}, Case{"4,4,1", 9},
                 Case{"5,3", 8}, Case{"1,1,2", 4}, Case{"2,3,2/1,2", 7}, Case{"1,2,3,1", 7}, Case{"6,1", 7}}) {
    Topology t;
    REQUIRE(topo_parse(c.spec, c.p, &t) == BC_OK);
    REQUIRE(t.uneven());
    for (Algo a : {Algo::Auto, Algo::Ring, Algo::Direct}) check_all(t, a, counts_for(c.p));
    check_all(t, Algo::Direct, counts_for(c.p), Hierarchy::Shape::Leader);
    for (Top top : {Top::Rd, Top::All}) {
      check_all(t, Algo::Direct, counts_for(c.p), Hierarchy::Shape::Leader, top);
      check_all(t, Algo::Auto, counts_for(c.p), Hierarchy::Shape::Split, top);
      check_all(t, Algo::Auto, counts_for(c.p), Hierarchy::Shape::Flat, top);
    }
  }
}

TEST_CASE("recursive doubling at the top: log2 steps, whole range everywhere", "[plan]") {
  Topology t;
  REQUIRE(topo_parse("2x4", 8, &t) == BC_OK);
  Hierarchy h = Hierarchy::build(t, Hierarchy::Shape::Leader);
  Program prog;
  // Leader 2: fold in rank 3, 2 doubling steps across the 4 leaders, send back.
  REQUIRE(build_program(h, 2, CollKind::Allreduce, 100, Algo::Auto, false, &prog, Top::Rd) == BC_OK);
  REQUIRE(prog.steps.size() == 4);
  REQUIRE(prog.stage_algos.back() == Algo::Rd);
  REQUIRE(prog.steps[1].sends[0].range.count == 100);
  // A top group of 3 is not a power of two: the split runs instead.
  REQUIRE(topo_parse("2x3", 6, &t) == BC_OK);
  h = Hierarchy::build(t, Hierarchy::Shape::Leader);
  REQUIRE(build_program(h, 0, CollKind::Allreduce, 100, Algo::Auto, false, &prog, Top::Rd) == BC_OK);
  REQUIRE(prog.stage_algos.back() == Algo::Ring);
}

TEST_CASE("the one-step exchange at the top: any group, whole range, owner order", "[plan]") {
  Topology t;
  REQUIRE(topo_parse("2x3", 6, &t) == BC_OK);  // 3 leaders: rd cannot run, all can
  Hierarchy h = Hierarchy::build(t, Hierarchy::Shape::Leader);
  Program prog;
  // Leader 2 (rank 2, owner index 1): fold in rank 3, one step with the other two leaders, send back.
  REQUIRE(build_program(h, 2, CollKind::Allreduce, 100, Algo::Auto, false, &prog, Top::All) == BC_OK);
  REQUIRE(prog.steps.size() == 3);
  REQUIRE(prog.stage_algos.back() == Algo::All);
  const Step &x = prog.steps[1];
  REQUIRE(x.sends.size() == 2);
  REQUIRE(x.recvs.size() == 2);
  REQUIRE(x.recvs[0].peer == 0);  // owners in order, mine left out ...
  REQUIRE(x.recvs[1].peer == 4);
  REQUIRE(x.self_order == 1);     // ... and placed between them
  REQUIRE(x.recvs[0].range.count == 100);
  // Owner 0 combines in plain order.
  REQUIRE(build_program(h, 0, CollKind::Allreduce, 100, Algo::Auto, false, &prog, Top::All) == BC_OK);
  REQUIRE(prog.steps[1].self_order == 0);
  // Not for reduce_scatter: its top splits.
  REQUIRE(build_program(h, 0, CollKind::ReduceScatter, 96, Algo::Auto, false, &prog, Top::All) == BC_OK);
  REQUIRE(prog.stage_algos.back() != Algo::All);
}

TEST_CASE("the leader shape: one owner per node, only leaders cross nodes", "[plan]") {
  Topology t;
  REQUIRE(topo_parse("4x3", 12, &t) == BC_OK);
  Hierarchy h = Hierarchy::build(t, Hierarchy::Shape::Leader);
  REQUIRE(h.stages.size() == 2);
  REQUIRE(h.stages[0].owners == 1);
  REQUIRE(h.stages[1].groups == std::vector<std::vector<int>>{{0, 4, 8}});
  REQUIRE(h.stages[1].owners == 3);
  // A non-leader sends its whole buffer once and receives the result once.
  Program prog;
  REQUIRE(build_program(h, 5, CollKind::Allreduce, 1200, Algo::Direct, false, &prog) == BC_OK);
  REQUIRE(prog.steps.size() == 2);
  REQUIRE(prog.steps[0].sends.size() == 1);
  REQUIRE(prog.steps[0].sends[0].peer == 4);
  REQUIRE(prog.steps[0].sends[0].range.count == 1200);
  // The leader: fold in 3 ranks, one direct exchange each way, send back to 3.
  REQUIRE(build_program(h, 4, CollKind::Allreduce, 1200, Algo::Direct, false, &prog) == BC_OK);
  REQUIRE(prog.steps.size() == 4);
  REQUIRE(prog.steps[0].recvs.size() == 3);
  REQUIRE(prog.steps[3].sends.size() == 3);
}

TEST_CASE("uneven layouts stay hierarchical: 3+2+3 folds one rank per 3-rank node", "[plan]") {
  Topology t;
  REQUIRE(topo_parse("3,2,3", 8, &t) == BC_OK);
  Hierarchy h = Hierarchy::build(t);
  REQUIRE(h.stages.size() == 2);
  REQUIRE(h.stages[0].owners == 2);
  REQUIRE(h.stages[0].groups == std::vector<std::vector<int>>{{0, 1, 2}, {3, 4}, {5, 6, 7}});
  REQUIRE(h.stages[1].owners == 3);
  REQUIRE(h.stages[1].groups == std::vector<std::vector<int>>{{0, 3, 5}, {1, 4, 6}});
  REQUIRE(h.final_range(2, 600).count == 0);  // rank 2 folds into rank 0
  REQUIRE(h.final_range(0, 600).count == 100);
}

TEST_CASE("non-contiguous and shuffled placements", "[plan]") {
  std::mt19937 rng(12345);
  for (int p = 2; p <= 9; ++p) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<int> order(p);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      const int nodes = 1 + trial % 3;
      std::vector<std::vector<int64_t>> keys(p);
      for (int i = 0; i < p; ++i) keys[order[i]] = {i % nodes, (i % nodes) % 2};
      Topology t;
      REQUIRE(topo_from_keys(keys, {"node", "rack"}, &t) == BC_OK);
      t.source = "shuffled";
      check_all(t, Algo::Auto, {0, 1, p + 1, 53});
    }
  }
}

TEST_CASE("describe names the stages and groups", "[plan]") {
  Topology t;
  REQUIRE(topo_parse("3,2,3", 8, &t) == BC_OK);
  Hierarchy h = Hierarchy::build(t);
  std::string d = h.describe(1000, 4);
  REQUIRE(d.find("plan (split)") != std::string::npos);
  REQUIRE(d.find("stage 1 (level 1): 3 parallel group(s), 2 owner(s)") != std::string::npos);
  REQUIRE(d.find("{0,1,2*}") != std::string::npos);
  Program prog;
  REQUIRE(build_program(h, 2, CollKind::Allreduce, 1000, Algo::Auto, false, &prog) == BC_OK);
  REQUIRE(describe_program(prog, 4).find("send[0]0+1000") != std::string::npos);
}

#include "core/params.h"
#include "plan/rules.h"

TEST_CASE("BC_PLAN rules: syntax, first match wins, unset settings keep the base", "[plan][rules]") {
  std::vector<PlanRule> rules;
  REQUIRE(plan_rules_parse("-32K:shape=leader,algo=direct,top=rd| 32K-16M:chunk=1M,depth=3 |16M-:algo=ring", &rules) == BC_OK);
  REQUIRE(rules.size() == 3);
  PlanChoice base;
  base.chunk_bytes = 4 << 20;
  base.depth = 2;
  PlanChoice c = plan_choose(rules, 100, base);
  REQUIRE(c.shape == Hierarchy::Shape::Leader);
  REQUIRE(c.algo == Algo::Direct);
  REQUIRE(c.top == Top::Rd);
  REQUIRE(c.chunk_bytes == 4 << 20);
  c = plan_choose(rules, 32 * 1024, base);
  REQUIRE(c.shape == Hierarchy::Shape::Split);
  REQUIRE(c.chunk_bytes == 1 << 20);
  REQUIRE(c.depth == 3);
  c = plan_choose(rules, 64 << 20, base);
  REQUIRE(c.algo == Algo::Ring);
  REQUIRE(plan_rules_parse("", &rules) == BC_OK);
  REQUIRE(rules.empty());
  for (const char *badspec : {"leader", "-1K", "1K-1K:algo=ring", "x-:algo=ring", "-1K:algo=fast",
                              "-1K:shape=tree", "-1K:top=tree", "-1K:depth=0", "-1K:colour=red", "-1K:algo"}) {
    INFO(badspec);
    REQUIRE(plan_rules_parse(badspec, &rules) == BC_ERR_PARAM);
    REQUIRE(std::string(last_error()).find("BC_PLAN") != std::string::npos);
  }
}

// chunk= and depth= take exactly the values BC_CHUNK and BC_PIPELINE_DEPTH take
// (the registry's ranges), with the same words in the error.
TEST_CASE("BC_PLAN rules: chunk and depth within the registry's ranges", "[plan][rules][params]") {
  std::vector<PlanRule> rules;
  const struct {
    const char *spec;
    int64_t chunk;
    int depth;
  } good[] = {{"-:chunk=0", 0, 1},         {"-:chunk=4K", 4096, 1},         {"-:chunk=4096", 4096, 1},
              {"-:chunk=1G", 1LL << 30, 1}, {"-:chunk=64K,depth=1", 65536, 1}, {"-:depth=1024", 0, 1024},
              {"-:depth=4", 0, 4}};
  for (const auto &g : good) {
    INFO(g.spec << ": " << last_error());
    REQUIRE(plan_rules_parse(g.spec, &rules) == BC_OK);
    REQUIRE(rules.size() == 1);
    if (rules[0].has_chunk) REQUIRE(rules[0].choice.chunk_bytes == g.chunk);
    if (rules[0].has_depth) REQUIRE(rules[0].choice.depth == g.depth);
  }
  const struct {
    const char *spec;
    const char *says;
  } bad[] = {{"-:chunk=1", "BC_CHUNK=1 is outside its range 0 (one chunk) or 4K..1G"},
             {"-:chunk=4095", "BC_CHUNK=4095 is outside"},
             {"-:chunk=1025M", "BC_CHUNK=1025M is outside"},
             {"-1M:chunk=64K|1M-:chunk=2K", "BC_CHUNK=2K is outside"},
             {"-:depth=0", "BC_PIPELINE_DEPTH=0 is outside its range 1..1024"},
             {"-:depth=1025", "BC_PIPELINE_DEPTH=1025 is outside its range 1..1024"},
             {"-:depth=1000000", "BC_PIPELINE_DEPTH=1000000 is outside"}};
  for (const auto &b : bad) {
    INFO(b.spec);
    REQUIRE(plan_rules_parse(b.spec, &rules) == BC_ERR_PARAM);
    const std::string msg = last_error();
    INFO(msg);
    REQUIRE(msg.find("BC_PLAN") != std::string::npos);
    REQUIRE(msg.find(b.says) != std::string::npos);
  }
  // The environment's parser says the same for the same values.
  ParamSet ps;
  REQUIRE(ps.set(ParamId::Chunk, "2K", "test") == BC_ERR_PARAM);
  REQUIRE(std::string(last_error()).find("BC_CHUNK=2K is outside its range 0 (one chunk) or 4K..1G") !=
          std::string::npos);
  REQUIRE(ps.set(ParamId::PipelineDepth, "1025", "test") == BC_ERR_PARAM);
  REQUIRE(std::string(last_error()).find("BC_PIPELINE_DEPTH=1025 is outside its range 1..1024") != std::string::npos);
}

TEST_CASE("plans the cost model chooses give exact results", "[plan][cost]") {
  // Fits that make each candidate win somewhere: slow steps across nodes (rd at
  // the top, leaders), cheap bytes inside (rhd), chunking for large buffers.
  CostModel m;
  for (int level = 0; level <= 3; ++level)
    for (Algo a : {Algo::Ring, Algo::Rhd, Algo::Rd}) m.fits[{level, a}] = {(level + 1) * 150e-6, (level + 1) * 8e-9};
  m.fits[{1, Algo::Rhd}] = {100e-6, 8e-9};
  struct Case { const char *spec; int p; };
  for (Case c : {Case{"2x4", 8}, Case{"4x2", 8}, Case{"2x2x2", 8}, Case{"3,2,3", 8}, Case{"3x2", 6}, Case{"2,2,2/2,1", 6}}) {
    Topology t;
    REQUIRE(topo_parse(c.spec, c.p, &t) == BC_OK);
    const Hierarchy split = Hierarchy::build(t), leader = Hierarchy::build(t, Hierarchy::Shape::Leader);
    const Hierarchy flat = Hierarchy::build(t, Hierarchy::Shape::Flat);
    for (int64_t bytes : {int64_t{64}, int64_t{4096}, int64_t{1} << 20, int64_t{64} << 20}) {
      const PlanChoice choice = model_choose(split, leader, flat, m, bytes);
      INFO(c.spec << " " << bytes << " bytes: " << plan_choice_describe(choice));
      // The simulator runs one chunk's plan: the chunk's element count and a few around it.
      const int64_t elems = std::min<int64_t>(choice.chunk_bytes > 0 ? choice.chunk_bytes : bytes, 4096) / 4;
      check_all(t, choice.algo, {elems, elems + 1, c.p + 1}, choice.shape, choice.top, &choice.stage_algos);
    }
  }
}
