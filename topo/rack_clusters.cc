#include "topo/rack_clusters.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <utility>

namespace bc {
namespace {

int find(std::vector<int> &up, int x) {
  while (up[x] != x) x = up[x] = up[up[x]];
  return x;
}

std::string pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * v);
  return buf;
}

}  // namespace

std::vector<int> discover_rounds(int n) {
  std::vector<int> out;
  for (int d = 1; d < n; d *= 2) out.push_back(d);
  return out;
}

int discover_partner(int i, int d, int n) {
  const int p = i ^ d;
  return p < n ? p : -1;
}

RackClusters rack_clusters(int n, const std::vector<Flow> &flows, double slow_ratio, double margin) {
  RackClusters out;
  if (n < 3) {
    out.why = std::to_string(n) + " node(s): a rack level needs at least 3";
    return out;
  }
  if (flows.empty()) {
    out.why = "no flow was measured";
    return out;
  }
  // Per directed flow its best measurement (repeats only ever lose to noise);
  // per unordered pair the mean of its two directions relative to the best
  // pair. The mean, because on a busy host one direction may starve while
  // the other runs fast, and flows that share a trunk share it unfairly:
  // the winner of a slow trunk can reach half a node link's rate, never both
  // directions of a pair at once.
  std::map<std::pair<int, int>, double> flow_rate;
  for (const Flow &f : flows) {
    if (f.src < 0 || f.src >= n || f.dst < 0 || f.dst >= n || f.src == f.dst) continue;
    if (f.rate <= 0) {
      out.why = "flow " + std::to_string(f.src) + "->" + std::to_string(f.dst) + " was not measured";
      return out;
    }
    double &r = flow_rate[std::make_pair(f.src, f.dst)];
    r = std::max(r, f.rate);
  }
  std::map<std::pair<int, int>, double> pair_ratio;
  std::map<std::pair<int, int>, int> directions;
  for (const auto &f : flow_rate) {
    const auto key = std::make_pair(std::min(f.first.first, f.first.second), std::max(f.first.first, f.first.second));
    pair_ratio[key] += f.second;
    ++directions[key];
  }
  out.best = 0;
  for (auto &p : pair_ratio) {
    p.second /= directions[p.first];
    out.best = std::max(out.best, p.second);
  }
  for (auto &p : pair_ratio) p.second /= out.best;
  const double lo = slow_ratio * (1 - margin), hi = slow_ratio * (1 + margin);
  for (const auto &p : pair_ratio)
    if (p.second >= lo && p.second < hi) {
      out.why = "nodes " + std::to_string(p.first.first) + " and " + std::to_string(p.first.second) + " ran at " +
                pct(p.second) + " of the best pair, too close to the threshold " + pct(slow_ratio) + " to call";
      return out;
    }
  std::vector<int> up(n);
  std::iota(up.begin(), up.end(), 0);
  for (const auto &p : pair_ratio)
    if (p.second >= slow_ratio) up[find(up, p.first.first)] = find(up, p.first.second);
  // Racks numbered by their smallest node.
  std::vector<int> id(n, -1);
  out.rack_of.assign(n, -1);
  int racks = 0, biggest = 0;
  std::vector<int> size(n, 0);
  for (int i = 0; i < n; ++i) {
    int &r = id[find(up, i)];
    if (r < 0) r = racks++;
    out.rack_of[i] = r;
    biggest = std::max(biggest, ++size[r]);
  }
  std::vector<std::vector<bool>> separated(racks, std::vector<bool>(racks, false));
  for (const auto &p : pair_ratio) {
    const int a = out.rack_of[p.first.first], b = out.rack_of[p.first.second];
    if (p.second >= slow_ratio) continue;
    if (a == b) {
      out.why = "inconsistent: nodes " + std::to_string(p.first.first) + " and " + std::to_string(p.first.second) +
                " are joined through fast flows but their own flow ran at " + pct(p.second) + " of the best";
      return out;
    }
    separated[a][b] = separated[b][a] = true;
  }
  if (racks == 1) {
    out.why = "every flow ran at >= " + pct(slow_ratio) + " of the best: one rack";
    out.conclusive = true;
    return out;
  }
  if (biggest == 1) {
    out.why = "no two nodes are joined by a fast flow: no rack holds two nodes";
    return out;
  }
  for (int a = 0; a < racks; ++a)
    for (int b = a + 1; b < racks; ++b)
      if (!separated[a][b]) {
        out.why = "ambiguous: no flow between candidate racks " + std::to_string(a) + " and " + std::to_string(b) +
                  " (numbered by smallest node) was measured slow; they may be one rack";
        return out;
      }
  out.found = out.conclusive = true;
  out.why = std::to_string(racks) + " racks: flows inside them ran at >= " + pct(slow_ratio) +
            " of the best, at least one flow between every two of them below";
  return out;
}

bool RackPasses::add(const std::vector<Flow> &flows) {
  ++passes_;
  const RackClusters pass = rack_clusters(n_, flows, slow_ratio_, margin_);
  if (pass.conclusive) {
    const std::vector<int> vote = pass.found ? pass.rack_of : std::vector<int>();
    auto it = std::find_if(votes_.begin(), votes_.end(), [&](const auto &v) { return v.first == vote; });
    if (it == votes_.end()) votes_.emplace_back(vote, 0), it = votes_.end() - 1;
    ++it->second;
  }
  all_.insert(all_.end(), flows.begin(), flows.end());
  const RackClusters together = rack_clusters(n_, all_, slow_ratio_, margin_);
  const std::vector<int> together_vote = together.found ? together.rack_of : std::vector<int>();
  const auto need = [](const std::vector<int> &v) { return v.empty() ? kVotesForOneRack : kVotesForRacks; };
  const int left = max_passes_ - passes_;
  bool possible = left >= kVotesForOneRack;  // a verdict nobody voted for yet
  std::string tally;
  for (const auto &v : votes_) {
    if (v.second >= need(v.first) && together.conclusive && together_vote == v.first) {
      result_ = together;
      result_.why += " (" + std::to_string(v.second) + " of " + std::to_string(passes_) + " passes agree)";
      return true;
    }
    possible = possible || need(v.first) - v.second <= left;
    tally += (tally.empty() ? "" : ", ") + std::to_string(v.second) + " for " +
             (v.first.empty() ? std::string("one rack") : "racks");
  }
  result_ = pass;
  result_.found = result_.conclusive = false;
  result_.why = "no verdict after " + std::to_string(passes_) + " pass(es) (" + (tally.empty() ? "no votes" : tally) +
                "; all passes together: " + (together.found ? std::string("racks") : together.why) +
                "; the last: " + (pass.found ? std::string("racks") : pass.why) + ")";
  return !possible || left <= 0;
}

}  // namespace bc
