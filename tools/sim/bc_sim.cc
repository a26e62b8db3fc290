// bc_sim: BlueConnect's real plans on a modelled cluster (docs/SIM.md).
//
// Every rank's Program comes from lib/plan (Hierarchy::build, build_program,
// model_choose); the engine (sim/engine.h) runs them all through a network
// of NICs, trunks and intra-node ports (sim/net.h) and reports the time per
// size and plan against the baselines and the link bound.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/params.h"
#include "sim/plans.h"
#include "sim/scale.h"

using namespace bcsim;

namespace {

const char kUsage[] =
    "usage: bc_sim --topo SPEC [options]     simulate all-reduces on a modelled cluster\n"
    "       bc_sim --scale [--scale-ranks LIST] [--scale-topo SPEC]   cost of the plan code at scale\n"
    "\n"
    "cluster (docs/SIM.md):\n"
    "  --topo SPEC        the levels as BC_TOPO gives them, fastest first; level 1 is the node\n"
    "                     (4x48: 4 ranks per node, 48 nodes; 8x16x4: 8 per node, 16 nodes per rack, 4 racks)\n"
    "  --np N             ranks (default: from SPEC; needed only if it cannot be derived)\n"
    "  --intra BW,ALPHA   each rank's port inside a node (default 150GB/s,1us)\n"
    "  --node BW,ALPHA    each node's NIC, out and in (default 12.5GB/s,2us)\n"
    "  --rack N           N nodes per rack (default: level 2 of SPEC when it has 3+ levels, else no racks)\n"
    "  --trunk BW,ALPHA   each rack's uplink, up and down; ALPHA is added to the node's (default 50GB/s,3us)\n"
    "  --reduce BW        bytes one rank combines per second in a Reduce step (default 100GB/s; 0 = free)\n"
    "                     rates: B/s KB/s MB/s GB/s TB/s KiB/s MiB/s GiB/s Mb/s Gb/s; latency: s ms us ns\n"
    "runs:\n"
    "  --size MIN:MAX     buffer sizes in bytes, K/M/G suffixes (default 4K:64M)\n"
    "  --factor F         multiply the size by F each row (default 4)\n"
    "  --dtype T          f16 bf16 f32 f64 i8 i32 i64 (element size only; default f32)\n"
    "  --plans LIST       of bc,split,han,ring,rhd (default all): bc = the cost model's choice per size;\n"
    "                     split = BlueConnect's stages in one piece; han = reduce to node leaders, ring among\n"
    "                     them, back down; ring / rhd = flat over all ranks\n"
    "  --plan SETTINGS    also run this plan, as a row named 'rule': BC_PLAN's settings, e.g.\n"
    "                     shape=split,algo=rhd/ring,top=rd,chunk=1M,depth=2 (docs/PLANS.md)\n"
    "  --max-chunk B      the largest chunk the cost model may choose (default 1M)\n"
    "  --max-whole B      the largest buffer the cost model may run in one piece (default 256K)\n"
    "  --max-steps N      skip a plan whose ranks have more steps than this in all (default 20000000)\n"
    "  --csv | --json     machine-readable output instead of the table\n"
    "  --describe         print the cluster, the cost model and the hierarchy first\n";

struct Options {
  std::string topo, plans = "bc,split,han,ring,rhd", format = "table", rule;
  int np = 0, rack = 0, factor = 4;
  NetParams net;
  int64_t min_size = 4 << 10, max_size = 64 << 20, max_chunk = 1 << 20, max_whole = 256 << 10, max_steps = 20000000;
  size_t elem = 4;
  std::string dtype = "f32";
  bool describe = false, scale = false;
  std::string scale_ranks = "1024,16384,65536", scale_topo = "8x32";
};

bool dtype_size(const std::string &t, size_t *out) {
  static const std::pair<const char *, size_t> kinds[] = {{"f16", 2}, {"bf16", 2}, {"f32", 4}, {"f64", 8},
                                                          {"i8", 1},  {"u8", 1},   {"i32", 4}, {"i64", 8}};
  for (const auto &k : kinds)
    if (t == k.first) { *out = k.second; return true; }
  return false;
}

bool bad(const char *what, const std::string &value) {
  std::fprintf(stderr, "bc_sim: bad %s '%s'\n%s", what, value.c_str(), kUsage);
  return false;
}

bool parse_args(int argc, char **argv, Options *o) {
  o->net.intra = LinkKind{150e9, 1e-6};
  o->net.node = LinkKind{12.5e9, 2e-6};
  o->net.trunk = LinkKind{50e9, 3e-6};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&](std::string *out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--help" || a == "-h") { std::fputs(kUsage, stdout); std::exit(0); }
    else if (a == "--csv") o->format = "csv";
    else if (a == "--json") o->format = "json";
    else if (a == "--describe") o->describe = true;
    else if (a == "--scale") o->scale = true;
    else if (!val(&v)) return bad("option (or missing value)", a);
    else if (a == "--topo") o->topo = v;
    else if (a == "--np") { if ((o->np = std::atoi(v.c_str())) < 1) return bad("--np", v); }
    else if (a == "--rack") { if ((o->rack = std::atoi(v.c_str())) < 1) return bad("--rack", v); }
    else if (a == "--factor") { if ((o->factor = std::atoi(v.c_str())) < 2) return bad("--factor", v); }
    else if (a == "--intra") { if (!parse_link(v, &o->net.intra)) return bad("--intra", v); }
    else if (a == "--node") { if (!parse_link(v, &o->net.node)) return bad("--node", v); }
    else if (a == "--trunk") { if (!parse_link(v, &o->net.trunk)) return bad("--trunk", v); }
    else if (a == "--reduce") {
      if (v == "0") o->net.reduce_bw = 0;
      else if (!parse_rate(v, &o->net.reduce_bw)) return bad("--reduce", v);
    } else if (a == "--size") {
      const size_t colon = v.find(':');
      if (!bc::parse_bytes(v.substr(0, colon), &o->min_size) ||
          !bc::parse_bytes(colon == std::string::npos ? v : v.substr(colon + 1), &o->max_size) || o->min_size < 1 ||
          o->max_size < o->min_size)
        return bad("--size", v);
    } else if (a == "--dtype") { if (!dtype_size(v, &o->elem)) return bad("--dtype", v); o->dtype = v; }
    else if (a == "--plans") o->plans = v;
    else if (a == "--plan") o->rule = v;
    else if (a == "--max-chunk") { if (!bc::parse_bytes(v, &o->max_chunk) || o->max_chunk < 1) return bad("--max-chunk", v); }
    else if (a == "--max-whole") { if (!bc::parse_bytes(v, &o->max_whole)) return bad("--max-whole", v); }
    else if (a == "--max-steps") { if (!bc::parse_bytes(v, &o->max_steps)) return bad("--max-steps", v); }
    else if (a == "--scale-ranks") o->scale_ranks = v;
    else if (a == "--scale-topo") o->scale_topo = v;
    else return bad("option", a);
  }
  if (!o->scale && o->topo.empty()) return bad("arguments: --topo is required", "");
  return true;
}

std::vector<std::string> split_list(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) if (!x.empty()) out.push_back(x);
  return out;
}

std::string human(int64_t b) {
  char buf[32];
  if (b >= (1 << 30) && b % (1 << 30) == 0) std::snprintf(buf, sizeof buf, "%lldG", static_cast<long long>(b >> 30));
  else if (b >= (1 << 20) && b % (1 << 20) == 0) std::snprintf(buf, sizeof buf, "%lldM", static_cast<long long>(b >> 20));
  else if (b >= 1024 && b % 1024 == 0) std::snprintf(buf, sizeof buf, "%lldK", static_cast<long long>(b >> 10));
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(b));
  return buf;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  if (!parse_args(argc, argv, &o)) return 2;
  if (o.scale) return scale_report(split_list(o.scale_ranks), o.scale_topo);
  Cluster c;
  if (cluster_build(o.topo, o.np, o.rack, o.net, &c) != BC_OK) {
    std::fprintf(stderr, "bc_sim: %s\n", bc::last_error());
    return 2;
  }
  c.model.max_chunk = o.max_chunk;
  c.model.max_whole = o.max_whole;
  std::vector<bc::PlanRule> rule;
  if (!o.rule.empty()) {
    if (bc::plan_rules_parse("-:" + o.rule, &rule) != BC_OK) {
      std::fprintf(stderr, "bc_sim: --plan: %s\n", bc::last_error());
      return 2;
    }
    o.plans += ",rule";
  }
  const int p = c.topo.nranks;
  const Network &net = *c.network;
  std::printf("# bc_sim: %d ranks, --topo %s: %d node(s) of up to %d rank(s), %d rack(s); intra %.4g GB/s %.3g us, "
              "node %.4g GB/s %.3g us, trunk %.4g GB/s %.3g us, reduce %.4g GB/s; dtype %s\n",
              p, o.topo.c_str(), net.nnodes(), c.ranks_per_node, net.nracks(), o.net.intra.bw / 1e9,
              o.net.intra.alpha * 1e6, o.net.node.bw / 1e9, o.net.node.alpha * 1e6, o.net.trunk.bw / 1e9,
              o.net.trunk.alpha * 1e6, o.net.reduce_bw / 1e9, o.dtype.c_str());
  if (o.describe) {
    std::printf("%s%s\n%s", c.topo.describe().c_str(), bc::model_describe(c.model).c_str(),
                c.split.describe(o.min_size / static_cast<int64_t>(o.elem), o.elem).c_str());
  }
  if (o.format == "table")
    std::printf("# busbw = algbw * 2(p-1)/p (nccl-tests); bound = the busiest NIC's (or trunk's) 2(N-1)/N * S / B\n"
                "# %10s %-6s %12s %11s %11s %7s %12s %8s  %s\n", "size", "plan", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "%bound", "model(us)", "sim(s)", "choice");
  else if (o.format == "csv")
    std::printf("bytes,plan,time_us,algbw_GBps,busbw_GBps,pct_bound,model_us,messages,choice\n");
  else
    std::printf("[\n");
  bool first = true;
  int rc = 0;
  for (int64_t size = o.min_size; size <= o.max_size; size *= o.factor) {
    const int64_t count = size / static_cast<int64_t>(o.elem);
    const int64_t bytes = count * static_cast<int64_t>(o.elem);
    for (const PlanRun &run : plans_for(c, bytes, split_list(o.plans), &rule)) {
      SimJob job;
      std::string why;
      const auto t0 = std::chrono::steady_clock::now();
      SimResult res;
      if (job_build(c, run, count, o.elem, o.max_steps, &job, &why)) {
        res = simulate(net, job);
        if (!res.ok) why = res.error, rc = 1;
      }
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      bc::PlanChoice priced = run.choice;  // Auto resolved as the programs were built, for the model
      if (priced.stage_algos.empty()) priced.stage_algos = job.stage_algos;
      const bc::Prediction pred = bc::predict(*run.h, c.model, priced, bytes);
      const double model_us = pred.ok ? pred.seconds * 1e6 : 0;
      const double t = res.seconds, algbw = t > 0 ? bytes / t / 1e9 : 0, busbw = algbw * 2.0 * (p - 1) / p;
      const double pct = t > 0 ? 100 * link_bound(c, static_cast<double>(bytes)) / t : 0;
      if (o.format == "table") {
        if (!res.ok) std::printf("  %10s %-6s skipped: %s\n", human(bytes).c_str(), run.name.c_str(), why.c_str());
        else
          std::printf("  %10s %-6s %12.2f %11.3f %11.3f %7.1f %12.2f %8.2f  %s\n", human(bytes).c_str(),
                      run.name.c_str(), t * 1e6, algbw, busbw, pct, model_us, wall, run.note.c_str());
      } else if (o.format == "csv") {
        std::printf("%lld,%s,%.3f,%.4f,%.4f,%.2f,%.3f,%lld,\"%s\"\n", static_cast<long long>(bytes), run.name.c_str(),
                    res.ok ? t * 1e6 : -1.0, algbw, busbw, pct, model_us, static_cast<long long>(res.messages),
                    res.ok ? run.note.c_str() : why.c_str());
      } else {
        std::printf("%s  {\"bytes\": %lld, \"plan\": \"%s\", \"ok\": %s, \"time_us\": %.3f, \"algbw_GBps\": %.4f, "
                    "\"busbw_GBps\": %.4f, \"pct_bound\": %.2f, \"model_us\": %.3f, \"choice\": \"%s\"}",
                    first ? "" : ",\n", static_cast<long long>(bytes), run.name.c_str(), res.ok ? "true" : "false",
                    t * 1e6, algbw, busbw, pct, model_us, res.ok ? run.note.c_str() : why.c_str());
      }
      first = false;
      std::fflush(stdout);
    }
    if (size > o.max_size / o.factor) break;
  }
  if (o.format == "json") std::printf("\n]\n");
  return rc;
}
