// The fp16/bf16 conversions and float combinations of the device kernels, as
// source that compiles for host and device alike. reduce_cuda.cu uses them on
// the GPU; the unit tests compile the same source on the host and compare it,
// exhaustively for fp16/bf16, with the host reductions' own conversions
// (reduce.cc, tuned for GCC's vectoriser), so device and host round alike.
// Only plain IEEE float adds and integer operations: no FMA can form, and CUDA
// keeps denormals without -ftz (this project never passes fast-math to nvcc).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define BC_HD __host__ __device__ __forceinline__
#else
#define BC_HD inline
#endif

namespace bc {
namespace hb {

BC_HD uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
BC_HD float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// After Fabian Giesen's half_to_float_fast / float_to_half_fast3_rtne, as in reduce.cc.
BC_HD float h2f(uint16_t h) {
  const uint32_t o = uint32_t(h & 0x7fffu) << 13;
  const uint32_t e = o & 0x0f800000u;
  const uint32_t normal = o + 0x38000000u;
  const uint32_t infnan = o + 0x70000000u;
  const uint32_t sub = f2u(u2f(o + 0x38800000u) - u2f(0x38800000u));
  uint32_t mag = e == 0 ? sub : normal;
  mag = e == 0x0f800000u ? infnan : mag;
  return u2f(mag | (uint32_t(h & 0x8000u) << 16));
}

BC_HD uint16_t f2h(float f) {
  const uint32_t u = f2u(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t sub = f2u(u2f(a) + 0.5f) - f2u(0.5f);
  const uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint32_t mag = a < 0x38800000u ? sub : normal;
  mag = a >= 0x47800000u ? 0x7c00u : mag;
  mag = a > 0x7f800000u ? nan : mag;
  return uint16_t(mag | sign);
}

BC_HD float b2f(uint16_t b) { return u2f(uint32_t(b) << 16); }

BC_HD uint16_t f2b(float f) {
  const uint32_t u = f2u(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// The combinations, NaN-propagating min/max as on host.
struct Sum {
  template <class T>
  BC_HD T operator()(T a, T b) const { return a + b; }
};
struct Prod {
  template <class T>
  BC_HD T operator()(T a, T b) const { return a * b; }
};
struct Min {
  template <class T>
  BC_HD T operator()(T a, T b) const { return ((a < b) | (a != a)) ? a : b; }
};
struct Max {
  template <class T>
  BC_HD T operator()(T a, T b) const { return ((a > b) | (a != a)) ? a : b; }
};
template <class Op>
struct Half {
  BC_HD uint16_t operator()(uint16_t a, uint16_t b) const { return f2h(Op()(h2f(a), h2f(b))); }
};
template <class Op>
struct BF16 {
  BC_HD uint16_t operator()(uint16_t a, uint16_t b) const { return f2b(Op()(b2f(a), b2f(b))); }
};
template <class Op>
struct Plain {
  template <class T>
  BC_HD T operator()(T a, T b) const { return Op()(a, b); }
};

}  // namespace hb
}  // namespace bc
