#include "plan/rules.h"

#include <sstream>

#include "core/params.h"
#include "plan/algo.h"

namespace bc {
namespace {

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

Status bad(const std::string &text, const std::string &what) {
  return BC_FAIL(BC_ERR_PARAM,
                 "BC_PLAN='%s': %s; expected rules like '-32K:shape=leader,algo=direct|32K-:chunk=4M,depth=2'",
                 text.c_str(), what.c_str());
}

}  // namespace

Status plan_rules_parse(const std::string &text, std::vector<PlanRule> *out) {
  out->clear();
  std::stringstream rules(text);
  std::string item;
  while (std::getline(rules, item, '|')) {
    item = trim(item);
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    if (colon == std::string::npos) return bad(text, "rule '" + item + "' has no ':'");
    const std::string range = trim(item.substr(0, colon));
    const size_t dash = range.find('-');
    if (dash == std::string::npos) return bad(text, "range '" + range + "' has no '-'");
    PlanRule rule;
    const std::string lo = trim(range.substr(0, dash)), hi = trim(range.substr(dash + 1));
    if (!lo.empty() && !parse_bytes(lo, &rule.min_bytes)) return bad(text, "'" + lo + "' is not a size");
    if (!hi.empty() && !parse_bytes(hi, &rule.max_bytes)) return bad(text, "'" + hi + "' is not a size");
    if (rule.max_bytes <= rule.min_bytes) return bad(text, "range '" + range + "' is empty");
    std::stringstream settings(item.substr(colon + 1));
    std::string kv;
    while (std::getline(settings, kv, ',')) {
      kv = trim(kv);
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) return bad(text, "setting '" + kv + "' is not KEY=VALUE");
      const std::string key = trim(kv.substr(0, eq)), value = trim(kv.substr(eq + 1));
      if (key == "shape") {
        if (value == "split") rule.choice.shape = Hierarchy::Shape::Split;
        else if (value == "leader") rule.choice.shape = Hierarchy::Shape::Leader;
        else if (value == "flat") rule.choice.shape = Hierarchy::Shape::Flat;
        else return bad(text, "shape '" + value + "' is not split, leader or flat");
        rule.has_shape = true;
      } else if (key == "algo") {
        std::stringstream per_stage(value);
        std::string one;
        std::vector<Algo> algos;
        while (std::getline(per_stage, one, '/')) {
          Algo a;
          if (algo_parse(trim(one), &a) != BC_OK) {
            clear_error();
            return bad(text, "algo '" + one + "' is not " + algo_choices());
          }
          algos.push_back(a);
        }
        if (algos.empty()) return bad(text, "algo is empty");
        if (algos.size() == 1) rule.choice.algo = algos[0];
        else rule.choice.stage_algos = algos;
        rule.has_algo = true;
      } else if (key == "top") {
        if (value == "rd") rule.choice.top = Top::Rd;
        else if (value == "all") rule.choice.top = Top::All;
        else if (value == "split") rule.choice.top = Top::Split;
        else return bad(text, "top '" + value + "' is not rd, all or split");
        rule.has_top = true;
      } else if (key == "chunk") {
        // The same limits as BC_CHUNK and BC_PIPELINE_DEPTH, from the registry.
        if (!parse_bytes(value, &rule.choice.chunk_bytes)) return bad(text, "chunk '" + value + "' is not a size");
        const ParamDef &def = param_def(ParamId::Chunk);
        if (!param_in_range(def, rule.choice.chunk_bytes))
          return bad(text, "chunk=" + value + ": " + param_range_error(def, value));
        rule.has_chunk = true;
      } else if (key == "depth") {
        int64_t d = 0;
        if (!parse_bytes(value, &d)) return bad(text, "depth '" + value + "' is not a number");
        const ParamDef &def = param_def(ParamId::PipelineDepth);
        if (!param_in_range(def, d)) return bad(text, "depth=" + value + ": " + param_range_error(def, value));
        rule.choice.depth = static_cast<int>(d);
        rule.has_depth = true;
      } else {
        return bad(text, "unknown setting '" + key + "'");
      }
    }
    out->push_back(rule);
  }
  return BC_OK;
}

PlanChoice plan_choose(const std::vector<PlanRule> &rules, int64_t bytes, const PlanChoice &base) {
  for (const PlanRule &r : rules) {
    if (bytes < r.min_bytes || bytes >= r.max_bytes) continue;
    PlanChoice c = base;
    if (r.has_shape) c.shape = r.choice.shape;
    if (r.has_algo) {
      c.algo = r.choice.algo;
      c.stage_algos = r.choice.stage_algos;
    }
    if (r.has_top) c.top = r.choice.top;
    if (r.has_chunk) c.chunk_bytes = r.choice.chunk_bytes;
    if (r.has_depth) c.depth = r.choice.depth;
    return c;
  }
  return base;
}

std::string plan_choice_describe(const PlanChoice &c) {
  std::ostringstream os;
  os << "shape=" << shape_name(c.shape) << ",algo=";
  if (c.stage_algos.empty()) os << algo_name(c.algo);
  for (size_t s = 0; s < c.stage_algos.size(); ++s)
    os << (s ? "/" : "") << algo_name(c.stage_algos[s] == Algo::Auto ? c.algo : c.stage_algos[s]);
  os << ",top=" << top_name(c.top) << ",chunk=" << c.chunk_bytes << ",depth=" << c.depth;
  return os.str();
}

uint64_t plan_choice_algo_key(const PlanChoice &c) {
  // 4 bits per algorithm: `algo`, then up to 15 stages.
  uint64_t key = static_cast<uint64_t>(c.algo);
  for (size_t s = 0; s < c.stage_algos.size() && s < 15; ++s)
    key |= static_cast<uint64_t>(c.stage_algos[s]) << (4 * (s + 1));
  return key;
}

}  // namespace bc
