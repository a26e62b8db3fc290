// bc_sim's network: the links a message crosses, their rates and latencies,
// and how flows on the same link share it (max-min fair, progressive filling).
//
// Physical model (docs/SIM.md): level 1 of the topology is the node. Inside a
// node every rank has its own port to the node's fabric (NVSwitch-like): an
// out and an in link at the intra rate. Each node has one NIC (an out and an
// in link at the node rate); racks of nodes, if any, have one trunk (up and
// down at the trunk rate) that every flow leaving or entering the rack
// crosses. A message between nodes uses the NICs (and trunks), not the ports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bcsim {

struct LinkKind {
  double bw = 0;     // bytes per second; 0 = this kind is absent
  double alpha = 0;  // seconds per message
};

struct NetParams {
  LinkKind intra, node, trunk;
  double reduce_bw = 100e9;  // bytes per second one rank combines (Reduce steps)
};

// Parses "150GB/s,1us" (rates: B/s, KB/s, MB/s, GB/s, TB/s and the binary
// KiB/s..., Gb/s and Mb/s in bits; latency: s, ms, us, ns); false on bad text.
bool parse_link(const std::string &text, LinkKind *out);
bool parse_rate(const std::string &text, double *bytes_per_s);
bool parse_seconds(const std::string &text, double *out);

class Network {
 public:
  // node_of: per rank; rack_of_node: per node (empty: no racks, no trunks).
  Network(const NetParams &params, std::vector<int> node_of, std::vector<int> rack_of_node);
  int nranks() const { return static_cast<int>(node_of_.size()); }
  int nnodes() const { return nnodes_; }
  int nracks() const { return nracks_; }
  int node_of(int rank) const { return node_of_[rank]; }
  // The links a message src -> dst crosses (at most 4) into `links`; returns
  // how many. Its latency: intra alpha inside a node, node alpha across
  // nodes, plus trunk alpha across racks.
  int path(int src, int dst, int *links) const;
  double latency(int src, int dst) const;
  const std::vector<double> &capacity() const { return cap_; }
  const NetParams &params() const { return p_; }

 private:
  NetParams p_;
  std::vector<int> node_of_, rack_of_node_;
  int nnodes_ = 0, nracks_ = 0;
  std::vector<double> cap_;
  int intra_out_ = 0, intra_in_ = 0, nic_out_ = 0, nic_in_ = 0, up_ = 0, down_ = 0;
};

// Max-min fair rates by progressive filling: every flow's rate rises together
// until a link is full; that link's flows are frozen at its fair share, and
// the rest continue. flow_links[f * 4 + i], i < nlinks[f]: the links of flow f.
// Rates of flows that cross no link are `unlimited`.
class FairShare {
 public:
  void solve(const std::vector<double> &cap, const std::vector<int> &flow_links, const std::vector<uint8_t> &nlinks,
             double unlimited, std::vector<double> *rates);

 private:
  std::vector<double> rem_;
  std::vector<int> cnt_, start_, fill_, members_, version_, touched_;
  std::vector<uint8_t> frozen_;
};

}  // namespace bcsim
