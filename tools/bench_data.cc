#include "bench_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace bcbench {
namespace {

bool is_float(bc_dtype_t t) { return t == BC_FLOAT32 || t == BC_FLOAT64 || t == BC_FLOAT16 || t == BC_BFLOAT16; }
bool is_signed(bc_dtype_t t) { return is_float(t) || t == BC_INT8 || t == BC_INT32 || t == BC_INT64; }

// The largest integer magnitude up to which every integer is exact (floats), or
// up to which an 8-bit sum cannot overflow; 0 where integer sums wrap exactly.
int64_t exact_limit(bc_dtype_t t) {
  switch (t) {
    case BC_FLOAT32: return INT64_C(1) << 24;
    case BC_FLOAT64: return INT64_C(1) << 53;
    case BC_FLOAT16: return 2048;
    case BC_BFLOAT16: return 256;
    case BC_INT8: return 127;
    case BC_UINT8: return 255;
    default: return 0;
  }
}

// Factors of 2 a product may hold without overflow (or saturation).
int prod_twos(bc_dtype_t t) {
  switch (t) {
    case BC_INT8: return 6;
    case BC_UINT8: return 7;
    case BC_INT32: return 30;
    case BC_UINT32: return 31;
    case BC_INT64: return 62;
    case BC_UINT64: return 63;
    case BC_FLOAT16: return 15;
    case BC_FLOAT64: return 1000;
    default: return 100;  // float32, bfloat16: 8-bit exponent
  }
}

// IEEE binary16 bits of v, exact for the integers used here (|v| <= 2^15).
uint16_t half_bits(double v) {
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  int e = 0;
  const double m = std::frexp(std::fabs(v), &e);  // |v| = m * 2^e, m in [0.5, 1)
  const auto mant = static_cast<uint16_t>(std::lround((m * 2 - 1) * 1024));
  return static_cast<uint16_t>(sign | ((e - 1 + 15) << 10) | mant);
}

uint64_t mix(int64_t i, int rank, uint64_t a, uint64_t b) {
  return static_cast<uint64_t>(i) * a + static_cast<uint64_t>(rank) * b;
}

}  // namespace

ExactData::ExactData(bc_dtype_t dtype, bc_op_t op, int nranks, bool gather)
    : dtype_(dtype), op_(op), p_(nranks), gather_(gather), float_(is_float(dtype)), signed_(is_signed(dtype)) {
  const int64_t limit = exact_limit(dtype);
  if (gather_) {
    std::snprintf(text_, sizeof text_, "integers in [%d, %d], from the rank and element index",
                  signed_ ? -100 : 0, signed_ ? 99 : 199);
  } else if (op_ == BC_SUM) {
    amp_ = limit ? std::min<int64_t>(100, limit / p_) : 100;
    if (amp_ > 0)
      std::snprintf(text_, sizeof text_, "integers in [%lld, %lld]; every partial sum exact",
                    signed_ ? -static_cast<long long>(amp_) : 0LL, static_cast<long long>(amp_));
    else
      std::snprintf(text_, sizeof text_, "0 or 1, one rank contributing 1 per element (p too large for more)");
  } else if (op_ == BC_AVG) {
    amp_ = std::min<int64_t>(12, limit / p_ - 1);
    if (amp_ < 1) amp_ = 0;
    std::snprintf(text_, sizeof text_, "a + d_r, a in [1, %lld], the d_r in {-1, 0, 1} summing to 0: average a",
                  static_cast<long long>(amp_));
  } else if (op_ == BC_PROD) {
    const int twos = prod_twos(dtype);
    period_ = std::max<int64_t>(3, (p_ + twos - 1) / twos);
    std::snprintf(text_, sizeof text_, "1 or 2 (every %lld-th rank 2): products exact",
                  static_cast<long long>(period_));
  } else if (op_ == BC_MIN || op_ == BC_MAX) {
    std::snprintf(text_, sizeof text_, "integers in [%d, %d]", signed_ ? -30 : 0, signed_ ? 30 : 60);
  } else {
    std::snprintf(text_, sizeof text_, "integers in [0, 127]");
  }
}

double ExactData::input_float(int r, int64_t i) const {
  if (gather_) return static_cast<double>(mix(i, r, 37, 101) % 200) - 100;
  switch (op_) {
    case BC_SUM:
      if (amp_ == 0) return i % p_ == r ? 1 : 0;
      return static_cast<double>(mix(i, r, 37, 101) % static_cast<uint64_t>(2 * amp_ + 1)) - amp_;
    case BC_AVG: {
      if (amp_ == 0) return 0;
      const int d = (p_ % 2 == 1 && r == p_ - 1) ? 0 : (r % 2 ? 1 : -1);
      return static_cast<double>(1 + i % amp_ + d);
    }
    case BC_PROD: return (i + r) % period_ == 0 ? 2 : 1;
    default: return static_cast<double>(mix(i, r, 13, 29) % 61) - 30;  // min, max
  }
}

uint64_t ExactData::input_int(int r, int64_t i) const {
  const uint64_t off = signed_ ? 1 : 0;  // signed types: centre the range on 0
  if (gather_) return mix(i, r, 37, 101) % 200 - off * 100;
  switch (op_) {
    case BC_SUM:
      if (amp_ == 0) return i % p_ == r ? 1 : 0;
      return mix(i, r, 37, 101) % static_cast<uint64_t>((1 + off) * amp_ + 1) - off * amp_;
    case BC_PROD: return (i + r) % period_ == 0 ? 2 : 1;
    case BC_MIN:
    case BC_MAX: return mix(i, r, 13, 29) % 61 - off * 30;
    default: return mix(i, r, 2654435761u, 40503) & 0x7F;  // band, bor, bxor
  }
}

void ExactData::put(void *buf, int64_t j, double fv, uint64_t iv) const {
  switch (dtype_) {
    case BC_FLOAT32: static_cast<float *>(buf)[j] = static_cast<float>(fv); break;
    case BC_FLOAT64: static_cast<double *>(buf)[j] = fv; break;
    case BC_FLOAT16: static_cast<uint16_t *>(buf)[j] = half_bits(fv); break;
    case BC_BFLOAT16: {
      const float f = static_cast<float>(fv);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<uint16_t *>(buf)[j] = static_cast<uint16_t>(bits >> 16);
      break;
    }
    case BC_INT8:
    case BC_UINT8: static_cast<uint8_t *>(buf)[j] = static_cast<uint8_t>(iv); break;
    case BC_INT32:
    case BC_UINT32: static_cast<uint32_t *>(buf)[j] = static_cast<uint32_t>(iv); break;
    default: static_cast<uint64_t *>(buf)[j] = iv; break;
  }
}

void ExactData::fill_input(void *buf, int rank, int64_t first, int64_t n) const {
  for (int64_t j = 0; j < n; ++j) {
    if (float_) put(buf, j, input_float(rank, first + j), 0);
    else put(buf, j, 0, input_int(rank, first + j));
  }
}

void ExactData::fill_expected(void *buf, int64_t first, int64_t n, int64_t block) const {
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = first + j;
    if (gather_) {
      const int owner = static_cast<int>(i / block);
      if (float_) put(buf, j, input_float(owner, i), 0);
      else put(buf, j, 0, input_int(owner, i));
      continue;
    }
    if (float_) {
      double acc = input_float(0, i);
      for (int r = 1; r < p_; ++r) {
        const double v = input_float(r, i);
        switch (op_) {
          case BC_PROD: acc *= v; break;
          case BC_MIN: acc = std::min(acc, v); break;
          case BC_MAX: acc = std::max(acc, v); break;
          default: acc += v; break;  // sum, avg
        }
      }
      if (op_ == BC_AVG) acc /= p_;
      put(buf, j, acc, 0);
    } else {
      uint64_t acc = input_int(0, i);  // two's complement: sums and products wrap exactly
      for (int r = 1; r < p_; ++r) {
        const uint64_t v = input_int(r, i);
        const auto sa = static_cast<int64_t>(acc), sv = static_cast<int64_t>(v);  // min/max values are small
        switch (op_) {
          case BC_SUM: acc += v; break;
          case BC_PROD: acc *= v; break;
          case BC_MIN: acc = static_cast<uint64_t>(std::min(sa, sv)); break;
          case BC_MAX: acc = static_cast<uint64_t>(std::max(sa, sv)); break;
          case BC_BAND: acc &= v; break;
          case BC_BOR: acc |= v; break;
          default: acc ^= v; break;
        }
      }
      put(buf, j, 0, acc);
    }
  }
}

GuardedBuf::~GuardedBuf() { std::free(base_); }

bool GuardedBuf::allocate(size_t bytes) {
  std::free(base_);
  base_ = nullptr;
  bytes_ = 0;
  void *mem = nullptr;
  if (posix_memalign(&mem, 4096, bytes + 2 * kGuard) != 0) return false;
  base_ = static_cast<unsigned char *>(mem);
  bytes_ = bytes;
  std::memset(base_, kGuardByte, kGuard);
  std::memset(base_ + kGuard + bytes, kGuardByte, kGuard);
  std::memset(data(), 0, bytes);  // touch every page before timing
  return true;
}

void GuardedBuf::poison(unsigned char byte) { std::memset(data(), byte, bytes_); }

int GuardedBuf::repair_guards() {
  for (size_t i = 0; i < kGuard; ++i) {
    if (base_[i] != kGuardByte || base_[kGuard + bytes_ + i] != kGuardByte) {
      std::memset(base_, kGuardByte, kGuard);
      std::memset(base_ + kGuard + bytes_, kGuardByte, kGuard);
      return 1;
    }
  }
  return 0;
}

int64_t count_wrong(const void *got, const void *want, int64_t n, size_t elem) {
  const auto *g = static_cast<const unsigned char *>(got), *w = static_cast<const unsigned char *>(want);
  if (n <= 0 || std::memcmp(g, w, static_cast<size_t>(n) * elem) == 0) return 0;
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += std::memcmp(g + i * elem, w + i * elem, elem) != 0;
  return wrong;
}

MPI_Datatype mpi_datatype(bc_dtype_t t) {
  switch (t) {
    case BC_FLOAT32: return MPI_FLOAT;
    case BC_FLOAT64: return MPI_DOUBLE;
    case BC_INT8: return MPI_INT8_T;
    case BC_UINT8: return MPI_UINT8_T;
    case BC_INT32: return MPI_INT32_T;
    case BC_UINT32: return MPI_UINT32_T;
    case BC_INT64: return MPI_INT64_T;
    case BC_UINT64: return MPI_UINT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(bc_op_t op) {
  switch (op) {
    case BC_SUM: return MPI_SUM;
    case BC_PROD: return MPI_PROD;
    case BC_MIN: return MPI_MIN;
    case BC_MAX: return MPI_MAX;
    case BC_BAND: return MPI_BAND;
    case BC_BOR: return MPI_BOR;
    case BC_BXOR: return MPI_BXOR;
    default: return MPI_OP_NULL;
  }
}

}  // namespace bcbench
