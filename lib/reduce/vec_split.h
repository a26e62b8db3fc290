// How a device reduction cuts a buffer: a scalar head up to 16-byte alignment,
// a body of 16-byte vectors, a scalar tail. Plain host code, so that the unit
// tests check the arithmetic on every machine; reduce_cuda.cu launches from it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bc {

enum class VecPath {
  Vector,    // head + body of 16-byte vectors + tail
  Scalar,    // dst and src differ in their offset from 16 bytes: element by element
  Bytewise,  // a pointer not aligned to its element: element by element, loaded as bytes
};

struct VecSplit {
  VecPath path = VecPath::Vector;
  int64_t head = 0;  // elements before the first 16-byte boundary of dst
  int64_t vecs = 0;  // 16-byte vectors in the body
  int64_t tail = 0;  // elements after the body
};

constexpr size_t kVecBytes = 16;

// `src` may equal `dst` (in place) or be 0 (a one-buffer kernel such as avg's
// divide). For the Scalar and Bytewise paths, head = count.
inline VecSplit vec_split(uintptr_t dst, uintptr_t src, int64_t count, size_t elem) {
  VecSplit s;
  if (count <= 0) return s;
  if (src == 0) src = dst;
  if (dst % elem != 0 || src % elem != 0) {
    s.path = VecPath::Bytewise;
    s.head = count;
    return s;
  }
  if (dst % kVecBytes != src % kVecBytes) {
    s.path = VecPath::Scalar;
    s.head = count;
    return s;
  }
  const int64_t per_vec = static_cast<int64_t>(kVecBytes / elem);
  int64_t head = static_cast<int64_t>(((kVecBytes - dst % kVecBytes) % kVecBytes) / elem);
  if (head > count) head = count;
  s.head = head;
  s.vecs = (count - head) / per_vec;
  s.tail = count - head - s.vecs * per_vec;
  return s;
}

}  // namespace bc
