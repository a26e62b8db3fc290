// The device kernels' conversions and combinations (half_bits.h), compiled
// here for the host, against the host reductions (reduce.cc): the GPU runs
// this same source, so equal bits here mean the device rounds as the host does
// (what no GPU-less machine can check by running the kernels).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "reduce/half_bits.h"
#include "reduce/reduce.h"

using namespace bc;

namespace {
uint32_t bits(float f) { return hb::f2u(f); }

bool is_nan16(bc_dtype_t t, uint16_t v) {
  return t == BC_FLOAT16 ? (v & 0x7fffu) > 0x7c00u : (v & 0x7fffu) > 0x7f80u;
}

// NaN results count as equal whatever their payload: which input's payload an
// IEEE add keeps is not specified (x86 keeps the first operand's, and GCC may
// swap commutative operands; NVIDIA GPUs return the canonical NaN).
template <class F>
void compare_combination(bc_dtype_t t, bc_op_t op, F f) {
  std::mt19937 rng(static_cast<unsigned>(t) * 31u + static_cast<unsigned>(op));
  const size_t n = 1 << 20;
  std::vector<uint16_t> a(n), b(n), want;
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<uint16_t>(rng());
    b[i] = static_cast<uint16_t>(rng());
  }
  want = a;
  REQUIRE(reduce_into(want.data(), b.data(), static_cast<int64_t>(n), t, op, BC_MEM_HOST) == BC_OK);
  size_t diff = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t got = f(a[i], b[i]);
    if (is_nan16(t, got) && is_nan16(t, want[i])) continue;
    diff += got != want[i];
  }
  INFO(bc_dtype_name(t) << " " << bc_op_name(op));
  CHECK(diff == 0);
}
}  // namespace

TEST_CASE("device conversions equal the host ones", "[reduce][cuda]") {
  size_t diff = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    diff += bits(hb::h2f(static_cast<uint16_t>(h))) != bits(half_to_float(static_cast<uint16_t>(h)));
    diff += bits(hb::b2f(static_cast<uint16_t>(h))) != bits(bf16_to_float(static_cast<uint16_t>(h)));
  }
  CHECK(diff == 0);
  // Float -> fp16/bf16: a prime stride through every exponent, every fp16
  // value and its neighbours (the rounding boundaries), and random patterns.
  std::vector<uint32_t> us;
  for (uint64_t u = 0; u < (1ull << 32); u += 4099) us.push_back(static_cast<uint32_t>(u));
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t f = bits(half_to_float(static_cast<uint16_t>(h)));
    for (int d = -2; d <= 2; ++d) us.push_back(f + static_cast<uint32_t>(d));
    const uint32_t mid = f + (1u << 12);  // half an fp16 ulp above (normal range)
    us.push_back(mid);
    us.push_back(mid - 1);
    us.push_back(mid + 1);
    us.push_back((h << 16) | 0x8000u);  // bf16 ties
    us.push_back((h << 16) | 0x7fffu);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1 << 20; ++i) us.push_back(static_cast<uint32_t>(rng()));
  diff = 0;
  for (uint32_t u : us) {
    const float f = hb::u2f(u);
    diff += hb::f2h(f) != float_to_half(f);
    diff += hb::f2b(f) != float_to_bf16(f);
  }
  CHECK(diff == 0);
}

TEST_CASE("device combinations equal the host ones", "[reduce][cuda]") {
  compare_combination(BC_FLOAT16, BC_SUM, hb::Half<hb::Sum>());
  compare_combination(BC_FLOAT16, BC_PROD, hb::Half<hb::Prod>());
  compare_combination(BC_FLOAT16, BC_MIN, hb::Half<hb::Min>());
  compare_combination(BC_FLOAT16, BC_MAX, hb::Half<hb::Max>());
  compare_combination(BC_BFLOAT16, BC_SUM, hb::BF16<hb::Sum>());
  compare_combination(BC_BFLOAT16, BC_PROD, hb::BF16<hb::Prod>());
  compare_combination(BC_BFLOAT16, BC_MIN, hb::BF16<hb::Min>());
  compare_combination(BC_BFLOAT16, BC_MAX, hb::BF16<hb::Max>());
  // float32: random bit patterns, NaN and signed zeros included.
  std::mt19937 rng(11);
  const size_t n = 1 << 18;
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = hb::u2f(static_cast<uint32_t>(rng()));
    b[i] = hb::u2f(static_cast<uint32_t>(rng()));
  }
  const bc_op_t ops[] = {BC_SUM, BC_PROD, BC_MIN, BC_MAX};
  for (bc_op_t op : ops) {
    std::vector<float> want = a;
    REQUIRE(reduce_into(want.data(), b.data(), static_cast<int64_t>(n), BC_FLOAT32, op, BC_MEM_HOST) == BC_OK);
    size_t diff = 0;
    for (size_t i = 0; i < n; ++i) {
      float got = 0;
      switch (op) {
        case BC_SUM: got = hb::Plain<hb::Sum>()(a[i], b[i]); break;
        case BC_PROD: got = hb::Plain<hb::Prod>()(a[i], b[i]); break;
        case BC_MIN: got = hb::Plain<hb::Min>()(a[i], b[i]); break;
        default: got = hb::Plain<hb::Max>()(a[i], b[i]); break;
      }
      // NaN: payloads may differ (see compare_combination).
      if (got != got && want[i] != want[i]) continue;
      diff += bits(got) != bits(want[i]);
    }
    INFO(bc_op_name(op));
    CHECK(diff == 0);
  }
}
