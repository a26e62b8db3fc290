// BC_CUDA_CHECK: a failed CUDA runtime call becomes BC_ERR_TRANSPORT with
// CUDA's own text and the call, and starts the usual trail. CUDA files only.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"

#define BC_CUDA_CHECK(call)                                                                       \
  do {                                                                                            \
    cudaError_t bc_cuda_rc_ = (call);                                                             \
    if (bc_cuda_rc_ != cudaSuccess) {                                                             \
      cudaGetLastError();                                                                         \
      return BC_FAIL(BC_ERR_TRANSPORT, "%s failed: %s (%s)", #call, cudaGetErrorString(bc_cuda_rc_), \
                     cudaGetErrorName(bc_cuda_rc_));                                              \
    }                                                                                             \
  } while (0)
