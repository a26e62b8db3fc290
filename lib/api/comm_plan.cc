// Plan choice and the plan cache: which plan a buffer size gets (cost model,
// BC_PLAN rules), its cached Program, its execution context, and bc_comm_describe.
#include "api/comm.h"

#include <algorithm>
#include <sstream>

#include "core/blocks.h"
#include "core/log.h"
#include "reduce/reduce.h"

namespace bc {

// Chunks a buffer of `total` elements is cut into under `choice` (at least 1).
int64_t chunk_count(const PlanChoice &choice, int64_t total, size_t elem) {
  if (choice.chunk_bytes <= 0 || total == 0) return 1;
  const int64_t chunk_elems = std::max<int64_t>(1, choice.chunk_bytes / static_cast<int64_t>(elem));
  return (total + chunk_elems - 1) / chunk_elems;
}

const Hierarchy &hierarchy_for(const bc_comm *c, Hierarchy::Shape shape) {
  switch (shape) {
    case Hierarchy::Shape::Leader: return c->hier_leader;
    case Hierarchy::Shape::Flat: return c->hier_flat;
    default: return c->hier;
  }
}

const PlanChoice &comm_choose(const bc_comm *c, int64_t bytes) {
  auto it = c->choices.find(bytes);
  if (it != c->choices.end()) return it->second;
  if (c->choices.size() >= 256) c->choices.clear();
  PlanChoice base;
  base.algo = c->algo;
  base.chunk_bytes = c->params.get_int(ParamId::Chunk);
  base.depth = static_cast<int>(c->params.get_int(ParamId::PipelineDepth));  // 1..1024: the registry's range
  PlanChoice chosen;
  if (c->model.empty()) {
    chosen = plan_choose(c->plan_rules, bytes, base);
  } else {
    PlanChoice m = model_choose(c->hier, c->hier_leader, c->hier_flat, c->model, bytes);
    // What the user set explicitly wins over the model.
    if (c->params.is_set(ParamId::Algo)) {
      m.algo = c->algo;
      m.stage_algos.clear();
    }
    if (c->params.is_set(ParamId::Chunk)) m.chunk_bytes = base.chunk_bytes;
    if (c->params.is_set(ParamId::PipelineDepth)) m.depth = base.depth;
    // BC_PLAN's default rules are the model-less choice; rules the user set apply on top.
    chosen = c->params.is_set(ParamId::Plan) ? plan_choose(c->plan_rules, bytes, m) : m;
  }
  return c->choices.emplace(bytes, std::move(chosen)).first->second;
}

BufferPool &buffer_pool(bc_comm *c, bc_memtype_t mem) { return mem == BC_MEM_CUDA ? c->dev_pool : c->host_pool; }

ExecContext exec_context(const bc_comm *c, bc_dtype_t dtype, bc_op_t op, bc_memtype_t mem) {
  const bool dev = mem == BC_MEM_CUDA;
  ExecContext ctx;
  ctx.peer_transport = dev ? &c->dev_peer_transport : &c->peer_transport;
  ctx.mem = mem;
  ctx.scratch_pool = &buffer_pool(const_cast<bc_comm *>(c), mem);
  ctx.dtype = dtype;
  ctx.op = op == BC_AVG ? BC_SUM : op;
  ctx.nranks = c->size;
  ctx.timeout_ms = c->params.get_int(ParamId::Timeout);
  ctx.spin_count = c->spin_count;  // at least 1: the parameter's range, or auto's choice
  ctx.liveness = c->liveness.get();
  ctx.timeline_comm = c->timeline_id;
  // Sleeping on one transport's event fd is only safe when every peer uses it.
  for (int r = 0; r < c->size && !dev; ++r) {
    if (r == c->rank) continue;
    Transport *t = c->peer_transport[r];
    if (!t->can_sleep() || (ctx.sleeper && ctx.sleeper != t)) {
      ctx.sleeper = nullptr;
      break;
    }
    ctx.sleeper = t;
  }
  return ctx;
}

Status comm_plan(bc_comm *c, CollKind kind, bool average, int64_t count, const PlanChoice &choice,
                 std::shared_ptr<const Program> *out) {
  bc_comm::PlanKey key{static_cast<int>(kind), average, count, static_cast<int>(choice.shape),
                       plan_choice_algo_key(choice), static_cast<int>(choice.top)};
  for (auto it = c->plans.begin(); it != c->plans.end(); ++it) {
    if (it->first == key) {
      c->plans.splice(c->plans.end(), c->plans, it);  // most recently used last
      *out = c->plans.back().second;
      return BC_OK;
    }
  }
  std::shared_ptr<Program> prog(new Program);
  BC_CHECK(build_program(hierarchy_for(c, choice.shape), c->rank, kind, count, choice.algo, average, prog.get(),
                         choice.top, &choice.stage_algos));
  if (log_enabled(LogLevel::Debug, LogSys::Plan))
    BC_DEBUGLOG(Plan, "rank %d %s", c->rank, describe_program(*prog, 1).c_str());
  const size_t max_plans = static_cast<size_t>(c->params.get_int(ParamId::MaxPlanCache));
  while (c->plans.size() >= max_plans) c->plans.pop_front();
  c->plans.emplace_back(key, prog);
  *out = prog;
  return BC_OK;
}

Status comm_describe(bc_comm *c, int64_t count, bc_dtype_t dtype, std::string *out) {
  BC_CHECK(comm_check(c));
  if (count < 0) return BC_FAIL(BC_ERR_INVALID_ARG, "count is negative");
  if (!dtype_is_valid(dtype)) return BC_FAIL(BC_ERR_INVALID_ARG, "unknown dtype %d", static_cast<int>(dtype));
  const size_t elem = bc_dtype_size(dtype);
  const PlanChoice &choice = comm_choose(c, count * static_cast<int64_t>(elem));
  const int64_t nchunks = chunk_count(choice, count, elem);
  std::shared_ptr<const Program> prog;
  BC_CHECK(comm_plan(c, CollKind::Allreduce, false, block_count(count, nchunks, 0), choice, &prog));
  const Hierarchy &h = hierarchy_for(c, choice.shape);
  std::ostringstream os;
  os << c->topo.describe() << "choice for " << count * static_cast<int64_t>(elem) << " bytes: "
     << plan_choice_describe(choice) << " -> " << nchunks << " chunk(s)\n";
  if (!c->model.empty()) {
    const Prediction p = predict(h, c->model, choice, count * static_cast<int64_t>(elem));
    os << model_describe(c->model) << "\n";
    if (p.ok) os << "predicted: " << p.seconds * 1e6 << " us (first chunk " << p.fill * 1e6 << " us, then "
                 << p.per_chunk * 1e6 << " us per chunk)\n";
  } else {
    os << "cost model: off (BC_MODEL=" << c->params.get_str(ParamId::Model) << ")\n";
  }
  os << plan_learning_describe(c);
  os << h.describe(block_count(count, nchunks, 0), elem);
  os << "transports:";
  for (auto &t : c->transports) os << " " << t->name();
  const Transport *sleeper = exec_context(c, dtype, BC_SUM, BC_MEM_HOST).sleeper;
  os << "\nwaiting: " << c->spin_count << " idle poll(s) per "
     << (sleeper ? std::string("sleep on ") + sleeper->name() + "'s event fd" : std::string("yield")) << " ("
     << c->spin_why << ")";
  os << "\nrank " << c->rank << " " << describe_program(*prog, elem);
  *out = os.str();
  return BC_OK;
}

}  // namespace bc
