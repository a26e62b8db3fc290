// The one helper for every uneven split (as UCC's ucc_buffer_block_count/offset).
//
// Block j of q over n elements: the first n % q blocks get one element more, so
// block sizes differ by at most one and every element belongs to one block.
#pragma once

#include <algorithm>
#include <cstdint>

namespace bc {

inline int64_t block_count(int64_t n, int64_t q, int64_t j) {
  return n / q + (j < n % q ? 1 : 0);
}

inline int64_t block_offset(int64_t n, int64_t q, int64_t j) {
  return j * (n / q) + std::min<int64_t>(j, n % q);
}

// A contiguous range of elements: [offset, offset + count).
struct Range {
  int64_t offset = 0;
  int64_t count = 0;
  int64_t end() const { return offset + count; }
  bool operator==(const Range &o) const { return offset == o.offset && count == o.count; }
  bool operator!=(const Range &o) const { return !(*this == o); }
};

// Sub-block j of q of `r`.
inline Range sub_block(const Range &r, int64_t q, int64_t j) {
  return Range{r.offset + block_offset(r.count, q, j), block_count(r.count, q, j)};
}

// Blocks [first, last) of q of `r`, as one contiguous range.
inline Range sub_blocks(const Range &r, int64_t q, int64_t first, int64_t last) {
  int64_t b = block_offset(r.count, q, first);
  int64_t e = block_offset(r.count, q, last);
  return Range{r.offset + b, e - b};
}

inline Range intersect(const Range &a, const Range &b) {
  int64_t lo = std::max(a.offset, b.offset);
  int64_t hi = std::min(a.end(), b.end());
  return hi > lo ? Range{lo, hi - lo} : Range{lo, 0};
}

}  // namespace bc
