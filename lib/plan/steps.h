// Small helpers the algorithm files share for writing Steps and pricing them.
#pragma once

#include "plan/algo.h"

namespace bc {

// Zero-length transfers are left out on both sides: both compute the same counts.
inline void add_send(Step *s, int peer, const Range &r) {
  if (r.count > 0) s->sends.push_back(Xfer{peer, r});
}
inline void add_recv(Step *s, int peer, const Range &r) {
  if (r.count > 0) s->recvs.push_back(Xfer{peer, r});
}

inline Step make_step(const GroupCtx &ctx, uint32_t substep, Combine combine) {
  Step s;
  s.tag = ctx.tag_base + substep;
  s.stage = ctx.stage;
  s.combine = combine;
  return s;
}

inline int owners_of(const GroupCtx &ctx) { return static_cast<int>(ctx.members->size()); }
inline int mod(int a, int q) { return ((a % q) + q) % q; }

// log2 of the largest power of two <= q (0 for q <= 1), as the cost model's
// step counts use it.
inline double floor_log2(int q) {
  double s = 0;
  for (int v = q; v > 1; v >>= 1) s += 1;
  return s;
}
// The fraction of a range each owner sends in a bandwidth-optimal RS (or AG).
inline double share_sent(int q) { return q > 0 ? static_cast<double>(q - 1) / q : 0; }

// What a builder returns for a group its precondition does not serve.
inline Status refuse(const char *algo, const GroupCtx &ctx) {
  return BC_FAIL(BC_ERR_NOT_SUPPORTED, "%s cannot serve a group of %d owners", algo, owners_of(ctx));
}

}  // namespace bc
