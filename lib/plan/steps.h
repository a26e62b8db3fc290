// Small helpers the algorithm files share for writing Steps.
#pragma once

#include "plan/plan.h"

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

}  // namespace bc
