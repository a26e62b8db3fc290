#include "api/argcheck.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/log.h"
#include "reduce/reduce.h"
#include "sched/liveness.h"

namespace bc {
namespace {

// What one rank passed, as the ranks exchange it once they know they differ.
struct Signature {
  int64_t count;
  int32_t kind;
  int32_t dtype;
  int32_t op;      // -1 for allgather, which has none
  int32_t status;  // this rank's own verdict on its arguments
};

// The first round: a MAX all-reduce of each field and its negation gives every
// rank the largest and smallest value of each, so that all of them learn
// together whether anybody differs, in one small message round.
constexpr int kFields = 5;

// Agreements whose MPI request may still complete: MPI forbids freeing or
// cancelling a collective request, and MPI may write into the buffers later,
// so they stay reachable for the life of the process.
std::mutex g_abandoned_mutex;
std::vector<std::unique_ptr<ArgAgreement>> g_abandoned;

bool same(const Signature &x, const Signature &y) {
  return x.count == y.count && x.kind == y.kind && x.dtype == y.dtype && x.op == y.op;
}

// "0", "1-3", "0,2,5-7" for ranks in increasing order.
std::string rank_list(const std::vector<int> &ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

// "rank 0 passed allreduce count 500 int32 sum; ranks 1-3 passed allreduce
// count 1000 int32 sum": the distinct signatures, in order of their first rank.
std::string describe_groups(const std::vector<Signature> &all) {
  constexpr size_t kMaxGroups = 6;  // the message stays readable (and under 1 KiB) at any size
  std::vector<std::pair<Signature, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    bool found = false;
    for (auto &g : groups)
      if (same(g.first, all[r])) {
        g.second.push_back(r);
        found = true;
        break;
      }
    if (!found) groups.push_back({all[r], {r}});
  }
  std::string out;
  for (size_t i = 0; i < groups.size() && i < kMaxGroups; ++i) {
    const auto &g = groups[i];
    if (!out.empty()) out += "; ";
    out += (g.second.size() == 1 ? "rank " : "ranks ") + rank_list(g.second) + " passed " +
           args_describe(g.first.kind, g.first.count, g.first.dtype, g.first.op);
  }
  if (groups.size() > kMaxGroups) out += "; and " + std::to_string(groups.size() - kMaxGroups) + " more groups";
  return out;
}

}  // namespace

// The buffers and state of one agreement.
struct ArgAgreement::Exchange {
  int64_t mine[2 * kFields];
  int64_t extremes[2 * kFields];
  Signature sig;
  std::vector<Signature> all;
  MPI_Request req = MPI_REQUEST_NULL;
  int round = 1;       // 1: first posted; 2: second posted; 0: verdict given
  bool agree = true;   // the first round found the same arguments everywhere
  Status local = BC_OK;
  std::string local_msg;  // this rank's own refusal, raised again with the verdict
  std::chrono::steady_clock::time_point posted;
  std::chrono::steady_clock::time_point checked;  // the last liveness check while waiting
};

std::string args_describe(int kind, int64_t count, int dtype, int op) {
  static const char *kinds[] = {"allreduce", "reduce_scatter", "allgather"};
  std::string s = kind >= 0 && kind < 3 ? kinds[kind] : "collective " + std::to_string(kind);
  s += kind == static_cast<int>(CollKind::ReduceScatter) ? " recvcount " : " count ";
  s += std::to_string(count) + " ";
  s += dtype_is_valid(static_cast<bc_dtype_t>(dtype)) ? bc_dtype_name(static_cast<bc_dtype_t>(dtype))
                                                      : "dtype " + std::to_string(dtype);
  if (op >= 0 && op < BC_OP_COUNT) s += std::string(" ") + bc_op_name(static_cast<bc_op_t>(op));
  else if (op != -1) s += " op " + std::to_string(op);
  return s;
}

ArgAgreement::~ArgAgreement() = default;

bool ArgAgreement::refused_here() const { return ex_->local != BC_OK; }

void ArgAgreement::abandon() {
  if (!ex_ || ex_->req == MPI_REQUEST_NULL) return;
  std::unique_ptr<ArgAgreement> keep(new ArgAgreement);
  keep->ex_ = std::move(ex_);
  std::lock_guard<std::mutex> lock(g_abandoned_mutex);
  g_abandoned.push_back(std::move(keep));
}

Status ArgAgreement::post(bc_comm *c, const CollArgs &a, Status local, std::unique_ptr<ArgAgreement> *out) {
  std::unique_ptr<ArgAgreement> agreement(new ArgAgreement);
  agreement->ex_.reset(new Exchange);
  Exchange &ex = *agreement->ex_;
  ex.local = local;
  if (local != BC_OK) ex.local_msg = last_error_body(local);
  ex.posted = ex.checked = std::chrono::steady_clock::now();
  Signature &s = ex.sig;
  s.count = a.count;
  s.kind = static_cast<int32_t>(a.kind);
  s.dtype = static_cast<int32_t>(a.dtype);
  s.op = a.kind == CollKind::Allgather ? -1 : static_cast<int32_t>(a.op);
  s.status = static_cast<int32_t>(local);
  // INT64_MIN (a refused count) would not negate: INT64_MIN + 1 stands for it in this round.
  const int64_t count = s.count == INT64_MIN ? INT64_MIN + 1 : s.count;
  const int64_t fields[kFields] = {count, s.kind, s.dtype, s.op, s.status != BC_OK ? 1 : 0};
  for (int i = 0; i < kFields; ++i) {
    ex.mine[2 * i] = fields[i];
    ex.mine[2 * i + 1] = -fields[i];
  }
  BC_MPI_CHECK(MPI_Iallreduce(ex.mine, ex.extremes, 2 * kFields, MPI_INT64_T, MPI_MAX, c->mpi, &ex.req));
  *out = std::move(agreement);
  return BC_OK;
}

Status ArgAgreement::test(bc_comm *c, bool *done) {
  *done = false;
  Exchange &ex = *ex_;
  if (ex.round == 0) return BC_FAIL(BC_ERR_INTERNAL, "argument agreement tested after its verdict");
  int complete = 0;
  BC_MPI_CHECK(MPI_Test(&ex.req, &complete, MPI_STATUS_IGNORE));
  if (!complete) {
    const auto now = std::chrono::steady_clock::now();
    // A dead peer never joins the agreement's MPI_Iallreduce: name it within
    // BC_LIVENESS_INTERVAL, as a running operation does. Without this, a rank
    // whose agreement still needed the victim's part (its neighbours had
    // theirs and went on into the collective) waited until BC_TIMEOUT.
    Liveness *l = c->liveness.get();
    if (l && l->enabled() && now - ex.checked >= std::chrono::milliseconds(l->interval_ms())) {
      ex.checked = now;
      if (l->check()) {
        const std::vector<int> dead = l->dead();
        const int round = ex.round;
        const std::string call = args_describe(ex.sig.kind, ex.sig.count, ex.sig.dtype, ex.sig.op);
        *done = true;
        abandon();
        const std::string who = l->who_list(dead);
        return BC_FAIL(BC_ERR_PEER_DEAD,
                       "%s %s (%s) before %s started: rank %d was in its argument agreement (BC_CHECK_ARGS, %s "
                       "round), which needs every rank",
                       who.c_str(), dead.size() > 1 ? "have died" : "died", l->how(dead[0]), call.c_str(), c->rank,
                       round == 1 ? "first" : "second");
      }
    }
    const int64_t timeout_ms = c->params.get_int(ParamId::Timeout);
    const int64_t waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - ex.posted).count();
    if (timeout_ms <= 0 || waited <= timeout_ms) return BC_OK;
    *done = true;
    const int round = ex.round;
    abandon();
    return BC_FAIL(BC_ERR_TIMEOUT,
                   "argument agreement (BC_CHECK_ARGS), %s round: not every rank of the communicator reached the "
                   "collective within %lld ms (BC_TIMEOUT)",
                   round == 1 ? "first" : "second", static_cast<long long>(timeout_ms));
  }
  const Status local = ex.local;
  // The verdict raises this rank's own refusal again, with its message.
  auto own = [&ex]() { return BC_FAIL(ex.local, "%s", ex.local_msg.c_str()); };
  if (ex.round == 1) {
    for (int i = 0; i < kFields; ++i) ex.agree = ex.agree && ex.extremes[2 * i] == -ex.extremes[2 * i + 1];
    const bool anyone_refused = ex.extremes[2 * (kFields - 1)] != 0;
    if (ex.agree && !anyone_refused) {
      ex.round = 0;
      *done = true;
      return BC_OK;
    }
    if (local != BC_OK && ex.agree) {  // everybody refused the same call: its own message is the best
      ex.round = 0;
      *done = true;
      return own();
    }
    // Somebody differs: every rank learns what each passed (only now, so the
    // common case pays one round).
    ex.all.resize(c->size);
    BC_MPI_CHECK(MPI_Iallgather(&ex.sig, sizeof(Signature), MPI_BYTE, ex.all.data(), sizeof(Signature), MPI_BYTE,
                                c->mpi, &ex.req));
    ex.round = 2;
    return BC_OK;
  }
  ex.round = 0;
  *done = true;
  const std::vector<Signature> &all = ex.all;
  if (local != BC_OK) {
    // Keep this rank's own message, which says what was wrong, and add who else differs.
    if (!ex.agree) BC_LOG(LogLevel::Debug, LogSys::Api, "arguments also differ: %s", describe_groups(all).c_str());
    return own();
  }
  std::vector<int> refused;
  Status code = BC_OK;
  for (int r = 0; r < c->size; ++r)
    if (all[r].status != BC_OK) {
      if (code == BC_OK) code = static_cast<Status>(all[r].status);
      refused.push_back(r);
    }
  if (!refused.empty()) {
    const std::string who = (refused.size() == 1 ? "rank " : "ranks ") + rank_list(refused);
    return BC_FAIL(code, "%s refused %s own arguments (%s; see that rank's message); the ranks passed: %s. "
                   "Nothing was sent (BC_CHECK_ARGS)",
                   who.c_str(), refused.size() == 1 ? "its" : "their", bc_strerror(code), describe_groups(all).c_str());
  }
  return BC_FAIL(BC_ERR_MISMATCH, "%s. Nothing was sent; the communicator stays usable (BC_CHECK_ARGS)",
                 describe_groups(all).c_str());
}

Status args_agree(bc_comm *c, const CollArgs &a, Status local) {
  std::unique_ptr<ArgAgreement> agreement;
  BC_CHECK(ArgAgreement::post(c, a, local, &agreement));
  WaitPolicy wait(c->spin_count);
  for (;;) {
    bool done = false;
    const Status st = agreement->test(c, &done);
    if (done || st != BC_OK) return st;
    if (agreement->refused_here()) {
      wait.pause();
      continue;
    }
    comm_advance_agreements(c);
    comm_wait_pass(c, &wait);
  }
}

}  // namespace bc
