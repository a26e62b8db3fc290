// bc_sim's engine (tools/sim): hand-computed times for small cases, max-min
// fair sharing, and that every program the simulator runs, the library's own
// plans and the baselines, also computes the exact all-reduce.
#include <catch2/catch.hpp>

#include "sim/engine.h"
#include "sim/net.h"
#include "sim/plans.h"

using namespace bcsim;

namespace {

NetParams links(double intra_bw, double intra_a, double node_bw, double node_a, double reduce_bw = 0) {
  NetParams n;
  n.intra = LinkKind{intra_bw, intra_a};
  n.node = LinkKind{node_bw, node_a};
  n.trunk = LinkKind{0, 0};
  n.reduce_bw = reduce_bw;
  return n;
}

Cluster cluster(const std::string &spec, int p, const NetParams &n, int racks = 0) {
  Cluster c;
  REQUIRE(cluster_build(spec, p, racks, n, &c) == BC_OK);
  return c;
}

// One step: rank `from` sends `count` elements to `to`.
bc::Program one_message(int from, int to, int me, int64_t count) {
  bc::Program p;
  p.count = count;
  bc::Step st;
  st.tag = 1;
  if (me == from) st.sends.push_back(bc::Xfer{to, bc::Range{0, count}});
  if (me == to) st.recvs.push_back(bc::Xfer{from, bc::Range{0, count}});
  if (!st.sends.empty() || !st.recvs.empty()) p.steps.push_back(st);
  return p;
}

SimResult run_plan(const Cluster &c, const std::string &name, int64_t count, size_t elem, int64_t chunk = 0,
                   int depth = 1) {
  PlanRun run = plans_for(c, count * static_cast<int64_t>(elem), {name}).at(0);
  if (name != "bc") run.choice.chunk_bytes = chunk, run.choice.depth = depth;
  SimJob job;
  std::string why;
  REQUIRE(job_build(c, run, count, elem, 1 << 24, &job, &why));
  return simulate(*c.network, job);
}

}  // namespace

TEST_CASE("sim: link and rate parsing", "[sim]") {
  LinkKind k;
  REQUIRE(parse_link("150GB/s,1us", &k));
  REQUIRE(k.bw == Approx(150e9));
  REQUIRE(k.alpha == Approx(1e-6));
  REQUIRE(parse_link("100Gb/s,500ns", &k));
  REQUIRE(k.bw == Approx(12.5e9));
  REQUIRE(k.alpha == Approx(5e-7));
  REQUIRE_FALSE(parse_link("fast,1us", &k));
  REQUIRE_FALSE(parse_link("1GB/s,soon", &k));
  REQUIRE(spec_ranks("4x48") == 192);
  REQUIRE(spec_ranks("3,2,3") == 8);
  REQUIRE(spec_ranks("2x3,1") == 8);
}

TEST_CASE("sim: max-min fair sharing by progressive filling", "[sim]") {
  FairShare fs;
  std::vector<double> rates;
  // link 0 (cap 1): flows a, b; link 1 (cap 3): flows b, c. b is held to 0.5
  // by link 0; c takes the rest of link 1.
  fs.solve({1.0, 3.0}, {0, 1, 0, 0, /*b*/ 0, 1, 0, 0, /*c*/ 1, 0, 0, 0}, {1, 2, 1}, 99, &rates);
  REQUIRE(rates[0] == Approx(0.5));
  REQUIRE(rates[1] == Approx(0.5));
  REQUIRE(rates[2] == Approx(2.5));
  fs.solve({1.0, 3.0}, {}, {}, 99, &rates);
  REQUIRE(rates.empty());
}

TEST_CASE("sim: a 2-rank exchange takes alpha + bytes / bandwidth", "[sim]") {
  const Cluster c = cluster("1x2", 2, links(10e9, 1e-6, 1e9, 10e-6));  // one rank per node
  SimJob job;
  job.count = 1000;
  job.elem = 4;
  for (int r = 0; r < 2; ++r) job.big.push_back(compact(one_message(0, 1, r, 1000)));
  SimResult res = simulate(*c.network, job);
  REQUIRE(res.ok);
  REQUIRE(res.messages == 1);
  REQUIRE(res.seconds == Approx(10e-6 + 4000 / 1e9));
  // The real flat plan on 2 ranks: RS and AG, one block each way per step,
  // the two directions on different links; one reduction of the block.
  const Cluster c2 = cluster("1x2", 2, links(10e9, 1e-6, 1e9, 10e-6, 2e9));
  res = run_plan(c2, "ring", 1000, 4);
  REQUIRE(res.ok);
  REQUIRE(res.seconds == Approx(2 * (10e-6 + 2000 / 1e9) + 2000 / 2e9));
}

TEST_CASE("sim: two flows on one NIC get half its rate each", "[sim]") {
  // ranks 0, 1 on node 0 send to 2, 3 on node 1: both cross node 0's NIC out
  // and node 1's NIC in.
  const Cluster c = cluster("2x2", 4, links(100e9, 0, 1e9, 2e-6));
  SimJob job;
  job.count = 500;
  job.elem = 8;
  for (int r = 0; r < 4; ++r) {
    bc::Program p = one_message(r % 2, 2 + r % 2, r, 500);
    job.big.push_back(compact(p));
  }
  const SimResult res = simulate(*c.network, job);
  REQUIRE(res.ok);
  REQUIRE(res.messages == 2);
  REQUIRE(res.seconds == Approx(2e-6 + 2 * 4000 / 1e9));
}

TEST_CASE("sim: a ring of 4 over 4 nodes", "[sim]") {
  const double a = 3e-6, bw = 2e9, red = 8e9;
  const Cluster c = cluster("1x4", 4, links(100e9, 0, bw, a, red));
  const int64_t n = 4096;  // elements of 4 bytes: blocks of 4096 bytes
  const SimResult res = run_plan(c, "ring", n, 4);
  REQUIRE(res.ok);
  REQUIRE(res.messages == 4 * 6);
  const double b = 4096;
  REQUIRE(res.seconds == Approx(6 * (a + b / bw) + 3 * b / red));
}

TEST_CASE("sim: a pipelined 2-level plan, 2 chunks at depth 1 and 2", "[sim]") {
  const double ai = 1e-6, bi = 4e9, an = 5e-6, bn = 1e9;
  const Cluster c = cluster("2x2", 4, links(bi, ai, bn, an));
  const int64_t n = 4096, m = 2048;  // two chunks of m elements (8 KiB)
  const double e = 4;
  // One chunk: RS1 sends m/2 over the ports; RS2 m/4 per rank, two ranks on
  // each NIC; then AG2 and AG1 the same.
  const double one = 2 * (ai + m / 2 * e / bi) + 2 * (an + 2 * (m / 4 * e) / bn);
  SimResult res = run_plan(c, "split", n, 4, m * 4, 1);
  REQUIRE(res.ok);
  REQUIRE(res.seconds == Approx(2 * one));
  // Depth 2: both chunks run in lockstep, every link shared two ways: the
  // bytes take as long, the latencies are paid once.
  res = run_plan(c, "split", n, 4, m * 4, 2);
  REQUIRE(res.ok);
  REQUIRE(res.seconds == Approx(2 * (ai + m * e / bi) + 2 * (an + 2 * (m / 2 * e) / bn)));
}

TEST_CASE("sim: every plan it runs is the exact all-reduce", "[sim]") {
  NetParams n = links(50e9, 1e-6, 5e9, 4e-6, 20e9);
  n.trunk = LinkKind{10e9, 2e-6};
  struct Case { const char *spec; int p; int racks; };
  for (const Case &k : {Case{"4x2", 8, 0}, Case{"3,2,3", 8, 0}, Case{"2x3x2", 12, 0}, Case{"2x2x3", 12, 2},
                        Case{"1x5", 5, 0}, Case{"3x2", 6, 1}}) {
    const Cluster c = cluster(k.spec, k.p, n, k.racks);
    for (int64_t count : {1, 7, 97, 4099}) {
      for (const char *name : {"bc", "split", "han", "ring", "rhd"}) {
        for (int depth : {1, 3}) {
          INFO(k.spec << " count " << count << " plan " << name << " depth " << depth);
          PlanRun run = plans_for(c, count * 4, {name}).at(0);
          if (std::string(name) != "bc") run.choice.chunk_bytes = depth > 1 ? 4 * 1000 : 0, run.choice.depth = depth;
          SimJob job;
          std::string why;
          REQUIRE(job_build(c, run, count, 4, 1 << 24, &job, &why));
          SimData data;
          data.work.assign(k.p, std::vector<int64_t>(count));
          for (int r = 0; r < k.p; ++r)
            for (int64_t i = 0; i < count; ++i) data.work[r][i] = (int64_t{1} << r) * (1 + i % 5);
          const SimResult res = simulate(*c.network, job, &data);
          REQUIRE(res.ok);
          REQUIRE(res.seconds > 0);
          const int64_t full = (int64_t{1} << k.p) - 1;
          for (int r = 0; r < k.p; ++r)
            for (int64_t i = 0; i < count; ++i)
              if (data.work[r][i] != full * (1 + i % 5)) FAIL("rank " << r << " element " << i << ": " << data.work[r][i]);
        }
      }
    }
  }
}

TEST_CASE("sim: a send without its receive is reported", "[sim]") {
  const Cluster c = cluster("1x2", 2, links(10e9, 1e-6, 1e9, 10e-6));
  SimJob job;
  job.count = 10;
  job.big.push_back(compact(one_message(0, 1, 0, 10)));
  job.big.push_back(compact(bc::Program{}));
  job.big[1].count = 10;
  SimResult res = simulate(*c.network, job);
  REQUIRE_FALSE(res.ok);
  REQUIRE(res.error.find("deadlock") != std::string::npos);
  // Sizes that differ: a clear error, not a silent wrong time.
  job.big[1] = compact(one_message(0, 1, 1, 10));
  job.big[1].xfers[0].count = 9;
  job.big[1].count = 10;
  res = simulate(*c.network, job);
  REQUIRE_FALSE(res.ok);
  REQUIRE(res.error.find("size mismatch") != std::string::npos);
}
