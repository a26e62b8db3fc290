// Recursive halving (reduce-scatter) and recursive doubling (all-gather):
// log2(q) steps, each exchanging half of what is left with the partner i^d.
// Same bytes as the ring, fewer steps.
//
// Any q, with the fold (as in Rabenseifner's algorithm): q' = the largest power
// of two <= q, r = q - q'. The first 2r owners pair up: odd 2u+1 folds into
// even 2u, so q' "units" remain, unit u played by owner core(u) (2u for u < r,
// else u + r) and covering blocks [first(u), first(u+1)) (two blocks for u < r,
// one after), which keeps every unit range one contiguous range of blocks.
//
//   reduce-scatter: odd 2u+1 sends everything to 2u (reduce); halving among
//                   the units, d = q'/2 .. 1: keep the half of [lo, hi) units
//                   that holds mine, send the other half to unit v^d, reduce
//                   what comes back; 2u hands block 2u+1 back to 2u+1.
//   all-gather:     2u+1 sends block 2u+1 to 2u; doubling d = 1 .. q'/2: send
//                   my d aligned units to v^d, receive its d; 2u sends
//                   everything to 2u+1.
// For a power of two r = 0: no fold, exactly the classic halving/doubling.
#include "plan/steps.h"

namespace bc {
namespace {

struct Fold {
  int q, qp = 1, r = 0, rounds = 0;  // rounds = log2(qp)
  explicit Fold(int owners) : q(owners) {
    while (qp * 2 <= q) qp *= 2, ++rounds;
    r = q - qp;
  }
  int core(int u) const { return u < r ? 2 * u : u + r; }      // the owner playing unit u
  int first(int u) const { return u < r ? 2 * u : u + r; }     // its first block
  bool folded(int i) const { return i < 2 * r && i % 2 == 1; } // an odd owner of the first 2r
  int unit(int i) const { return i < 2 * r ? i / 2 : i - r; }
  // Blocks of units [lo, hi).
  Range blocks(const Range &range, int lo, int hi) const {
    return sub_blocks(range, q, first(lo), hi < qp ? first(hi) : q);
  }
};

// Any group: a power of two runs the classic halving, the others fold first.
bool rhd_serves(int q) { return q >= 1; }

// Auto takes rhd only where no fold is needed: folding a group of 3 costs more
// steps and bytes than its ring.
bool rhd_auto_serves(int q) { return is_power_of_two(q); }

// A power of two: log2 q steps each way, the ring's bytes. Other q: the fold's
// pairs in and out add 2 steps each way and about B + B/q bytes (a core with a
// partner hands its block back after the halving, and all of B at the end).
// The fold's units hold one block or two, so the halving is uneven and the
// busiest rank sends up to B/4 more than this (q = 10..12; tests/unit/test_algo.cc).
StageShape rhd_shape(int q) {
  if (is_power_of_two(q)) return {2 * floor_log2(q), 2 * share_sent(q), false};
  const int qp = 1 << static_cast<int>(floor_log2(q));
  return {2 * floor_log2(q) + 4, 2.0 * (qp - 1) / qp + 1 + 1.0 / q, false};
}

Status rhd_reduce_scatter(const GroupCtx &ctx, std::vector<Step> *out) {
  if (!rhd_serves(owners_of(ctx))) return refuse("rhd", ctx);
  const Fold f(owners_of(ctx));
  const int i = ctx.me;
  const auto &m = *ctx.members;
  uint32_t sub = 1;
  const uint32_t last = 2 + f.rounds;
  if (f.folded(i)) {
    Step give = make_step(ctx, sub, Combine::Reduce);
    add_send(&give, m[i - 1], ctx.range);
    out->push_back(std::move(give));
    Step back = make_step(ctx, last, Combine::Copy);
    add_recv(&back, m[i - 1], sub_block(ctx.range, f.q, i));
    out->push_back(std::move(back));
    return BC_OK;
  }
  if (f.r > 0 && i < 2 * f.r) {
    Step take = make_step(ctx, sub, Combine::Reduce);
    add_recv(&take, m[i + 1], ctx.range);
    out->push_back(std::move(take));
  }
  ++sub;
  const int v = f.unit(i);
  int lo = 0, hi = f.qp;
  for (int d = f.qp / 2; d >= 1; d /= 2, ++sub) {
    const int mid = lo + (hi - lo) / 2;
    const int partner = m[f.core(v ^ d)];
    Step st = make_step(ctx, sub, Combine::Reduce);
    if ((v & d) == 0) {
      add_send(&st, partner, f.blocks(ctx.range, mid, hi));
      add_recv(&st, partner, f.blocks(ctx.range, lo, mid));
      hi = mid;
    } else {
      add_send(&st, partner, f.blocks(ctx.range, lo, mid));
      add_recv(&st, partner, f.blocks(ctx.range, mid, hi));
      lo = mid;
    }
    out->push_back(std::move(st));
  }
  if (f.r > 0 && i < 2 * f.r) {
    Step back = make_step(ctx, last, Combine::Copy);
    add_send(&back, m[i + 1], sub_block(ctx.range, f.q, i + 1));
    out->push_back(std::move(back));
  }
  return BC_OK;
}

Status rhd_all_gather(const GroupCtx &ctx, std::vector<Step> *out) {
  if (!rhd_serves(owners_of(ctx))) return refuse("rhd", ctx);
  const Fold f(owners_of(ctx));
  const int i = ctx.me;
  const auto &m = *ctx.members;
  uint32_t sub = 1;
  const uint32_t last = 2 + f.rounds;
  if (f.folded(i)) {
    Step give = make_step(ctx, sub, Combine::Copy);
    add_send(&give, m[i - 1], sub_block(ctx.range, f.q, i));
    out->push_back(std::move(give));
    Step back = make_step(ctx, last, Combine::Copy);
    add_recv(&back, m[i - 1], ctx.range);
    out->push_back(std::move(back));
    return BC_OK;
  }
  if (f.r > 0 && i < 2 * f.r) {
    Step take = make_step(ctx, sub, Combine::Copy);
    add_recv(&take, m[i + 1], sub_block(ctx.range, f.q, i + 1));
    out->push_back(std::move(take));
  }
  ++sub;
  const int v = f.unit(i);
  for (int d = 1; d < f.qp; d *= 2, ++sub) {
    const int mine = (v / d) * d, theirs = ((v ^ d) / d) * d;
    Step st = make_step(ctx, sub, Combine::Copy);
    add_send(&st, m[f.core(v ^ d)], f.blocks(ctx.range, mine, mine + d));
    add_recv(&st, m[f.core(v ^ d)], f.blocks(ctx.range, theirs, theirs + d));
    out->push_back(std::move(st));
  }
  if (f.r > 0 && i < 2 * f.r) {
    Step back = make_step(ctx, last, Combine::Copy);
    add_send(&back, m[i + 1], ctx.range);
    out->push_back(std::move(back));
  }
  return BC_OK;
}

}  // namespace

const AlgoImpl kAlgoRhd = [] {
  AlgoImpl a;
  a.id = Algo::Rhd;
  a.name = "rhd";
  a.description = "recursive halving / doubling, log2(q) steps; other q fold pairs into a power of two";
  a.serves = rhd_serves;
  a.shape = rhd_shape;
  a.reduce_scatter = rhd_reduce_scatter;
  a.all_gather = rhd_all_gather;
  // Auto's first choice inside the node (level 1, and the flat shape's level
  // 0): fewest steps over fast memory. Not above: see the ring's entry.
  a.auto_max_level = 1;
  a.auto_rank = 1;
  a.auto_serves = rhd_auto_serves;
  // At q = 2 rhd is the ring; calibration gives it the ring's fit there.
  a.calibrated = [](int q, bool) { return q > 2; };
  return a;
}();

}  // namespace bc
