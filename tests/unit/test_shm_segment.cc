// The shared-memory segment's sizes where /dev/shm is tight (shm::fit_segment):
// the eager areas shrink by halves before they go, then the copy ring halves.
#include <catch2/catch.hpp>

#include "transports/shm/shm_node.h"

using namespace bc;
using namespace bc::shm;

TEST_CASE("shm segment: eager areas halve where /dev/shm is tight, then go, then the ring halves", "[shm]") {
  const size_t fixed = 4096, chunk = 256 * 1024;
  const size_t pairs = 32 * 31;  // 32 ranks on a node
  auto need = [&](size_t eager, uint32_t ring) { return fixed + pairs * (kEagerSlots * eager + ring * chunk); };

  // Room enough: as asked.
  SegmentSize s = fit_segment(need(16384, 0), fixed, pairs, 16384, 0, chunk);
  REQUIRE(s.eager_bytes == 16384);
  REQUIRE(s.total == need(16384, 0));
  // A 64 MiB /dev/shm at 32 ranks (cma, no ring): 16 KiB areas need 124 MiB, 8 KiB 62.
  s = fit_segment(64u << 20, fixed, pairs, 16384, 0, chunk);
  REQUIRE(s.eager_bytes == 8192);
  REQUIRE(s.total <= (64u << 20));
  // Just below a size: the next half, not less.
  s = fit_segment(need(8192, 0) - 1, fixed, pairs, 16384, 0, chunk);
  REQUIRE(s.eager_bytes == 4096);
  // Sizes that are no power of two stay multiples of 64.
  s = fit_segment(need(4800, 0), fixed, pairs, 10000, 0, chunk);
  REQUIRE(s.eager_bytes % 64 == 0);
  REQUIRE(s.total <= need(4800, 0));
  // Not even 64 B areas fit: none; copy mode then halves its ring (4 -> 2 chunks).
  s = fit_segment(need(0, 3), fixed, pairs, 16384, 4, chunk);
  REQUIRE(s.eager_bytes == 0);
  REQUIRE(s.ring_slots == 2);
  REQUIRE(s.total == need(0, 2));
  // Nothing fits: the smallest layout, for the caller to refuse.
  s = fit_segment(fixed, fixed, pairs, 16384, 4, chunk);
  REQUIRE(s.eager_bytes == 0);
  REQUIRE(s.ring_slots == 2);
  REQUIRE(s.total > fixed);
  // Eager off stays off.
  s = fit_segment(need(16384, 4), fixed, pairs, 0, 4, chunk);
  REQUIRE(s.eager_bytes == 0);
  REQUIRE(s.ring_slots == 4);
}
