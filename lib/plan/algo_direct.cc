// Direct exchange: one step in which every owner sends each other owner its
// block and reduces the q-1 copies of its own block in owner order. Fewest
// steps (latency) at the cost of q-1 messages in flight per rank: for small
// groups and small messages.
#include "plan/steps.h"

namespace bc {
namespace {

Status direct_reduce_scatter(const GroupCtx &ctx, std::vector<Step> *out) {
  const int q = owners_of(ctx), i = ctx.me;
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

const AlgoImpl kAlgoDirect = {Algo::Direct, "direct", "direct exchange, 1 step, q-1 messages",
                              direct_reduce_scatter, direct_all_gather};

}  // namespace bc
