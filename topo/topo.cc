#include "topo/topo.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <sstream>

namespace bc {

int Topology::units(int l) const {
  if (l == 0) return nranks;
  const std::vector<int> &p = parent[l - 1];
  return p.empty() ? 0 : *std::max_element(p.begin(), p.end()) + 1;
}

std::vector<std::vector<int>> Topology::children(int l) const {
  std::vector<std::vector<int>> out(units(l));
  const std::vector<int> &p = parent[l - 1];
  for (int u = 0; u < static_cast<int>(p.size()); ++u) out[p[u]].push_back(u);
  return out;
}

bool Topology::uneven() const {
  for (int l = 1; l <= levels(); ++l) {
    auto ch = children(l);
    for (auto &c : ch)
      if (c.size() != ch[0].size()) return true;
  }
  return false;
}

bool Topology::noncontiguous() const {
  // Follow each rank up to level 1..k; a unit is contiguous when its ranks form
  // one run in rank order.
  std::vector<int> unit(nranks);
  std::iota(unit.begin(), unit.end(), 0);
  for (int l = 0; l < levels(); ++l) {
    for (int r = 0; r < nranks; ++r) unit[r] = parent[l][unit[r]];
    std::vector<int> seen_last(units(l + 1), -2);
    for (int r = 0; r < nranks; ++r) {
      int u = unit[r];
      if (seen_last[u] != -2 && seen_last[u] != r - 1) return true;
      seen_last[u] = r;
    }
  }
  return false;
}

std::string Topology::describe() const {
  std::ostringstream os;
  os << "topology: " << nranks << " ranks, " << levels() << " level(s) from " << source;
  if (uneven()) os << " [uneven]";
  if (noncontiguous()) os << " [non-contiguous]";
  os << "\n";
  std::vector<std::vector<int>> ranks_of(nranks);
  for (int r = 0; r < nranks; ++r) ranks_of[r] = {r};
  for (int l = 1; l <= levels(); ++l) {
    std::vector<std::vector<int>> next(units(l));
    for (int u = 0; u < static_cast<int>(parent[l - 1].size()); ++u)
      for (int r : ranks_of[u]) next[parent[l - 1][u]].push_back(r);
    for (auto &v : next) std::sort(v.begin(), v.end());
    os << "  level " << l << " (" << level_names[l - 1] << "): " << next.size() << " unit(s):";
    for (size_t u = 0; u < next.size() && u < 64; ++u) {
      os << " {";
      for (size_t i = 0; i < next[u].size(); ++i) {
        if (i) os << ",";
        if (i >= 16) { os << "..." << next[u].size() << " ranks"; break; }
        os << next[u][i];
      }
      os << "}";
    }
    if (next.size() > 64) os << " ...";
    os << "\n";
    ranks_of = std::move(next);
  }
  return os.str();
}

namespace {

// One level of a spec: either a single size (every unit) or a list of sizes.
struct LevelSpec {
  std::vector<int> sizes;
  bool uniform = false;
};

Status parse_level(const std::string &text, const std::string &spec, LevelSpec *out) {
  out->sizes.clear();
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || item.size() > 9 ||
        !std::all_of(item.begin(), item.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      return BC_FAIL(BC_ERR_TOPOLOGY,
                     "BC_TOPO='%s': '%s' is not a unit size; expected e.g. 2x2x2, 4/2 or 3,2,3",
                     spec.c_str(), item.c_str());
    int v = std::stoi(item);
    if (v < 1)
      return BC_FAIL(BC_ERR_TOPOLOGY, "BC_TOPO='%s': unit sizes must be at least 1", spec.c_str());
    out->sizes.push_back(v);
  }
  if (out->sizes.empty() || text.back() == ',')
    return BC_FAIL(BC_ERR_TOPOLOGY, "BC_TOPO='%s': empty level", spec.c_str());
  out->uniform = out->sizes.size() == 1;
  return BC_OK;
}

}  // namespace

Status topo_parse(const std::string &spec, int nranks, Topology *out) {
  if (nranks < 1) return BC_FAIL(BC_ERR_INVALID_ARG, "topology needs at least one rank");
  std::vector<LevelSpec> levels;
  std::string cur;
  for (size_t i = 0; i <= spec.size(); ++i) {
    char c = i < spec.size() ? spec[i] : '\0';
    if (c == 'x' || c == 'X' || c == '/' || c == '\0') {
      if (cur.empty())
        return BC_FAIL(BC_ERR_TOPOLOGY, "BC_TOPO='%s': empty level; expected e.g. 2x2x2, 4/2 or 3,2,3",
                       spec.c_str());
      LevelSpec ls;
      BC_CHECK(parse_level(cur, spec, &ls));
      levels.push_back(ls);
      cur.clear();
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      cur += c;
    }
  }
  Topology t;
  t.nranks = nranks;
  t.source = "BC_TOPO=" + spec;
  int nunits = nranks;  // units of the level below
  for (size_t l = 0; l < levels.size(); ++l) {
    const LevelSpec &ls = levels[l];
    std::vector<int> sizes = ls.sizes;
    if (ls.uniform) {
      if (nunits % sizes[0] != 0)
        return BC_FAIL(BC_ERR_TOPOLOGY,
                       "BC_TOPO='%s': level %zu groups %d units by %d, which does not divide",
                       spec.c_str(), l + 1, nunits, sizes[0]);
      sizes.assign(nunits / sizes[0], sizes[0]);
    }
    long total = std::accumulate(sizes.begin(), sizes.end(), 0L);
    if (total != nunits)
      return BC_FAIL(BC_ERR_TOPOLOGY,
                     "BC_TOPO='%s': level %zu lists %ld units in all, but the level below has %d",
                     spec.c_str(), l + 1, total, nunits);
    std::vector<int> parent;
    for (int u = 0; u < static_cast<int>(sizes.size()); ++u) parent.insert(parent.end(), sizes[u], u);
    t.parent.push_back(parent);
    t.level_names.push_back(l == 0 ? "node" : l == 1 ? "rack" : "level" + std::to_string(l + 1));
    nunits = static_cast<int>(sizes.size());
  }
  if (nunits > 1 || t.parent.empty()) {
    t.parent.emplace_back(nunits, 0);
    t.level_names.push_back(t.parent.size() == 1 ? "all" : "top");
  }
  *out = std::move(t);
  return BC_OK;
}

Status topo_from_keys(const std::vector<std::vector<int64_t>> &keys,
                      const std::vector<std::string> &level_names, Topology *out) {
  const int n = static_cast<int>(keys.size());
  if (n == 0) return BC_FAIL(BC_ERR_INVALID_ARG, "topology needs at least one rank");
  const size_t nkeys = keys[0].size();
  for (auto &k : keys)
    if (k.size() != nkeys) return BC_FAIL(BC_ERR_INTERNAL, "ranks disagree on the number of topology levels");
  Topology t;
  t.nranks = n;
  // unit_of[r]: rank r's unit at the level built last (starts with the rank).
  std::vector<int> unit_of(n);
  std::iota(unit_of.begin(), unit_of.end(), 0);
  int nunits = n;
  for (size_t l = 0; l <= nkeys; ++l) {
    // Level l+1 unit of rank r: identified by keys[r][l..] (the path upwards);
    // the root level (l == nkeys) has the empty path.
    std::map<std::vector<int64_t>, int> id;  // path -> unit, numbered by smallest rank
    std::vector<int> parent(nunits, -1);
    for (int r = 0; r < n; ++r) {
      std::vector<int64_t> path(keys[r].begin() + static_cast<long>(l), keys[r].end());
      auto it = id.find(path);
      if (it == id.end()) it = id.emplace(path, static_cast<int>(id.size())).first;
      if (parent[unit_of[r]] != -1 && parent[unit_of[r]] != it->second)
        return BC_FAIL(BC_ERR_TOPOLOGY,
                       "topology levels are not nested: rank %d's level-%zu group spans two level-%zu groups",
                       r, l, l + 1);
      parent[unit_of[r]] = it->second;
    }
    const int next_units = static_cast<int>(id.size());
    // Drop a level in which nothing groups (every unit alone), unless it is the root.
    const bool trivial = next_units == nunits;
    if (!trivial || (l == nkeys && t.parent.empty())) {
      t.parent.push_back(parent);
      t.level_names.push_back(l < level_names.size() ? level_names[l] : (l == nkeys ? "top" : "level"));
      for (int r = 0; r < n; ++r) unit_of[r] = parent[unit_of[r]];
      nunits = next_units;
    }
  }
  *out = std::move(t);
  return BC_OK;
}

}  // namespace bc
