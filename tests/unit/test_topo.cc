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
