#include "topo/topo.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <sstream>

#include "core/hash.h"

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
    os << "  level " << l << " (" << level_names[l - 1] << "): " << next.size() << " unit(s): "
       << brace_groups(next, 64) << "\n";
    ranks_of = std::move(next);
  }
  return os.str();
}

std::string brace_groups(const std::vector<std::vector<int>> &groups, size_t max_groups) {
  std::ostringstream os;
  for (size_t u = 0; u < groups.size() && u < max_groups; ++u) {
    os << (u ? " {" : "{");
    for (size_t i = 0; i < groups[u].size(); ++i) {
      if (i) os << ",";
      if (i >= 16) { os << "..." << groups[u].size() << " ranks"; break; }
      os << groups[u][i];
    }
    os << "}";
  }
  if (groups.size() > max_groups) os << " ...";
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

int64_t topo_group_key(const std::string &name) { return static_cast<int64_t>(fnv1a(name) >> 1); }

Status topo_file_parse(const std::string &text, const std::string &label, const std::string &host,
                       int max_cols, std::vector<std::string> *groups) {
  std::istringstream in(text);
  std::string line;
  int lineno = 0, ncols = -1;
  bool found = false;
  while (std::getline(in, line)) {
    ++lineno;
    line = line.substr(0, line.find('#'));
    std::istringstream ls(line);
    std::string name, group;
    if (!(ls >> name)) continue;
    std::vector<std::string> cols;
    while (ls >> group) cols.push_back(group);
    if (cols.empty())
      return BC_FAIL(BC_ERR_TOPOLOGY, "BC_TOPO_FILE=%s:%d: '%s' has no group; expected 'HOSTNAME GROUP [GROUP2 ...]'",
                     label.c_str(), lineno, name.c_str());
    if (ncols >= 0 && static_cast<int>(cols.size()) != ncols)
      return BC_FAIL(BC_ERR_TOPOLOGY, "BC_TOPO_FILE=%s:%d: every line needs the same number of groups (%d)",
                     label.c_str(), lineno, ncols);
    ncols = static_cast<int>(cols.size());
    if (name == host) { *groups = cols; found = true; }
  }
  if (ncols > max_cols)
    return BC_FAIL(BC_ERR_TOPOLOGY, "BC_TOPO_FILE=%s: at most %d group columns", label.c_str(), max_cols);
  if (!found)
    return BC_FAIL(BC_ERR_TOPOLOGY, "BC_TOPO_FILE=%s: this host (%s) is not listed", label.c_str(), host.c_str());
  return BC_OK;
}

namespace {

std::vector<std::string> split_dots(const std::string &s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t dot = s.find('.', pos);
    out.push_back(s.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos));
    if (dot == std::string::npos) return out;
    pos = dot + 1;
  }
}

}  // namespace

Status topo_addr_parse(const std::string &addr, const char *addr_var, const std::string *pattern,
                       const char *pattern_var, std::vector<std::string> *switches) {
  const std::vector<std::string> fields = split_dots(addr);
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].empty() || fields[i].find_first_of(" \t\r\n") != std::string::npos)
      return BC_FAIL(BC_ERR_TOPOLOGY,
                     "%s='%s': field %zu is empty or holds blanks; expected switch names and the node name "
                     "separated by dots, outermost first (e.g. 'spine1.rack3.host17')",
                     addr_var, addr.c_str(), i + 1);
  if (pattern) {
    const std::vector<std::string> words = split_dots(*pattern);
    if (words.size() != fields.size())
      return BC_FAIL(BC_ERR_TOPOLOGY, "%s='%s' has %zu field(s) but %s='%s' has %zu; they must match",
                     addr_var, addr.c_str(), fields.size(), pattern_var, pattern->c_str(), words.size());
    // The last field is the node; every field before it names a level above
    // it, whatever Slurm calls that level ('switch' from topology/tree, 'block'
    // from topology/block): the address's names group the nodes either way.
    if (words.back() != "node")
      return BC_FAIL(BC_ERR_TOPOLOGY,
                     "%s='%s': the last field is '%s', expected 'node' (BC_TOPO_SCHEDULER=off ignores Slurm's "
                     "variables)",
                     pattern_var, pattern->c_str(), words.back().c_str());
    for (size_t i = 0; i + 1 < words.size(); ++i)
      if (words[i].empty() || words[i] == "node")
        return BC_FAIL(BC_ERR_TOPOLOGY,
                       "%s='%s': field %zu is '%s'; only the last field may be the node, the ones before it name "
                       "the levels above it (e.g. 'switch.switch.node') (BC_TOPO_SCHEDULER=off ignores Slurm's "
                       "variables)",
                       pattern_var, pattern->c_str(), i + 1, words[i].c_str());
  }
  switches->assign(fields.rbegin() + 1, fields.rend());
  return BC_OK;
}

Status topo_to_file(const Topology &t, const std::vector<std::string> &host_of, std::string *out) {
  const int n = t.nranks;
  if (static_cast<int>(host_of.size()) != n)
    return BC_FAIL(BC_ERR_INVALID_ARG, "%zu host names for %d ranks", host_of.size(), n);
  // Hosts in order of their smallest rank.
  std::vector<std::string> hosts;
  std::map<std::string, int> host_id;
  std::vector<int> host_of_rank(n);
  for (int r = 0; r < n; ++r) {
    auto it = host_id.find(host_of[r]);
    if (it == host_id.end()) {
      it = host_id.emplace(host_of[r], static_cast<int>(hosts.size())).first;
      hosts.push_back(host_of[r]);
    }
    host_of_rank[r] = it->second;
  }
  const int nhosts = static_cast<int>(hosts.size());
  // Each host's unit at each level; the columns are the levels below the root
  // that hold whole hosts and group more than one of them.
  std::vector<int> unit(n);
  std::iota(unit.begin(), unit.end(), 0);
  std::vector<std::vector<int>> columns;  // columns[c][host]
  std::vector<std::string> names, inside;
  for (int l = 1; l <= t.levels(); ++l) {
    for (int r = 0; r < n; ++r) unit[r] = t.parent[l - 1][unit[r]];
    std::vector<int> of_host(nhosts, -1);
    int split = -1;
    for (int r = 0; r < n && split < 0; ++r) {
      int &u = of_host[host_of_rank[r]];
      if (u != -1 && u != unit[r]) split = host_of_rank[r];
      u = unit[r];
    }
    const std::string &name = t.level_names[l - 1];
    if (split >= 0) {
      if (name == "numa" || name == "package") {
        inside.push_back(name);
        continue;
      }
      return BC_FAIL(BC_ERR_TOPOLOGY,
                     "level %d (%s) puts the ranks of host %s in different groups: a BC_TOPO_FILE holds only "
                     "levels above the host (topology from %s)", l, name.c_str(), hosts[split].c_str(),
                     t.source.c_str());
    }
    if (l == t.levels() || t.units(l) == nhosts) continue;  // the root, or the hosts themselves
    columns.push_back(of_host);
    names.push_back(name);
  }
  std::ostringstream os;
  os << "# BC_TOPO_FILE: " << nhosts << " host(s), " << n << " rank(s); topology from " << t.source << "\n";
  for (auto &name : inside) os << "# level '" << name << "' inside the host: set BC_TOPO_INTRA=" << name << "\n";
  os << "# HOSTNAME";
  for (auto &name : names) os << " " << name;
  if (names.empty()) os << " all";
  os << "\n";
  for (int h = 0; h < nhosts; ++h) {
    os << hosts[h];
    for (size_t c = 0; c < columns.size(); ++c) {
      const std::string &name = names[c];
      const bool digit_end = !name.empty() && std::isdigit(static_cast<unsigned char>(name.back()));
      os << " " << name << (digit_end ? "_" : "") << columns[c][h];
    }
    if (columns.empty()) os << " all";
    os << "\n";
  }
  *out = os.str();
  return BC_OK;
}

}  // namespace bc
