// Device reductions (reduce_cuda.cu): the same contract as reduce_into and
// reduce_finish_avg on host, for float32, float64, float16 and bfloat16 with
// sum, prod, min, max (avg = sum, then the finishing divide). fp16/bf16 widen
// to float, combine, and round to nearest even after every combination with
// the same arithmetic as the host (half_bits.h), so device and host results
// are equal bit for bit for the same inputs and order, NaN payloads aside
// (GPU float arithmetic returns the canonical NaN).
//
// Both calls return when the device has finished (the stream is synchronised):
// the next step may hand the buffer to a peer that reads it from another
// process through CUDA IPC.
#pragma once

#include <cstdint>

#include "blueconnect.h"
#include "core/status.h"
#include "reduce/reduce.h"  // reduce_check_cuda

namespace bc {

Status reduce_into_cuda(void *dst, const void *src, int64_t count, bc_dtype_t dtype, bc_op_t op);
Status reduce_finish_avg_cuda(void *buf, int64_t count, bc_dtype_t dtype, int divisor);

}  // namespace bc
