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

namespace {

// The flows of racks {0,1} {2,3} (250 and 100 Mbit/s) with the pair 2-3 read
// slow: a starved host, as on CI, where two such passes in a row made a wrong
// rack level {0,1} {2} {3}.
std::vector<Flow> starved_pair(unsigned seed) {
  std::vector<Flow> f = simulate({0, 0, 1, 1}, 31e6, 12.5e6, 0.05, seed);
  for (Flow &x : f)
    if (x.round == 0 && x.src >= 2) x.rate = 8e6;
  return f;
}

}  // namespace

TEST_CASE("passes: racks need three agreeing votes, one rack two", "[discover]") {
  RackPasses racks(4, 4);
  REQUIRE_FALSE(racks.add(simulate({0, 0, 1, 1}, 31e6, 12.5e6, 0.05, 1)));
  REQUIRE_FALSE(racks.add(simulate({0, 0, 1, 1}, 31e6, 12.5e6, 0.05, 2)));
  REQUIRE_FALSE(racks.result().found);  // two votes do not decide a level
  REQUIRE(racks.add(simulate({0, 0, 1, 1}, 31e6, 12.5e6, 0.05, 3)));
  INFO(racks.result().why);
  REQUIRE(racks.result().found);
  REQUIRE(racks.result().conclusive);
  REQUIRE(racks.result().rack_of == std::vector<int>({0, 0, 1, 1}));
  REQUIRE(racks.result().why.find("3 of 3 passes agree") != std::string::npos);
  REQUIRE(racks.passes() == 3);

  RackPasses flat(4, 4);
  REQUIRE_FALSE(flat.add(simulate({0, 0, 0, 0}, 31e6, 31e6, 0.05, 1)));
  REQUIRE(flat.add(simulate({0, 0, 0, 0}, 31e6, 31e6, 0.05, 2)));
  REQUIRE_FALSE(flat.result().found);
  REQUIRE(flat.result().conclusive);
  REQUIRE(flat.passes() == 2);
}

TEST_CASE("passes: a pair read slow twice is no level while another pass read it fast", "[discover]") {
  const std::vector<int> truth = {0, 0, 1, 1};
  // Two starved passes agree on {0,1} {2} {3}; then the truth.
  RackPasses p(4, 4);
  REQUIRE_FALSE(p.add(starved_pair(1)));
  REQUIRE_FALSE(p.add(starved_pair(2)));
  REQUIRE_FALSE(p.result().found);
  REQUIRE_FALSE(p.add(simulate(truth, 31e6, 12.5e6, 0.05, 3)));
  // A third starved pass makes three votes, but pass 3 read the pair fast.
  REQUIRE(p.add(starved_pair(4)));
  INFO(p.result().why);
  REQUIRE_FALSE(p.result().found);
  REQUIRE_FALSE(p.result().conclusive);
  REQUIRE(p.result().why.find("no verdict after 4 pass(es)") != std::string::npos);
  REQUIRE(p.result().why.find("3 for racks, 1 for racks") != std::string::npos);
  // With 6 passes (discovery's), the same start still ends in the truth.
  RackPasses six(4, 6);
  REQUIRE_FALSE(six.add(starved_pair(1)));
  REQUIRE_FALSE(six.add(starved_pair(2)));
  REQUIRE_FALSE(six.add(simulate(truth, 31e6, 12.5e6, 0.05, 3)));
  REQUIRE_FALSE(six.add(starved_pair(4)));
  REQUIRE_FALSE(six.add(simulate(truth, 31e6, 12.5e6, 0.05, 5)));
  REQUIRE(six.add(simulate(truth, 31e6, 12.5e6, 0.05, 6)));
  REQUIRE(six.result().found);
  REQUIRE(six.result().rack_of == truth);
  REQUIRE(six.result().why.find("3 of 6 passes agree") != std::string::npos);
  // One starved pass among four: the truth, from the other three.
  RackPasses q(4, 4);
  REQUIRE_FALSE(q.add(starved_pair(5)));
  for (unsigned seed = 6; seed <= 7; ++seed) REQUIRE_FALSE(q.add(simulate(truth, 31e6, 12.5e6, 0.05, seed)));
  REQUIRE(q.add(simulate(truth, 31e6, 12.5e6, 0.05, 8)));
  INFO(q.result().why);
  REQUIRE(q.result().found);
  REQUIRE(q.result().rack_of == truth);
  REQUIRE(q.passes() == 4);
}

TEST_CASE("passes: a stalled round is outvoted, inconclusive passes stop early", "[discover]") {
  // Racks of 3 + 1; in pass 2 the host stalls through round d=1 (every flow
  // at 15 Mbit/s... of 250), which alone reads as racks of their own.
  const std::vector<int> truth = {0, 0, 0, 1};
  RackPasses p(4, 4);
  REQUIRE_FALSE(p.add(simulate(truth, 31e6, 12.5e6, 0.05, 1)));
  std::vector<Flow> stalled = simulate(truth, 31e6, 12.5e6, 0.05, 2);
  for (Flow &x : stalled)
    if (x.round == 0) x.rate = 1.9e6;
  REQUIRE_FALSE(p.add(stalled));
  REQUIRE_FALSE(p.add(simulate(truth, 31e6, 12.5e6, 0.05, 3)));
  REQUIRE(p.add(simulate(truth, 31e6, 12.5e6, 0.05, 4)));
  INFO(p.result().why);
  REQUIRE(p.result().found);
  REQUIRE(p.result().rack_of == truth);
  // Every pass too close to call: after 3 no verdict can reach 2 votes.
  std::vector<Flow> close = simulate({0, 0, 1, 1}, 31e6, 12.5e6);
  close[0].rate = close[1].rate = 0.55 * 31e6;
  RackPasses c(4, 4);
  REQUIRE_FALSE(c.add(close));
  REQUIRE_FALSE(c.add(close));
  REQUIRE(c.add(close));
  REQUIRE(c.passes() == 3);
  REQUIRE_FALSE(c.result().conclusive);
  REQUIRE(c.result().why.find("no votes") != std::string::npos);
  REQUIRE(c.result().why.find("too close") != std::string::npos);
}
