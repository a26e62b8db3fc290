#include <catch2/catch.hpp>

#include <string>

#include "topo/topo.h"

using namespace bc;

TEST_CASE("BC_TOPO even specs", "[topo]") {
  Topology t;
  REQUIRE(topo_parse("2x2x2", 8, &t) == BC_OK);
  REQUIRE(t.levels() == 3);
  REQUIRE(t.parent[0] == std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3});
  REQUIRE(t.parent[1] == std::vector<int>{0, 0, 1, 1});
  REQUIRE(t.parent[2] == std::vector<int>{0, 0});
  REQUIRE_FALSE(t.uneven());
  REQUIRE_FALSE(t.noncontiguous());

  REQUIRE(topo_parse("4", 12, &t) == BC_OK);  // top level implied
  REQUIRE(t.levels() == 2);
  REQUIRE(t.units(1) == 3);
  REQUIRE(t.units(2) == 1);

  REQUIRE(topo_parse("4/2", 8, &t) == BC_OK);
  REQUIRE(t.levels() == 2);
  REQUIRE(topo_parse("1", 1, &t) == BC_OK);
  REQUIRE(t.levels() == 1);
}

TEST_CASE("BC_TOPO uneven specs", "[topo]") {
  Topology t;
  REQUIRE(topo_parse("3,2,3", 8, &t) == BC_OK);
  REQUIRE(t.parent[0] == std::vector<int>{0, 0, 0, 1, 1, 2, 2, 2});
  REQUIRE(t.uneven());
  REQUIRE(topo_parse("2,2,2/2,1", 6, &t) == BC_OK);
  REQUIRE(t.levels() == 3);
  REQUIRE(t.parent[1] == std::vector<int>{0, 0, 1});
}

TEST_CASE("BC_TOPO errors are clear", "[topo]") {
  Topology t;
  REQUIRE(topo_parse("3x3", 8, &t) == BC_ERR_TOPOLOGY);
  REQUIRE(std::string(last_error()).find("does not divide") != std::string::npos);
  REQUIRE(topo_parse("3,2", 8, &t) == BC_ERR_TOPOLOGY);
  REQUIRE(std::string(last_error()).find("lists 5 units") != std::string::npos);
  REQUIRE(topo_parse("2xx2", 4, &t) == BC_ERR_TOPOLOGY);
  REQUIRE(topo_parse("a", 4, &t) == BC_ERR_TOPOLOGY);
  REQUIRE(topo_parse("0", 4, &t) == BC_ERR_TOPOLOGY);
  REQUIRE(topo_parse("2,", 4, &t) == BC_ERR_TOPOLOGY);
  REQUIRE(topo_parse("-2", 4, &t) == BC_ERR_TOPOLOGY);
}

TEST_CASE("topology from keys: non-contiguous placement, trivial levels dropped", "[topo]") {
  // 7 ranks placed round-robin over 3 nodes; nodes 0,1 in rack A, node 2 in rack B.
  std::vector<std::vector<int64_t>> keys;
  for (int r = 0; r < 7; ++r) keys.push_back({r % 3, (r % 3) < 2 ? 100 : 200});
  Topology t;
  REQUIRE(topo_from_keys(keys, {"node", "rack"}, &t) == BC_OK);
  REQUIRE(t.levels() == 3);
  REQUIRE(t.parent[0] == std::vector<int>{0, 1, 2, 0, 1, 2, 0});
  REQUIRE(t.parent[1] == std::vector<int>{0, 0, 1});
  REQUIRE(t.noncontiguous());
  REQUIRE(t.uneven());

  // Every rank on its own node, one rack: the node level groups nothing.
  keys.clear();
  for (int r = 0; r < 4; ++r) keys.push_back({r, 7});
  REQUIRE(topo_from_keys(keys, {"node", "rack"}, &t) == BC_OK);
  REQUIRE(t.levels() == 1);
  REQUIRE(t.level_names[0] == "rack");

  // Keys are paths: the same node key under two racks is two units.
  keys = {{0, 1}, {0, 2}, {0, 1}};
  REQUIRE(topo_from_keys(keys, {"node", "rack"}, &t) == BC_OK);
  REQUIRE(t.parent[0] == std::vector<int>{0, 1, 0});
}

TEST_CASE("scheduler addresses: Slurm's address and pattern, BC_TOPO_ADDR", "[topo][sched]") {
  std::vector<std::string> sw;
  const std::string pat3 = "switch.switch.node";
  REQUIRE(topo_addr_parse("s0.s10.node17", "SLURM_TOPOLOGY_ADDR", &pat3, "SLURM_TOPOLOGY_ADDR_PATTERN", &sw) == BC_OK);
  REQUIRE(sw == std::vector<std::string>{"s10", "s0"});  // innermost first
  const std::string pat1 = "node";
  REQUIRE(topo_addr_parse("node17", "SLURM_TOPOLOGY_ADDR", &pat1, "SLURM_TOPOLOGY_ADDR_PATTERN", &sw) == BC_OK);
  REQUIRE(sw.empty());  // no topology plugin: the node alone
  REQUIRE(topo_addr_parse("spine1.rack3.host17", "BC_TOPO_ADDR", nullptr, nullptr, &sw) == BC_OK);
  REQUIRE(sw == std::vector<std::string>{"rack3", "spine1"});
  REQUIRE(topo_addr_parse("host17", "BC_TOPO_ADDR", nullptr, nullptr, &sw) == BC_OK);
  REQUIRE(sw.empty());
}

TEST_CASE("scheduler addresses: bad ones are refused, naming the variables", "[topo][sched]") {
  std::vector<std::string> sw;
  const std::string pat3 = "switch.switch.node", pat2 = "switch.node";
  auto slurm = [&](const std::string &addr, const std::string &pat) {
    return topo_addr_parse(addr, "SLURM_TOPOLOGY_ADDR", &pat, "SLURM_TOPOLOGY_ADDR_PATTERN", &sw);
  };
  auto error = [] { return std::string(last_error()); };
  // Field counts differ.
  REQUIRE(slurm("s0.node17", pat3) == BC_ERR_TOPOLOGY);
  REQUIRE(error().find("SLURM_TOPOLOGY_ADDR='s0.node17' has 2 field(s)") != std::string::npos);
  REQUIRE(error().find("SLURM_TOPOLOGY_ADDR_PATTERN='switch.switch.node' has 3") != std::string::npos);
  REQUIRE(slurm("a.b.c.node17", pat3) == BC_ERR_TOPOLOGY);
  // Any level word before the node ('block' from topology/block); the node last, and only there.
  const std::string block = "block.node", nodelast = "node.switch", twonodes = "node.node";
  REQUIRE(slurm("b0.node17", block) == BC_OK);
  REQUIRE(sw == std::vector<std::string>{"b0"});
  REQUIRE(slurm("s0.node17", nodelast) == BC_ERR_TOPOLOGY);
  REQUIRE(error().find("SLURM_TOPOLOGY_ADDR_PATTERN='node.switch': the last field is 'switch', expected 'node'") !=
          std::string::npos);
  REQUIRE(error().find("BC_TOPO_SCHEDULER=off") != std::string::npos);
  REQUIRE(slurm("s0.node17", twonodes) == BC_ERR_TOPOLOGY);
  REQUIRE(error().find("field 1 is 'node'; only the last field may be the node") != std::string::npos);
  // Empty fields, in the address or the pattern.
  REQUIRE(slurm("s0..node17", pat3) == BC_ERR_TOPOLOGY);
  REQUIRE(error().find("field 2 is empty") != std::string::npos);
  REQUIRE(slurm(".node17", pat2) == BC_ERR_TOPOLOGY);
  REQUIRE(slurm("s0.", pat2) == BC_ERR_TOPOLOGY);
  REQUIRE(slurm("", pat2) == BC_ERR_TOPOLOGY);
  REQUIRE(slurm("s0.node17", "switch.") == BC_ERR_TOPOLOGY);
  REQUIRE(topo_addr_parse("spine1..host17", "BC_TOPO_ADDR", nullptr, nullptr, &sw) == BC_ERR_TOPOLOGY);
  REQUIRE(error().find("BC_TOPO_ADDR='spine1..host17': field 2 is empty") != std::string::npos);
  REQUIRE(topo_addr_parse("rack 3.host17", "BC_TOPO_ADDR", nullptr, nullptr, &sw) == BC_ERR_TOPOLOGY);
  REQUIRE(topo_addr_parse("", "BC_TOPO_ADDR", nullptr, nullptr, &sw) == BC_ERR_TOPOLOGY);
}

namespace {

// The tree detect() builds from each rank's node and group names (innermost first).
Topology from_names(const std::vector<int> &node_of, const std::vector<std::vector<std::string>> &groups) {
  std::vector<std::vector<int64_t>> keys;
  for (size_t r = 0; r < node_of.size(); ++r) {
    keys.push_back({node_of[r]});
    for (auto &g : groups[r]) keys.back().push_back(topo_group_key(g));
  }
  std::vector<std::string> names = {"node", "rack"};
  for (size_t i = 2; i < 8; ++i) names.push_back("level" + std::to_string(i + 1));
  names.resize(keys[0].size());
  Topology t;
  REQUIRE(topo_from_keys(keys, names, &t) == BC_OK);
  return t;
}

}  // namespace

TEST_CASE("switch names make the levels as a topology file does", "[topo][sched]") {
  // 8 ranks on 4 hosts, round-robin; hosts 0,1 under s10, hosts 2,3 under s11, both under s0.
  std::vector<int> node;
  std::vector<std::vector<std::string>> groups;
  for (int r = 0; r < 8; ++r) {
    node.push_back(r % 4);
    groups.push_back({r % 4 < 2 ? "s10" : "s11", "s0"});
  }
  Topology t = from_names(node, groups);
  REQUIRE(t.levels() == 3);  // node, rack, and the outer switch is the root
  REQUIRE(t.level_names == std::vector<std::string>{"node", "rack", "level3"});
  REQUIRE(t.parent[0] == std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3});
  REQUIRE(t.parent[1] == std::vector<int>{0, 0, 1, 1});
  REQUIRE(t.units(3) == 1);
  // One switch for the whole cluster: no level between the nodes and the root.
  for (auto &g : groups) g = {"s0"};
  t = from_names(node, groups);
  REQUIRE(t.levels() == 2);
  REQUIRE(t.units(1) == 4);
  REQUIRE(t.units(2) == 1);
}

TEST_CASE("ranks of one host under different switches split the host", "[topo][sched]") {
  // What BC_TOPO_ADDR does when the ranks of one host disagree (one machine in
  // tests): the node level splits by switch, so each switch's ranks form a
  // unit and the plan still sees a nested tree.
  Topology t = from_names({0, 0, 0, 0}, {{"sw0"}, {"sw0"}, {"sw1"}, {"sw1"}});
  REQUIRE(t.levels() == 2);
  REQUIRE(t.parent[0] == std::vector<int>{0, 0, 1, 1});
  REQUIRE(t.level_names == std::vector<std::string>{"node", "top"});
  // Such a tree has no host file: the dump refuses it clearly.
  std::string text;
  REQUIRE(topo_to_file(t, {"h", "h", "h", "h"}, &text) == BC_ERR_TOPOLOGY);
  REQUIRE(std::string(last_error()).find("puts the ranks of host h in different groups") != std::string::npos);
}

TEST_CASE("topology file: written, parsed back, the same tree", "[topo][sched]") {
  // 12 ranks on 6 hosts placed round-robin, hosts in racks of 2 (3 racks) and
  // rows of 2 racks and 1 rack: uneven and non-contiguous.
  const char *rack_of_host[] = {"r0", "r0", "r1", "r1", "r2", "r2"};
  const char *row_of_host[] = {"row0", "row0", "row0", "row0", "row1", "row1"};
  std::vector<int> node;
  std::vector<std::vector<std::string>> groups;
  std::vector<std::string> hosts;
  for (int r = 0; r < 12; ++r) {
    const int h = r % 6;
    node.push_back(h);
    groups.push_back({rack_of_host[h], row_of_host[h]});
    hosts.push_back("host" + std::to_string(h));
  }
  const Topology t = from_names(node, groups);
  REQUIRE(t.levels() == 4);
  std::string text;
  REQUIRE(topo_to_file(t, hosts, &text) == BC_OK);
  INFO(text);
  REQUIRE(text.find("host0 rack0 level3_0\n") != std::string::npos);
  REQUIRE(text.find("host5 rack2 level3_1\n") != std::string::npos);
  // Reload: each rank reads its host's line, as BC_TOPO_FILE does.
  std::vector<std::vector<std::string>> reloaded;
  for (int r = 0; r < 12; ++r) {
    std::vector<std::string> cols;
    REQUIRE(topo_file_parse(text, "dump", hosts[r], 6, &cols) == BC_OK);
    reloaded.push_back(cols);
  }
  const Topology back = from_names(node, reloaded);
  REQUIRE(back.parent == t.parent);
  REQUIRE(back.level_names == t.level_names);
  // And again: the dump of the reloaded tree is the same file.
  std::string again;
  REQUIRE(topo_to_file(back, hosts, &again) == BC_OK);
  REQUIRE(again == text);

  // Nothing above the host: one group 'all', which reloads to the same tree.
  const Topology flat = from_names({0, 0, 1, 1}, {{}, {}, {}, {}});
  REQUIRE(topo_to_file(flat, {"a", "a", "b", "b"}, &text) == BC_OK);
  REQUIRE(text.find("\na all\nb all\n") != std::string::npos);
  std::vector<std::vector<std::string>> cols(4);
  for (int r = 0; r < 4; ++r) REQUIRE(topo_file_parse(text, "dump", r < 2 ? "a" : "b", 6, &cols[r]) == BC_OK);
  REQUIRE(from_names({0, 0, 1, 1}, cols).parent == flat.parent);

  // A numa level inside the host is left to BC_TOPO_INTRA, with a comment.
  Topology numa;
  REQUIRE(topo_from_keys({{0, 0}, {0, 0}, {1, 0}, {1, 0}, {0, 1}, {0, 1}, {1, 1}, {1, 1}}, {"numa", "node"},
                        &numa) == BC_OK);
  REQUIRE(numa.levels() == 3);
  REQUIRE(topo_to_file(numa, {"a", "a", "a", "a", "b", "b", "b", "b"}, &text) == BC_OK);
  REQUIRE(text.find("\na all\nb all\n") != std::string::npos);
  REQUIRE(text.find("BC_TOPO_INTRA=numa") != std::string::npos);
}

TEST_CASE("topology file parsing errors", "[topo]") {
  std::vector<std::string> cols;
  REQUIRE(topo_file_parse("a r0\nb\n", "f", "a", 6, &cols) == BC_ERR_TOPOLOGY);
  REQUIRE(std::string(last_error()).find("f:2: 'b' has no group") != std::string::npos);
  REQUIRE(topo_file_parse("a r0\nb r1 x\n", "f", "a", 6, &cols) == BC_ERR_TOPOLOGY);
  REQUIRE(topo_file_parse("# only\na r0 # comment\n", "f", "c", 6, &cols) == BC_ERR_TOPOLOGY);
  REQUIRE(std::string(last_error()).find("this host (c) is not listed") != std::string::npos);
  REQUIRE(topo_file_parse("# only\na r0 # comment\n", "f", "a", 6, &cols) == BC_OK);
  REQUIRE(cols == std::vector<std::string>{"r0"});
}
