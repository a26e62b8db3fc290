#include "sim/net.h"

#include <algorithm>
#include <cstdlib>
#include <queue>
#include <utility>

namespace bcsim {
namespace {

// Splits "150GB/s" into 150 and "GB/s"; false on no number.
bool number_unit(const std::string &text, double *v, std::string *unit) {
  const char *s = text.c_str();
  char *end = nullptr;
  *v = std::strtod(s, &end);
  if (end == s || !(*v >= 0)) return false;
  *unit = std::string(end);
  return true;
}

}  // namespace

bool parse_rate(const std::string &text, double *out) {
  double v;
  std::string u;
  if (!number_unit(text, &v, &u)) return false;
  static const std::pair<const char *, double> units[] = {
      {"", 1},         {"B/s", 1},        {"KB/s", 1e3},     {"MB/s", 1e6},      {"GB/s", 1e9},
      {"TB/s", 1e12},  {"KiB/s", 1024.0}, {"MiB/s", 1 << 20}, {"GiB/s", 1 << 30}, {"Kb/s", 1e3 / 8},
      {"Mb/s", 1e6 / 8}, {"Gb/s", 1e9 / 8}, {"Tb/s", 1e12 / 8}};
  for (const auto &x : units)
    if (u == x.first) { *out = v * x.second; return *out > 0; }
  return false;
}

bool parse_seconds(const std::string &text, double *out) {
  double v;
  std::string u;
  if (!number_unit(text, &v, &u)) return false;
  static const std::pair<const char *, double> units[] = {{"", 1}, {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
  for (const auto &x : units)
    if (u == x.first) { *out = v * x.second; return true; }
  return false;
}

bool parse_link(const std::string &text, LinkKind *out) {
  const size_t comma = text.find(',');
  LinkKind k;
  if (!parse_rate(text.substr(0, comma), &k.bw)) return false;
  if (comma != std::string::npos && !parse_seconds(text.substr(comma + 1), &k.alpha)) return false;
  *out = k;
  return true;
}

Network::Network(const NetParams &params, std::vector<int> node_of, std::vector<int> rack_of_node)
    : p_(params), node_of_(std::move(node_of)), rack_of_node_(std::move(rack_of_node)) {
  const int p = nranks();
  for (int n : node_of_) nnodes_ = std::max(nnodes_, n + 1);
  for (int r : rack_of_node_) nracks_ = std::max(nracks_, r + 1);
  if (p_.trunk.bw <= 0) nracks_ = 0, rack_of_node_.clear();
  intra_out_ = 0;
  intra_in_ = p;
  nic_out_ = 2 * p;
  nic_in_ = nic_out_ + nnodes_;
  up_ = nic_in_ + nnodes_;
  down_ = up_ + nracks_;
  cap_.assign(down_ + nracks_, 0);
  std::fill(cap_.begin(), cap_.begin() + nic_out_, p_.intra.bw);
  std::fill(cap_.begin() + nic_out_, cap_.begin() + up_, p_.node.bw);
  std::fill(cap_.begin() + up_, cap_.end(), p_.trunk.bw);
}

int Network::path(int src, int dst, int *links) const {
  const int a = node_of_[src], b = node_of_[dst];
  int n = 0;
  if (a == b) {
    links[n++] = intra_out_ + src;
    links[n++] = intra_in_ + dst;
    return n;
  }
  links[n++] = nic_out_ + a;
  if (nracks_ > 0 && rack_of_node_[a] != rack_of_node_[b]) {
    links[n++] = up_ + rack_of_node_[a];
    links[n++] = down_ + rack_of_node_[b];
  }
  links[n++] = nic_in_ + b;
  return n;
}

double Network::latency(int src, int dst) const {
  const int a = node_of_[src], b = node_of_[dst];
  if (a == b) return p_.intra.alpha;
  if (nracks_ > 0 && rack_of_node_[a] != rack_of_node_[b]) return p_.node.alpha + p_.trunk.alpha;
  return p_.node.alpha;
}

void FairShare::solve(const std::vector<double> &cap, const std::vector<int> &flow_links,
                      const std::vector<uint8_t> &nlinks, double unlimited, std::vector<double> *rates) {
  const size_t nf = nlinks.size();
  if (rem_.size() != cap.size()) {
    rem_.assign(cap.size(), 0);
    cnt_.assign(cap.size(), 0);
    start_.assign(cap.size() + 1, 0);
    fill_.assign(cap.size(), 0);
    version_.assign(cap.size(), 0);
  }
  rates->assign(nf, unlimited);
  frozen_.assign(nf, 0);
  // Links in use, and per link its flows (CSR over the touched links only).
  touched_.clear();
  for (size_t f = 0; f < nf; ++f)
    for (int i = 0; i < nlinks[f]; ++i) {
      const int l = flow_links[f * 4 + i];
      if (cnt_[l]++ == 0) touched_.push_back(l);
    }
  int total = 0;
  for (int l : touched_) {
    start_[l] = total;
    fill_[l] = total;
    total += cnt_[l];
    rem_[l] = cap[l];
  }
  members_.resize(total);
  for (size_t f = 0; f < nf; ++f)
    for (int i = 0; i < nlinks[f]; ++i) members_[fill_[flow_links[f * 4 + i]]++] = static_cast<int>(f);
  using Entry = std::pair<double, std::pair<int, int>>;  // share, (link, version)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (int l : touched_) heap.push({rem_[l] / cnt_[l], {l, version_[l]}});
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    const int l = e.second.first;
    if (e.second.second != version_[l] || cnt_[l] == 0) continue;
    const double share = std::max(0.0, rem_[l] / cnt_[l]);
    for (int k = start_[l]; k < fill_[l]; ++k) {
      const int f = members_[k];
      if (frozen_[f]) continue;
      frozen_[f] = 1;
      (*rates)[f] = share;
      for (int i = 0; i < nlinks[f]; ++i) {
        const int l2 = flow_links[f * 4 + i];
        rem_[l2] -= share;
        --cnt_[l2];
        ++version_[l2];
        if (l2 != l && cnt_[l2] > 0) heap.push({std::max(0.0, rem_[l2]) / cnt_[l2], {l2, version_[l2]}});
      }
    }
  }
  for (int l : touched_) cnt_[l] = 0;
}

}  // namespace bcsim
