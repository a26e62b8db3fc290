#include <catch2/catch.hpp>

#include "core/blocks.h"

using namespace bc;

namespace Catch {
template <>
struct StringMaker<Range> {
  static std::string convert(const Range &r) {
    return "[" + std::to_string(r.offset) + "+" + std::to_string(r.count) + "]";
  }
};
}  // namespace Catch

TEST_CASE("blocks cover every element once, sizes differ by at most one", "[blocks]") {
  for (int64_t n : {0, 1, 2, 3, 7, 8, 100, 1000003}) {
    for (int64_t q = 1; q <= 13; ++q) {
      int64_t next = 0, lo = INT64_MAX, hi = 0;
      for (int64_t j = 0; j < q; ++j) {
        REQUIRE(block_offset(n, q, j) == next);
        next += block_count(n, q, j);
        lo = std::min(lo, block_count(n, q, j));
        hi = std::max(hi, block_count(n, q, j));
      }
      REQUIRE(next == n);
      REQUIRE(block_offset(n, q, q) == n);
      REQUIRE(hi - lo <= 1);
    }
  }
}

TEST_CASE("sub_blocks spans consecutive blocks; intersect", "[blocks]") {
  Range r{10, 23};
  REQUIRE(sub_blocks(r, 4, 1, 3) == Range{16, 12});  // blocks 6,6,6,5 at 10,16,22,28
  REQUIRE(sub_block(r, 4, 3) == Range{28, 5});
  REQUIRE(intersect(Range{0, 10}, Range{5, 10}) == Range{5, 5});
  REQUIRE(intersect(Range{0, 5}, Range{5, 10}).count == 0);
  REQUIRE(intersect(Range{3, 0}, Range{0, 10}).count == 0);
}
