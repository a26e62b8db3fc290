// Direct exchange: one step in which every owner sends each other owner its
// block and reduces the q-1 copies of its own block in owner order. Fewest
// steps (latency) at the cost of q-1 messages in flight per rank: for small
// groups and small messages.
#include "plan/steps.h"

namespace bc {
namespace {

bool direct_serves(int q) { return q >= 1; }

// One step each way, each owner sending q-1 blocks of B/q.
StageShape direct_shape(int q) { return {2.0, 2 * share_sent(q), false}; }

Status direct_reduce_scatter(const GroupCtx &ctx, std::vector<Step> *out) {
  const int q = owners_of(ctx), i = ctx.me;
  if (!direct_serves(q)) return refuse("direct", ctx);
  if (q < 2) return BC_OK;
  Step st = make_step(ctx, 1, Combine::Reduce);
  for (int j = 0; j < q; ++j) {
    if (j == i) continue;
    add_send(&st, (*ctx.members)[j], sub_block(ctx.range, q, j));
    add_recv(&st, (*ctx.members)[j], sub_block(ctx.range, q, i));
  }
  out->push_back(std::move(st));
  return BC_OK;
}

Status direct_all_gather(const GroupCtx &ctx, std::vector<Step> *out) {
  const int q = owners_of(ctx), i = ctx.me;
  if (!direct_serves(q)) return refuse("direct", ctx);
  if (q < 2) return BC_OK;
  Step st = make_step(ctx, 1, Combine::Copy);
  for (int j = 0; j < q; ++j) {
    if (j == i) continue;
    add_send(&st, (*ctx.members)[j], sub_block(ctx.range, q, i));
    add_recv(&st, (*ctx.members)[j], sub_block(ctx.range, q, j));
  }
  out->push_back(std::move(st));
  return BC_OK;
}

}  // namespace

// Neither auto nor calibration takes it: BC_ALGO, BC_PLAN or a model file's
// own fit line chooses it.
const AlgoImpl kAlgoDirect = [] {
  AlgoImpl a;
  a.id = Algo::Direct;
  a.name = "direct";
  a.description = "direct exchange, 1 step, q-1 messages";
  a.serves = direct_serves;
  a.shape = direct_shape;
  a.reduce_scatter = direct_reduce_scatter;
  a.all_gather = direct_all_gather;
  return a;
}();

}  // namespace bc
