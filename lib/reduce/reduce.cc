#include "reduce/reduce.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "bc_config.h"
#include "reduce/reduce_cuda.h"

namespace bc {
namespace {

// The rows and columns of the dispatch table are indexed by these values.
static_assert(BC_FLOAT32 == 0 && BC_UINT64 == 9 && BC_DTYPE_COUNT == 10, "dtype order");
static_assert(BC_SUM == 0 && BC_BXOR == 7 && BC_OP_COUNT == 8, "op order");

const char *const kDtypeNames[BC_DTYPE_COUNT] = {"float32", "float64", "float16", "bfloat16",
                                                 "int8",    "uint8",   "int32",   "uint32",
                                                 "int64",   "uint64"};
const char *const kOpNames[BC_OP_COUNT] = {"sum", "prod", "min", "max",
                                           "avg", "band", "bor", "bxor"};
const size_t kDtypeSize[BC_DTYPE_COUNT] = {4, 8, 2, 2, 1, 1, 4, 4, 8, 8};

inline uint32_t f2u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float u2f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The conversions compute every path and select, without branches or tables,
// so that the fp16/bf16 loops vectorise like the others. The selects are mask
// blends, not ?:, because GCC otherwise sinks the subnormal path's float op
// under a branch, and if-conversion then refuses it ("could trap" under the
// default -ftrapping-math) and gives up on the resulting three-way merges.
inline uint32_t blend(bool c, uint32_t x, uint32_t y) {
  const uint32_t m = 0u - uint32_t(c);
  return (x & m) | (y & ~m);
}
// After Fabian Giesen's half_to_float_fast / float_to_half_fast3_rtne.
inline float h2f(uint16_t h) {
  const uint32_t o = uint32_t(h & 0x7fffu) << 13;  // exponent+mantissa, float position
  const uint32_t e = o & 0x0f800000u;
  const uint32_t normal = o + 0x38000000u;  // rebias 15 -> 127
  const uint32_t infnan = o + 0x70000000u;  // exponent 31 -> 255, payload kept
  // A subnormal m*2^-24 is (1 + m/1024)*2^-14 - 2^-14: exact in float.
  const uint32_t sub = f2u(u2f(o + 0x38800000u) - u2f(0x38800000u));
  uint32_t mag = blend(e == 0, sub, normal);
  mag = blend(e == 0x0f800000u, infnan, mag);
  return u2f(mag | (uint32_t(h & 0x8000u) << 16));
}

inline uint16_t f2h(float f) {
  const uint32_t u = f2u(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  // Below 2^-14 the result is subnormal: adding 0.5 makes the FPU's own
  // round-to-nearest-even shift the bits into place.
  const uint32_t sub = f2u(u2f(a) + 0.5f) - f2u(0.5f);
  // Normal: rebias, then add just under half an ulp plus the odd bit (RNE);
  // a carry out of the mantissa bumps the exponent, up to inf at 65520.
  const uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);  // quiet, top payload kept
  uint32_t mag = blend(a < 0x38800000u, sub, normal);
  mag = blend(a >= 0x47800000u, 0x7c00u, mag);  // >= 65536, and inf
  mag = blend(a > 0x7f800000u, nan, mag);
  return uint16_t(mag | sign);
}

inline float b2f(uint16_t b) { return u2f(uint32_t(b) << 16); }

inline uint16_t f2b(float f) {
  const uint32_t u = f2u(f);
  // bf16 keeps float's exponent range, so RNE on the bits handles subnormals
  // and the overflow of the largest finite values to inf.
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;  // rounding could carry a NaN into inf
  return uint16_t(blend((u & 0x7fffffffu) > 0x7f800000u, nan, rounded));
}

// Integer sum and prod go through the unsigned type of the same width: two's
// complement wrap without signed-overflow UB.
template <class T>
using U = std::make_unsigned_t<T>;

struct Sum {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return T(U<T>(U<T>(a) + U<T>(b)));
    else return a + b;
  }
};
struct Prod {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return T(U<T>(U<T>(a) * U<T>(b)));
    else return a * b;
  }
};
// Floating min/max propagate NaN: if either input is NaN the result is NaN,
// whatever the order of combination, so a NaN on any rank reaches every rank
// (fmin would hide it, and a bare a < b ? a : b depends on the operand order).
// +0 and -0 compare equal; which of them is kept depends on the order.
// The `|` (not `||`) keeps the select branch-free for the vectoriser.
struct Min {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return a < b ? a : b;
    else return ((a < b) | (a != a)) ? a : b;
  }
};
struct Max {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return a > b ? a : b;
    else return ((a > b) | (a != a)) ? a : b;
  }
};
struct BAnd {
  template <class T>
  T operator()(T a, T b) const { return T(a & b); }
};
struct BOr {
  template <class T>
  T operator()(T a, T b) const { return T(a | b); }
};
struct BXor {
  template <class T>
  T operator()(T a, T b) const { return T(a ^ b); }
};

// fp16/bf16: widen, combine in float, round back after every combination.
template <class Op>
struct Half {
  uint16_t operator()(uint16_t a, uint16_t b) const { return f2h(Op()(h2f(a), h2f(b))); }
};
template <class Op>
struct BF16 {
  uint16_t operator()(uint16_t a, uint16_t b) const { return f2b(Op()(b2f(a), b2f(b))); }
};

template <class T, class F>
void loop(T *__restrict__ d, const T *__restrict__ s, int64_t n) {
  const F f;
  for (int64_t i = 0; i < n; ++i) d[i] = f(d[i], s[i]);
}
// In place (dst == src) the two restrict pointers would alias, so it gets
// its own single-pointer loop.
template <class T, class F>
void loop_self(T *__restrict__ d, int64_t n) {
  const F f;
  for (int64_t i = 0; i < n; ++i) d[i] = f(d[i], d[i]);
}

using Kernel = void (*)(void *, const void *, int64_t);

template <class T, class F>
void kernel(void *dst, const void *src, int64_t n) {
  if (dst == src) loop_self<T, F>(static_cast<T *>(dst), n);
  else loop<T, F>(static_cast<T *>(dst), static_cast<const T *>(src), n);
}

using Row = std::array<Kernel, BC_OP_COUNT>;
using Table = std::array<Row, BC_DTYPE_COUNT>;

// Unsupported pairs stay null; reduce_check explains why.
template <class T>
constexpr Row int_row() {
  return {kernel<T, Sum>, kernel<T, Prod>, kernel<T, Min>, kernel<T, Max>, nullptr,
          kernel<T, BAnd>, kernel<T, BOr>, kernel<T, BXor>};
}
template <class T, template <class> class W>
constexpr Row wide_row() {  // avg reduces as sum
  return {kernel<T, W<Sum>>, kernel<T, W<Prod>>, kernel<T, W<Min>>, kernel<T, W<Max>>,
          kernel<T, W<Sum>>, nullptr, nullptr, nullptr};
}
template <class Op>
using Plain = Op;

constexpr Table make_table() {
  Table t{};
  t[BC_FLOAT32] = wide_row<float, Plain>();
  t[BC_FLOAT64] = wide_row<double, Plain>();
  t[BC_FLOAT16] = wide_row<uint16_t, Half>();
  t[BC_BFLOAT16] = wide_row<uint16_t, BF16>();
  t[BC_INT8] = int_row<int8_t>();
  t[BC_UINT8] = int_row<uint8_t>();
  t[BC_INT32] = int_row<int32_t>();
  t[BC_UINT32] = int_row<uint32_t>();
  t[BC_INT64] = int_row<int64_t>();
  t[BC_UINT64] = int_row<uint64_t>();
  return t;
}
constexpr Table kTable = make_table();

template <class T, class Div, class Load, class Store>
void divide_loop(T *__restrict__ p, int64_t n, Div div, Load load, Store store) {
  for (int64_t i = 0; i < n; ++i) p[i] = store(load(p[i]) / div);
}

// Divides an element-aligned buffer; the dtype is a floating one.
void divide(void *buf, int64_t n, bc_dtype_t dtype, int divisor) {
  const auto same = [](auto x) { return x; };
  if (dtype == BC_FLOAT32)
    divide_loop(static_cast<float *>(buf), n, float(divisor), same, same);
  else if (dtype == BC_FLOAT64)
    divide_loop(static_cast<double *>(buf), n, double(divisor), same, same);
  else if (dtype == BC_FLOAT16)
    divide_loop(static_cast<uint16_t *>(buf), n, float(divisor),
                [](uint16_t x) { return h2f(x); }, [](float x) { return f2h(x); });
  else
    divide_loop(static_cast<uint16_t *>(buf), n, float(divisor),
                [](uint16_t x) { return b2f(x); }, [](float x) { return f2b(x); });
}

bool misaligned(const void *p, bc_dtype_t dtype) {
  return reinterpret_cast<uintptr_t>(p) % kDtypeSize[dtype] != 0;
}

// A buffer not aligned to its elements cannot be read through typed pointers
// (UB, and the vector loops' aligned accesses could fault), but C callers can
// hand one over. Rather than fail half-way through a collective, such calls
// run `fn` on aligned copies, a chunk at a time: slower, still vectorised.
template <class Fn>
void bounced(void *dst, const void *src, int64_t count, size_t size, Fn fn) {
  alignas(64) unsigned char bd[4096], bs[4096];
  const int64_t chunk = int64_t(sizeof bd / size);
  for (int64_t i = 0; i < count; i += chunk) {
    const int64_t m = std::min(chunk, count - i);
    unsigned char *d = static_cast<unsigned char *>(dst) + i * size;
    std::memcpy(bd, d, m * size);
    if (src) std::memcpy(bs, static_cast<const unsigned char *>(src) + i * size, m * size);
    fn(bd, bs, m);
    std::memcpy(d, bd, m * size);
  }
}

// The host kernel on checked arguments: through aligned bounce chunks when
// either pointer is not aligned to the element (reduce_into, Reducer::apply).
void run_kernel(void *dst, const void *src, int64_t count, bc_dtype_t dtype, Kernel k) {
  if (misaligned(dst, dtype) || misaligned(src, dtype))
    bounced(dst, src, count, kDtypeSize[dtype], k);
  else
    k(dst, src, count);
}

// Shared argument checks of reduce_into and reduce_finish_avg.
Status check_buffer(const void *p, const char *what, int64_t count, bc_memtype_t mem) {
  if (count < 0) return BC_FAIL(BC_ERR_INVALID_ARG, "negative count %lld", (long long)count);
  const int m = static_cast<int>(mem);
  if (m < 0 || m >= BC_MEM_COUNT) return BC_FAIL(BC_ERR_INVALID_ARG, "unknown memory type %d", m);
  // AUTO means host here: the API resolves device buffers before they get
  // this far, and device calls go to reduce_cuda.cu before this check.
  if (mem != BC_MEM_HOST && mem != BC_MEM_AUTO)
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "device-buffer reductions need a CUDA build (meson -Dcuda=enabled)");
  if (count == 0) return BC_OK;
  if (p == nullptr)
    return BC_FAIL(BC_ERR_INVALID_ARG, "%s is null with count %lld", what, (long long)count);
  return BC_OK;
}

}  // namespace

bool dtype_is_valid(bc_dtype_t dtype) {
  const int d = static_cast<int>(dtype);
  return d >= 0 && d < BC_DTYPE_COUNT;
}
bool op_is_valid(bc_op_t op) {
  const int o = static_cast<int>(op);
  return o >= 0 && o < BC_OP_COUNT;
}
bool dtype_is_floating(bc_dtype_t dtype) {
  return dtype == BC_FLOAT32 || dtype == BC_FLOAT64 || dtype == BC_FLOAT16 ||
         dtype == BC_BFLOAT16;
}

Status reduce_check(bc_dtype_t dtype, bc_op_t op) {
  if (!dtype_is_valid(dtype)) return BC_FAIL(BC_ERR_INVALID_ARG, "unknown dtype %d", int(dtype));
  if (!op_is_valid(op)) return BC_FAIL(BC_ERR_INVALID_ARG, "unknown op %d", int(op));
  if (kTable[dtype][op] != nullptr) return BC_OK;
  const char *kind = dtype_is_floating(dtype) ? "integer" : "floating";
  return BC_FAIL(BC_ERR_NOT_SUPPORTED, "%s is defined for %s types only, not %s", kOpNames[op],
                 kind, kDtypeNames[dtype]);
}

Status reduce_check_cuda(bc_dtype_t dtype, bc_op_t op) {
  BC_CHECK(reduce_check(dtype, op));
  if (!dtype_is_floating(dtype) || op == BC_BAND || op == BC_BOR || op == BC_BXOR)
    return BC_FAIL(BC_ERR_NOT_SUPPORTED,
                   "%s %s is not implemented on device buffers (float32, float64, float16, bfloat16 with "
                   "sum, prod, min, max, avg are)", kDtypeNames[dtype], kOpNames[op]);
  return BC_OK;
}

Status reduce_into(void *dst, const void *src, int64_t count, bc_dtype_t dtype, bc_op_t op,
                   bc_memtype_t mem) {
#if BC_HAVE_CUDA
  if (mem == BC_MEM_CUDA) return reduce_into_cuda(dst, src, count, dtype, op);
#endif
  BC_CHECK(reduce_check(dtype, op));
  BC_CHECK(check_buffer(dst, "dst", count, mem));
  BC_CHECK(check_buffer(src, "src", count, mem));
  if (count == 0) return BC_OK;
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  const uintptr_t bytes = uintptr_t(count) * kDtypeSize[dtype];
  if (d != s && d < s + bytes && s < d + bytes)
    return BC_FAIL(BC_ERR_INVALID_ARG, "dst and src overlap without being equal");
  run_kernel(dst, src, count, dtype, kTable[dtype][op]);
  return BC_OK;
}

Status reducer_for(bc_dtype_t dtype, bc_op_t op, bc_memtype_t mem, Reducer *out) {
  *out = Reducer();
#if BC_HAVE_CUDA
  if (mem == BC_MEM_CUDA) {
    BC_CHECK(reduce_check_cuda(dtype, op));
    out->dtype = dtype;
    out->op = op;
    out->mem = mem;
    return BC_OK;
  }
#endif
  BC_CHECK(reduce_check(dtype, op));
  BC_CHECK(check_buffer(out, "reducer", 0, mem));  // the memory type alone
  out->dtype = dtype;
  out->op = op;
  out->mem = BC_MEM_HOST;
  out->kernel = kTable[dtype][op];
  return BC_OK;
}

Status Reducer::apply(void *dst, const void *src, int64_t count) const {
#if BC_HAVE_CUDA
  if (mem == BC_MEM_CUDA) return reduce_into_cuda(dst, src, count, dtype, op);
#endif
  if (kernel == nullptr) return BC_FAIL(BC_ERR_INTERNAL, "reduction used before reducer_for() checked it");
  if (count > 0) run_kernel(dst, src, count, dtype, kernel);
  return BC_OK;
}

Status reduce_finish_avg(void *buf, int64_t count, bc_dtype_t dtype, int divisor,
                         bc_memtype_t mem) {
#if BC_HAVE_CUDA
  if (mem == BC_MEM_CUDA) return reduce_finish_avg_cuda(buf, count, dtype, divisor);
#endif
  BC_CHECK(reduce_check(dtype, BC_AVG));
  if (divisor <= 0) return BC_FAIL(BC_ERR_INVALID_ARG, "avg divisor %d is not positive", divisor);
  BC_CHECK(check_buffer(buf, "buf", count, mem));
  if (!misaligned(buf, dtype)) {
    divide(buf, count, dtype, divisor);
  } else {
    bounced(buf, nullptr, count, kDtypeSize[dtype],
            [&](void *d, const void *, int64_t m) { divide(d, m, dtype, divisor); });
  }
  return BC_OK;
}

float half_to_float(uint16_t h) { return h2f(h); }
uint16_t float_to_half(float f) { return f2h(f); }
float bf16_to_float(uint16_t b) { return b2f(b); }
uint16_t float_to_bf16(float f) { return f2b(f); }

}  // namespace bc
