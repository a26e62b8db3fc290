// Ring reduce-scatter and all-gather over q owners: q-1 steps each, every step
// moving one block to the next owner. Bandwidth-optimal for any q; its latency
// grows with q, so it suits large messages and groups that are not a power of two.
//
//   reduce-scatter step s: send block (i-s-1) to i+1, receive block (i-s-2) from
//                          i-1 and reduce it; after q-1 steps owner i holds block i.
//   all-gather step s:     send block (i-s), receive block (i-s-1) and keep it.
#include "plan/steps.h"

namespace bc {
namespace {

Status ring_reduce_scatter(const GroupCtx &ctx, std::vector<Step> *out) {
  const int q = owners_of(ctx), i = ctx.me;
  const int next = (*ctx.members)[mod(i + 1, q)], prev = (*ctx.members)[mod(i - 1, q)];
  for (int s = 0; s < q - 1; ++s) {
    Step st = make_step(ctx, 1 + s, Combine::Reduce);
    add_send(&st, next, sub_block(ctx.range, q, mod(i - s - 1, q)));
    add_recv(&st, prev, sub_block(ctx.range, q, mod(i - s - 2, q)));
    out->push_back(std::move(st));
  }
  return BC_OK;
}

Status ring_all_gather(const GroupCtx &ctx, std::vector<Step> *out) {
  const int q = owners_of(ctx), i = ctx.me;
  const int next = (*ctx.members)[mod(i + 1, q)], prev = (*ctx.members)[mod(i - 1, q)];
  for (int s = 0; s < q - 1; ++s) {
    Step st = make_step(ctx, 1 + s, Combine::Copy);
    add_send(&st, next, sub_block(ctx.range, q, mod(i - s, q)));
    add_recv(&st, prev, sub_block(ctx.range, q, mod(i - s - 1, q)));
    out->push_back(std::move(st));
  }
  return BC_OK;
}

}  // namespace

const AlgoImpl kAlgoRing = {Algo::Ring, "ring", "ring reduce-scatter / all-gather, q-1 steps",
                            ring_reduce_scatter, ring_all_gather};

}  // namespace bc
