// The parts of the device-buffer support that need no GPU: the IPC handle
// cache (with a fake opener), the bounce-buffer bookkeeping, the vector split
// of the kernels, and memory-type detection on host pointers. They run on
// every machine, with or without CUDA.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <vector>

#include "cuda/cuda_rt.h"
#include "reduce/vec_split.h"
#include "transports/cuda/bounce.h"
#include "transports/cuda/ipc_cache.h"

using namespace bc;

namespace {

struct FakeMapper : IpcMapper {
  std::map<void *, unsigned char> open_maps;  // mapped address -> first handle byte
  uintptr_t next = 0x1000;
  int fail_next = 0;
  Status open(int, const IpcHandle &h, void **mapped) override {
    if (fail_next) {
      --fail_next;
      return BC_FAIL(BC_ERR_TRANSPORT, "fake open failure");
    }
    *mapped = reinterpret_cast<void *>(next);
    next += 0x1000;
    open_maps[*mapped] = h.bytes[0];
    return BC_OK;
  }
  void close(void *mapped) override { REQUIRE(open_maps.erase(mapped) == 1); }
};

IpcHandle handle(unsigned char b) {
  IpcHandle h{};
  h.bytes[0] = b;
  h.bytes[63] = static_cast<unsigned char>(b ^ 0x5A);
  return h;
}

}  // namespace

TEST_CASE("IpcCache: one open per buffer, reopen when the handle changes") {
  FakeMapper m;
  IpcCache cache(&m, 8);
  void *a = nullptr, *b = nullptr;
  REQUIRE(cache.acquire(1, 0x7000, 4096, handle(1), &a) == BC_OK);
  cache.release(a);
  REQUIRE(cache.acquire(1, 0x7000, 4096, handle(1), &b) == BC_OK);
  cache.release(b);
  CHECK(a == b);
  CHECK(cache.opens() == 1);
  // Same peer, base and size, other handle: the sender freed and reallocated.
  REQUIRE(cache.acquire(1, 0x7000, 4096, handle(2), &b) == BC_OK);
  cache.release(b);
  CHECK(a != b);
  CHECK(cache.opens() == 2);
  CHECK(cache.closes() == 1);
  CHECK(m.open_maps.size() == 1);
  CHECK(m.open_maps[b] == 2);
  // Another peer with the same addresses is another entry.
  REQUIRE(cache.acquire(2, 0x7000, 4096, handle(2), &a) == BC_OK);
  cache.release(a);
  CHECK(cache.size() == 2);
  // Another size at the same base is another allocation.
  REQUIRE(cache.acquire(2, 0x7000, 8192, handle(3), &a) == BC_OK);
  cache.release(a);
  CHECK(cache.size() == 3);
  cache.clear();
  CHECK(m.open_maps.empty());
}

TEST_CASE("IpcCache: LRU bound, pinned entries survive") {
  FakeMapper m;
  IpcCache cache(&m, 2);
  void *p[4];
  for (int i = 0; i < 3; ++i) {
    REQUIRE(cache.acquire(0, 0x10000u * (i + 1), 64, handle(static_cast<unsigned char>(i)), &p[i]) == BC_OK);
    cache.release(p[i]);
  }
  CHECK(cache.size() == 2);
  CHECK(m.open_maps.count(p[0]) == 0);  // least recently used went
  // Touch entry 1, add entry 3: entry 2 goes.
  void *q = nullptr;
  REQUIRE(cache.acquire(0, 0x20000, 64, handle(1), &q) == BC_OK);
  cache.release(q);
  REQUIRE(cache.acquire(0, 0x40000, 64, handle(3), &p[3]) == BC_OK);
  cache.release(p[3]);
  CHECK(m.open_maps.count(p[1]) == 1);
  CHECK(m.open_maps.count(p[2]) == 0);
  // Pinned entries are not closed even past the bound.
  void *x = nullptr, *y = nullptr, *z = nullptr;
  REQUIRE(cache.acquire(1, 0x1, 64, handle(7), &x) == BC_OK);
  REQUIRE(cache.acquire(1, 0x2, 64, handle(8), &y) == BC_OK);
  REQUIRE(cache.acquire(1, 0x3, 64, handle(9), &z) == BC_OK);
  CHECK(m.open_maps.count(x) == 1);
  CHECK(m.open_maps.count(y) == 1);
  CHECK(m.open_maps.count(z) == 1);
  cache.release(x);
  cache.release(y);
  cache.release(z);
  CHECK(cache.size() == 2);
  // A pinned range whose handle changes is an error, not a silent close.
  REQUIRE(cache.acquire(1, 0x3, 64, handle(9), &z) == BC_OK);
  CHECK(cache.acquire(1, 0x3, 64, handle(10), &x) == BC_ERR_INTERNAL);
  cache.release(z);
  // A failed open leaves nothing behind.
  m.fail_next = 1;
  const size_t before = cache.size();
  CHECK(cache.acquire(5, 0x9, 64, handle(1), &x) == BC_ERR_TRANSPORT);
  CHECK(cache.size() == before);
}

TEST_CASE("BouncePool: acquire and release") {
  BouncePool pool(2, 1024);
  CHECK(pool.size() == 2);
  CHECK(pool.buf_bytes() == 1024);
  const int a = pool.acquire(), b = pool.acquire();
  CHECK(a != b);
  CHECK(pool.acquire() == -1);
  CHECK(pool.free_count() == 0);
  pool.release(a);
  CHECK(pool.free_count() == 1);
  CHECK(pool.acquire() == a);
  pool.release(7);  // out of range: ignored
  CHECK(pool.free_count() == 0);
  BouncePool one(0, 8);  // at least one buffer
  CHECK(one.size() == 1);
}

TEST_CASE("PieceTracker: pieces cover the transfer, at most 2 in flight, in order") {
  for (size_t bytes : {size_t(0), size_t(1), size_t(999), size_t(1000), size_t(1001), size_t(4500)}) {
    PieceTracker t(bytes, 1000, 2);
    const int64_t want = bytes == 0 ? 1 : static_cast<int64_t>((bytes + 999) / 1000);
    CHECK(t.pieces() == want);
    BouncePool pool(3, 1000);
    size_t covered = 0;
    int64_t next_expected = 0;
    while (!t.done()) {
      while (t.can_start()) {
        const int buf = pool.acquire();
        REQUIRE(buf >= 0);
        Piece &p = t.start(buf);
        CHECK(p.offset == covered);
        CHECK(p.bytes <= 1000);
        covered += p.bytes;
      }
      CHECK(t.inflight().size() <= 2);
      CHECK(t.inflight().front().index == next_expected);
      pool.release(t.retire_front());
      ++next_expected;
    }
    CHECK(covered == bytes);
    CHECK(next_expected == want);
    CHECK(pool.free_count() == 3);
  }
}

TEST_CASE("vec_split: head to 16 bytes, vectors, tail") {
  for (size_t elem : {size_t(2), size_t(4), size_t(8)}) {
    for (int64_t count : {0, 1, 2, 7, 8, 9, 1023, 1000003}) {
      for (uintptr_t off = 0; off < 16; off += elem) {
        const uintptr_t d = 0x10000 + off, s = 0x20000 + off;
        const VecSplit sp = vec_split(d, s, count, elem);
        CHECK(sp.path == VecPath::Vector);
        CHECK(sp.head + sp.vecs * static_cast<int64_t>(16 / elem) + sp.tail == count);
        CHECK(sp.tail < static_cast<int64_t>(16 / elem));
        if (sp.vecs > 0) {
          CHECK((d + sp.head * elem) % 16 == 0);
          CHECK((s + sp.head * elem) % 16 == 0);
        }
        CHECK(sp.head * elem < 16);
      }
    }
  }
  // Different offsets from 16 bytes: element by element.
  VecSplit sp = vec_split(0x10000, 0x20004, 100, 4);
  CHECK(sp.path == VecPath::Scalar);
  CHECK(sp.head == 100);
  // Not aligned to the element: bytes.
  sp = vec_split(0x10001, 0x20001, 100, 4);
  CHECK(sp.path == VecPath::Bytewise);
  sp = vec_split(0x10000, 0x20002, 100, 4);
  CHECK(sp.path == VecPath::Bytewise);
  // One-buffer kernels pass src = 0.
  sp = vec_split(0x10008, 0, 9, 4);
  CHECK(sp.path == VecPath::Vector);
  CHECK(sp.head == 2);
  CHECK(sp.vecs == 1);
  CHECK(sp.tail == 3);
}

TEST_CASE("BufferPool (host): buffers are kept and reused across operations, by size class") {
  BufferPool pool(BC_MEM_HOST);
  CHECK(pool.memtype() == BC_MEM_HOST);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  REQUIRE(pool.acquire(300 << 10, &a) == BC_OK);  // rounds up to 512 KiB
  REQUIRE(pool.acquire(1, &b) == BC_OK);          // the smallest class, 256 B
  CHECK(a != b);
  CHECK(reinterpret_cast<uintptr_t>(a) % 4096 == 0);  // whole pages
  CHECK(pool.held_bytes() == (512u << 10) + 256u);
  static_cast<unsigned char *>(a)[(300 << 10) - 1] = 1;  // writable to the end
  pool.release(a);
  // The next operation gets the same buffer back: nothing is allocated anew.
  REQUIRE(pool.acquire(200 << 10, &c) == BC_OK);
  CHECK(c == a);
  CHECK(pool.held_bytes() == (512u << 10) + 256u);
  // While in use, a buffer is never handed out twice.
  void *d = nullptr;
  REQUIRE(pool.acquire(200 << 10, &d) == BC_OK);
  CHECK(d != c);
  CHECK(pool.held_bytes() == (512u << 10) + (256u << 10) + 256u);  // a new 256 KiB class
  pool.clear();
  CHECK(pool.held_bytes() == 0);
}

TEST_CASE("memtype: host pointers are host; CUDA declared without a device is refused") {
  std::vector<float> v(16);
  float stack_value = 0;
  void *heap = std::malloc(64);
  CHECK(memtype_of(v.data()) == BC_MEM_HOST);
  CHECK(memtype_of(&stack_value) == BC_MEM_HOST);
  CHECK(memtype_of(heap) == BC_MEM_HOST);
  CHECK(memtype_of(nullptr) == BC_MEM_HOST);
  std::free(heap);
  bc_memtype_t m = BC_MEM_CUDA;
  REQUIRE(resolve_memtype(v.data(), v.data() + 8, BC_MEM_AUTO, &m) == BC_OK);
  CHECK(m == BC_MEM_HOST);
  REQUIRE(resolve_memtype(BC_IN_PLACE, v.data(), BC_MEM_AUTO, &m) == BC_OK);
  CHECK(m == BC_MEM_HOST);
  CHECK(resolve_memtype(v.data(), v.data(), static_cast<bc_memtype_t>(7), &m) == BC_ERR_INVALID_ARG);
  if (cuda_usable() != BC_OK) {
    clear_error();
    CHECK(resolve_memtype(v.data(), v.data(), BC_MEM_CUDA, &m) == BC_ERR_NOT_SUPPORTED);
    CHECK_THAT(last_error(), Catch::Matchers::Contains("CUDA"));
    void *p = nullptr;
    CHECK(cuda_malloc(&p, 64) == BC_ERR_NOT_SUPPORTED);
    BufferPool pool(BC_MEM_CUDA);
    CHECK(pool.acquire(100, &p) == BC_ERR_NOT_SUPPORTED);
    CHECK(std::string(cuda_unusable_reason()).size() > 0);
  }
  clear_error();
}
