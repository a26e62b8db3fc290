// Validating and starting a collective: the argument checks, the refusals of
// a broken communicator, the started Operation, and the blocking run (comm_run).
#include "api/comm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "api/argcheck.h"
#include "api/progress_thread.h"
#include "core/blocks.h"
#include "reduce/reduce.h"
#include "sched/operation.h"

namespace bc {

// A call on a communicator an earlier failure broke: the cause again, at once
// (a dead peer stays BC_ERR_PEER_DEAD, so a caller can tell death from misuse).
Status refuse_broken(const bc_comm *c) {
  return BC_FAIL(c->broken_by == BC_ERR_PEER_DEAD ? BC_ERR_PEER_DEAD : BC_ERR_INVALID_COMM,
                 "the communicator is broken by an earlier failure (%s: %s); destroy it", bc_strerror(c->broken_by),
                 c->broken_why.c_str());
}

// One rank's own arguments, before anything is sent (with BC_CHECK_ARGS the
// verdict goes into the agreement, so that every rank fails together).
Status check_own_args(const bc_comm *c, const CollArgs &a) {
  if (a.count < 0)
    return BC_FAIL(BC_ERR_INVALID_ARG, "count is negative (%lld)", static_cast<long long>(a.count));
  if (!dtype_is_valid(a.dtype)) return BC_FAIL(BC_ERR_INVALID_ARG, "unknown dtype %d", static_cast<int>(a.dtype));
  if (a.kind != CollKind::Allgather) BC_CHECK(reduce_check(a.dtype, a.op));
  if (a.mem < 0 || a.mem >= BC_MEM_COUNT)
    return BC_FAIL(BC_ERR_INVALID_ARG, "unknown memory type %d", static_cast<int>(a.mem));
  const size_t elem = bc_dtype_size(a.dtype);
  const int64_t p = c->size;
  const int64_t limit = INT64_MAX / static_cast<int64_t>(elem) / p;
  if (a.count > limit) return BC_FAIL(BC_ERR_INVALID_ARG, "count %lld overflows", static_cast<long long>(a.count));
  if (a.count == 0) return BC_OK;
  const bool in_place = a.sendbuf == BC_IN_PLACE || (a.kind == CollKind::Allreduce && a.sendbuf == a.recvbuf);
  if (!a.recvbuf) return BC_FAIL(BC_ERR_INVALID_ARG, "recvbuf is NULL with count %lld", static_cast<long long>(a.count));
  if (!a.sendbuf) return BC_FAIL(BC_ERR_INVALID_ARG, "sendbuf is NULL with count %lld (use BC_IN_PLACE for in-place)",
                                 static_cast<long long>(a.count));
  const int64_t total = a.kind == CollKind::Allreduce ? a.count : a.count * p;
  const size_t send_bytes = static_cast<size_t>(a.kind == CollKind::Allgather ? a.count : total) * elem;
  const size_t recv_bytes = static_cast<size_t>(a.kind == CollKind::ReduceScatter ? a.count : total) * elem;
  if (!in_place) {
    const auto *s = static_cast<const unsigned char *>(a.sendbuf);
    const auto *r = static_cast<const unsigned char *>(a.recvbuf);
    if (s < r + recv_bytes && r < s + send_bytes)
      return BC_FAIL(BC_ERR_INVALID_ARG, "sendbuf and recvbuf overlap; use BC_IN_PLACE for in-place");
  }
  return BC_OK;
}

// With BC_CHECK_ARGS: a broken communicator may have a collective still
// posted on c->mpi (an agreement that timed out): no new one may follow it.
Status refuse_if_broken(bc_comm *c) {
  CommLock peek;
  peek.take(c);
  if (c->broken) return refuse_broken(c);
  return BC_OK;
}

// Checks the arguments, takes `lock` once `c` is known to be live (nothing is
// taken without a progress thread), places the input in the work buffer and
// builds the started Operation. *work_out: the work buffer (for
// reduce_scatter's finish). *pooled_work_out: a work buffer from the pool of
// the buffers' memory type (reduce_scatter out of place), for the caller to
// release; set before any failure after it is taken.
// `agreed_before`: a non-blocking call whose agreement has already passed (comm_advance_agreements).
Status start(bc_comm *c, const CollArgs &a, CommLock *lock, std::unique_ptr<Operation> *op_out,
             unsigned char **work_out, void **pooled_work_out, bool agreed_before, LearnTurn *turn) {
  BC_CHECK(comm_check(c));
  if (c->check_args && !agreed_before) {
    BC_CHECK(refuse_if_broken(c));
    // Unlocked: the progress thread keeps driving requests in flight meanwhile.
    const Status agreed = args_agree(c, a, check_own_args(c, a));
    // Earlier non-blocking calls start their operations first, so that every
    // rank numbers the operations in call order. Their agreements were posted
    // before this one, which has completed: they complete too.
    WaitPolicy wait(c->spin_count);
    while (agreed == BC_OK && !c->agreeing.empty()) {
      comm_advance_agreements(c);
      comm_wait_pass(c, &wait);
    }
    lock->take(c);
    comm_mark_broken_on(c, agreed);  // a round that timed out or failed in MPI
    BC_CHECK(agreed);
  } else {
    lock->take(c);
  }
  if (c->broken) return refuse_broken(c);
  if (!c->check_args) BC_CHECK(check_own_args(c, a));  // else passed on every rank above
  bc_memtype_t mem = BC_MEM_HOST;
  BC_CHECK(resolve_memtype(a.sendbuf, a.recvbuf, a.mem, &mem));
  c->cur_mem = mem;
  if (mem == BC_MEM_CUDA) {
    if (a.kind != CollKind::Allgather) BC_CHECK(reduce_check_cuda(a.dtype, a.op));
    BC_CHECK(comm_ensure_device(c));
  }
  if (a.count == 0) return BC_OK;
  const size_t elem = bc_dtype_size(a.dtype);
  const int64_t p = c->size;
  const bool in_place = a.sendbuf == BC_IN_PLACE || (a.kind == CollKind::Allreduce && a.sendbuf == a.recvbuf);
  const int64_t total = a.kind == CollKind::Allreduce ? a.count : a.count * p;
  const size_t send_bytes = static_cast<size_t>(a.kind == CollKind::Allgather ? a.count : total) * elem;

  // Only the all-reduce is cut into chunks: reduce_scatter and allgather tie
  // blocks to ranks across the whole buffer. Its plan may be learned
  // (api/plan_learn.h): a blocking call takes the learner's turn.
  const int64_t bytes = total * static_cast<int64_t>(elem);
  const PlanChoice *learned = nullptr;
  if (a.kind == CollKind::Allreduce && c->learning) {
    LearnTurn none;
    LearnTurn *t = turn ? turn : &none;
    t->bytes = bytes;
    learned = plan_learning_choose(c, bytes, turn != nullptr, &t->candidate, &t->timed);
  }
  const PlanChoice &choice = learned ? *learned : comm_choose(c, bytes);
  const int64_t nchunks = a.kind == CollKind::Allreduce ? chunk_count(choice, total, elem) : 1;
  std::shared_ptr<const Program> big, small;
  BC_CHECK(comm_plan(c, a.kind, a.op == BC_AVG, block_count(total, nchunks, 0), choice, &big));
  small = big;
  if (total % nchunks != 0) BC_CHECK(comm_plan(c, a.kind, a.op == BC_AVG, total / nchunks, choice, &small));

  unsigned char *work = nullptr;
  const unsigned char *lazy_input = nullptr;
  auto *recv = static_cast<unsigned char *>(a.recvbuf);
  const bool dev = mem == BC_MEM_CUDA;
  // Device buffers: the same placement with device copies. The reduce-
  // scatter's work buffer comes from the communicator's pool of that memory.
  auto copy = [dev](void *dst, const void *src, size_t n) -> Status {
    if (dev) return cuda_copy(dst, src, n);
    std::memcpy(dst, src, n);
    return BC_OK;
  };
  switch (a.kind) {
    case CollKind::Allreduce:
      work = recv;
      // Host buffers out of place: the executor reads the input where it is
      // needed instead of copying it all first (executor.cc, "Lazy input").
      if (!in_place && dev) BC_CHECK(copy(work, a.sendbuf, send_bytes));
      if (!in_place && !dev) lazy_input = static_cast<const unsigned char *>(a.sendbuf);
      break;
    case CollKind::ReduceScatter:
      if (in_place) {
        work = recv;
      } else {
        if (!pooled_work_out) return BC_FAIL(BC_ERR_INTERNAL, "reduce_scatter started without a work buffer slot");
        void *p = nullptr;
        BC_CHECK(buffer_pool(c, mem).acquire(send_bytes, &p));
        *pooled_work_out = p;
        work = static_cast<unsigned char *>(p);
        BC_CHECK(copy(work, a.sendbuf, send_bytes));
      }
      break;
    case CollKind::Allgather:
      work = recv;
      if (!in_place) BC_CHECK(copy(work + c->rank * a.count * elem, a.sendbuf, a.count * elem));
      break;
  }

  const ExecContext ctx = exec_context(c, a.dtype, a.op, mem);
  if (c->spare_op) *op_out = std::move(c->spare_op);
  else op_out->reset(new Operation);
  (*op_out)->start(ctx, work, total, nchunks, choice.depth, std::move(big), std::move(small), c->seq, lazy_input);
  c->seq += static_cast<uint32_t>(nchunks);
  *work_out = work;
  return BC_OK;
}

void comm_keep_idle(bc_comm *c, std::unique_ptr<Operation> *op) {
  if (!*op || c->spare_op) return;
  (*op)->finish();
  c->spare_op = std::move(*op);
}

void comm_mark_broken_on(bc_comm *c, Status st) {
  if (c->broken || !(st == BC_ERR_TIMEOUT || st == BC_ERR_TRANSPORT || st == BC_ERR_MPI || st == BC_ERR_PEER_DEAD))
    return;
  c->broken = true;
  c->broken_by = st;
  // The first line of the message, without its "code: " head and the trail.
  const std::string why = last_error_body(st);
  const size_t cut = why.find(" (at ");
  c->broken_why = why.substr(0, std::min(cut, why.find('\n')));
}

Status comm_run(bc_comm *c, const CollArgs &a) {
  CommLock lock;  // held to the end, past the pool's release
  std::unique_ptr<Operation> op;
  unsigned char *work = nullptr;
  void *pooled_work = nullptr;
  LearnTurn turn;
  // Read before start() knows whether the call is a learning turn (the turn's
  // time includes start); `c` is not checked yet, so nothing of it is read here.
  const auto began = std::chrono::steady_clock::now();
  Status st = start(c, a, &lock, &op, &work, &pooled_work, false, &turn);
  if (st == BC_OK && op) {
    st = op->wait();
    // A learning probe: the call's time, start included (its plan's building
    // and scratch are the candidate's cost too).
    if (st == BC_OK && turn.timed) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      st = plan_learning_record(c, turn.bytes, turn.candidate, seconds);
    }
    comm_mark_broken_on(c, st);
    if (st == BC_OK) c->last_stage_seconds = op->stage_seconds();
    comm_keep_idle(c, &op);  // under the lock still
    if (st == BC_OK && a.kind == CollKind::ReduceScatter) {
      const size_t elem = bc_dtype_size(a.dtype);
      unsigned char *from = work + c->rank * a.count * elem;
      // In place, rank r's block never overlaps block 0 unless r = 0 (equal).
      if (from != a.recvbuf) {
        if (c->cur_mem == BC_MEM_CUDA) st = cuda_copy(a.recvbuf, from, a.count * elem);
        else std::memmove(a.recvbuf, from, a.count * elem);
      }
    }
  }
  if (pooled_work) buffer_pool(c, c->cur_mem).release(pooled_work);
  BC_CHECK(st);
  return BC_OK;
}

}  // namespace bc
