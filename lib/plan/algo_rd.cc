// Recursive doubling: the top stage's whole all-reduce among q owners, a power
// of two, in log2(q) steps; in step d each owner exchanges the whole range with
// owner i^d and adds what it receives. Both partners add the same two values,
// so every owner ends with the same bits. The fewest steps of any whole-range
// plan with one message per step: for latency-bound sizes (BC_PLAN top=rd, or
// the cost model's choice), never a per-stage algorithm.
#include "plan/steps.h"

namespace bc {
namespace {

// A power of two. One owner is served with no step at all; top_whole() asks
// for more than one before the plan runs the top stage whole.
bool rd_serves(int q) { return is_power_of_two(q); }

// log2 q steps, each sending the whole range B.
StageShape rd_shape(int q) { return {floor_log2(q), floor_log2(q), false}; }

Status rd_all_reduce(const GroupCtx &ctx, std::vector<Step> *out) {
  const int q = owners_of(ctx), me = ctx.me;
  if (!rd_serves(q)) return refuse("rd", ctx);
  const auto &owners = *ctx.members;
  uint32_t sub = 1;
  for (int d = 1; d < q; d <<= 1, ++sub) {
    Step st = make_step(ctx, sub, Combine::Reduce);
    add_send(&st, owners[me ^ d], ctx.range);
    add_recv(&st, owners[me ^ d], ctx.range);
    out->push_back(std::move(st));
  }
  return BC_OK;
}

}  // namespace

const AlgoImpl kAlgoRd = [] {
  AlgoImpl a;
  a.id = Algo::Rd;
  a.name = "rd";
  a.description = "recursive doubling of the whole range, log2(q) steps; q a power of two";
  a.top = Top::Rd;
  a.serves = rd_serves;
  a.shape = rd_shape;
  a.all_reduce = rd_all_reduce;
  // Timed where it can run: the split's top stage, or the flat one.
  a.calibrated = [](int q, bool top) { return top && q > 1 && rd_serves(q); };
  return a;
}();

}  // namespace bc
