#include "sim/scale.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "plan/cost.h"
#include "sim/plans.h"

namespace bcsim {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

template <typename T>
size_t vec_bytes(const std::vector<T> &v) {
  return sizeof(v) + v.capacity() * sizeof(T);
}

size_t hierarchy_bytes(const bc::Hierarchy &h) {
  size_t b = sizeof(h) + vec_bytes(h.stages) + vec_bytes(h.slot);
  for (const auto &s : h.slot) b += s.capacity() * sizeof(int);
  for (const auto &sg : h.stages) {
    b += vec_bytes(sg.groups) - sizeof(sg.groups) + vec_bytes(sg.group_of) + vec_bytes(sg.index_of);
    for (const auto &g : sg.groups) b += g.capacity() * sizeof(int);
  }
  return b;
}

size_t program_bytes(const bc::Program &p) {
  size_t b = sizeof(p) + vec_bytes(p.steps) + vec_bytes(p.stage_algos);
  for (const auto &s : p.steps) b += (s.sends.capacity() + s.recvs.capacity()) * sizeof(bc::Xfer);
  return b;
}

}  // namespace

int scale_report(const std::vector<std::string> &ranks, const std::string &prefix) {
  const int per_rack = spec_ranks(prefix);
  std::printf("# the plan code's cost for one rank (every rank builds the same Hierarchy; its own Program)\n"
              "# %7s %-14s %9s %10s %10s %10s %9s %9s %6s %10s  %s\n", "ranks", "layout", "topo(ms)",
              "split(ms)", "3hier(ms)", "3hier(KiB)", "prog(ms)", "prog(KiB)", "steps", "choose(ms)",
              "choice at 4K / 64M");
  for (const std::string &rs : ranks) {
    const int p = std::atoi(rs.c_str());
    if (p < per_rack || p % per_rack != 0) {
      std::printf("  %7d skipped: not a multiple of %d (%s)\n", p, per_rack, prefix.c_str());
      continue;
    }
    const std::string spec = prefix + "x" + std::to_string(p / per_rack);
    auto t0 = Clock::now();
    bc::Topology topo;
    if (bc::topo_parse(spec, p, &topo) != BC_OK) {
      std::printf("  %7d %s: %s\n", p, spec.c_str(), bc::last_error());
      return 1;
    }
    const double topo_ms = ms_since(t0);
    // The best of 3 (the machine is shared): the split shape alone, then all
    // three shapes, as a communicator builds them.
    double split_ms = 1e30, hier_ms = 1e30;
    bc::Hierarchy split, leader, flat;
    for (int rep = 0; rep < 3; ++rep) {
      t0 = Clock::now();
      split = bc::Hierarchy::build(topo);
      split_ms = std::min(split_ms, ms_since(t0));
      leader = bc::Hierarchy::build(topo, bc::Hierarchy::Shape::Leader);
      flat = bc::Hierarchy::build(topo, bc::Hierarchy::Shape::Flat);
      hier_ms = std::min(hier_ms, ms_since(t0));
    }
    const size_t hier_b = hierarchy_bytes(split) + hierarchy_bytes(leader) + hierarchy_bytes(flat);
    // The cost model from the default links (bc_sim's): its choice at 4K and 64M.
    Cluster c;
    NetParams net;
    net.intra = LinkKind{150e9, 1e-6};
    net.node = LinkKind{12.5e9, 2e-6};
    net.trunk = LinkKind{50e9, 3e-6};
    if (cluster_build(spec, p, 0, net, &c) != BC_OK) return 1;
    t0 = Clock::now();
    const bc::PlanChoice small = bc::model_choose(split, leader, flat, c.model, 4096);
    const bc::PlanChoice big = bc::model_choose(split, leader, flat, c.model, 64 << 20);
    const double choose_ms = ms_since(t0) / 2;
    // One rank's Program for the large choice (the most steps), the middle rank.
    const bc::Hierarchy &h = big.shape == bc::Hierarchy::Shape::Leader ? leader
                             : big.shape == bc::Hierarchy::Shape::Flat ? flat : split;
    const int64_t count = (64 << 20) / 4;
    const int64_t chunk = big.chunk_bytes > 0 ? std::min<int64_t>(count, big.chunk_bytes / 4) : count;
    bc::Program prog;
    double prog_ms = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      t0 = Clock::now();
      if (bc::build_program(h, p / 2, bc::CollKind::Allreduce, chunk, big.algo, false, &prog, big.top,
                            &big.stage_algos) != BC_OK)
        return 1;
      prog_ms = std::min(prog_ms, ms_since(t0));
    }
    std::printf("  %7d %-14s %9.2f %10.2f %10.2f %10.0f %9.3f %9.1f %6zu %10.3f  %s / %s\n", p, spec.c_str(),
                topo_ms, split_ms, hier_ms, hier_b / 1024.0, prog_ms, program_bytes(prog) / 1024.0, prog.steps.size(), choose_ms,
                bc::plan_choice_describe(small).c_str(), bc::plan_choice_describe(big).c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace bcsim
