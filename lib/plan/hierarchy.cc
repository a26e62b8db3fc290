// Levels -> stages -> groups.
//
// Every unit of level l-1 (a rank, for l = 1) holds the same set of slots, one
// active rank per slot. Stage l groups, per level-l unit U and slot t, the rank
// holding t in each child of U. With q = the fewest children any level-l unit
// has, members 0..q-1 of each group become the owners of slots t.0 .. t.(q-1);
// members q.. (only in uneven layouts) fold into owner (index mod q) and drop
// out. So every level-l unit again holds the same slots, and the next level
// lines up, whatever the layout. Even layouts have no extras: this is then
// exactly BlueConnect's p1 x p2 x ... x pk decomposition.
#include <sstream>

#include "plan/plan.h"

namespace bc {

Hierarchy Hierarchy::build(const Topology &topo, Shape shape) {
  Hierarchy h;
  h.nranks = topo.nranks;
  h.shape = static_cast<uint8_t>(shape);
  if (shape == Shape::Flat) {
    if (topo.nranks <= 1) return h;
    StageGroups sg;
    sg.level = 0;
    sg.owners = topo.nranks;
    sg.groups.assign(1, std::vector<int>());
    for (int r = 0; r < topo.nranks; ++r) sg.groups[0].push_back(r);
    sg.group_of.assign(topo.nranks, 0);
    sg.index_of = sg.groups[0];
    h.slot.push_back(sg.index_of);
    h.stages.push_back(std::move(sg));
    return h;
  }
  // held[u * S + k]: the rank holding slot k of unit u, S slots per unit, in
  // the order of their paths (t.0, t.1, ... after each level): every unit of
  // a level holds the same slots, so slot k is the same path in every unit.
  // (A map from the path to the rank per unit, as this was, cost 190 ms and
  // 65,536 maps at 65,536 ranks; the same groups come out.)
  std::vector<int> held(topo.nranks);
  for (int r = 0; r < topo.nranks; ++r) held[r] = r;
  size_t S = 1;

  for (int l = 1; l <= topo.levels(); ++l) {
    const auto children = topo.children(l);
    size_t q = SIZE_MAX, most = 0;
    for (const auto &c : children) {
      q = std::min(q, c.size());
      most = std::max(most, c.size());
    }
    if (shape == Shape::Leader && l < topo.levels()) q = 1;
    if (most <= 1) {  // nothing to combine at this level
      std::vector<int> next(children.size() * S);
      for (size_t u = 0; u < children.size(); ++u)
        std::copy_n(held.begin() + children[u][0] * S, S, next.begin() + u * S);
      held.swap(next);
      continue;
    }
    StageGroups sg;
    sg.level = l;
    sg.owners = static_cast<int>(q);
    sg.group_of.assign(topo.nranks, -1);
    sg.index_of.assign(topo.nranks, -1);
    sg.groups.reserve(children.size() * S);
    std::vector<int> slot(topo.nranks, -1);
    std::vector<int> next(children.size() * S * q);
    for (size_t u = 0; u < children.size(); ++u) {
      for (size_t k = 0; k < S; ++k) {
        std::vector<int> members;
        members.reserve(children[u].size());
        for (int c : children[u]) members.push_back(held[c * S + k]);
        const int g = static_cast<int>(sg.groups.size());
        for (size_t i = 0; i < members.size(); ++i) {
          sg.group_of[members[i]] = g;
          sg.index_of[members[i]] = static_cast<int>(i);
          if (i < q) {
            next[(u * S + k) * q + i] = members[i];  // path t.i
            slot[members[i]] = static_cast<int>(i);
          }
        }
        sg.groups.push_back(std::move(members));
      }
    }
    h.stages.push_back(std::move(sg));
    h.slot.push_back(std::move(slot));
    held.swap(next);
    S *= q;
  }
  return h;
}

Range Hierarchy::range_before(int stage, int rank, int64_t count) const {
  Range r{0, count};
  for (int s = 0; s < stage; ++s) {
    if (slot[s][rank] < 0) return Range{0, 0};
    r = sub_block(r, stages[s].owners, slot[s][rank]);
  }
  return r;
}

Range Hierarchy::final_range(int rank, int64_t count) const {
  return range_before(static_cast<int>(stages.size()), rank, count);
}

const char *shape_name(Hierarchy::Shape shape) {
  switch (shape) {
    case Hierarchy::Shape::Leader: return "leader";
    case Hierarchy::Shape::Flat: return "flat";
    default: return "split";
  }
}

std::string Hierarchy::describe(int64_t count, size_t elem_size) const {
  std::ostringstream os;
  os << "plan (" << shape_name(static_cast<Shape>(shape)) << "): " << stages.size()
     << " reduce-scatter stage(s), then the same in reverse as all-gather; "
     << count << " elements (" << count * static_cast<int64_t>(elem_size) << " bytes)\n";
  for (size_t s = 0; s < stages.size(); ++s) {
    const StageGroups &sg = stages[s];
    int extras = 0;
    for (const auto &g : sg.groups) extras += static_cast<int>(g.size()) - sg.owners;
    // The range a member of group 0 splits, for sizes.
    const int first = sg.groups[0][0];
    const Range in = range_before(static_cast<int>(s), first, count);
    os << "  stage " << s + 1 << " (level " << sg.level << "): " << sg.groups.size()
       << " parallel group(s), " << sg.owners << " owner(s) each";
    if (extras) os << ", " << extras << " extra rank(s) fold in";
    os << "; per rank " << in.count << " -> ~" << in.count / sg.owners << " elements\n    groups:";
    for (size_t g = 0; g < sg.groups.size() && g < 32; ++g) {
      os << " {";
      for (size_t i = 0; i < sg.groups[g].size(); ++i) {
        if (i) os << ",";
        os << sg.groups[g][i];
        if (static_cast<int>(i) >= sg.owners) os << "*";
      }
      os << "}";
    }
    if (sg.groups.size() > 32) os << " ...";
    os << (extras ? "  (* = folds into owner index mod " + std::to_string(sg.owners) + ")" : "") << "\n";
  }
  return os.str();
}

}  // namespace bc
