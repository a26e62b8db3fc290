// The cost model's calibration at communicator creation (BC_MODEL), and its
// cache file (BC_MODEL_FILE).
//
// For every stage of the split hierarchy and every algorithm that can serve it,
// all of that stage's groups run the stage's all-reduce (RS + AG) at once, over
// the transports the collectives use, at a small and a large size. Every rank
// times every run after a barrier; one allreduce takes the slowest rank's time
// per run; the fastest of the repeats gives two points, and fit_stage turns them
// into that (level, algorithm)'s alpha and beta (lib/plan/cost.h). Because all
// ranks fit the same agreed numbers, all of them choose the same plans.
//
// Then the small-buffer end: every one-piece plan the model can choose (split
// or leader shape, top stage rd, all or split, with the algorithms the stage fits
// pick) is timed whole at 4 KiB and 64 KiB, and those two points give the plan
// fits that predict buffers up to 64 KiB. The stage fits alone misjudged that
// end: timed with every group of a stage busy at once, they priced the leader
// shape, where one rank per node crosses the network, at 2-6 times its measured
// time (simulated cluster, 2 nodes x 4 ranks), so the model never chose it,
// and at 4-32 KiB the split ran 0.60-0.73x Open MPI's han.
//
// Where the model comes from (a file, this process, the per-user cache, or
// this calibration): lib/api/model_setup.cc.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "api/comm.h"
#include "core/log.h"
#include "sched/operation.h"

namespace bc {
namespace {

// Every measurement is repeated kRepeats times and the fastest counts: a
// stall (a retransmission, a rank descheduled on a loaded host) only ever
// makes a run slower, and with three repeats and their median the calibration
// cost 2.6 s on layout a (issue 40: a cold start under a second).
constexpr int kRepeats = 2;
double fastest(std::vector<double>::const_iterator first) { return *std::min_element(first, first + kRepeats); }
constexpr int64_t kSmallPerOwner = 16;   // floats per owner: the latency point
constexpr int64_t kLarge = 64 * 1024;    // floats (256 KiB): the bandwidth point inside a node
// The bandwidth point of a stage whose groups cross nodes: floats (1 MiB), the
// largest chunk the model cuts (CostModel::max_chunk). At 256 KiB the fits
// priced the network at up to 1.6x its sustained rate: socket buffers and the
// link's burst carry much of a short exchange (layout d, 4 nodes x 2 ranks at
// 1 Gbit/s: predicted 0.61-0.67x the measured time at 4-16 MiB, now 0.88-0.89x;
// 8 nodes x 2 ranks 0.71x at 4 MiB, now 0.90-0.94x; docs/BENCHMARKS.md as of 6d346a9).
constexpr int64_t kLargeAcross = 256 * 1024;
// Operations timed back to back per measurement, after one barrier: the small
// ones so that the barrier's exit skew is spread over many steps instead of
// counted as latency; the large ones so that a link's burst allowance (a token
// bucket, a switch buffer) is spent and the fit sees the sustained rate. One
// 1 MiB operation moves twice what two 256 KiB ones do.
constexpr int kSmallBackToBack = 8;
constexpr int kLargeBackToBack = 2;
constexpr int kLargeAcrossBackToBack = 1;
// Whole plans, in one piece: the two sizes in floats (4 KiB, 64 KiB), timed
// kPlanSmallBackToBack and kPlanLargeBackToBack times back to back. Fewer than
// the stages' 8 and 4: 6 plans x 2 sizes took 530-550 ms of a 1.0 s
// calibration on layout a (two repeats), the largest part; the plan learning
// measures what these fits nominate on the job's own calls.
constexpr int64_t kPlanSmall = 1024;
constexpr int64_t kPlanLarge = 16 * 1024;
constexpr int kPlanSmallBackToBack = 4;
constexpr int kPlanLargeBackToBack = 2;

struct Trial {
  size_t stage;
  Algo algo;
  int64_t count;
  int back_to_back;
};

// One (stage, algorithm) fit: its trials' indices, large < 0 where it borrows
// the ring's beta on the same level.
struct StageEntry {
  size_t stage;
  Algo algo;
  size_t small;
  long large;
};

// Stage s of h on its own: every group of that stage, nothing else.
Hierarchy single_stage(const Hierarchy &h, size_t s) {
  Hierarchy one;
  one.nranks = h.nranks;
  one.shape = h.shape;
  one.stages = {h.stages[s]};
  one.slot = {h.slot[s]};
  return one;
}

// Whether some group of the stage has members on two nodes.
bool stage_crosses_nodes(const bc_comm *c, const StageGroups &sg) {
  for (const std::vector<int> &g : sg.groups)
    for (int r : g)
      if (c->topo.node_of[r] != c->topo.node_of[g.front()]) return true;
  return false;
}

// Stages of the split first, then the flat hierarchy's one stage (level 0).
const StageGroups &trial_stage(const bc_comm *c, size_t s) {
  return s < c->hier.stages.size() ? c->hier.stages[s] : c->hier_flat.stages[0];
}

// Every collective step of the calibration starts here: a barrier that also
// carries whether this rank failed since the last one (agree_status). A rank
// whose measurement failed (a timeout, a transport error) takes part in
// exactly one more and returns its error from it; every other rank returns
// "calibration failed on another rank" from the same one, so all of them reach
// comm_create's agreement together. With a plain barrier the failing rank went
// on to that agreement while the others waited in the next barrier for ever
// (seen after a BC_TIMEOUT inside the calibration, 16 ranks).
Status sync_point(bc_comm *c, Status mine) { return agree_status(c->mpi, mine, "calibration"); }

// Seconds per all-reduce of `prog` (one piece), `back_to_back` of them after one barrier.
Status time_program(bc_comm *c, const std::shared_ptr<const Program> &prog, int back_to_back,
                    std::vector<float> *buf, double *seconds) {
  buf->assign(static_cast<size_t>(prog->count), 1.0f);
  const ExecContext ctx = exec_context(c, BC_FLOAT32, BC_SUM, BC_MEM_HOST);
  BC_CHECK(sync_point(c, BC_OK));
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < back_to_back; ++k) {
    Operation op(ctx, reinterpret_cast<unsigned char *>(buf->data()), prog->count, 1, 1, prog, prog, c->seq);
    c->seq += 1;
    const Status st = op.wait();
    if (st != BC_OK) return sync_point(c, st);
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / back_to_back;
  return BC_OK;
}

Status run_trial(bc_comm *c, const Trial &t, std::vector<float> *buf, double *seconds) {
  const Hierarchy one = t.stage < c->hier.stages.size() ? single_stage(c->hier, t.stage) : c->hier_flat;
  auto prog = std::make_shared<Program>();
  // A whole-top algorithm (rd) is timed through its `top`, a stage algorithm forced on the stage.
  const Top top = algo_find(t.algo)->top;
  const std::vector<Algo> algos{top != Top::Split ? Algo::Auto : t.algo};
  const Status st = build_program(one, c->rank, CollKind::Allreduce, t.count, Algo::Auto, false, prog.get(), top, &algos);
  if (st != BC_OK) return sync_point(c, st);
  return time_program(c, prog, t.back_to_back, buf, seconds);
}

// The plan fits (see the top of this file): every one-piece candidate timed
// whole at two sizes. Needs the stage fits in *m (they pick the algorithms).
Status calibrate_plans(bc_comm *c, CostModel *m) {
  m->plan_fits.clear();
  m->plan_fit_max = 0;
  if (c->hier.stages.size() < 2) return BC_OK;  // one level: the shapes are the same plan
  std::vector<PlanFit> cands;
  for (Hierarchy::Shape shape : {Hierarchy::Shape::Split, Hierarchy::Shape::Leader}) {
    const Hierarchy &h = hierarchy_for(c, shape);
    // Every top the stage can run whole is timed, the one-step exchange too:
    // priced from borrowed stage fits, top=all won 4 KiB on layout a at a
    // predicted 1.7 ms with the split shape, measured 2.0-2.8 ms, while the
    // leader shape's one-step exchange took 1.0 ms.
    for (Top top : {Top::Split, Top::Rd, Top::All}) {
      if (!top_whole(top, h.stages.back().owners) && top != Top::Split) continue;
      PlanFit f;
      f.choice.shape = shape;
      f.choice.top = top;
      f.choice = model_stage_algos(h, *m, f.choice, kPlanSmall * static_cast<int64_t>(sizeof(float)));
      cands.push_back(f);
    }
  }
  std::vector<float> buf;
  std::vector<double> mine(cands.size() * 2 * kRepeats), slowest(mine.size());
  for (int r = 0; r < kRepeats; ++r) {
    for (size_t i = 0; i < cands.size(); ++i) {
      for (int big = 0; big < 2; ++big) {
        std::shared_ptr<const Program> prog;
        const Status st = comm_plan(c, CollKind::Allreduce, false, big ? kPlanLarge : kPlanSmall, cands[i].choice, &prog);
        if (st != BC_OK) return sync_point(c, st);
        BC_CHECK(time_program(c, prog, big ? kPlanLargeBackToBack : kPlanSmallBackToBack, &buf, &mine[(i * 2 + big) * kRepeats + r]));
      }
    }
  }
  BC_CHECK(sync_point(c, BC_OK));  // a failure in the last measurement is announced here
  BC_MPI_CHECK(MPI_Allreduce(mine.data(), slowest.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_MAX, c->mpi));
  const double b0 = kPlanSmall * 4.0, b1 = kPlanLarge * 4.0;
  for (size_t i = 0; i < cands.size(); ++i) {
    const auto pick = [&](int big) { return fastest(slowest.begin() + static_cast<long>((i * 2 + big) * kRepeats)); };
    // The whole plan as one step that moves the buffer once.
    const CostFit fit = fit_stage(StageShape{1, 1, true}, b0, pick(0), b1, pick(1));
    cands[i].alpha = fit.alpha;
    cands[i].beta = fit.beta;
    m->plan_fits.push_back(cands[i]);
  }
  m->plan_fit_max = static_cast<int64_t>(b1);
  return BC_OK;
}

}  // namespace

Status calibrate(bc_comm *c, CostModel *out) {
  const Hierarchy &h = c->hier;
  // Only the split's stages are timed. The flat shape (level 0) is left out of
  // the automatic choice: timed at 256 KiB on rate-limited links its ring
  // looked faster than the link (the token bucket's burst), and it won sizes
  // where it measured slower. A model file with level-0 fits lets it compete.
  //
  // Across nodes, where every byte is slow to time, only what the model may
  // choose there is timed (auto's algorithms for the level, and the whole-top
  // ones on the top stage: rhd across nodes was timed for 350-470 ms of a
  // 2.6 s calibration on layout a and never chosen), and only the ring takes
  // the large point: every other algorithm there fits its alpha from its small
  // point on the ring's beta, the link's price per byte a rank sends (rd's own
  // large point moved log2(q) MiB per rank: 480-530 ms on layout a). What that
  // leaves out (rd's partner switching at large sizes) the plan learning
  // measures on the job's own calls.
  const size_t nstages = h.stages.size();
  std::vector<Trial> trials;
  std::vector<StageEntry> entries;
  for (size_t s = 0; s < nstages; ++s) {
    const StageGroups &sg = trial_stage(c, s);
    const int q = sg.owners;
    const bool top = s + 1 >= h.stages.size();  // the split's top stage, or the flat one
    const bool across = stage_crosses_nodes(c, sg);
    const std::vector<Algo> automatic = auto_candidates(sg.level);
    for (const AlgoImpl *impl : algorithms()) {
      if (!impl->calibrated || !impl->calibrated(q, top)) continue;
      const bool chosen_here = impl->top != Top::Split ||
                               std::find(automatic.begin(), automatic.end(), impl->id) != automatic.end();
      if (across && !chosen_here) continue;
      StageEntry e{s, impl->id, trials.size(), -1};
      trials.push_back({s, impl->id, kSmallPerOwner * q, kSmallBackToBack});
      if (!across || impl->id == Algo::Ring) {
        e.large = static_cast<long>(trials.size());
        trials.push_back({s, impl->id, across ? kLargeAcross : kLarge, across ? kLargeAcrossBackToBack : kLargeBackToBack});
      }
      entries.push_back(e);
    }
  }
  std::vector<float> buf;
  // Where the calibration's time goes, for BC_DEBUG=PLAN (wall clock on
  // rank 0, barriers included): the untimed first runs, each (stage,
  // algorithm)'s small and large trials over all repeats, the plan fits.
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  auto t0 = Clock::now();
  // One untimed run per stage first: connections are set up on first use.
  for (size_t s = 0; s < nstages; ++s) {
    double ignored = 0;
    BC_CHECK(run_trial(c, {s, Algo::Ring, kLarge, 1}, &buf, &ignored));
  }
  const double first_runs = since(t0);
  std::vector<double> mine(trials.size() * kRepeats), slowest(mine.size()), spent(trials.size(), 0.0);
  for (int r = 0; r < kRepeats; ++r)
    for (size_t i = 0; i < trials.size(); ++i) {
      t0 = Clock::now();
      BC_CHECK(run_trial(c, trials[i], &buf, &mine[i * kRepeats + r]));
      spent[i] += since(t0);
    }
  BC_CHECK(sync_point(c, BC_OK));  // a failure in the last measurement is announced here
  BC_MPI_CHECK(MPI_Allreduce(mine.data(), slowest.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_MAX, c->mpi));

  out->fits.clear();
  const auto pick = [&](size_t k) { return fastest(slowest.begin() + k * kRepeats); };
  // Two passes: the entries with both points first, so that the ring's beta
  // is there for the entries that borrow it.
  for (int borrowed = 0; borrowed < 2; ++borrowed)
    for (const StageEntry &e : entries) {
      if ((e.large < 0) != (borrowed == 1)) continue;
      const StageGroups &sg = trial_stage(c, e.stage);
      const StageShape shape = stage_shape(e.algo, sg.owners, sg.max_members());
      const Trial &small = trials[e.small];
      CostFit fit;
      if (e.large >= 0) {
        const Trial &large = trials[static_cast<size_t>(e.large)];
        fit = fit_stage(shape, small.count * 4.0, pick(e.small), large.count * 4.0, pick(static_cast<size_t>(e.large)));
      } else {
        const CostFit *ring = out->find(sg.level, Algo::Ring);
        if (!ring) return sync_point(c, BC_FAIL(BC_ERR_INTERNAL, "calibration: no ring fit at level %d to price %s",
                                                  sg.level, algo_name(e.algo)));
        fit = fit_alpha(shape, small.count * 4.0, pick(e.small), ring->beta);
      }
      out->fits[{sg.level, e.algo}] = fit;
      // At q <= 2 rhd is the ring (its entry is not timed there): the same fit.
      if (e.algo == Algo::Ring && sg.owners <= 2) out->fits[{sg.level, Algo::Rhd}] = fit;
    }
  out->source = "calibrated";
  // Chunks up to 1 MiB, and one piece up to 2 MiB, chosen by the fits. The
  // earlier caps (64 KiB chunks, one piece only up to the 256 KiB timed here)
  // were set while every operation page-faulted its scratch in anew, which
  // hit large chunks and large single pieces and spared 64 KiB ones (the heap
  // kept those): with the scratch pool, 4-16 MiB on 4 nodes x 2 ranks took
  // 214-221 / 859-862 ms in 256 KiB-1 MiB chunks against 247 / 969 ms in
  // 64 KiB ones at 250 Mbit/s, and 61-65 against 91-95 ms (4 MiB) at 1 Gbit/s.
  // One piece tied with 1 MiB chunks up to 2 MiB (1 Gbit/s: 17.8 / 33.1 ms
  // against 15.7 / 34.0 ms at 1 / 2 MiB) but lost above, by 4-7% on 4 nodes x
  // 2 ranks and 10-18% on 2 nodes x 4 ranks at 4-16 MiB (158-704 against
  // 143-604 ms), where the fits, noisy from one calibration to the next, chose
  // it in one run in two.
  out->max_chunk = 1 << 20;
  out->max_whole = 2 << 20;
  t0 = Clock::now();
  BC_CHECK(calibrate_plans(c, out));
  if (c->rank == 0 && log_enabled(LogLevel::Info, LogSys::Plan)) {
    std::string parts;
    char part[96];
    for (const StageEntry &e : entries) {
      std::snprintf(part, sizeof part, " stage %zu %s %.0f+%.0f ms;", e.stage + 1, algo_name(e.algo),
                    spent[e.small] * 1e3, e.large < 0 ? 0.0 : spent[static_cast<size_t>(e.large)] * 1e3);
      parts += part;
    }
    BC_INFO(Plan, "calibration's time: first runs %.0f ms;%s whole plans %.0f ms (%zu plans x 2 sizes x %d)",
            first_runs * 1e3, parts.c_str(), since(t0) * 1e3, out->plan_fits.size(), kRepeats);
  }
  return BC_OK;
}

}  // namespace bc
