#include "sim/flows.h"

#include <limits>

namespace bcsim {

Flows::Flows(const std::vector<double> &capacity)
    : cap_(capacity), link_stamp_(capacity.size(), 0), on_link_(capacity.size()) {}

int Flows::start(const int *links, int nl, double bytes, double now) {
  int id;
  if (!free_.empty()) id = free_.back(), free_.pop_back();
  else id = static_cast<int>(f_.size()), f_.emplace_back();
  F &f = f_[id];
  f.rem = bytes;
  f.t = now;
  f.rate = 0;
  f.nl = static_cast<uint8_t>(nl);
  f.live = true;
  ++f.version;
  for (int i = 0; i < nl; ++i) {
    f.links[i] = links[i];
    f.pos[i] = static_cast<int>(on_link_[links[i]].size());
    on_link_[links[i]].push_back(id);
    dirty_.push_back(links[i]);
  }
  ++active_;
  return id;
}

void Flows::unlink(int id) {
  F &f = f_[id];
  for (int i = 0; i < f.nl; ++i) {
    std::vector<int> &on = on_link_[f.links[i]];
    const int last = on.back();
    // Move the link's last flow into this one's place, and tell it where.
    on[f.pos[i]] = last;
    F &g = f_[last];
    for (int k = 0; k < g.nl; ++k)
      if (g.links[k] == f.links[i]) { g.pos[k] = f.pos[i]; break; }
    on.pop_back();
    dirty_.push_back(f.links[i]);
  }
  f.live = false;
  ++f.version;
  free_.push_back(id);
  --active_;
}

double Flows::next_end() {
  while (!ends_.empty()) {
    const End &e = ends_.top();
    const F &f = f_[e.second.first];
    if (f.live && f.version == e.second.second) return e.first;
    ends_.pop();
  }
  return std::numeric_limits<double>::infinity();
}

void Flows::take_ended(double now, double eps, std::vector<int> *out) {
  out->clear();
  while (next_end() <= now + eps) {
    const int id = ends_.top().second.first;
    ends_.pop();
    unlink(id);
    out->push_back(id);
  }
}

void Flows::settle(double now) {
  if (dirty_.empty()) return;
  ++solves_;
  ++stamp_;
  // The touched components: links and flows reachable from the dirty links.
  comp_.clear();
  queue_.clear();
  for (int l : dirty_)
    if (link_stamp_[l] != stamp_) link_stamp_[l] = stamp_, queue_.push_back(l);
  dirty_.clear();
  for (size_t h = 0; h < queue_.size(); ++h)
    for (int id : on_link_[queue_[h]]) {
      F &f = f_[id];
      if (f.stamp == stamp_) continue;
      f.stamp = stamp_;
      comp_.push_back(id);
      for (int i = 0; i < f.nl; ++i)
        if (link_stamp_[f.links[i]] != stamp_)
          link_stamp_[f.links[i]] = stamp_, queue_.push_back(f.links[i]);
    }
  links_.resize(comp_.size() * 4);
  nls_.resize(comp_.size());
  for (size_t i = 0; i < comp_.size(); ++i) {
    const F &f = f_[comp_[i]];
    nls_[i] = f.nl;
    for (int k = 0; k < f.nl; ++k) links_[i * 4 + k] = f.links[k];
  }
  fair_.solve(cap_, links_, nls_, std::numeric_limits<double>::infinity(), &rates_);
  for (size_t i = 0; i < comp_.size(); ++i) {
    F &f = f_[comp_[i]];
    f.rem -= f.rate * (now - f.t);
    f.t = now;
    f.rate = rates_[i];
    ++f.version;
    if (f.rate > 0) ends_.push(End{now + std::max(0.0, f.rem) / f.rate, {comp_[i], f.version}});
  }
  // Stale entries pile up (every re-solve pushes the component again): when
  // they outnumber the live ones 4 to 1, rebuild the heap from the live flows.
  if (ends_.size() > 4 * active_ + 1024) {
    std::vector<End> live;
    live.reserve(active_);
    for (size_t id = 0; id < f_.size(); ++id) {
      const F &f = f_[id];
      if (f.live && f.rate > 0)
        live.push_back(End{f.t + std::max(0.0, f.rem) / f.rate, {static_cast<int>(id), f.version}});
    }
    ends_ = std::priority_queue<End, std::vector<End>, std::greater<End>>(std::greater<End>(), std::move(live));
  }
}

}  // namespace bcsim
