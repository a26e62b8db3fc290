// Racks from measured rates (topo/rack_clusters.h) on synthetic rate matrices:
// a model of node links of rate B and rack trunks of rate T, shared evenly by
// the flows that cross them in each measurement round, plus noise.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "topo/rack_clusters.h"

using namespace bc;

namespace {

// The flows of every round for nodes in racks rack_of, node links B, trunks T
// (per direction, between each rack and a spine); noise: uniform relative
// error in [-noise, +noise].
std::vector<Flow> simulate(const std::vector<int> &rack_of, double B, double T, double noise = 0,
                           unsigned seed = 1) {
  const int n = static_cast<int>(rack_of.size());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(-noise, noise);
  std::vector<Flow> flows;
  const auto rounds = discover_rounds(n);
  for (size_t r = 0; r < rounds.size(); ++r) {
    std::vector<int> out(n, 0), in(n, 0);  // flows leaving / entering each rack
    for (int i = 0; i < n; ++i) {
      const int p = discover_partner(i, rounds[r], n);
      if (p >= 0 && rack_of[i] != rack_of[p]) ++out[rack_of[i]], ++in[rack_of[p]];
    }
    for (int i = 0; i < n; ++i) {
      const int p = discover_partner(i, rounds[r], n);
      if (p < 0) continue;
      double rate = B;
      if (rack_of[i] != rack_of[p]) rate = std::min({B, T / out[rack_of[i]], T / in[rack_of[p]]});
      flows.push_back({static_cast<int>(r), i, p, rate * (1 + jitter(rng))});
    }
  }
  return flows;
}

}  // namespace

TEST_CASE("rounds and partners", "[discover]") {
  REQUIRE(discover_rounds(2) == std::vector<int>{1});
  REQUIRE(discover_rounds(4) == std::vector<int>({1, 2}));
  REQUIRE(discover_rounds(5) == std::vector<int>({1, 2, 4}));
  REQUIRE(discover_rounds(1024).size() == 10);
  REQUIRE(discover_partner(1, 2, 4) == 3);
  REQUIRE(discover_partner(1, 4, 5) == -1);  // 5 is past the end: idle
  REQUIRE(discover_partner(4, 4, 5) == 0);
}

TEST_CASE("flat: no level", "[discover]") {
  const RackClusters c = rack_clusters(4, simulate({0, 0, 0, 0}, 31e6, 31e6, 0.05));
  INFO(c.why);
  REQUIRE_FALSE(c.found);
  REQUIRE(c.why.find("one rack") != std::string::npos);
  REQUIRE(c.conclusive);  // a vote for no level, not a shrug
  REQUIRE_FALSE(rack_clusters(8, simulate({0, 0, 0, 0, 0, 0, 0, 0}, 31e6, 1e9, 0.1)).found);
}

TEST_CASE("two equal racks with slow trunks", "[discover]") {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const RackClusters c = rack_clusters(4, simulate({0, 0, 1, 1}, 31e6, 12.5e6, 0.1, seed));
    INFO(c.why);
    REQUIRE(c.found);
    REQUIRE(c.rack_of == std::vector<int>({0, 0, 1, 1}));
  }
  const RackClusters c8 = rack_clusters(8, simulate({0, 0, 0, 0, 1, 1, 1, 1}, 31e6, 12.5e6));
  REQUIRE(c8.found);
  REQUIRE(c8.rack_of == std::vector<int>({0, 0, 0, 0, 1, 1, 1, 1}));
  // Interleaved racks are seen too: round 1 crosses, round 2 stays inside.
  const RackClusters ci = rack_clusters(4, simulate({0, 1, 0, 1}, 31e6, 12.5e6));
  REQUIRE(ci.found);
  REQUIRE(ci.rack_of == std::vector<int>({0, 1, 0, 1}));
}

TEST_CASE("uneven racks 3+1", "[discover]") {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const RackClusters c = rack_clusters(4, simulate({0, 0, 0, 1}, 31e6, 12.5e6, 0.1, seed));
    INFO(c.why);
    REQUIRE(c.found);
    REQUIRE(c.rack_of == std::vector<int>({0, 0, 0, 1}));
  }
  const RackClusters c = rack_clusters(6, simulate({0, 0, 0, 0, 1, 1}, 31e6, 12.5e6));
  INFO(c.why);
  REQUIRE(c.found);
  REQUIRE(c.rack_of == std::vector<int>({0, 0, 0, 0, 1, 1}));
}

TEST_CASE("oversubscribed trunk as fast as a node link: seen through contention", "[discover]") {
  // Racks of 4 behind a trunk as fast as one node link: in round d=4 every
  // node of a rack crosses it at once, a quarter of the rate each.
  const std::vector<int> racks = {0, 0, 0, 0, 1, 1, 1, 1};
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const RackClusters c = rack_clusters(8, simulate(racks, 31e6, 31e6, 0.1, seed));
    INFO(c.why);
    REQUIRE(c.found);
    REQUIRE(c.rack_of == racks);
  }
  // Racks of 2 share it two ways: half rate, just below the threshold: the
  // racks. With noise the right level or none, never another.
  const RackClusters half = rack_clusters(4, simulate({0, 0, 1, 1}, 31e6, 31e6));
  REQUIRE(half.found);
  REQUIRE(half.rack_of == std::vector<int>({0, 0, 1, 1}));
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const RackClusters c = rack_clusters(4, simulate({0, 0, 1, 1}, 31e6, 31e6, 0.05, seed));
    INFO(c.why);
    REQUIRE((!c.found || c.rack_of == std::vector<int>({0, 0, 1, 1})));
  }
  // A trunk that carries all of its rack's nodes at full rate is no level.
  REQUIRE_FALSE(rack_clusters(4, simulate({0, 0, 1, 1}, 31e6, 62e6)).found);
}

TEST_CASE("a pair's rate is the mean of its directions", "[discover]") {
  // Unfair sharing of a slow trunk: one flow of each pair wins; a busy host
  // halves one direction inside a rack.
  std::vector<Flow> f = simulate({0, 0, 1, 1}, 31e6, 12.5e6);
  for (Flow &x : f) {
    if (x.round == 1) x.rate = x.src < 2 ? 10e6 : 2.5e6;
    if (x.round == 0 && x.src == 0) x.rate = 15e6;
  }
  const RackClusters c = rack_clusters(4, f);
  INFO(c.why);
  REQUIRE(c.found);
  REQUIRE(c.rack_of == std::vector<int>({0, 0, 1, 1}));
}

TEST_CASE("inconsistent or ambiguous data: no level, and why", "[discover]") {
  // 0-1 fast, 1-2 fast would join 0 and 2, but 0-2 was slow.
  std::vector<Flow> f = {{0, 0, 1, 30e6}, {0, 1, 0, 30e6}, {0, 2, 3, 30e6}, {0, 3, 2, 30e6},
                         {1, 0, 2, 5e6},  {1, 2, 0, 5e6},  {1, 1, 3, 30e6}, {1, 3, 1, 30e6}};
  RackClusters c = rack_clusters(4, f);
  INFO(c.why);
  REQUIRE_FALSE(c.found);
  REQUIRE(c.why.find("inconsistent") != std::string::npos);
  REQUIRE_FALSE(c.conclusive);  // discovery measures again rather than count this as flat
  // 3 racks of 2 in 6 nodes: racks {2,3} and {4,5} never meet in a round.
  c = rack_clusters(6, simulate({0, 0, 1, 1, 2, 2}, 31e6, 12.5e6));
  REQUIRE_FALSE(c.found);
  REQUIRE(c.why.find("ambiguous") != std::string::npos);
  REQUIRE_FALSE(c.conclusive);
  // A flow near the threshold is not called either way.
  f = simulate({0, 0, 1, 1}, 31e6, 12.5e6);
  f[0].rate = f[1].rate = 0.55 * 31e6;  // the pair 0-1, both directions
  c = rack_clusters(4, f);
  REQUIRE_FALSE(c.found);
  REQUIRE(c.why.find("too close") != std::string::npos);
  REQUIRE_FALSE(c.conclusive);
  // Every flow slow (every node its own rack): nothing to group.
  c = rack_clusters(4, simulate({0, 1, 2, 3}, 31e6, 5e6));
  REQUIRE_FALSE(c.found);
  // Missing measurements, too few nodes.
  f = simulate({0, 0, 1, 1}, 31e6, 12.5e6);
  f[3].rate = 0;
  REQUIRE_FALSE(rack_clusters(4, f).found);
  REQUIRE_FALSE(rack_clusters(4, f).conclusive);
  REQUIRE_FALSE(rack_clusters(2, simulate({0, 1}, 31e6, 5e6)).found);
  REQUIRE_FALSE(rack_clusters(4, {}).found);
}
