// Element-wise reductions: dst[i] = dst[i] OP src[i].
//
// Host kernels are plain loops over typed pointers that GCC vectorises at -O3.
// fp16 and bf16 are widened to float, combined, and rounded back to the
// nearest even after every single combination (see docs/REDUCTIONS.md), so a
// result depends on the order of combination only as float arithmetic does.
// BC_AVG reduces as BC_SUM; the owner of each block divides once at the end
// (reduce_finish_avg), so every rank gets the same bits.
#pragma once

#include <cstdint>

#include "blueconnect.h"
#include "core/status.h"

namespace bc {

bool dtype_is_floating(bc_dtype_t dtype);
bool dtype_is_valid(bc_dtype_t dtype);
bool op_is_valid(bc_op_t op);

// BC_OK when (dtype, op) is a supported pair; otherwise a failure with a message
// (BC_ERR_INVALID_ARG for unknown values, BC_ERR_NOT_SUPPORTED for e.g. avg on
// integers or bitwise ops on floats).
Status reduce_check(bc_dtype_t dtype, bc_op_t op);

// BC_OK when the device kernels (reduce_cuda.cu) cover (dtype, op): floating
// types with sum, prod, min, max, avg. NotSupported naming both otherwise.
// Defined in every build, so the API checks the same way with or without CUDA.
Status reduce_check_cuda(bc_dtype_t dtype, bc_op_t op);

// dst[i] = dst[i] OP src[i], i < count. dst and src must not overlap unless
// equal. `mem` says where both live: BC_MEM_CUDA runs the device kernels
// (CUDA builds; NotSupported otherwise).
Status reduce_into(void *dst, const void *src, int64_t count, bc_dtype_t dtype, bc_op_t op,
                   bc_memtype_t mem);

// A reduction checked once. reducer_for() validates (dtype, op, mem) as
// reduce_into does; apply() is what the executor runs on every received
// block, and it checks nothing but alignment: the call was validated at the
// API's boundary, and the executor's ranges lie inside its own buffers, never
// overlapping (issue 16: validation once per call, the hot path trusts it).
struct Reducer {
  bc_dtype_t dtype = BC_FLOAT32;
  bc_op_t op = BC_SUM;
  bc_memtype_t mem = BC_MEM_HOST;
  void (*kernel)(void *, const void *, int64_t) = nullptr;  // host buffers; null: not checked yet
  // dst[i] = dst[i] OP src[i], i < count.
  Status apply(void *dst, const void *src, int64_t count) const;
};
Status reducer_for(bc_dtype_t dtype, bc_op_t op, bc_memtype_t mem, Reducer *out);

// For BC_AVG: buf[i] /= divisor, rounded once to the dtype.
Status reduce_finish_avg(void *buf, int64_t count, bc_dtype_t dtype, int divisor, bc_memtype_t mem);

// IEEE binary16 and bfloat16 conversions, round to nearest even; NaN stays NaN.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

}  // namespace bc
