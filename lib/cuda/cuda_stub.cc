// Built without CUDA: every pointer is host memory and every device request
// says how to get a CUDA build.
#include "cuda/cuda_rt.h"

namespace bc {
namespace {
const char kNoCuda[] = "built without CUDA (meson -Dcuda=enabled)";
}

bool cuda_built() { return false; }
Status cuda_usable() { return BC_FAIL(BC_ERR_NOT_SUPPORTED, "device buffers: %s", kNoCuda); }
const char *cuda_unusable_reason() { return kNoCuda; }
bc_memtype_t memtype_of(const void *) { return BC_MEM_HOST; }

Status resolve_memtype(const void *, const void *, bc_memtype_t declared, bc_memtype_t *out) {
  if (declared < 0 || declared >= BC_MEM_COUNT)
    return BC_FAIL(BC_ERR_INVALID_ARG, "unknown memory type %d", static_cast<int>(declared));
  if (declared == BC_MEM_CUDA) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "BC_MEM_CUDA: %s", kNoCuda);
  *out = BC_MEM_HOST;
  return BC_OK;
}

Status cuda_copy(void *, const void *, size_t) { return BC_FAIL(BC_ERR_NOT_SUPPORTED, "%s", kNoCuda); }
Status cuda_memset(void *, int, size_t) { return BC_FAIL(BC_ERR_NOT_SUPPORTED, "%s", kNoCuda); }
Status cuda_malloc(void **, size_t) { return BC_FAIL(BC_ERR_NOT_SUPPORTED, "%s", kNoCuda); }
void cuda_free(void *) {}
Status cuda_host_alloc(void **, size_t) { return BC_FAIL(BC_ERR_NOT_SUPPORTED, "%s", kNoCuda); }
void cuda_host_free(void *) {}
Status cuda_current_device(int *) { return BC_FAIL(BC_ERR_NOT_SUPPORTED, "%s", kNoCuda); }
Status cuda_set_device(int) { return BC_FAIL(BC_ERR_NOT_SUPPORTED, "%s", kNoCuda); }

}  // namespace bc
