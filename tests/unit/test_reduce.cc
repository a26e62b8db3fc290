// Tests for lib/reduce: every dtype x op pair against a scalar reference,
// the fp16/bf16 conversions (exhaustively where 16 bits allow), NaN and
// rounding semantics, integer wraparound, odd counts and offset pointers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "reduce/reduce.h"

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

namespace {

using bc::Status;

struct DtypeInfo {
  bc_dtype_t dtype;
  const char *name;
  size_t size;
  bool floating;
  bool is_signed;
};

const DtypeInfo kDtypes[] = {
    {BC_FLOAT32, "float32", 4, true, true},  {BC_FLOAT64, "float64", 8, true, true},
    {BC_FLOAT16, "float16", 2, true, true},  {BC_BFLOAT16, "bfloat16", 2, true, true},
    {BC_INT8, "int8", 1, false, true},       {BC_UINT8, "uint8", 1, false, false},
    {BC_INT32, "int32", 4, false, true},     {BC_UINT32, "uint32", 4, false, false},
    {BC_INT64, "int64", 8, false, true},     {BC_UINT64, "uint64", 8, false, false},
};
const char *const kOpNames[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};

bool expect_supported(const DtypeInfo &dt, bc_op_t op) {
  if (op == BC_AVG) return dt.floating;
  if (op == BC_BAND || op == BC_BOR || op == BC_BXOR) return !dt.floating;
  return true;
}

uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bitsf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double load_float(bc_dtype_t d, const unsigned char *p) {
  switch (d) {
    case BC_FLOAT32: { float f; std::memcpy(&f, p, 4); return f; }
    case BC_FLOAT64: { double x; std::memcpy(&x, p, 8); return x; }
    case BC_FLOAT16: { uint16_t h; std::memcpy(&h, p, 2); return bc::half_to_float(h); }
    case BC_BFLOAT16: { uint16_t b; std::memcpy(&b, p, 2); return bc::bf16_to_float(b); }
    default: FAIL("not a floating dtype"); return 0;
  }
}
void store_float(bc_dtype_t d, unsigned char *p, double v) {
  switch (d) {
    case BC_FLOAT32: { float f = float(v); std::memcpy(p, &f, 4); break; }
    case BC_FLOAT64: std::memcpy(p, &v, 8); break;
    case BC_FLOAT16: { uint16_t h = bc::float_to_half(float(v)); std::memcpy(p, &h, 2); break; }
    case BC_BFLOAT16: { uint16_t b = bc::float_to_bf16(float(v)); std::memcpy(p, &b, 2); break; }
    default: FAIL("not a floating dtype");
  }
}

// Raw little-endian bits, zero-extended; sign-extended on request.
uint64_t load_bits(const unsigned char *p, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, p, size);
  return v;
}
int64_t sign_extend(uint64_t v, size_t size) {
  if (size == 8) return int64_t(v);
  const unsigned shift = unsigned(64 - 8 * size);
  return int64_t(v << shift) >> shift;  // arithmetic shift: GCC and C++20 semantics
}

// One reference combination. Integers: exact uint64 arithmetic, truncated to
// the width on store, so wraparound is checked against modular arithmetic.
void reference(const DtypeInfo &dt, bc_op_t op, unsigned char *d, const unsigned char *s) {
  if (dt.floating) {
    const double a = load_float(dt.dtype, d), b = load_float(dt.dtype, s);
    double r = 0;
    switch (op) {
      case BC_SUM: case BC_AVG: r = a + b; break;
      case BC_PROD: r = a * b; break;
      case BC_MIN: r = std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); break;
      case BC_MAX: r = std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); break;
      default: FAIL("bad op");
    }
    store_float(dt.dtype, d, r);
    return;
  }
  const uint64_t a = load_bits(d, dt.size), b = load_bits(s, dt.size);
  const bool a_less = dt.is_signed ? sign_extend(a, dt.size) < sign_extend(b, dt.size) : a < b;
  uint64_t r = 0;
  switch (op) {
    case BC_SUM: r = a + b; break;
    case BC_PROD: r = a * b; break;
    case BC_MIN: r = a_less ? a : b; break;
    case BC_MAX: r = a_less ? b : a; break;
    case BC_BAND: r = a & b; break;
    case BC_BOR: r = a | b; break;
    case BC_BXOR: r = a ^ b; break;
    default: FAIL("bad op");
  }
  std::memcpy(d, &r, dt.size);
}

// Floats get small integers, so every reference result is exact in every
// format; integers get arbitrary bits.
void fill(const DtypeInfo &dt, unsigned char *p, int64_t n, std::mt19937_64 &rng) {
  for (int64_t i = 0; i < n; ++i) {
    if (dt.floating) store_float(dt.dtype, p + i * dt.size, double(int(rng() % 17) - 8));
    else {
      const uint64_t v = rng();
      std::memcpy(p + i * dt.size, &v, dt.size);
    }
  }
}

bool same_or_both_nan(const DtypeInfo &dt, const unsigned char *x, const unsigned char *y) {
  if (std::memcmp(x, y, dt.size) == 0) return true;
  return dt.floating && std::isnan(load_float(dt.dtype, x)) && std::isnan(load_float(dt.dtype, y));
}

// Runs one pair on `count` elements with dst/src offset by whole elements
// (and optionally by bytes, misaligning them) from a 16-byte-aligned
// allocation, and checks the elements before dst and the guard element after.
void check_pair(const DtypeInfo &dt, bc_op_t op, int64_t count, int dst_off, int src_off,
                std::mt19937_64 &rng, int dst_shift = 0, int src_shift = 0) {
  const size_t sz = dt.size;
  std::vector<unsigned char> dbuf((count + 2) * sz + 8), sbuf((count + 2) * sz + 8);
  unsigned char *dbase = dbuf.data() + dst_shift, *sbase = sbuf.data() + src_shift;
  fill(dt, dbase, count + 2, rng);
  fill(dt, sbase, count + 2, rng);
  unsigned char *d = dbase + dst_off * sz;
  const unsigned char *s = sbase + src_off * sz;
  std::vector<unsigned char> expect(dbuf);
  unsigned char *ebase = expect.data() + dst_shift;
  for (int64_t i = 0; i < count; ++i) reference(dt, op, ebase + (dst_off + i) * sz, s + i * sz);

  REQUIRE(bc::reduce_into(d, s, count, dt.dtype, op, BC_MEM_HOST) == BC_OK);
  int64_t bad = 0, first_bad = -1;
  for (int64_t i = 0; i < count + 2 - dst_off; ++i) {
    const size_t at = (dst_off + i) * sz;
    if (!same_or_both_nan(dt, dbase + at, ebase + at)) {
      if (first_bad < 0) first_bad = i;
      ++bad;
    }
  }
  INFO(dt.name << " " << kOpNames[op] << " count " << count << " dst+" << dst_off << " src+"
               << src_off << " bytes +" << dst_shift << "/+" << src_shift << " first bad index "
               << first_bad);
  CHECK(bad == 0);
  CHECK(std::memcmp(dbuf.data(), expect.data(), dst_shift + dst_off * sz) == 0);  // before dst
}

std::string last_error() { return bc::last_error(); }

// Independent decoding of a binary16 pattern.
double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}

}  // namespace

TEST_CASE("dtype and op predicates", "[reduce]") {
  for (const auto &dt : kDtypes) {
    CHECK(bc::dtype_is_valid(dt.dtype));
    CHECK(bc::dtype_is_floating(dt.dtype) == dt.floating);
  }
  CHECK_FALSE(bc::dtype_is_valid(BC_DTYPE_COUNT));
  CHECK_FALSE(bc::dtype_is_valid(static_cast<bc_dtype_t>(15)));
  CHECK_FALSE(bc::dtype_is_floating(BC_DTYPE_COUNT));
  for (int op = 0; op < BC_OP_COUNT; ++op) CHECK(bc::op_is_valid(static_cast<bc_op_t>(op)));
  CHECK_FALSE(bc::op_is_valid(BC_OP_COUNT));
  CHECK_FALSE(bc::op_is_valid(static_cast<bc_op_t>(15)));
}

TEST_CASE("reduce_check: every dtype x op pair", "[reduce]") {
  for (const auto &dt : kDtypes) {
    for (int o = 0; o < BC_OP_COUNT; ++o) {
      const auto op = static_cast<bc_op_t>(o);
      INFO(dt.name << " " << kOpNames[o]);
      if (expect_supported(dt, op)) {
        CHECK(bc::reduce_check(dt.dtype, op) == BC_OK);
        continue;
      }
      bc::clear_error();
      CHECK(bc::reduce_check(dt.dtype, op) == BC_ERR_NOT_SUPPORTED);
      const std::string want = std::string(kOpNames[o]) + " is defined for " +
                               (dt.floating ? "integer" : "floating") + " types only, not " +
                               dt.name;
      CHECK_THAT(last_error(), Catch::Matchers::Contains(want));
      // reduce_into refuses the pair too, and leaves dst alone.
      alignas(8) unsigned char d[8] = {1, 2, 3, 4, 5, 6, 7, 8};
      alignas(8) unsigned char s[8] = {0};
      CHECK(bc::reduce_into(d, s, 1, dt.dtype, op, BC_MEM_HOST) == BC_ERR_NOT_SUPPORTED);
      CHECK_THAT(last_error(), Catch::Matchers::Contains(want));
      CHECK(d[0] == 1);
      CHECK(d[7] == 8);
    }
  }
  CHECK(bc::reduce_check(BC_DTYPE_COUNT, BC_SUM) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_check(static_cast<bc_dtype_t>(15), BC_SUM) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_check(BC_FLOAT32, BC_OP_COUNT) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_check(BC_FLOAT32, static_cast<bc_op_t>(15)) == BC_ERR_INVALID_ARG);
  // Any int is a valid enum value only with a fixed underlying type (C++
  // enums without one hold just the bits their enumerators need).
  if constexpr (std::is_same_v<std::underlying_type_t<bc_dtype_t>, int>) {
    CHECK(bc::reduce_check(static_cast<bc_dtype_t>(-1), BC_SUM) == BC_ERR_INVALID_ARG);
    CHECK(bc::reduce_check(static_cast<bc_dtype_t>(99), BC_SUM) == BC_ERR_INVALID_ARG);
    CHECK(bc::reduce_check(BC_INT8, static_cast<bc_op_t>(-1)) == BC_ERR_INVALID_ARG);
    CHECK(bc::reduce_check(BC_INT8, static_cast<bc_op_t>(1000)) == BC_ERR_INVALID_ARG);
    int x = 0;
    CHECK(bc::reduce_into(&x, &x, 1, BC_INT32, BC_SUM, static_cast<bc_memtype_t>(-1)) ==
          BC_ERR_INVALID_ARG);
  }
}

TEST_CASE("reduce_into: every supported pair against the reference", "[reduce]") {
  std::mt19937_64 rng(12345);
  for (const auto &dt : kDtypes) {
    for (int o = 0; o < BC_OP_COUNT; ++o) {
      const auto op = static_cast<bc_op_t>(o);
      if (!expect_supported(dt, op)) continue;
      for (int64_t count : {int64_t(0), int64_t(1), int64_t(7), int64_t(100)}) {
        for (int doff : {0, 1})
          for (int soff : {0, 1}) check_pair(dt, op, count, doff, soff, rng);
      }
      check_pair(dt, op, 1000003, 0, 0, rng);
      check_pair(dt, op, 1000003, 1, 0, rng);
      // Not aligned to the element size: served through aligned bounce
      // chunks (4096 bytes), so also cross a few chunk boundaries.
      if (dt.size > 1) {
        for (int64_t count : {int64_t(1), int64_t(7), int64_t(5000)}) {
          check_pair(dt, op, count, 0, 0, rng, 1, 0);
          check_pair(dt, op, count, 1, 0, rng, 0, 3);
          check_pair(dt, op, count, 0, 0, rng, 1, 1);
        }
      }
    }
  }
}

TEST_CASE("reduce_into: argument errors", "[reduce]") {
  float d[4] = {1, 2, 3, 4}, s[4] = {1, 1, 1, 1};
  CHECK(bc::reduce_into(d, s, -1, BC_FLOAT32, BC_SUM, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_into(nullptr, s, 1, BC_FLOAT32, BC_SUM, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_into(d, nullptr, 1, BC_FLOAT32, BC_SUM, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_into(nullptr, nullptr, 0, BC_FLOAT32, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(bc::reduce_into(d, s, 0, BC_FLOAT32, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(d[0] == 1);
  CHECK(bc::reduce_into(d, s, 4, BC_DTYPE_COUNT, BC_SUM, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_into(d, s, 4, BC_FLOAT32, BC_OP_COUNT, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_into(d, s, 4, BC_FLOAT32, BC_SUM, BC_MEM_COUNT) == BC_ERR_INVALID_ARG);

  bc::clear_error();
  CHECK(bc::reduce_into(d, s, 4, BC_FLOAT32, BC_SUM, BC_MEM_CUDA) == BC_ERR_NOT_SUPPORTED);
  // Without CUDA: "built without CUDA"; with CUDA but no device: "no CUDA device: ...".
  CHECK_THAT(last_error(), Catch::Matchers::Contains("CUDA"));
  CHECK(d[0] == 1);

  CHECK(bc::reduce_into(d, s, 4, BC_FLOAT32, BC_SUM, BC_MEM_AUTO) == BC_OK);
  CHECK(d[3] == 5);

  // Partial overlap is refused; exact aliasing (in place) is allowed.
  float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(bc::reduce_into(buf + 1, buf, 4, BC_FLOAT32, BC_SUM, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_into(buf, buf + 3, 4, BC_FLOAT32, BC_SUM, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_into(buf, buf + 4, 4, BC_FLOAT32, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(buf[0] == 6);

  // Pointers not aligned to their element size still work.
  alignas(8) unsigned char raw[80] = {};
  const int32_t a32[4] = {1, -2, 3, 0x7fffffff}, b32[4] = {10, 20, -30, 1};
  std::memcpy(raw + 1, a32, 16);
  std::memcpy(raw + 35, b32, 16);
  CHECK(bc::reduce_into(raw + 1, raw + 35, 4, BC_INT32, BC_SUM, BC_MEM_HOST) == BC_OK);
  int32_t r32[4];
  std::memcpy(r32, raw + 1, 16);
  CHECK(r32[0] == 11);
  CHECK(r32[1] == 18);
  CHECK(r32[2] == -27);
  CHECK(r32[3] == std::numeric_limits<int32_t>::min());
  // Misaligned and in place.
  const double a64[3] = {1.5, -2, 1e300};
  std::memcpy(raw + 3, a64, 24);
  CHECK(bc::reduce_into(raw + 3, raw + 3, 3, BC_FLOAT64, BC_SUM, BC_MEM_HOST) == BC_OK);
  double r64[3];
  std::memcpy(r64, raw + 3, 24);
  CHECK(r64[0] == 3.0);
  CHECK(r64[1] == -4.0);
  CHECK(r64[2] == 2e300);
}

TEST_CASE("reduce_into: in place (dst == src)", "[reduce]") {
  std::vector<float> f(1001);
  for (size_t i = 0; i < f.size(); ++i) f[i] = float(i);
  REQUIRE(bc::reduce_into(f.data(), f.data(), 1001, BC_FLOAT32, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(f[1000] == 2000.0f);
  CHECK(f[7] == 14.0f);
  std::vector<int32_t> v(1001, 0x5a5a5a5a);
  REQUIRE(bc::reduce_into(v.data(), v.data(), 1001, BC_INT32, BC_BXOR, BC_MEM_HOST) == BC_OK);
  CHECK(v[0] == 0);
  CHECK(v[1000] == 0);
  std::vector<uint16_t> h(9, bc::float_to_half(1.5f));
  REQUIRE(bc::reduce_into(h.data(), h.data(), 9, BC_FLOAT16, BC_PROD, BC_MEM_HOST) == BC_OK);
  CHECK(bc::half_to_float(h[8]) == 2.25f);
}

TEST_CASE("integer sums and products wrap as two's complement", "[reduce]") {
  int8_t a8[] = {100, -128, 127, -100, 16, -128, 127};
  int8_t b8[] = {100, -1, 1, -100, 16, -1, 127};
  REQUIRE(bc::reduce_into(a8, b8, 4, BC_INT8, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(a8[0] == -56);
  CHECK(a8[1] == 127);
  CHECK(a8[2] == -128);
  CHECK(a8[3] == 56);
  REQUIRE(bc::reduce_into(a8 + 4, b8 + 4, 3, BC_INT8, BC_PROD, BC_MEM_HOST) == BC_OK);
  CHECK(a8[4] == 0);     // 256
  CHECK(a8[5] == -128);  // 128
  CHECK(a8[6] == 1);     // 16129 = 63 * 256 + 1

  uint8_t u8[] = {200, 255, 0, 255};
  uint8_t v8[] = {100, 1, 0, 255};
  REQUIRE(bc::reduce_into(u8, v8, 3, BC_UINT8, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(u8[0] == 44);
  CHECK(u8[1] == 0);
  CHECK(u8[2] == 0);
  REQUIRE(bc::reduce_into(u8 + 3, v8 + 3, 1, BC_UINT8, BC_PROD, BC_MEM_HOST) == BC_OK);
  CHECK(u8[3] == 1);

  // A long int8 run, so that the vector body (not just the tail) wraps.
  std::vector<int8_t> x(1003, 120), y(1003, 10);
  REQUIRE(bc::reduce_into(x.data(), y.data(), 1003, BC_INT8, BC_SUM, BC_MEM_HOST) == BC_OK);
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(x[i] == -126);

  int32_t a32[] = {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  int32_t b32[] = {1, -1};
  REQUIRE(bc::reduce_into(a32, b32, 2, BC_INT32, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(a32[0] == std::numeric_limits<int32_t>::min());
  CHECK(a32[1] == std::numeric_limits<int32_t>::max());

  int64_t a64[] = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  int64_t b64[] = {1, -1};
  REQUIRE(bc::reduce_into(a64, b64, 2, BC_INT64, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(a64[0] == std::numeric_limits<int64_t>::min());
  CHECK(a64[1] == std::numeric_limits<int64_t>::max());
  int64_t c64[] = {std::numeric_limits<int64_t>::min()}, m1[] = {-1};
  REQUIRE(bc::reduce_into(c64, m1, 1, BC_INT64, BC_PROD, BC_MEM_HOST) == BC_OK);
  CHECK(c64[0] == std::numeric_limits<int64_t>::min());

  uint64_t u64[] = {~uint64_t(0)}, one[] = {1};
  REQUIRE(bc::reduce_into(u64, one, 1, BC_UINT64, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(u64[0] == 0);
}

TEST_CASE("floating min/max propagate NaN in either operand", "[reduce]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const double dv[] = {nan, 1, nan, 1, -inf, 2, 5};
  const double sv[] = {1, nan, nan, 2, 3, inf, -0.5};
  const double want_min[] = {nan, nan, nan, 1, -inf, 2, -0.5};
  const double want_max[] = {nan, nan, nan, 2, 3, inf, 5};
  for (const auto &dt : kDtypes) {
    if (!dt.floating) continue;
    for (bc_op_t op : {BC_MIN, BC_MAX}) {
      // Repeated so that the vector body sees NaNs in every lane.
      const int n = 7 * 37;
      std::vector<unsigned char> d(n * dt.size), s(n * dt.size);
      for (int i = 0; i < n; ++i) {
        store_float(dt.dtype, d.data() + i * dt.size, dv[i % 7]);
        store_float(dt.dtype, s.data() + i * dt.size, sv[i % 7]);
      }
      REQUIRE(bc::reduce_into(d.data(), s.data(), n, dt.dtype, op, BC_MEM_HOST) == BC_OK);
      const double *want = op == BC_MIN ? want_min : want_max;
      for (int i = 0; i < n; ++i) {
        INFO(dt.name << " " << kOpNames[op] << " element " << i);
        const double got = load_float(dt.dtype, d.data() + i * dt.size);
        if (std::isnan(want[i % 7])) CHECK(std::isnan(got));
        else CHECK(got == want[i % 7]);
      }
    }
  }
}

TEST_CASE("fp16/bf16 round after every combination", "[reduce]") {
  auto h = [](float f) { return bc::float_to_half(f); };
  //            2048+1 tie->2048  2050+1 tie->2052  overflow->inf    2^-24+2^-24
  uint16_t d[] = {h(2048), h(2050), h(65504), uint16_t(0x0001), h(-65504)};
  uint16_t s[] = {h(1), h(1), h(65504), uint16_t(0x0001), h(-15)};
  REQUIRE(bc::reduce_into(d, s, 5, BC_FLOAT16, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(d[0] == h(2048));
  CHECK(d[1] == h(2052));
  CHECK(d[2] == 0x7c00);
  CHECK(d[3] == 0x0002);
  CHECK(d[4] == 0xfbff);  // -65519 is below the overflow threshold: back to -65504
  // Products into the subnormal range: 2^-24 * 0.5 ties to 0, 1.5 * 2^-24 ties to 2^-23.
  uint16_t p[] = {0x0001, 0x0003, h(300)};
  uint16_t q[] = {h(0.5f), h(0.5f), h(300)};
  REQUIRE(bc::reduce_into(p, q, 3, BC_FLOAT16, BC_PROD, BC_MEM_HOST) == BC_OK);
  CHECK(p[0] == 0x0000);
  CHECK(p[1] == 0x0002);
  CHECK(p[2] == 0x7c00);

  auto b = [](float f) { return bc::float_to_bf16(f); };
  uint16_t bd[] = {b(256), b(258), b(3.0e38f)};
  uint16_t bs[] = {b(1), b(1), b(3.0e38f)};
  REQUIRE(bc::reduce_into(bd, bs, 3, BC_BFLOAT16, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(bd[0] == b(256));
  CHECK(bd[1] == b(260));
  CHECK(bd[2] == 0x7f80);

  // Accumulating many small terms: each step rounds, so 2048 + 1 + 1 ... stays 2048.
  std::vector<uint16_t> acc(33, h(2048)), one(33, h(1));
  for (int k = 0; k < 10; ++k)
    REQUIRE(bc::reduce_into(acc.data(), one.data(), 33, BC_FLOAT16, BC_SUM, BC_MEM_HOST) == BC_OK);
  CHECK(acc[0] == h(2048));
  CHECK(acc[32] == h(2048));
}

TEST_CASE("half: all 65536 patterns decode and round-trip", "[reduce][fp16]") {
  int bad_decode = 0, bad_trip = 0, bad_nan = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float f = bc::half_to_float(h);
    const bool sign = (h & 0x8000) != 0;
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) {
      const uint16_t back = bc::float_to_half(f);
      // A quiet NaN comes back bit for bit; a signalling one comes back quieted.
      if (!std::isnan(f) || back != (h | 0x0200)) ++bad_nan;
      continue;
    }
    const double want = (h & 0x7fff) == 0x7c00 ? (sign ? -INFINITY : INFINITY) : half_value(h);
    if (double(f) != want || std::signbit(f) != sign) ++bad_decode;
    if (bc::float_to_half(f) != h) ++bad_trip;
  }
  CHECK(bad_decode == 0);
  CHECK(bad_trip == 0);
  CHECK(bad_nan == 0);
}

TEST_CASE("half: round to nearest even at every midpoint", "[reduce][fp16]") {
  // Between each pair of adjacent finite halves (and 65504 and "65536", the
  // overflow threshold), the exact midpoint goes to the even one and the
  // floats either side of it go to the nearer one.
  int bad = 0;
  for (uint32_t i = 0; i < 0x7c00; ++i) {
    const double lo = half_value(uint16_t(i));
    const double hi = i + 1 == 0x7c00 ? 65536.0 : half_value(uint16_t(i + 1));
    const float mid = float((lo + hi) / 2);  // 12 significant bits: exact
    REQUIRE(double(mid) == (lo + hi) / 2);
    const uint16_t even = (i & 1) ? uint16_t(i + 1) : uint16_t(i);
    for (int sgn = 0; sgn < 2; ++sgn) {
      const float m = sgn ? -mid : mid;
      const uint16_t sb = sgn ? 0x8000 : 0;
      if (bc::float_to_half(m) != (even | sb)) ++bad;
      if (bc::float_to_half(std::nextafter(m, 0.0f)) != (i | sb)) ++bad;
      if (bc::float_to_half(std::nextafter(m, sgn ? -INFINITY : INFINITY)) != ((i + 1) | sb)) ++bad;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("half: named cases", "[reduce][fp16]") {
  using bc::float_to_half;
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie, even below
  CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie, even above
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  CHECK(float_to_half(std::ldexp(1.0f, -14)) == 0x0400);        // smallest normal
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);        // smallest subnormal
  CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);        // tie to even (zero)
  CHECK(float_to_half(std::ldexp(3.0f, -25)) == 0x0002);        // tie to even (2)
  CHECK(float_to_half(std::ldexp(1.0f, -25) * 1.0001f) == 0x0001);
  CHECK(float_to_half(std::ldexp(1023.5f, -24)) == 0x0400);     // subnormal rounds up to normal
  CHECK(float_to_half(std::ldexp(1.0f, -30)) == 0x0000);
  CHECK(float_to_half(-std::ldexp(1.0f, -30)) == 0x8000);
  CHECK(float_to_half(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(float_to_half(-0.0f) == 0x8000);
  CHECK(float_to_half(65504.0f) == 0x7bff);
  CHECK(float_to_half(65519.99f) == 0x7bff);
  CHECK(float_to_half(65520.0f) == 0x7c00);  // tie between 65504 (odd) and 65536: inf
  CHECK(float_to_half(1e10f) == 0x7c00);
  CHECK(float_to_half(-1e10f) == 0xfc00);
  CHECK(float_to_half(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(float_to_half(INFINITY) == 0x7c00);
  CHECK(float_to_half(-INFINITY) == 0xfc00);
  const uint16_t n = float_to_half(NAN);
  CHECK((n & 0x7c00) == 0x7c00);
  CHECK((n & 0x03ff) != 0);
  CHECK((float_to_half(bitsf(0x7f800001)) & 0x7fff) > 0x7c00);  // signalling NaN stays NaN
  CHECK((float_to_half(bitsf(0xff800001)) & 0x8000) != 0);
  CHECK(bc::half_to_float(0x7c00) == INFINITY);
  CHECK(bc::half_to_float(0xfc00) == -INFINITY);
  CHECK(std::isnan(bc::half_to_float(0x7c01)));
  CHECK(std::isnan(bc::half_to_float(0xfe00)));
  CHECK(bc::half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(bc::half_to_float(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(bc::half_to_float(0x3555) == 0.333251953125f);
}

#if defined(__SSE2__)
TEST_CASE("half: conversions and sums are immune to FTZ/DAZ", "[reduce][fp16]") {
  // Programs linked with -ffast-math run with flush-to-zero and
  // denormals-are-zero. Half subnormals are normal floats, and the conversions
  // never feed a float subnormal into arithmetic, so nothing may change.
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  int bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    if ((h & 0x7c00) == 0x7c00) continue;
    const float f = bc::half_to_float(h);
    if (double(f) != half_value(h) || bc::float_to_half(f) != h) ++bad;
  }
  uint16_t d[] = {0x0001, 0x03ff, 0x0003}, s[] = {0x0001, 0x0001, bc::float_to_half(0.5f)};
  const Status st1 = bc::reduce_into(d, s, 2, BC_FLOAT16, BC_SUM, BC_MEM_HOST);
  const Status st2 = bc::reduce_into(d + 2, s + 2, 1, BC_FLOAT16, BC_PROD, BC_MEM_HOST);
  _mm_setcsr(saved);
  CHECK(bad == 0);
  CHECK(st1 == BC_OK);
  CHECK(st2 == BC_OK);
  CHECK(d[0] == 0x0002);
  CHECK(d[1] == 0x0400);
  CHECK(d[2] == 0x0002);  // 1.5 * 2^-24 ties to even
}
#endif

#ifdef __FLT16_MAX__
TEST_CASE("half: agrees with the compiler's _Float16 conversions", "[reduce][fp16]") {
  int bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    _Float16 x;
    std::memcpy(&x, &h, 2);
    const float want = float(x);
    const float got = bc::half_to_float(h);
    if (!(std::isnan(want) && std::isnan(got)) && fbits(want) != fbits(got)) ++bad;
  }
  // A stride that visits every exponent and many mantissa patterns.
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4093) {
    const float f = bitsf(uint32_t(u));
    if (std::isnan(f)) continue;
    const _Float16 x = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &x, 2);
    if (bc::float_to_half(f) != want) ++bad;
  }
  CHECK(bad == 0);
}
#endif

TEST_CASE("bf16: all 65536 patterns, rounding, overflow, NaN", "[reduce][bf16]") {
  int bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = uint16_t(i);
    const float f = bc::bf16_to_float(b);
    if (fbits(f) != i << 16) ++bad;
    const bool nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
    if (bc::float_to_bf16(f) != (nan ? (b | 0x40) : b)) ++bad;
  }
  CHECK(bad == 0);

  // Reference: the nearer of the two neighbours, ties to the even one. Both
  // neighbours share f's binade (or the next power of two), so the distances
  // are exact in double. Past the largest finite value, inf sits at 2^128.
  auto value = [](uint32_t bits) {
    const double v = bitsf(bits);
    return (bits & 0x7fffffffu) == 0x7f800000u ? std::copysign(std::ldexp(1.0, 128), v) : v;
  };
  int bad_round = 0;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 2039) {
    const uint32_t bits = uint32_t(u);
    if ((bits & 0x7fffffffu) >= 0x7f800000u) continue;
    const uint32_t lo = bits & 0xffff0000u, hi = lo + 0x10000u;
    const double dl = std::fabs(value(bits) - value(lo)), dh = std::fabs(value(hi) - value(bits));
    const uint32_t want = dl < dh ? lo : dh < dl ? hi : ((lo >> 16) & 1) ? hi : lo;
    if (bc::float_to_bf16(bitsf(bits)) != (want >> 16)) ++bad_round;
  }
  CHECK(bad_round == 0);

  using bc::float_to_bf16;
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(bitsf(0x3f808000)) == 0x3f80);  // tie, even below
  CHECK(float_to_bf16(bitsf(0x3f818000)) == 0x3f82);  // tie, even above
  CHECK(float_to_bf16(bitsf(0x3f808001)) == 0x3f81);
  CHECK(float_to_bf16(bitsf(0x00008000)) == 0x0000);  // subnormal tie to zero
  CHECK(float_to_bf16(bitsf(0x00018000)) == 0x0002);
  CHECK(float_to_bf16(bitsf(0x7f7f7fff)) == 0x7f7f);
  CHECK(float_to_bf16(bitsf(0x7f7f8000)) == 0x7f80);  // tie at the top: overflow to inf
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(float_to_bf16(-std::numeric_limits<float>::max()) == 0xff80);
  CHECK(float_to_bf16(INFINITY) == 0x7f80);
  CHECK(float_to_bf16(-0.0f) == 0x8000);
  CHECK(float_to_bf16(bitsf(0x7f800001)) == 0x7fc0);  // rounding must not turn it into inf
  CHECK(float_to_bf16(bitsf(0xffffffff)) == 0xffff);
  CHECK(std::isnan(bc::bf16_to_float(0x7fc0)));
}

TEST_CASE("reduce_finish_avg", "[reduce]") {
  float f[] = {1, 2, 3, -7};
  REQUIRE(bc::reduce_finish_avg(f, 4, BC_FLOAT32, 2, BC_MEM_HOST) == BC_OK);
  CHECK(f[0] == 0.5f);
  CHECK(f[2] == 1.5f);
  CHECK(f[3] == -3.5f);
  double d[] = {1, 10};
  REQUIRE(bc::reduce_finish_avg(d, 2, BC_FLOAT64, 3, BC_MEM_AUTO) == BC_OK);
  CHECK(d[0] == 1.0 / 3);
  CHECK(d[1] == 10.0 / 3);
  uint16_t h[] = {bc::float_to_half(1), bc::float_to_half(65504)};
  REQUIRE(bc::reduce_finish_avg(h, 2, BC_FLOAT16, 3, BC_MEM_HOST) == BC_OK);
  CHECK(h[0] == 0x3555);
  CHECK(h[1] == bc::float_to_half(65504.0f / 3));
  uint16_t b[] = {bc::float_to_bf16(1)};
  REQUIRE(bc::reduce_finish_avg(b, 1, BC_BFLOAT16, 3, BC_MEM_HOST) == BC_OK);
  CHECK(b[0] == 0x3eab);

  // avg reduces as sum, then divides once.
  float x[] = {1, 2}, y[] = {2, 2};
  REQUIRE(bc::reduce_into(x, y, 2, BC_FLOAT32, BC_AVG, BC_MEM_HOST) == BC_OK);
  CHECK(x[0] == 3.0f);
  REQUIRE(bc::reduce_finish_avg(x, 2, BC_FLOAT32, 2, BC_MEM_HOST) == BC_OK);
  CHECK(x[0] == 1.5f);
  CHECK(x[1] == 2.0f);

  // Long, offset and misaligned runs for every floating dtype, against a
  // scalar reference.
  std::mt19937_64 rng(7);
  for (const auto &dt : kDtypes) {
    if (!dt.floating) continue;
    for (int64_t count : {int64_t(1), int64_t(7), int64_t(5000), int64_t(1000003)}) {
      for (int shift : {0, 1}) {
        std::vector<unsigned char> buf((count + 2) * dt.size + 1);
        fill(dt, buf.data() + shift, count + 2, rng);
        std::vector<unsigned char> want(buf);
        for (int64_t i = 1; i <= count; ++i) {
          unsigned char *p = want.data() + shift + i * dt.size;
          const double v = load_float(dt.dtype, p);
          if (dt.dtype == BC_FLOAT64) store_float(dt.dtype, p, v / 7);
          else store_float(dt.dtype, p, float(v) / 7.0f);
        }
        REQUIRE(bc::reduce_finish_avg(buf.data() + shift + dt.size, count, dt.dtype, 7,
                                      BC_MEM_HOST) == BC_OK);
        INFO(dt.name << " count " << count << " byte shift " << shift);
        CHECK(std::memcmp(buf.data(), want.data(), buf.size()) == 0);  // no 1M-element printout
      }
    }
  }

  int32_t iv[] = {4};
  bc::clear_error();
  CHECK(bc::reduce_finish_avg(iv, 1, BC_INT32, 2, BC_MEM_HOST) == BC_ERR_NOT_SUPPORTED);
  CHECK_THAT(last_error(),
             Catch::Matchers::Contains("avg is defined for floating types only, not int32"));
  CHECK(iv[0] == 4);
  CHECK(bc::reduce_finish_avg(f, 4, BC_FLOAT32, 0, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_finish_avg(f, 4, BC_FLOAT32, -2, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_finish_avg(f, -1, BC_FLOAT32, 2, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_finish_avg(nullptr, 0, BC_FLOAT32, 2, BC_MEM_HOST) == BC_OK);
  CHECK(bc::reduce_finish_avg(nullptr, 1, BC_FLOAT32, 2, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(bc::reduce_finish_avg(f, 4, BC_FLOAT32, 2, BC_MEM_CUDA) == BC_ERR_NOT_SUPPORTED);
  CHECK(bc::reduce_finish_avg(f, 4, BC_DTYPE_COUNT, 2, BC_MEM_HOST) == BC_ERR_INVALID_ARG);
  CHECK(f[0] == 0.5f);
}

TEST_CASE("Reducer: checked once, then the same bits as reduce_into", "[reduce]") {
  std::mt19937_64 rng(777);
  for (const auto &dt : kDtypes) {
    for (int o = 0; o < BC_OP_COUNT; ++o) {
      const auto op = static_cast<bc_op_t>(o);
      INFO(dt.name << " " << kOpNames[o]);
      bc::Reducer r;
      if (!expect_supported(dt, op)) {
        bc::clear_error();
        CHECK(bc::reducer_for(dt.dtype, op, BC_MEM_HOST, &r) == BC_ERR_NOT_SUPPORTED);
        CHECK_THAT(last_error(), Catch::Matchers::Contains("types only, not"));
        continue;
      }
      REQUIRE(bc::reducer_for(dt.dtype, op, BC_MEM_HOST, &r) == BC_OK);
      // Aligned and misaligned (the bounce path), across bounce chunks.
      for (int64_t count : {int64_t(0), int64_t(1), int64_t(7), int64_t(5000)})
        for (size_t shift : {size_t(0), size_t(1)}) {
          const size_t bytes = static_cast<size_t>(count) * dt.size;
          std::vector<unsigned char> src(bytes + 8), a(bytes + 8), b(bytes + 8);
          for (auto &c : src) c = static_cast<unsigned char>(rng());
          for (size_t i = 0; i < a.size(); ++i) a[i] = b[i] = static_cast<unsigned char>(rng());
          const size_t at = dt.size > 1 ? shift : 0;
          REQUIRE(bc::reduce_into(a.data() + at, src.data(), count, dt.dtype, op, BC_MEM_HOST) == BC_OK);
          REQUIRE(r.apply(b.data() + at, src.data(), count) == BC_OK);
          CHECK(a == b);
        }
    }
  }
  bc::Reducer unchecked;
  float x = 1, y = 2;
  CHECK(unchecked.apply(&x, &y, 1) == BC_ERR_INTERNAL);
  CHECK(x == 1);
  bc::Reducer r;
  CHECK(bc::reducer_for(BC_FLOAT32, BC_SUM, static_cast<bc_memtype_t>(BC_MEM_COUNT), &r) == BC_ERR_INVALID_ARG);
}
