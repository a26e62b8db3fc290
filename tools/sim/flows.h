// The flows in flight on bc_sim's network and their max-min fair rates.
//
// Rates change only where flows start or end: max-min fairness splits over
// the connected components of the flow-link graph, so settle() re-solves just
// the component(s) that hold the links touched since the last call. Each flow
// keeps (bytes left, when counted, rate); a heap of end times, stale entries
// skipped by version, gives the next end without visiting every flow.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "sim/net.h"

namespace bcsim {

class Flows {
 public:
  explicit Flows(const std::vector<double> &capacity);
  // A flow of `bytes` over links[0..nl) joins now (rate 0 until settle()); its id.
  int start(const int *links, int nl, double bytes, double now);
  // When the next flow ends at the current rates (infinity when none can).
  double next_end();
  // Removes the flows that end by now + eps into *out (ids, reused later).
  void take_ended(double now, double eps, std::vector<int> *out);
  // Re-solves the rates of the components touched since the last call.
  void settle(double now);
  int64_t solves() const { return solves_; }
  size_t active() const { return active_; }

 private:
  struct F {
    double rem = 0, t = 0, rate = 0;  // bytes left at time t; bytes per second since
    int links[4] = {0, 0, 0, 0}, pos[4] = {0, 0, 0, 0};  // pos: index in on_link_[links[i]]
    uint8_t nl = 0;
    bool live = false;
    uint32_t version = 0, stamp = 0;
  };
  using End = std::pair<double, std::pair<int, uint32_t>>;  // end time, (flow, version)
  const std::vector<double> &cap_;
  std::vector<F> f_;
  std::vector<int> free_, dirty_, comp_, queue_, links_;
  std::vector<uint32_t> link_stamp_;
  std::vector<uint8_t> nls_;
  std::vector<double> rates_;
  std::vector<std::vector<int>> on_link_;
  std::priority_queue<End, std::vector<End>, std::greater<End>> ends_;
  FairShare fair_;
  uint32_t stamp_ = 0;
  int64_t solves_ = 0;
  size_t active_ = 0;
  void unlink(int id);
};

}  // namespace bcsim
