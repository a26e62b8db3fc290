// One rank's Program for a collective: the stages of the Hierarchy lowered to Steps.
//
//   allreduce:      RS stage 1..k, [avg], AG stage k..1
//   reduce_scatter: RS stage 1..k, [avg], redistribute (owned range -> rank order)
//   allgather:      redistribute (rank order -> owned range), AG stage k..1
//
// Tags: stage s, phase (0 = RS, 1 = AG) use ((2s + phase) << 12) + substep,
// substep 0 being the fold of the extras and 1.. the algorithm's steps.
#include <sstream>

#include "plan/steps.h"

namespace bc {

namespace {

constexpr uint32_t kRedistributeTag = 0xFF000;

uint32_t tag_base(int stage, int phase) { return static_cast<uint32_t>((2 * stage + phase) << 12); }

// Candidates in order of preference; the first whose preconditions hold runs.
std::vector<Algo> candidates(Algo forced, int level) {
  if (forced != Algo::Auto) return {forced};
  return auto_candidates(level);
}

struct Builder {
  const Hierarchy &h;
  int rank;
  int64_t count;
  Algo algo;
  Program *prog;
  const std::vector<Algo> *stage_algos = nullptr;  // per stage, overriding `algo` where not Auto
  int last_stage = -1;  // the last stage this rank takes part in
  bool extra_at_last = false;
  Top top = Top::Split;   // asked for the top stage whole (an all-reduce)
  bool top_full = false;  // ... and it applies: the top owners hold the whole range

  // The top stage's whole all-reduce by the entry `top` selects (rd or all).
  Status run_whole(int s, const std::vector<int> &owners, int me, const Range &range) {
    const AlgoImpl *impl = algo_for_top(top);
    GroupCtx ctx{&owners, me, range, tag_base(s, 0), s};
    BC_CHECK(impl->all_reduce(ctx, &prog->steps));
    prog->stage_algos[s] = impl->id;
    return BC_OK;
  }

  // My group at stage s: the owners' ranks, my index, the range.
  bool group(int s, std::vector<int> *owners, std::vector<int> *members, int *me, Range *range) const {
    const StageGroups &sg = h.stages[s];
    const int g = sg.group_of[rank];
    if (g < 0) return false;
    *members = sg.groups[g];
    owners->assign(members->begin(), members->begin() + sg.owners);
    *me = sg.index_of[rank];
    *range = h.range_before(s, rank, count);
    return true;
  }

  Status run_algo(int s, int phase, const std::vector<int> &owners, int me, const Range &range) {
    GroupCtx ctx{&owners, me, range, tag_base(s, phase), s};
    Algo forced = algo;
    if (stage_algos && s < static_cast<int>(stage_algos->size()) && (*stage_algos)[s] != Algo::Auto)
      forced = (*stage_algos)[s];
    for (Algo a : candidates(forced, h.stages[s].level)) {
      const AlgoImpl *impl = algo_find(a);
      if (!impl || !impl->reduce_scatter)  // Rd and All run the top stage whole, never one stage
        return BC_FAIL(BC_ERR_NOT_SUPPORTED, "%s is not a per-stage algorithm", algo_name(a));
      const int q = static_cast<int>(owners.size());
      if (forced == Algo::Auto && impl->auto_serves && !impl->auto_serves(q)) continue;
      std::vector<Step> steps;
      Status st = phase == 0 ? impl->reduce_scatter(ctx, &steps) : impl->all_gather(ctx, &steps);
      if (st == BC_ERR_NOT_SUPPORTED && forced == Algo::Auto) { clear_error(); continue; }
      BC_CHECK(st);
      prog->stage_algos[s] = a;
      for (auto &x : steps) prog->steps.push_back(std::move(x));
      return BC_OK;
    }
    return BC_FAIL(BC_ERR_INTERNAL, "no algorithm can serve stage %d", s + 1);
  }

  Status reduce_scatter_phase() {
    for (int s = 0; s < static_cast<int>(h.stages.size()); ++s) {
      std::vector<int> owners, members;
      int me = -1;
      Range range;
      if (!group(s, &owners, &members, &me, &range)) break;
      last_stage = s;
      const int q = h.stages[s].owners, m = static_cast<int>(members.size());
      if (me >= q) {  // an extra: hand everything to an owner, then wait for the result
        Step st;
        st.tag = tag_base(s, 0);
        st.stage = s;
        add_send(&st, members[me % q], range);
        prog->steps.push_back(std::move(st));
        extra_at_last = true;
        return BC_OK;
      }
      if (m > q) {
        Step st;
        st.tag = tag_base(s, 0);
        st.stage = s;
        st.combine = Combine::Reduce;
        for (int e = me + q; e < m; e += q) add_recv(&st, members[e], range);
        prog->steps.push_back(std::move(st));
      }
      const bool top = s + 1 == static_cast<int>(h.stages.size());
      if (top && top_whole(this->top, q)) {
        top_full = true;
        BC_CHECK(run_whole(s, owners, me, range));
        continue;
      }
      BC_CHECK(run_algo(s, 0, owners, me, range));
    }
    return BC_OK;
  }

  Status all_gather_phase() {
    for (int s = last_stage; s >= 0; --s) {
      std::vector<int> owners, members;
      int me = -1;
      Range range;
      group(s, &owners, &members, &me, &range);
      const int q = h.stages[s].owners, m = static_cast<int>(members.size());
      if (me >= q) {
        Step st;
        st.tag = tag_base(s, 1);
        st.stage = s;
        add_recv(&st, members[me % q], range);
        prog->steps.push_back(std::move(st));
        continue;
      }
      if (!(top_full && s + 1 == static_cast<int>(h.stages.size()))) BC_CHECK(run_algo(s, 1, owners, me, range));
      if (m > q) {
        Step st;
        st.tag = tag_base(s, 1);
        st.stage = s;
        for (int e = me + q; e < m; e += q) add_send(&st, members[e], range);
        prog->steps.push_back(std::move(st));
      }
    }
    return BC_OK;
  }

  void finish_avg() {
    const int top = static_cast<int>(h.stages.size()) - 1;
    // With the top stage whole (rd or all) every top owner holds (and divides) its
    // whole top range; otherwise each owner divides the block it owns.
    Range mine = top_full && !extra_at_last ? h.range_before(top, rank, count) : h.final_range(rank, count);
    if (mine.count == 0) return;
    Step st;
    st.finish_avg = true;
    st.avg_range = mine;
    prog->steps.push_back(std::move(st));
  }

  // One step that moves every element from the rank that has it to the rank that
  // needs it. have/need: per rank.
  void redistribute(const std::vector<Range> &have, const std::vector<Range> &need) {
    Step st;
    st.tag = kRedistributeTag;
    for (int r = 0; r < h.nranks; ++r) {
      if (r == rank) continue;
      add_send(&st, r, intersect(have[rank], need[r]));
      add_recv(&st, r, intersect(have[r], need[rank]));
    }
    if (!st.sends.empty() || !st.recvs.empty()) prog->steps.push_back(std::move(st));
  }
};

}  // namespace

Status build_program(const Hierarchy &h, int rank, CollKind kind, int64_t count, Algo algo,
                     bool average, Program *out, Top top, const std::vector<Algo> *stage_algos) {
  if (rank < 0 || rank >= h.nranks || count < 0)
    return BC_FAIL(BC_ERR_INVALID_ARG, "build_program: rank %d of %d, count %lld", rank, h.nranks,
                   static_cast<long long>(count));
  Program prog;
  prog.kind = kind;
  prog.count = count;
  prog.stage_algos.assign(h.stages.size(), Algo::Auto);
  Builder b{h, rank, count, algo, &prog};
  b.stage_algos = stage_algos;
  b.top = kind == CollKind::Allreduce ? top : Top::Split;
  // Every rank's ranges, for the redistribution steps of reduce_scatter and
  // allgather only: O(p) per rank, which an all-reduce (all p ranks building
  // theirs: O(p^2)) does not pay.
  const int p = h.nranks;
  std::vector<Range> owned, rank_order;
  if (kind != CollKind::Allreduce) {
    owned.resize(p);
    rank_order.resize(p);
    for (int r = 0; r < p; ++r) {
      owned[r] = h.final_range(r, count);
      rank_order[r] = Range{r * (count / p), count / p};
    }
  }
  if (kind == CollKind::Allgather) b.redistribute(rank_order, owned);
  if (kind != CollKind::Allgather) BC_CHECK(b.reduce_scatter_phase());
  else {
    // The all-gather phase walks back from the last stage this rank reached.
    for (int s = 0; s < static_cast<int>(h.stages.size()); ++s) {
      if (h.stages[s].group_of[rank] < 0) break;
      b.last_stage = s;
      if (h.stages[s].index_of[rank] >= h.stages[s].owners) break;
    }
  }
  if (average && kind != CollKind::Allgather && h.nranks > 1) b.finish_avg();
  if (kind == CollKind::ReduceScatter) b.redistribute(owned, rank_order);
  if (kind != CollKind::ReduceScatter) BC_CHECK(b.all_gather_phase());

  for (const Step &st : prog.steps) {
    prog.sends += st.sends.size();
    if (st.combine != Combine::Reduce) continue;
    int64_t need = 0;
    for (const Xfer &x : st.recvs) need += x.range.count;
    prog.scratch_elems = std::max(prog.scratch_elems, need);
  }
  *out = std::move(prog);
  return BC_OK;
}

std::string describe_program(const Program &p, size_t elem_size) {
  std::ostringstream os;
  os << "program: " << p.steps.size() << " step(s), scratch " << p.scratch_elems * static_cast<int64_t>(elem_size)
     << " bytes; algorithms:";
  for (size_t s = 0; s < p.stage_algos.size(); ++s) os << " stage" << s + 1 << "=" << algo_name(p.stage_algos[s]);
  os << "\n";
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step &st = p.steps[i];
    os << "  step " << i << " tag 0x" << std::hex << st.tag << std::dec;
    if (st.stage >= 0) os << " stage " << st.stage + 1;
    os << (st.combine == Combine::Reduce ? " reduce" : " copy");
    for (const Xfer &x : st.sends) os << " send[" << x.peer << "]" << x.range.offset << "+" << x.range.count;
    for (const Xfer &x : st.recvs) os << " recv[" << x.peer << "]" << x.range.offset << "+" << x.range.count;
    if (st.finish_avg) os << " avg " << st.avg_range.offset << "+" << st.avg_range.count;
    os << "\n";
  }
  return os.str();
}

}  // namespace bc
