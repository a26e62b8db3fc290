// Recursive halving (reduce-scatter) and recursive doubling (all-gather) for a
// power-of-two number of owners: log2(q) steps, each exchanging half of what is
// left with the partner i^d. Same bytes as the ring, fewer steps.
//
//   halving, d = q/2 .. 1: keep the half of [lo, hi) blocks that holds block i,
//                          send the other half to i^d, reduce what comes back.
//   doubling, d = 1 .. q/2: send my d aligned blocks to i^d, receive its d.
#include "plan/steps.h"

namespace bc {
namespace {

bool power_of_two(int q) { return q > 0 && (q & (q - 1)) == 0; }

Status rhd_reduce_scatter(const GroupCtx &ctx, std::vector<Step> *out) {
  const int q = owners_of(ctx), i = ctx.me;
  if (!power_of_two(q))
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "rhd needs a power-of-two group, this one has %d owners", q);
  int lo = 0, hi = q;
  uint32_t sub = 1;
  for (int d = q / 2; d >= 1; d /= 2, ++sub) {
    const int mid = lo + (hi - lo) / 2;
    const int partner = (*ctx.members)[i ^ d];
    Step st = make_step(ctx, sub, Combine::Reduce);
    if ((i & d) == 0) {
      add_send(&st, partner, sub_blocks(ctx.range, q, mid, hi));
      add_recv(&st, partner, sub_blocks(ctx.range, q, lo, mid));
      hi = mid;
    } else {
      add_send(&st, partner, sub_blocks(ctx.range, q, lo, mid));
      add_recv(&st, partner, sub_blocks(ctx.range, q, mid, hi));
      lo = mid;
    }
    out->push_back(std::move(st));
  }
  return BC_OK;
}

Status rhd_all_gather(const GroupCtx &ctx, std::vector<Step> *out) {
  const int q = owners_of(ctx), i = ctx.me;
  if (!power_of_two(q))
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "rhd needs a power-of-two group, this one has %d owners", q);
  uint32_t sub = 1;
  for (int d = 1; d < q; d *= 2, ++sub) {
    const int mine = (i / d) * d, theirs = ((i ^ d) / d) * d;
    Step st = make_step(ctx, sub, Combine::Copy);
    add_send(&st, (*ctx.members)[i ^ d], sub_blocks(ctx.range, q, mine, mine + d));
    add_recv(&st, (*ctx.members)[i ^ d], sub_blocks(ctx.range, q, theirs, theirs + d));
    out->push_back(std::move(st));
  }
  return BC_OK;
}

}  // namespace

const AlgoImpl kAlgoRhd = {Algo::Rhd, "rhd",
                           "recursive halving / doubling, log2(q) steps, power-of-two groups",
                           rhd_reduce_scatter, rhd_all_gather};

}  // namespace bc
