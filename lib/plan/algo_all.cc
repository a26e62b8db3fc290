// Exchange to all: the top stage's whole all-reduce among q owners in one
// step. Each owner sends its whole range to every other and combines the q
// copies in owner order (Step::self_order), so every owner gets the same bits.
// Any q > 1; one round trip and one wait for the slowest owner instead of
// log2 q of them, at q-1 times the bytes: for latency-bound sizes (BC_PLAN
// top=all, or the cost model's choice), never a per-stage algorithm.
#include "plan/steps.h"

namespace bc {
namespace {

bool all_serves(int q) { return q > 1; }

// One step, sending the whole range B to each of the q-1 others.
StageShape all_shape(int q) { return {1.0, static_cast<double>(q - 1), false}; }

Status all_all_reduce(const GroupCtx &ctx, std::vector<Step> *out) {
  const int q = owners_of(ctx), me = ctx.me;
  if (!all_serves(q)) return refuse("all", ctx);
  Step st = make_step(ctx, 1, Combine::Reduce);
  for (int j = 0; j < q; ++j) {
    if (j == me) continue;
    add_send(&st, (*ctx.members)[j], ctx.range);
    add_recv(&st, (*ctx.members)[j], ctx.range);
  }
  st.self_order = ctx.range.count > 0 ? me : 0;
  out->push_back(std::move(st));
  return BC_OK;
}

}  // namespace

const AlgoImpl kAlgoAll = [] {
  AlgoImpl a;
  a.id = Algo::All;
  a.name = "all";
  a.description = "whole range to every other owner, 1 step, q-1 messages";
  a.top = Top::All;
  a.serves = all_serves;
  a.shape = all_shape;
  a.all_reduce = all_all_reduce;
  // Calibration does not time it (one more trial per level would lengthen
  // every communicator's creation): its one step sends the whole range to each
  // other owner, as an rd step sends it to one, so it borrows rd's per-step and
  // per-byte costs, or the ring's where rd cannot run (q not a power of two).
  // A model file may give it its own line.
  a.priced_as[0] = Algo::Rd;
  a.priced_as[1] = Algo::Ring;
  return a;
}();

}  // namespace bc
