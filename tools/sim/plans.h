// What bc_sim runs: the cluster (topology and network), the cost model built
// from its link parameters, and the plans to compare. Every plan is built by
// the library's own code (Hierarchy::build, build_program, model_choose);
// the baselines are shapes the library can already produce:
//   ring  Shape::Flat, algo ring: the flat ring over all p ranks
//   rhd   Shape::Flat, algo rhd: flat recursive halving-doubling (Rabenseifner)
//   han   Shape::Leader on the node level alone: reduce to each node's first
//         rank, a ring all-reduce among the leaders, the result back down
//   split Shape::Split, algo auto, one piece: BlueConnect's stages unpipelined
//   bc    what the cost model chooses for the size (shape, algorithms, top,
//         chunk, depth), as lib/api/comm_plan.cc's comm_choose does
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "plan/cost.h"
#include "sim/engine.h"
#include "sim/net.h"

namespace bcsim {

struct Cluster {
  bc::Topology topo;       // the plan's levels (topo_parse of --topo)
  bc::Topology node_topo;  // nodes and the root alone, for han
  NetParams net;
  std::vector<int> node_of, rack_of_node;  // physical placement
  int ranks_per_node = 1, nodes_per_rack = 0;
  bc::Hierarchy split, leader, flat, han;
  bc::CostModel model;
  std::unique_ptr<Network> network;
};

// nranks 0: from the spec (the product of its levels up to the first list,
// times that list's sum). racks: nodes per rack; 0: level-2 units when the
// topology has 3 or more levels, else none.
bc::Status cluster_build(const std::string &spec, int nranks, int racks, const NetParams &net, Cluster *out);
int spec_ranks(const std::string &spec);

// The analytic cost model: per (level, algorithm) alpha = the level's latency,
// beta = seconds per byte one rank sends when every rank of the level's
// groups sends at once (a NIC shared by the node's ranks; a trunk by the rack's).
bc::CostModel cluster_model(const Cluster &c);

struct PlanRun {
  std::string name;
  bc::PlanChoice choice;
  const bc::Hierarchy *h = nullptr;
  std::string note;  // why it was skipped, or a description
};
// names: of bc, split, han, ring, rhd; "rule" runs `rule` (BC_PLAN's settings,
// e.g. "shape=split,algo=ring,chunk=1M,depth=2"; parsed by plan_rules_parse).
std::vector<PlanRun> plans_for(const Cluster &c, int64_t bytes, const std::vector<std::string> &names,
                               const std::vector<bc::PlanRule> *rule = nullptr);

// Builds every rank's Program for `run` on `count` elements. false (and
// *why) when a build fails or the programs would exceed max_steps steps in all.
bool job_build(const Cluster &c, const PlanRun &run, int64_t count, size_t elem, int64_t max_steps, SimJob *out,
               std::string *why);

// The bound an all-reduce of `bytes` cannot beat: the busiest of a node's NIC
// (2(N-1)/N * S / B), a rack's trunk (2(R-1)/R * S / T), and inside a single
// node a rank's port (2(g-1)/g * S / intra).
double link_bound(const Cluster &c, double bytes);

}  // namespace bcsim
