// Ring reduce-scatter and all-gather over q owners: q-1 steps each, every step
// moving one block to the next owner. Bandwidth-optimal for any q; its latency
// grows with q, so it suits large messages and groups that are not a power of two.
//
//   reduce-scatter step s: send block (i-s-1) to i+1, receive block (i-s-2) from
//                          i-1 and reduce it; after q-1 steps owner i holds block i.
//   all-gather step s:     send block (i-s), receive block (i-s-1) and keep it.
#include <climits>

#include "plan/steps.h"

namespace bc {
namespace {

bool ring_serves(int q) { return q >= 1; }

// RS and AG: q-1 steps each, each step sending one block of B/q.
StageShape ring_shape(int q) { return {2.0 * (q - 1), 2 * share_sent(q), false}; }

Status ring_reduce_scatter(const GroupCtx &ctx, std::vector<Step> *out) {
  const int q = owners_of(ctx), i = ctx.me;
  if (!ring_serves(q)) return refuse("ring", ctx);
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
  if (!ring_serves(q)) return refuse("ring", ctx);
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

const AlgoImpl kAlgoRing = [] {
  AlgoImpl a;
  a.id = Algo::Ring;
  a.name = "ring";
  a.description = "ring reduce-scatter / all-gather, q-1 steps";
  a.serves = ring_serves;
  a.shape = ring_shape;
  a.reduce_scatter = ring_reduce_scatter;
  a.all_gather = ring_all_gather;
  // Auto's choice at every level, and the only one above the node: its steady
  // neighbour-to-neighbour stream kept 250 Mbit/s links 10-17% busier than
  // rhd's halving exchanges on the simulated 4-node cluster
  // (docs/BENCHMARKS.md as of 6d346a9); the cost model, which chooses among auto's
  // candidates, measured the same (lib/plan/cost.cc).
  a.auto_max_level = INT_MAX;
  a.auto_rank = 2;
  a.calibrated = [](int, bool) { return true; };
  return a;
}();

}  // namespace bc
