// Device reduction kernels against the host reductions, bit for bit (NaN
// payloads aside: any NaN equals any NaN): every
// supported dtype x op, counts around the vector width and a large one, and
// pointers at every element offset from 16 bytes (same and different
// misalignment of dst and src). Needs a GPU; skips (exit 77) without one.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_rt.h"
#include "probe.h"
#include "reduce/reduce.h"

using namespace bc;

namespace {

// Random bit patterns would be mostly NaN/inf for fp16; use values of mixed
// magnitude (with some subnormals, zeros of both signs and NaN) instead.
void fill(std::vector<unsigned char> &buf, bc_dtype_t t, std::mt19937 &rng) {
  const size_t n = buf.size() / bc_dtype_size(t);
  std::uniform_real_distribution<float> mag(-8.f, 8.f);
  for (size_t i = 0; i < n; ++i) {
    float f = std::ldexp(mag(rng), static_cast<int>(rng() % 40) - 26);
    if (i % 97 == 5) f = 0.0f;
    if (i % 97 == 6) f = -0.0f;
    if (i % 997 == 7) f = std::nanf("");
    switch (t) {
      case BC_FLOAT32: std::memcpy(&buf[i * 4], &f, 4); break;
      case BC_FLOAT64: { double d = static_cast<double>(f) * 1.000000119; std::memcpy(&buf[i * 8], &d, 8); break; }
      case BC_FLOAT16: { uint16_t h = float_to_half(f); std::memcpy(&buf[i * 2], &h, 2); break; }
      default: { uint16_t b = float_to_bf16(f); std::memcpy(&buf[i * 2], &b, 2); break; }
    }
  }
}

bool is_nan(const unsigned char *p, bc_dtype_t t) {
  switch (t) {
    case BC_FLOAT32: { uint32_t u; std::memcpy(&u, p, 4); return (u & 0x7fffffffu) > 0x7f800000u; }
    case BC_FLOAT64: { uint64_t u; std::memcpy(&u, p, 8); return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
    case BC_FLOAT16: { uint16_t u; std::memcpy(&u, p, 2); return (u & 0x7fffu) > 0x7c00u; }
    default: { uint16_t u; std::memcpy(&u, p, 2); return (u & 0x7fffu) > 0x7f80u; }
  }
}

// Elements whose bits differ, NaN counting equal to NaN: the GPU's float
// arithmetic returns the canonical NaN where the host keeps an input's payload.
int64_t count_diff(const std::vector<unsigned char> &got, const std::vector<unsigned char> &want, bc_dtype_t t) {
  const size_t e = bc_dtype_size(t);
  int64_t bad = 0;
  for (size_t i = 0; i + e <= got.size(); i += e) {
    if (std::memcmp(&got[i], &want[i], e) == 0) continue;
    if (is_nan(&got[i], t) && is_nan(&want[i], t)) continue;
    ++bad;
  }
  return bad;
}

struct DevBuf {
  void *p = nullptr;
  explicit DevBuf(size_t bytes) { REQUIRE(cuda_malloc(&p, bytes) == BC_OK); }
  ~DevBuf() { cuda_free(p); }
};

}  // namespace

TEST_CASE("device reduce_into equals host reduce_into, bit for bit") {
  const bc_dtype_t dtypes[] = {BC_FLOAT32, BC_FLOAT64, BC_FLOAT16, BC_BFLOAT16};
  const bc_op_t ops[] = {BC_SUM, BC_PROD, BC_MIN, BC_MAX, BC_AVG};
  const int64_t counts[] = {0, 1, 2, 7, 8, 9, 1023, 1000003};
  std::mt19937 rng(12345);
  for (bc_dtype_t t : dtypes) {
    const size_t elem = bc_dtype_size(t);
    const size_t maxbytes = static_cast<size_t>(1000003) * elem + 64;
    DevBuf dd(maxbytes), ds(maxbytes);
    for (bc_op_t op : ops) {
      for (int64_t n : counts) {
        // (dst offset, src offset) in bytes: aligned, same misalignment,
        // different misalignment, and (for n small) not element-aligned.
        std::vector<std::pair<size_t, size_t>> offs = {{0, 0}, {elem, elem}, {0, elem}, {3 * elem, 16 + elem}};
        if (n < 2000) offs.push_back({1, 1});
        for (auto [od, os] : offs) {
          INFO(bc_dtype_name(t) << " " << bc_op_name(op) << " n=" << n << " offsets " << od << "," << os);
          const size_t bytes = static_cast<size_t>(n) * elem;
          std::vector<unsigned char> a(bytes), b(bytes), want, got(bytes);
          fill(a, t, rng);
          fill(b, t, rng);
          want = a;
          auto *pd = static_cast<unsigned char *>(dd.p) + od;
          auto *ps = static_cast<unsigned char *>(ds.p) + os;
          REQUIRE(cuda_copy(pd, a.data(), bytes) == BC_OK);
          REQUIRE(cuda_copy(ps, b.data(), bytes) == BC_OK);
          REQUIRE(reduce_into(want.data(), b.data(), n, t, op, BC_MEM_HOST) == BC_OK);
          REQUIRE(reduce_into(pd, ps, n, t, op, BC_MEM_CUDA) == BC_OK);
          if (op == BC_AVG) {
            REQUIRE(reduce_finish_avg(want.data(), n, t, 3, BC_MEM_HOST) == BC_OK);
            REQUIRE(reduce_finish_avg(pd, n, t, 3, BC_MEM_CUDA) == BC_OK);
          }
          REQUIRE(cuda_copy(got.data(), pd, bytes) == BC_OK);
          CHECK(count_diff(got, want, t) == 0);
        }
      }
    }
    // In place (dst == src).
    std::vector<unsigned char> a(1031 * elem), want, got(a.size());
    fill(a, t, rng);
    want = a;
    REQUIRE(cuda_copy(dd.p, a.data(), a.size()) == BC_OK);
    REQUIRE(reduce_into(want.data(), want.data(), 1031, t, BC_SUM, BC_MEM_HOST) == BC_OK);
    REQUIRE(reduce_into(dd.p, dd.p, 1031, t, BC_SUM, BC_MEM_CUDA) == BC_OK);
    REQUIRE(cuda_copy(got.data(), dd.p, got.size()) == BC_OK);
    CHECK(count_diff(got, want, t) == 0);
  }
}

TEST_CASE("device reductions refuse integer dtypes and bitwise ops by name") {
  DevBuf d(64), s(64);
  CHECK(reduce_into(d.p, s.p, 4, BC_INT32, BC_SUM, BC_MEM_CUDA) == BC_ERR_NOT_SUPPORTED);
  CHECK_THAT(last_error(), Catch::Matchers::Contains("int32 sum"));
  CHECK(reduce_into(d.p, s.p, 4, BC_FLOAT32, BC_BXOR, BC_MEM_CUDA) == BC_ERR_NOT_SUPPORTED);
}

TEST_CASE("memtype_of tells device, managed and host memory apart") {
  DevBuf d(256);
  void *managed = nullptr, *pinned = nullptr;
  REQUIRE(cudaMallocManaged(&managed, 256) == cudaSuccess);
  REQUIRE(cuda_host_alloc(&pinned, 256) == BC_OK);
  std::vector<char> host(256);
  CHECK(memtype_of(d.p) == BC_MEM_CUDA);
  CHECK(memtype_of(static_cast<char *>(d.p) + 100) == BC_MEM_CUDA);
  CHECK(memtype_of(managed) == BC_MEM_CUDA);
  CHECK(memtype_of(pinned) == BC_MEM_HOST);
  CHECK(memtype_of(host.data()) == BC_MEM_HOST);
  bc_memtype_t m = BC_MEM_HOST;
  CHECK(resolve_memtype(d.p, d.p, BC_MEM_AUTO, &m) == BC_OK);
  CHECK(m == BC_MEM_CUDA);
  CHECK(resolve_memtype(host.data(), d.p, BC_MEM_AUTO, &m) == BC_ERR_INVALID_ARG);
  cudaFree(managed);
  cuda_host_free(pinned);
}

int main(int argc, char **argv) {
  const std::string why = bctest::cuda_missing();
  if (!why.empty()) return bctest::print_skip(why);
  return Catch::Session().run(argc, argv);
}
