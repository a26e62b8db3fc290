// Device reduction kernels. See reduce_cuda.h for the contract and
// vec_split.h for how a buffer is cut into head, 16-byte body and tail.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "reduce/half_bits.h"
#include "reduce/reduce_cuda.h"
#include "cuda/cuda_rt.h"
#include "reduce/vec_split.h"

namespace bc {
namespace {

// Conversions and combinations: half_bits.h, shared with the host unit tests.
using hb::b2f;
using hb::BF16;
using hb::f2b;
using hb::f2h;
using hb::h2f;
using hb::Half;
using hb::Max;
using hb::Min;
using hb::Plain;
using hb::Prod;
using hb::Sum;

template <class T>
__device__ __forceinline__ T load_bytes(const unsigned char *p) {
  T v;
  memcpy(&v, p, sizeof(T));
  return v;
}

// Head and tail by the first threads, the body by every thread (grid stride).
template <class T, class F>
__global__ void reduce_vec(T *d, const T *s, int64_t head, int64_t vecs, int64_t tail) {
  constexpr int kLanes = int(kVecBytes / sizeof(T));
  const F f;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if (tid < head) d[tid] = f(d[tid], s[tid]);
  uint4 *dv = reinterpret_cast<uint4 *>(d + head);
  const uint4 *sv = reinterpret_cast<const uint4 *>(s + head);
  for (int64_t v = tid; v < vecs; v += stride) {
    uint4 a = dv[v];
    const uint4 b = sv[v];
    T *ta = reinterpret_cast<T *>(&a);
    const T *tb = reinterpret_cast<const T *>(&b);
#pragma unroll
    for (int k = 0; k < kLanes; ++k) ta[k] = f(ta[k], tb[k]);
    dv[v] = a;
  }
  T *dt = d + head + vecs * kLanes;
  const T *st = s + head + vecs * kLanes;
  if (tid < tail) dt[tid] = f(dt[tid], st[tid]);
}

// Element by element; with kBytes the elements are moved as bytes, for
// pointers not aligned to their element (a typed load there would fault).
template <class T, class F, bool kBytes>
__global__ void reduce_scalar(unsigned char *d, const unsigned char *s, int64_t n) {
  const F f;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (kBytes) {
      const T r = f(load_bytes<T>(d + i * sizeof(T)), load_bytes<T>(s + i * sizeof(T)));
      memcpy(d + i * sizeof(T), &r, sizeof(T));
    } else {
      T *dt = reinterpret_cast<T *>(d);
      dt[i] = f(dt[i], reinterpret_cast<const T *>(s)[i]);
    }
  }
}

template <class T, class Load, class Store, class Div>
__global__ void divide_kernel(unsigned char *p, int64_t n, Div div, bool bytes) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    T x = bytes ? load_bytes<T>(p + i * sizeof(T)) : reinterpret_cast<T *>(p)[i];
    const T r = Store()(Load()(x) / div);
    if (bytes) memcpy(p + i * sizeof(T), &r, sizeof(T));
    else reinterpret_cast<T *>(p)[i] = r;
  }
}
struct Same {
  template <class T>
  __device__ T operator()(T x) const { return x; }
};
struct FromHalf { __device__ float operator()(uint16_t x) const { return h2f(x); } };
struct ToHalf { __device__ uint16_t operator()(float x) const { return f2h(x); } };
struct FromBF16 { __device__ float operator()(uint16_t x) const { return b2f(x); } };
struct ToBF16 { __device__ uint16_t operator()(float x) const { return f2b(x); } };

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

unsigned blocks_for(int64_t work) {
  int64_t b = (work + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > kMaxBlocks) b = kMaxBlocks;
  return static_cast<unsigned>(b);
}

Status finish_launch(const char *what, bc_dtype_t dtype, bc_op_t op) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamPerThread);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return BC_FAIL(BC_ERR_TRANSPORT, "%s (%s, %s) on the device: %s", what, bc_dtype_name(dtype), bc_op_name(op),
                   cudaGetErrorString(e));
  }
  return BC_OK;
}

template <class T, class F>
void launch(void *dst, const void *src, int64_t count) {
  const VecSplit sp = vec_split(reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src), count, sizeof(T));
  auto *d = static_cast<unsigned char *>(dst);
  const auto *s = static_cast<const unsigned char *>(src);
  cudaStream_t st = cudaStreamPerThread;
  switch (sp.path) {
    case VecPath::Vector: {
      int64_t most = sp.vecs > sp.head ? sp.vecs : sp.head;
      if (sp.tail > most) most = sp.tail;
      reduce_vec<T, F><<<blocks_for(most), kThreads, 0, st>>>(reinterpret_cast<T *>(d), reinterpret_cast<const T *>(s),
                                                              sp.head, sp.vecs, sp.tail);
      break;
    }
    case VecPath::Scalar:
      reduce_scalar<T, F, false><<<blocks_for(count), kThreads, 0, st>>>(d, s, count);
      break;
    case VecPath::Bytewise:
      reduce_scalar<T, F, true><<<blocks_for(count), kThreads, 0, st>>>(d, s, count);
      break;
  }
}

template <class T, template <class> class W>
bool dispatch_op(bc_op_t op, void *dst, const void *src, int64_t count) {
  switch (op) {
    case BC_SUM:
    case BC_AVG: launch<T, W<Sum>>(dst, src, count); return true;
    case BC_PROD: launch<T, W<Prod>>(dst, src, count); return true;
    case BC_MIN: launch<T, W<Min>>(dst, src, count); return true;
    case BC_MAX: launch<T, W<Max>>(dst, src, count); return true;
    default: return false;
  }
}

}  // namespace

Status reduce_into_cuda(void *dst, const void *src, int64_t count, bc_dtype_t dtype, bc_op_t op) {
  BC_CHECK(reduce_check_cuda(dtype, op));
  BC_CHECK(cuda_usable());
  if (count == 0) return BC_OK;
  if (!dst || !src) return BC_FAIL(BC_ERR_INVALID_ARG, "device reduction: null buffer with count %lld", (long long)count);
  bool ok = false;
  switch (dtype) {
    case BC_FLOAT32: ok = dispatch_op<float, Plain>(op, dst, src, count); break;
    case BC_FLOAT64: ok = dispatch_op<double, Plain>(op, dst, src, count); break;
    case BC_FLOAT16: ok = dispatch_op<uint16_t, Half>(op, dst, src, count); break;
    case BC_BFLOAT16: ok = dispatch_op<uint16_t, BF16>(op, dst, src, count); break;
    default: break;
  }
  if (!ok) return BC_FAIL(BC_ERR_INTERNAL, "no device kernel for %s %s", bc_dtype_name(dtype), bc_op_name(op));
  BC_CHECK(finish_launch("reduction kernel", dtype, op));
  return BC_OK;
}

Status reduce_finish_avg_cuda(void *buf, int64_t count, bc_dtype_t dtype, int divisor) {
  BC_CHECK(reduce_check_cuda(dtype, BC_AVG));
  if (divisor <= 0) return BC_FAIL(BC_ERR_INVALID_ARG, "avg divisor %d is not positive", divisor);
  BC_CHECK(cuda_usable());
  if (count == 0) return BC_OK;
  auto *p = static_cast<unsigned char *>(buf);
  const size_t elem = bc_dtype_size(dtype);
  const bool bytes = reinterpret_cast<uintptr_t>(buf) % elem != 0;
  const unsigned blocks = blocks_for(count);
  cudaStream_t st = cudaStreamPerThread;
  switch (dtype) {
    case BC_FLOAT32: divide_kernel<float, Same, Same><<<blocks, kThreads, 0, st>>>(p, count, float(divisor), bytes); break;
    case BC_FLOAT64: divide_kernel<double, Same, Same><<<blocks, kThreads, 0, st>>>(p, count, double(divisor), bytes); break;
    case BC_FLOAT16: divide_kernel<uint16_t, FromHalf, ToHalf><<<blocks, kThreads, 0, st>>>(p, count, float(divisor), bytes); break;
    default: divide_kernel<uint16_t, FromBF16, ToBF16><<<blocks, kThreads, 0, st>>>(p, count, float(divisor), bytes); break;
  }
  BC_CHECK(finish_launch("avg divide kernel", dtype, BC_AVG));
  return BC_OK;
}

}  // namespace bc
