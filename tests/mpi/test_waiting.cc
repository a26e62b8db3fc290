// How a communicator's waiters spin or yield (BC_SPIN_COUNT, core/wait_policy.h).
// auto, the default, counts the communicator's ranks on this node and the CPUs
// their affinity masks allow between them, and yields after every idle poll
// only where the ranks outnumber those CPUs. The expectation is computed here
// on its own (a node split and an OR of the masks) and compared with what
// bc_comm_describe says the communicator chose.
#include <catch2/catch.hpp>

#include <sched.h>

#include <string>

#include "harness.h"

using namespace bctest;

namespace {

// The ranks of `comm` on this node, and the CPUs they may run on between them.
struct NodeShare {
  int ranks = 0;
  int cpus = 0;
  cpu_set_t all;
};
NodeShare node_share(MPI_Comm comm) {
  NodeShare s;
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &s.ranks);
  cpu_set_t mine;
  CPU_ZERO(&mine);
  sched_getaffinity(0, sizeof mine, &mine);
  MPI_Allreduce(&mine, &s.all, sizeof(cpu_set_t), MPI_BYTE, MPI_BOR, node);
  s.cpus = CPU_COUNT(&s.all);
  MPI_Comm_free(&node);
  return s;
}

// The line bc_comm_describe should print for BC_SPIN_COUNT=auto.
std::string auto_line(const NodeShare &s) {
  const bool shared = s.ranks > s.cpus;
  return std::string("waiting: ") + (shared ? "1" : "64") + " idle poll(s) per yield (BC_SPIN_COUNT=auto: " +
         std::to_string(s.ranks) + " rank(s) on this node, " + std::to_string(s.cpus) + " CPU(s) between them";
}

// An exact all-reduce on `comm` (the harness's data: any order of the sum is
// exact), in place, with the guard bytes checked.
bool exact_sum(bc_comm_t comm, MPI_Comm base) {
  int p = 0, r = 0;
  MPI_Comm_size(base, &p);
  MPI_Comm_rank(base, &r);
  return allreduce_right(comm, BC_INT32, 1009, r, p);
}

// Puts this process back on its CPUs however the test case leaves.
struct AffinityRestore {
  cpu_set_t saved;
  AffinityRestore() { sched_getaffinity(0, sizeof saved, &saved); }
  ~AffinityRestore() { sched_setaffinity(0, sizeof saved, &saved); }
};

}  // namespace

TEST_CASE("BC_SPIN_COUNT=auto yields at once only where a node's ranks outnumber their CPUs", "[waiting]") {
  const int r = world_rank();
  MPI_Comm evens = MPI_COMM_NULL;  // a sub-communicator: fewer ranks on the node
  MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &evens);
  for (MPI_Comm base : {MPI_COMM_WORLD, evens}) {
    const NodeShare share = node_share(base);
    bc_comm_t comm = nullptr;
    REQUIRE(everywhere(bc_comm_create(base, &comm) == BC_OK));
    const std::string text = describe(comm);
    INFO(text << "\nexpected: " << auto_line(share));
    REQUIRE(everywhere(text.find(auto_line(share)) != std::string::npos));
    REQUIRE(everywhere(exact_sum(comm, base)));
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
  MPI_Comm_free(&evens);

  // Every rank of a node moved to one CPU, the node's lowest: where a node has
  // two ranks or more they now take turns. The world's layout was detected
  // above; the changed masks must make it look again.
  {
    AffinityRestore restore;
    const NodeShare before = node_share(MPI_COMM_WORLD);
    int lowest = 0;
    while (lowest < CPU_SETSIZE && !CPU_ISSET(lowest, &before.all)) ++lowest;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(lowest, &one);
    REQUIRE(everywhere(sched_setaffinity(0, sizeof one, &one) == 0));
    const NodeShare pinned = node_share(MPI_COMM_WORLD);
    REQUIRE(pinned.cpus == 1);
    bc_comm_t comm = nullptr;
    REQUIRE(everywhere(bc_comm_create(MPI_COMM_WORLD, &comm) == BC_OK));
    const std::string text = describe(comm);
    INFO(text << "\nexpected: " << auto_line(pinned));
    REQUIRE(everywhere(text.find(auto_line(pinned)) != std::string::npos));
    // Every rank takes part in the agreement (a node of one rank keeps 64).
    REQUIRE(everywhere(pinned.ranks == 1 || text.find("waiting: 1 idle poll(s) per yield") != std::string::npos));
    REQUIRE(everywhere(exact_sum(comm, MPI_COMM_WORLD)));
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }

  // A value set explicitly is used as it is.
  bc_comm_t comm = nullptr;
  REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, "BC_SPIN_COUNT=7", &comm) == BC_OK));
  const std::string text = describe(comm);
  INFO(text);
  REQUIRE(everywhere(text.find("waiting: 7 idle poll(s) per yield (BC_SPIN_COUNT=7)") != std::string::npos));
  REQUIRE(everywhere(exact_sum(comm, MPI_COMM_WORLD)));
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
}
