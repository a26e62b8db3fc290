// The C API: argument checks happen in comm_start.cc; here every entry point is
// wrapped so that no C++ exception crosses into C.
#include <exception>
#include <new>
#include <string>

#include "api/comm.h"
#include "api/progress_thread.h"
#include "blueconnect.h"
#include "core/status.h"
#include "reduce/reduce.h"

namespace {

template <typename F>
bc_status_t guarded(const char *fn, F &&body) {
  try {
    bc::clear_error();
    return body();
  } catch (const std::bad_alloc &) {
    return BC_FAIL(BC_ERR_NO_MEMORY, "%s: out of memory", fn);
  } catch (const std::exception &e) {
    return BC_FAIL(BC_ERR_INTERNAL, "%s: unexpected exception: %s", fn, e.what());
  } catch (...) {
    return BC_FAIL(BC_ERR_INTERNAL, "%s: unexpected exception", fn);
  }
}

bc_status_t run(const char *fn, const bc::CollArgs &args, bc_comm_t comm) {
  return guarded(fn, [&] { return bc::comm_run(comm, args); });
}

}  // namespace

extern "C" {

bc_status_t bc_init(void) {
  return guarded("bc_init", [] { return bc::api_init(false); });
}

bc_status_t bc_finalize(void) {
  return guarded("bc_finalize", [] { return bc::api_finalize(); });
}

bc_status_t bc_comm_create(MPI_Comm comm, bc_comm_t *out) {
  return guarded("bc_comm_create", [&] { return bc::comm_create(comm, nullptr, out); });
}

bc_status_t bc_comm_create_with(MPI_Comm comm, const char *options, bc_comm_t *out) {
  return guarded("bc_comm_create_with", [&] { return bc::comm_create(comm, options, out); });
}

bc_status_t bc_comm_destroy(bc_comm_t *comm) {
  return guarded("bc_comm_destroy", [&]() -> bc_status_t {
    if (!comm) return BC_FAIL(BC_ERR_INVALID_ARG, "bc_comm_destroy: the pointer is NULL");
    BC_CHECK(bc::comm_destroy(*comm));
    *comm = nullptr;
    return BC_OK;
  });
}

bc_status_t bc_comm_shrink(bc_comm_t comm, bc_comm_t *newcomm) {
  return guarded("bc_comm_shrink", [&] { return bc::comm_shrink(comm, newcomm); });
}

bc_status_t bc_comm_rank(bc_comm_t comm, int *rank) {
  return guarded("bc_comm_rank", [&]() -> bc_status_t {
    BC_CHECK(bc::comm_check(comm));
    if (!rank) return BC_FAIL(BC_ERR_INVALID_ARG, "rank pointer is NULL");
    *rank = comm->rank;
    return BC_OK;
  });
}

bc_status_t bc_comm_size(bc_comm_t comm, int *size) {
  return guarded("bc_comm_size", [&]() -> bc_status_t {
    BC_CHECK(bc::comm_check(comm));
    if (!size) return BC_FAIL(BC_ERR_INVALID_ARG, "size pointer is NULL");
    *size = comm->size;
    return BC_OK;
  });
}

bc_status_t bc_allreduce(const void *sendbuf, void *recvbuf, int64_t count, bc_dtype_t dtype, bc_op_t op,
                         bc_comm_t comm) {
  return run("bc_allreduce", {bc::CollKind::Allreduce, sendbuf, recvbuf, count, dtype, op, BC_MEM_AUTO}, comm);
}

bc_status_t bc_allreduce_mem(const void *sendbuf, void *recvbuf, int64_t count, bc_dtype_t dtype, bc_op_t op,
                             bc_memtype_t mem, bc_comm_t comm) {
  return run("bc_allreduce_mem", {bc::CollKind::Allreduce, sendbuf, recvbuf, count, dtype, op, mem}, comm);
}

bc_status_t bc_reduce_scatter(const void *sendbuf, void *recvbuf, int64_t recvcount, bc_dtype_t dtype,
                              bc_op_t op, bc_comm_t comm) {
  return run("bc_reduce_scatter",
             {bc::CollKind::ReduceScatter, sendbuf, recvbuf, recvcount, dtype, op, BC_MEM_AUTO}, comm);
}

bc_status_t bc_allgather(const void *sendbuf, void *recvbuf, int64_t count, bc_dtype_t dtype, bc_comm_t comm) {
  return run("bc_allgather", {bc::CollKind::Allgather, sendbuf, recvbuf, count, dtype, BC_SUM, BC_MEM_AUTO},
             comm);
}

bc_status_t bc_iallreduce(const void *sendbuf, void *recvbuf, int64_t count, bc_dtype_t dtype, bc_op_t op,
                          bc_comm_t comm, bc_request_t *request) {
  return guarded("bc_iallreduce", [&] {
    return bc::comm_start_allreduce(
        comm, {bc::CollKind::Allreduce, sendbuf, recvbuf, count, dtype, op, BC_MEM_AUTO}, request);
  });
}

bc_status_t bc_test(bc_request_t *request, int *done) {
  return guarded("bc_test", [&]() -> bc_status_t {
    if (!done) return BC_FAIL(BC_ERR_INVALID_ARG, "done is NULL");
    bool d = false;
    *done = 0;
    BC_CHECK(bc::request_progress(request, false, &d));
    *done = d ? 1 : 0;
    return BC_OK;
  });
}

bc_status_t bc_wait(bc_request_t *request) {
  return guarded("bc_wait", [&] { return bc::request_progress(request, true, nullptr); });
}

const char *bc_strerror(bc_status_t status) {
  switch (status) {
    case BC_OK: return "success";
    case BC_ERR_INVALID_ARG: return "invalid argument";
    case BC_ERR_NOT_SUPPORTED: return "not supported";
    case BC_ERR_NO_MEMORY: return "out of memory";
    case BC_ERR_NOT_INITIALIZED: return "not initialised";
    case BC_ERR_INVALID_COMM: return "invalid communicator";
    case BC_ERR_TOPOLOGY: return "topology error";
    case BC_ERR_PARAM: return "invalid parameter";
    case BC_ERR_TRANSPORT: return "transport failure";
    case BC_ERR_TIMEOUT: return "timeout";
    case BC_ERR_MPI: return "MPI error";
    case BC_ERR_INTERNAL: return "internal error";
    case BC_ERR_IN_PROGRESS: return "in progress";
    case BC_ERR_PEER_DEAD: return "peer died";
    case BC_ERR_MISMATCH: return "arguments differ between ranks";
    default: return "unknown status";
  }
}

const char *bc_last_error(void) { return bc::last_error(); }

const char *bc_dtype_name(bc_dtype_t dtype) {
  static const char *names[] = {"float32", "float64", "float16", "bfloat16", "int8",
                                "uint8",   "int32",   "uint32",  "int64",    "uint64"};
  return dtype >= 0 && dtype < BC_DTYPE_COUNT ? names[dtype] : "unknown";
}

const char *bc_op_name(bc_op_t op) {
  static const char *names[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
  return op >= 0 && op < BC_OP_COUNT ? names[op] : "unknown";
}

size_t bc_dtype_size(bc_dtype_t dtype) {
  static const size_t sizes[] = {4, 8, 2, 2, 1, 1, 4, 4, 8, 8};
  return dtype >= 0 && dtype < BC_DTYPE_COUNT ? sizes[dtype] : 0;
}

bc_status_t bc_comm_describe(bc_comm_t comm, int64_t count, bc_dtype_t dtype, char *buf, size_t len,
                             size_t *needed) {
  return guarded("bc_comm_describe", [&]() -> bc_status_t {
    std::string text;
    BC_CHECK(bc::comm_describe(comm, count, dtype, &text));
    if (needed) *needed = text.size() + 1;
    if (buf && len > 0) {
      size_t n = std::min(len - 1, text.size());
      text.copy(buf, n);
      buf[n] = '\0';
    }
    return BC_OK;
  });
}

bc_status_t bc_comm_write_topology(bc_comm_t comm, const char *path) {
  return guarded("bc_comm_write_topology", [&]() -> bc_status_t { return bc::comm_write_topology(comm, path); });
}

bc_status_t bc_comm_stage_times(bc_comm_t comm, double *seconds, int max, int *nstages) {
  return guarded("bc_comm_stage_times", [&]() -> bc_status_t {
    BC_CHECK(bc::comm_check(comm));
    if (!nstages) return BC_FAIL(BC_ERR_INVALID_ARG, "nstages is NULL");
    if (max < 0) return BC_FAIL(BC_ERR_INVALID_ARG, "max is negative (%d)", max);
    if (max > 0 && !seconds) return BC_FAIL(BC_ERR_INVALID_ARG, "seconds is NULL with max %d", max);
    const std::vector<double> &t = comm->last_stage_seconds;
    for (size_t i = 0; i < t.size() && i < static_cast<size_t>(max); ++i) seconds[i] = t[i];
    *nstages = static_cast<int>(t.size());
    return BC_OK;
  });
}

bc_status_t bc_comm_plan_for(bc_comm_t comm, int64_t bytes, char *plan, size_t len, double *predicted_seconds) {
  return guarded("bc_comm_plan_for", [&]() -> bc_status_t {
    BC_CHECK(bc::comm_check(comm));
    if (bytes < 0) return BC_FAIL(BC_ERR_INVALID_ARG, "bytes is negative (%lld)", static_cast<long long>(bytes));
    if (len > 0 && !plan) return BC_FAIL(BC_ERR_INVALID_ARG, "plan is NULL with len %zu", len);
    // The learned winner once the size has one (docs/PLANS.md, Learning), else the choice.
    const bc::PlanChoice *learned = bc::plan_learning_current(comm, bytes);
    const bc::PlanChoice choice = learned ? *learned : bc::comm_choose(comm, bytes);
    if (predicted_seconds) {
      *predicted_seconds = -1;
      if (!comm->model.empty()) {
        const bc::Hierarchy &h = bc::hierarchy_for(comm, choice.shape);
        const bc::Prediction p = bc::predict(h, comm->model, choice, bytes);
        if (p.ok) *predicted_seconds = p.seconds;
      }
    }
    if (len > 0) {
      const std::string text = bc::plan_choice_describe(choice);
      const size_t n = std::min(len - 1, text.size());
      text.copy(plan, n);
      plan[n] = '\0';
    }
    return BC_OK;
  });
}

bc_status_t bc_comm_learning_calls(bc_comm_t comm, int64_t bytes, int *calls) {
  return guarded("bc_comm_learning_calls", [&]() -> bc_status_t {
    BC_CHECK(bc::comm_check(comm));
    if (!calls) return BC_FAIL(BC_ERR_INVALID_ARG, "calls is NULL");
    if (bytes < 0) return BC_FAIL(BC_ERR_INVALID_ARG, "bytes is negative (%lld)", static_cast<long long>(bytes));
    bc::CommLock lock;
    lock.take(comm);
    *calls = bytes == 0 ? 0 : bc::plan_learning_calls_left(comm, bytes);
    return BC_OK;
  });
}

bc_status_t bc_print_params(FILE *out) {
  return guarded("bc_print_params", [&]() -> bc_status_t {
    if (!out) return BC_FAIL(BC_ERR_INVALID_ARG, "out is NULL");
    const bc::ParamSet &ps = bc::api_initialized() ? bc::global_params() : bc::ParamSet();
    std::fputs(ps.describe().c_str(), out);
    return BC_OK;
  });
}

}  // extern "C"
