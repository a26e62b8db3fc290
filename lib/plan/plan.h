// Plans: what every rank sends, receives and reduces, as pure data.
//
// A Hierarchy (built once per communicator from the Topology) lists the stages:
// stage i groups, for every level-i unit and every slot, the ranks that hold
// that slot in each child unit. The first `owners` members of a group split the
// group's range between them; the rest ("extras", only in uneven layouts) fold
// their data into an owner first and get the result back last.
//
// A Program (built per collective and element count) is one rank's list of
// Steps. A Step posts all its receives and sends at once, waits for them, then
// reduces what it received in a fixed order, so the reduction order of every
// element is fixed by the plan and every rank gets identical bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/blocks.h"
#include "core/status.h"
#include "topo/topo.h"

namespace bc {

// The algorithms' ids. Each one but Auto has an entry in the registry
// (plan/algo.h), which says what it is: Ring, Rhd and Direct run any stage; Rd
// and All run the top stage's whole all-reduce (see Top), and BC_ALGO cannot
// force them per stage. Auto is no algorithm: the plan picks one per group.
// The values are stable: the plan cache's key packs them (plan_choice_algo_key).
enum class Algo : uint8_t { Auto = 0, Ring, Rhd, Direct, Rd, All };
const char *algo_name(Algo a);
// BC_ALGO's values: auto and the stage algorithms.
Status algo_parse(const std::string &text, Algo *out);

enum class CollKind : uint8_t { Allreduce = 0, ReduceScatter, Allgather };

inline bool is_power_of_two(int q) { return q > 0 && (q & (q - 1)) == 0; }

// How the top stage runs: reduce-scatter then all-gather (Split, BlueConnect's
// stages), or as one whole-range all-reduce among its owners: Rd (a power of
// two) or All (any q; one step, so latency-bound sizes pay one round trip and
// one wait for the slowest owner instead of log2 q of them).
enum class Top : uint8_t { Split = 0, Rd, All };
const char *top_name(Top t);
// Whether `t` runs a top stage of q owners whole: its registry entry serves q
// and there is more than one owner (Split never does).
bool top_whole(Top t, int q);

struct StageGroups {
  int level = 0;   // 1-based topology level
  int owners = 0;  // q: members that own a part of the range after this stage
  std::vector<std::vector<int>> groups;  // member ranks in child order
  std::vector<int> group_of;     // per rank: its group, -1 when inactive here
  std::vector<int> index_of;     // per rank: its index in that group
  // Members of the largest group (owners plus extras).
  int max_members() const {
    size_t m = 0;
    for (const auto &g : groups) m = std::max(m, g.size());
    return static_cast<int>(m);
  }
};

struct Hierarchy {
  int nranks = 0;
  uint8_t shape = 0;  // Shape, for printing
  std::vector<StageGroups> stages;  // reduce-scatter order: fastest level first
  // slot[s][r]: rank r's digit after stage s (its index among the owners), -1
  // when r is not an owner there.
  std::vector<std::vector<int>> slot;
  // Build from a topology. Stages in which every group has one member are left out.
  // Shape::Split is BlueConnect's decomposition. Shape::Leader keeps one owner
  // per group below the top level: every unit reduces into its first rank, only
  // those leaders exchange, and the result is sent back down. Fewer steps on
  // the slow levels, more bytes: for small messages.
  // Shape::Flat ignores the levels: one stage, every rank an owner, in rank
  // order, at level 0 (a level of its own for the cost model). Flat recursive
  // doubling takes log2(p) steps where the hierarchy takes one per level and
  // more: the latency plan when every step costs about the same.
  enum class Shape : uint8_t { Split = 0, Leader, Flat };
  static Hierarchy build(const Topology &topo, Shape shape = Shape::Split);
  // The range rank r owns after all reduce-scatter stages (count 0 when it owns
  // none: an extra somewhere).
  Range final_range(int rank, int64_t count) const;
  // The range rank r holds going into stage s (before its reduce-scatter).
  Range range_before(int stage, int rank, int64_t count) const;
  std::string describe(int64_t count, size_t elem_size) const;
};

enum class Combine : uint8_t { Copy = 0, Reduce };

struct Xfer {
  int peer = -1;
  Range range;  // elements of the work buffer
};

struct Step {
  uint32_t tag = 0;       // unique within a Program; both sides use the same
  int stage = -1;         // hierarchy stage, for per-stage timing; -1 for others
  Combine combine = Combine::Copy;
  std::vector<Xfer> sends;
  std::vector<Xfer> recvs;  // Reduce: received into scratch, reduced in this order
  // Reduce with every recv over the same range: > 0 places my own contribution
  // at this position of the recvs' order (a step that combines a whole group's
  // copies, in member order, so that every member computes the same bits).
  int self_order = 0;
  bool finish_avg = false;  // after the step: divide `avg_range` by the size
  Range avg_range;
};

struct Program {
  CollKind kind = CollKind::Allreduce;
  int64_t count = 0;          // elements of the work buffer
  std::vector<Step> steps;
  int64_t scratch_elems = 0;  // scratch needed by the largest Reduce step
  size_t sends = 0;           // over all steps: the most that can outlive their steps at once (executor.cc)
  std::vector<Algo> stage_algos;  // the algorithm each stage ended up with
};

// The inputs an algorithm needs for one group of one stage, as seen by one rank.
struct GroupCtx {
  const std::vector<int> *members;  // the owners' ranks (extras excluded)
  int me;                           // my index among the owners
  Range range;                      // the range the group splits
  uint32_t tag_base;                // tags tag_base .. tag_base + 4095 are this stage's
  int stage;
};

// Builds rank `rank`'s program. `algo` Auto picks per group; a forced algorithm
// that cannot serve a group fails with BC_ERR_NOT_SUPPORTED.
// ReduceScatter: count = p * recvcount (equal blocks, rank order).
// Allgather: count = p * sendcount.
// top: for an all-reduce, Rd or All run the top stage whole (every owner ends
// with the whole range) instead of RS + AG: fewer steps, for small messages.
// Rd's partners combine the same two values and All's owners combine all q
// copies in owner order, so every rank still gets the same bits. Ignored (the
// split runs) where top_whole() says the top group cannot run it.
// stage_algos: an algorithm per stage, overriding `algo` where not Auto.
Status build_program(const Hierarchy &h, int rank, CollKind kind, int64_t count, Algo algo,
                     bool average, Program *out, Top top = Top::Split,
                     const std::vector<Algo> *stage_algos = nullptr);

std::string describe_program(const Program &p, size_t elem_size);
const char *shape_name(Hierarchy::Shape shape);

}  // namespace bc
