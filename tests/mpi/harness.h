// Shared by the MPI tests: a Catch2 main under MPI, agreement across ranks, and
// exact data for every dtype.
//
// Every check is agreed across the communicator before Catch sees it, so all
// ranks take the same path through a test case and a failure on any rank is
// reported (by rank 0) instead of hanging the others.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "blueconnect.h"

namespace bctest {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// True on every rank of `comm` when `ok` is true on every rank.
inline bool everywhere(bool ok, MPI_Comm comm = MPI_COMM_WORLD) {
  int local = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_LAND, comm);
  return all != 0;
}

// The transports a test loops over: the one a forced run names
// (tests/meson.build sets BC_TRANSPORT), else `unforced` (by default auto and
// ucx, the two whose communicators share a process's UCX worker).
inline std::vector<std::string> transports_to_try(std::vector<std::string> unforced = {"auto", "ucx"}) {
  const char *forced = std::getenv("BC_TRANSPORT");
  if (forced && *forced) return {forced};
  return unforced;
}

// bc_comm_describe's text for a 1024-float all-reduce on `comm` ("" if it fails).
inline std::string describe(bc_comm_t comm) {
  size_t need = 0;
  if (bc_comm_describe(comm, 1024, BC_FLOAT32, nullptr, 0, &need) != BC_OK) return "";
  std::string text(need, '\0');
  if (bc_comm_describe(comm, 1024, BC_FLOAT32, &text[0], need, &need) != BC_OK) return "";
  text.resize(text.find('\0') == std::string::npos ? text.size() : text.find('\0'));
  return text;
}

// Element values are small integers ("logical" values), exact in every dtype,
// so any reduction order gives the same bits.
// Rank 0 gets every rank's `line` (cut to max_len bytes), one per row in rank
// order, for a report of what each rank saw; other ranks get "".
inline std::string gather_lines(std::string line, size_t max_len = 600) {
  line.resize(max_len, '\0');
  std::vector<char> all(max_len * static_cast<size_t>(world_size()));
  MPI_Gather(line.data(), static_cast<int>(max_len), MPI_CHAR, all.data(), static_cast<int>(max_len), MPI_CHAR, 0,
             MPI_COMM_WORLD);
  std::string out;
  if (world_rank() != 0) return out;
  // Bounded: a line of max_len bytes or more arrives without its NUL.
  for (int k = 0; k < world_size(); ++k) {
    const char *row = all.data() + static_cast<size_t>(k) * max_len;
    out += "\n  " + std::string(row, strnlen(row, max_len));
  }
  return out;
}

inline uint16_t small_int_to_half(int64_t v) {
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  uint64_t a = static_cast<uint64_t>(v < 0 ? -v : v);
  int e = 63 - __builtin_clzll(a);  // exact for |v| < 2048
  uint16_t mant = static_cast<uint16_t>(((a << (10 - e)) & 0x3FF));
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | mant);
}
inline uint16_t small_int_to_bf16(int64_t v) {
  float f = static_cast<float>(v);  // exact for |v| < 256
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// Writes logical value v as element i of buf; integer types wrap as in C.
inline void put(void *buf, bc_dtype_t t, size_t i, int64_t v) {
  switch (t) {
    case BC_FLOAT32: static_cast<float *>(buf)[i] = static_cast<float>(v); break;
    case BC_FLOAT64: static_cast<double *>(buf)[i] = static_cast<double>(v); break;
    case BC_FLOAT16: static_cast<uint16_t *>(buf)[i] = small_int_to_half(v); break;
    case BC_BFLOAT16: static_cast<uint16_t *>(buf)[i] = small_int_to_bf16(v); break;
    case BC_INT8: static_cast<int8_t *>(buf)[i] = static_cast<int8_t>(v); break;
    case BC_UINT8: static_cast<uint8_t *>(buf)[i] = static_cast<uint8_t>(v); break;
    case BC_INT32: static_cast<int32_t *>(buf)[i] = static_cast<int32_t>(v); break;
    case BC_UINT32: static_cast<uint32_t *>(buf)[i] = static_cast<uint32_t>(v); break;
    case BC_INT64: static_cast<int64_t *>(buf)[i] = v; break;
    case BC_UINT64: static_cast<uint64_t *>(buf)[i] = static_cast<uint64_t>(v); break;
    default: break;
  }
}

inline bool is_float(bc_dtype_t t) { return t <= BC_BFLOAT16; }
inline bool is_signed(bc_dtype_t t) { return is_float(t) || t == BC_INT8 || t == BC_INT32 || t == BC_INT64; }
inline bool op_valid_for(bc_op_t op, bc_dtype_t t) {
  if (op == BC_AVG) return is_float(t);
  if (op == BC_BAND || op == BC_BOR || op == BC_BXOR) return !is_float(t);
  return true;
}

// Logical input of rank r (of p) for element i under op. Chosen so that the exact
// result is representable: sums stay below 256 for floats (bf16 has 8 bits), and
// products of {1,2} over at most 8 ranks stay at most 256. avg inputs are a_i +
// d_r with the d_r summing to zero, so the average is exactly a_i.
inline int64_t input_value(bc_op_t op, bc_dtype_t t, int r, int p, int64_t i) {
  const bool sgn = is_signed(t);
  switch (op) {
    case BC_SUM: return is_float(t) ? (i * 7 + r * 3) % 9 - (sgn ? 4 : 0) : (i * 37 + r * 101) % 200 - (sgn ? 100 : 0);
    case BC_PROD: return 1 + ((i + r) % 3 == 0 ? 1 : 0);
    case BC_MIN:
    case BC_MAX: return (i * 13 + r * 29) % 61 - (sgn ? 30 : 0);
    case BC_AVG: {
      int64_t d = (p % 2 == 1 && r == p - 1) ? 0 : (r % 2 ? 1 : -1);
      return (i % 11) + 2 + d;
    }
    default: return (i * 2654435761LL + r * 40503LL) & 0x7F;  // bitwise ops
  }
}

inline int64_t wrap(bc_dtype_t t, int64_t v) {
  switch (t) {
    case BC_INT8: return static_cast<int8_t>(v);
    case BC_UINT8: return static_cast<uint8_t>(v);
    case BC_INT32: return static_cast<int32_t>(v);
    case BC_UINT32: return static_cast<uint32_t>(v);
    default: return v;
  }
}

inline int64_t expected_value(bc_op_t op, bc_dtype_t t, int p, int64_t i) {
  int64_t acc = input_value(op, t, 0, p, i);
  for (int r = 1; r < p; ++r) {
    int64_t v = input_value(op, t, r, p, i);
    switch (op) {
      case BC_SUM: case BC_AVG: acc = wrap(t, acc + v); break;
      case BC_PROD: acc = wrap(t, acc * v); break;
      case BC_MIN: acc = std::min(acc, v); break;
      case BC_MAX: acc = std::max(acc, v); break;
      case BC_BAND: acc &= v; break;
      case BC_BOR: acc |= v; break;
      case BC_BXOR: acc ^= v; break;
      default: break;
    }
  }
  if (op == BC_AVG) acc /= p;
  return acc;
}

// A buffer with guard bytes on both sides, poisoned inside.
class Guarded {
 public:
  static constexpr size_t kGuard = 64;
  // The largest buffer: its guards must still fit in an object. Checked, so
  // that a negative count turned size_t cannot wrap bytes + 2 * kGuard (GCC
  // warned of that path's memset, -Wstringop-overflow).
  static constexpr size_t kMaxBytes = static_cast<size_t>(PTRDIFF_MAX) - 2 * kGuard;
  explicit Guarded(size_t bytes, unsigned char poison = 0xCD)
      : bytes_(fits(bytes)), mem_(bytes_ + 2 * kGuard, 0xA5) {
    std::memset(data(), poison, bytes_);
  }
  void *data() { return mem_.data() + kGuard; }
  size_t bytes() const { return bytes_; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (mem_[i] != 0xA5 || mem_[kGuard + bytes_ + i] != 0xA5) return false;
    return true;
  }

 private:
  static size_t fits(size_t bytes) {
    if (bytes > kMaxBytes) throw std::length_error("Guarded: " + std::to_string(bytes) + " bytes is too large");
    return bytes;
  }

  size_t bytes_;
  std::vector<unsigned char> mem_;
};

// Fills rank r's input for (dtype, op) and returns the buffer; checks a result.
struct Case {
  bc_dtype_t dtype;
  bc_op_t op;
  int64_t count;
  std::unique_ptr<Guarded> buf;
  void fill(int r, int p) {
    buf.reset(new Guarded(bc_dtype_size(dtype) * count));
    for (int64_t i = 0; i < count; ++i) put(buf->data(), dtype, i, input_value(op, dtype, r, p, i));
  }
  bool right(int p) {
    const size_t es = bc_dtype_size(dtype);
    std::vector<unsigned char> want(es);
    for (int64_t i = 0; i < count; ++i) {
      put(want.data(), dtype, 0, expected_value(op, dtype, p, i));
      if (std::memcmp(want.data(), static_cast<unsigned char *>(buf->data()) + i * es, es) != 0) return false;
    }
    return buf->guards_intact();
  }
  // For an out-of-place call: the filled data moves to a new guarded buffer,
  // returned as the input, and buf starts poisoned again.
  std::unique_ptr<Guarded> take_input() {
    std::unique_ptr<Guarded> in(new Guarded(buf->bytes()));
    std::memcpy(in->data(), buf->data(), buf->bytes());
    buf.reset(new Guarded(buf->bytes()));
    return in;
  }
};

// One in-place all-reduce (sum) of `count` elements of the exact data above
// on `comm`, this rank r of p: true when it succeeds, every element is right
// and the guard bytes are intact.
inline bool allreduce_right(bc_comm_t comm, bc_dtype_t dtype, int64_t count, int r, int p) {
  Case c{dtype, BC_SUM, count, nullptr};
  c.fill(r, p);
  return bc_allreduce(BC_IN_PLACE, c.buf->data(), count, dtype, BC_SUM, comm) == BC_OK && c.right(p);
}

}  // namespace bctest
