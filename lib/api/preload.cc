// The preload's door (lib/include/blueconnect_preload.h): thin forwards to the
// library's internals, which stay hidden.
#include "blueconnect_preload.h"

#include <algorithm>

#include "api/comm.h"
#include "core/status.h"
#include "cuda/cuda_rt.h"
#include "reduce/reduce.h"

namespace bc {
namespace preload {

bc_status_t init(bool quiet_by_default) { return api_init(quiet_by_default); }
bc_status_t finalize() { return api_finalize(); }
int64_t param_int(ParamId id) { return global_params().get_int(id); }
std::string param_str(ParamId id) { return global_params().get_str(id); }
bc_memtype_t memtype_of(const void *p) { return bc::memtype_of(p); }
bool device_buffers_usable() { return cuda_unusable_reason()[0] == '\0'; }

bool device_reduces(bc_dtype_t dtype, bc_op_t op) {
  if (reduce_check_cuda(dtype, op) == BC_OK) return true;
  clear_error();
  return false;
}

bc_status_t copy(void *dst, const void *src, size_t bytes) { return cuda_copy(dst, src, bytes); }

int learning_calls(int64_t bytes) {
  if (param_str(ParamId::PlanLearn) != "on") return 0;
  // The user's candidates, or the model's (its choice and up to two runners-up).
  const std::string &fixed = param_str(ParamId::PlanCandidates);
  const int n = fixed.empty() ? kMaxModelCandidates : 1 + static_cast<int>(std::count(fixed.begin(), fixed.end(), '|'));
  return plan_learning_max_calls(bytes, n);
}

}  // namespace preload
}  // namespace bc
