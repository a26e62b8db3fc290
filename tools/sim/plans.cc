#include "sim/plans.h"

#include <algorithm>
#include <cstdlib>

#include "api/comm.h"  // chunk_count: how the library cuts a buffer into chunks
#include "core/blocks.h"

namespace bcsim {

using bc::Algo;
using bc::Hierarchy;
using bc::PlanChoice;

int spec_ranks(const std::string &spec) {
  long long ranks = 1;
  std::string level;
  for (size_t i = 0; i <= spec.size(); ++i) {
    const char ch = i < spec.size() ? spec[i] : 'x';
    if (ch != 'x' && ch != 'X' && ch != '/') { level += ch; continue; }
    if (level.find(',') != std::string::npos) {  // a list: its sum is the units below
      long long sum = 0;
      for (size_t b = 0; b <= level.size();) {
        const size_t e = std::min(level.find(',', b), level.size());
        sum += std::atoll(level.substr(b, e - b).c_str());
        b = e + 1;
      }
      return static_cast<int>(std::min<long long>(ranks * sum, 1 << 30));
    }
    ranks *= std::max(1LL, std::atoll(level.c_str()));
    if (ranks > (1 << 30)) return 1 << 30;
    level.clear();
  }
  return static_cast<int>(ranks);
}

bc::Status cluster_build(const std::string &spec, int nranks, int racks, const NetParams &net, Cluster *out) {
  Cluster &c = *out;
  if (nranks <= 0) nranks = spec_ranks(spec);
  BC_CHECK(bc::topo_parse(spec, nranks, &c.topo));
  c.net = net;
  const bc::Topology &t = c.topo;
  c.node_of = t.parent[0];
  const auto nodes = t.levels() >= 1 ? t.children(1) : std::vector<std::vector<int>>{};
  c.ranks_per_node = 1;
  for (const auto &n : nodes) c.ranks_per_node = std::max(c.ranks_per_node, static_cast<int>(n.size()));
  const int nnodes = static_cast<int>(nodes.size());
  c.rack_of_node.clear();
  c.nodes_per_rack = 0;
  if (racks > 0 && racks < nnodes) {
    for (int n = 0; n < nnodes; ++n) c.rack_of_node.push_back(n / racks);
    c.nodes_per_rack = racks;
  } else if (racks == 0 && t.levels() >= 3) {
    c.rack_of_node = t.parent[1];
    for (const auto &k : t.children(2)) c.nodes_per_rack = std::max(c.nodes_per_rack, static_cast<int>(k.size()));
  }
  if (net.trunk.bw <= 0) c.rack_of_node.clear(), c.nodes_per_rack = 0;
  // han: the node level and the root, whatever the levels above.
  const std::string first = spec.substr(0, spec.find_first_of("xX/"));
  if (t.levels() >= 2) BC_CHECK(bc::topo_parse(first, nranks, &c.node_topo));
  else c.node_topo = t;
  c.split = Hierarchy::build(t);
  c.leader = Hierarchy::build(t, Hierarchy::Shape::Leader);
  c.flat = Hierarchy::build(t, Hierarchy::Shape::Flat);
  c.han = Hierarchy::build(c.node_topo, Hierarchy::Shape::Leader);
  c.network.reset(new Network(net, c.node_of, c.rack_of_node));
  c.model = cluster_model(c);
  return BC_OK;
}

bc::CostModel cluster_model(const Cluster &c) {
  bc::CostModel m;
  m.source = "bc_sim link parameters";
  const NetParams &n = c.net;
  const bool racks = !c.rack_of_node.empty();
  const bool racks_are_level2 = racks && c.topo.levels() >= 3 && c.rack_of_node == c.topo.parent[1];
  const double g = c.ranks_per_node, per_rack = g * std::max(1, c.nodes_per_rack);
  auto put = [&m](int level, double alpha, double beta) {
    for (Algo a : {Algo::Ring, Algo::Rhd, Algo::Rd}) m.fits[{level, a}] = bc::CostFit{alpha, beta};
  };
  for (int l = 1; l <= c.topo.levels(); ++l) {
    if (l == 1) { put(1, n.intra.alpha, 1 / n.intra.bw); continue; }
    double alpha = n.node.alpha, beta = g / n.node.bw;
    // A level whose groups cross racks: all of a rack's ranks share its trunk
    // when the racks are the level; only the ring's boundary flows otherwise.
    if (racks && (l >= 3 || !racks_are_level2)) {
      alpha += n.trunk.alpha;
      beta = std::max(beta, (racks_are_level2 ? per_rack : g) / n.trunk.bw);
    }
    put(l, alpha, beta);
  }
  // Level 0, the flat shape: every step paced by the slowest hop. The ring in
  // rank order sends one flow out of each node (and rack); rhd's long-distance
  // rounds send all of them.
  const bool nodes = c.network->nnodes() > 1;
  const double alpha0 = nodes ? n.node.alpha + (racks ? n.trunk.alpha : 0) : n.intra.alpha;
  double ring_bw = n.intra.bw, rhd_beta = 1 / n.intra.bw;
  if (nodes) ring_bw = std::min(ring_bw, n.node.bw), rhd_beta = std::max(rhd_beta, g / n.node.bw);
  if (racks) ring_bw = std::min(ring_bw, n.trunk.bw), rhd_beta = std::max(rhd_beta, per_rack / n.trunk.bw);
  m.fits[{0, Algo::Ring}] = bc::CostFit{alpha0, 1 / ring_bw};
  m.fits[{0, Algo::Rhd}] = m.fits[{0, Algo::Rd}] = bc::CostFit{alpha0, rhd_beta};
  return m;
}

std::vector<PlanRun> plans_for(const Cluster &c, int64_t bytes, const std::vector<std::string> &names,
                               const std::vector<bc::PlanRule> *rule) {
  std::vector<PlanRun> out;
  for (const std::string &name : names) {
    PlanRun r;
    r.name = name;
    if (name == "bc") {
      r.choice = bc::model_choose(c.split, c.leader, c.flat, c.model, bytes);
      r.h = r.choice.shape == Hierarchy::Shape::Leader ? &c.leader
            : r.choice.shape == Hierarchy::Shape::Flat ? &c.flat : &c.split;
    } else if (name == "split") {
      r.h = &c.split;
    } else if (name == "ring" || name == "rhd") {
      r.choice.shape = Hierarchy::Shape::Flat;
      r.choice.algo = name == "ring" ? Algo::Ring : Algo::Rhd;
      r.h = &c.flat;
    } else if (name == "rule" && rule) {
      r.choice = bc::plan_choose(*rule, bytes, PlanChoice());
      r.h = r.choice.shape == Hierarchy::Shape::Leader ? &c.leader
            : r.choice.shape == Hierarchy::Shape::Flat ? &c.flat : &c.split;
    } else if (name == "han") {
      r.choice.shape = Hierarchy::Shape::Leader;
      r.choice.algo = Algo::Ring;
      r.h = &c.han;
    } else {
      continue;
    }
    r.note = bc::plan_choice_describe(r.choice);
    out.push_back(r);
  }
  return out;
}

bool job_build(const Cluster &c, const PlanRun &run, int64_t count, size_t elem, int64_t max_steps, SimJob *out,
               std::string *why) {
  const int p = c.topo.nranks;
  SimJob &j = *out;
  j = SimJob();
  j.count = count;
  j.elem = elem;
  j.nchunks = bc::chunk_count(run.choice, count, elem);
  j.depth = run.choice.depth;
  const int64_t big = bc::block_count(count, j.nchunks, 0), small = count / j.nchunks;
  const bool two = count % j.nchunks != 0;
  j.big.resize(p);
  if (two) j.small.resize(p);
  int64_t steps = 0;
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < (two ? 2 : 1); ++k) {
      bc::Program prog;
      if (bc::build_program(*run.h, r, bc::CollKind::Allreduce, k ? small : big, run.choice.algo, false, &prog,
                            run.choice.top, &run.choice.stage_algos) != BC_OK) {
        *why = std::string("build_program failed: ") + bc::last_error();
        bc::clear_error();
        return false;
      }
      steps += static_cast<int64_t>(prog.steps.size());
      if (r == 0 && k == 0) j.stage_algos = prog.stage_algos;
      if (steps > max_steps) {
        *why = "over --max-steps (" + std::to_string(max_steps) + " steps of all ranks)";
        return false;
      }
      (k ? j.small : j.big)[r] = compact(prog);
    }
  }
  return true;
}

double link_bound(const Cluster &c, double bytes) {
  const Network &n = *c.network;
  double b = 0;
  const double nn = n.nnodes(), nr = n.nracks(), g = c.ranks_per_node;
  if (nn > 1) b = std::max(b, 2 * (nn - 1) / nn * bytes / c.net.node.bw);
  if (nr > 1) b = std::max(b, 2 * (nr - 1) / nr * bytes / c.net.trunk.bw);
  if (nn <= 1 && g > 1) b = std::max(b, 2 * (g - 1) / g * bytes / c.net.intra.bw);
  return b;
}

}  // namespace bcsim
