// The CUDA runtime behind cuda_rt.h. cudart is linked statically, so this
// library loads on hosts without libcudart.so; with no driver there, the first
// call returns cudaErrorInsufficientDriver (or NoDevice) and we say so once.
#include "cuda/cuda_rt.h"

#include <cuda_runtime_api.h>

#include <string>

#include "core/log.h"

namespace bc {
namespace {

bool g_usable = false;
std::string g_reason;

// Runs once, from usable().
bool probe() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    g_reason = std::string("no CUDA device: cudaGetDeviceCount: ") + cudaGetErrorString(e);
    cudaGetLastError();
  } else if (n == 0) {
    g_reason = "no CUDA device: cudaGetDeviceCount returned 0 devices";
  } else {
    g_usable = true;
  }
  BC_INFO(Init, "CUDA: %s", g_usable ? "device buffers usable" : g_reason.c_str());
  return g_usable;
}

// A function-local static, not std::call_once: memtype_of runs on every call
// the PMPI preload sees, and libstdc++'s call_once sets two thread-locals and
// calls pthread_once each time, done or not (19 % and most of the 17 % in
// __tls_get_addr of a passed 4-byte MPI_Allreduce at np 1); a local static's
// guard is one acquire load once initialised.
bool usable() {
  static const bool usable_now = probe();
  return usable_now;
}

Status cuda_fail(cudaError_t e, const char *what) {
  cudaGetLastError();  // do not let a sticky error leak into the next call
  return BC_FAIL(BC_ERR_TRANSPORT, "%s: %s (%s)", what,
                 cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace

bool cuda_built() { return true; }

Status cuda_usable() {
  if (usable()) return BC_OK;
  return BC_FAIL(BC_ERR_NOT_SUPPORTED, "%s", g_reason.c_str());
}

const char *cuda_unusable_reason() { return usable() ? "" : g_reason.c_str(); }

bc_memtype_t memtype_of(const void *p) {
  if (!p || p == BC_IN_PLACE || !usable()) return BC_MEM_HOST;
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return BC_MEM_HOST;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? BC_MEM_CUDA : BC_MEM_HOST;
}

Status resolve_memtype(const void *send, const void *recv, bc_memtype_t declared, bc_memtype_t *out) {
  if (declared < 0 || declared >= BC_MEM_COUNT)
    return BC_FAIL(BC_ERR_INVALID_ARG, "unknown memory type %d", static_cast<int>(declared));
  if (declared == BC_MEM_HOST) {
    *out = BC_MEM_HOST;
    return BC_OK;
  }
  if (declared == BC_MEM_CUDA) {
    if (!usable()) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "BC_MEM_CUDA: %s", g_reason.c_str());
    *out = BC_MEM_CUDA;
    return BC_OK;
  }
  const bc_memtype_t r = memtype_of(recv);
  if (send && send != BC_IN_PLACE && memtype_of(send) != r)
    return BC_FAIL(BC_ERR_INVALID_ARG, "sendbuf is %s memory but recvbuf is %s memory; both must be on the same side",
                   r == BC_MEM_CUDA ? "host" : "device", r == BC_MEM_CUDA ? "device" : "host");
  *out = r;
  return BC_OK;
}

Status cuda_copy(void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return BC_OK;
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (e != cudaSuccess) return cuda_fail(e, "cudaMemcpy");
  return BC_OK;
}

Status cuda_memset(void *dst, int value, size_t bytes) {
  cudaError_t e = cudaMemset(dst, value, bytes);
  if (e != cudaSuccess) return cuda_fail(e, "cudaMemset");
  return BC_OK;
}

Status cuda_malloc(void **p, size_t bytes) {
  BC_CHECK(cuda_usable());
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return BC_FAIL(BC_ERR_NO_MEMORY, "cudaMalloc(%zu): %s", bytes, cudaGetErrorString(e));
  }
  return BC_OK;
}

void cuda_free(void *p) {
  if (!p) return;
  cudaError_t e = cudaFree(p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    BC_WARN(Transport, "cudaFree: %s", cudaGetErrorString(e));
  }
}

Status cuda_host_alloc(void **p, size_t bytes) {
  BC_CHECK(cuda_usable());
  cudaError_t e = cudaMallocHost(p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return BC_FAIL(BC_ERR_NO_MEMORY, "cudaMallocHost(%zu): %s", bytes, cudaGetErrorString(e));
  }
  return BC_OK;
}

void cuda_host_free(void *p) {
  if (!p) return;
  cudaError_t e = cudaFreeHost(p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    BC_WARN(Transport, "cudaFreeHost: %s", cudaGetErrorString(e));
  }
}

Status cuda_current_device(int *dev) {
  cudaError_t e = cudaGetDevice(dev);
  if (e != cudaSuccess) return cuda_fail(e, "cudaGetDevice");
  return BC_OK;
}

Status cuda_set_device(int dev) {
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess) return cuda_fail(e, "cudaSetDevice");
  return BC_OK;
}

}  // namespace bc
