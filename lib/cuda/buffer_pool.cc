// BufferPool: the bookkeeping is plain C++; only cuda_malloc/cuda_free touch CUDA.
#include <cstdlib>

#include "cuda/cuda_rt.h"

namespace bc {
namespace {
constexpr size_t kHostAlign = 4096;  // whole pages: no false sharing with the caller's data
}

BufferPool::~BufferPool() { clear(); }

Status BufferPool::acquire(size_t bytes, void **out) {
  size_t want = 256;
  while (want < bytes) want <<= 1;
  // The smallest free buffer that fits: chunks of one collective share a class.
  Buf *best = nullptr;
  for (Buf &b : bufs_)
    if (!b.used && b.bytes >= want && (!best || b.bytes < best->bytes)) best = &b;
  if (!best) {
    void *p = nullptr;
    if (mem_ == BC_MEM_CUDA) {
      BC_CHECK(cuda_malloc(&p, want));
    } else if (posix_memalign(&p, kHostAlign, want) != 0) {
      return BC_FAIL(BC_ERR_NO_MEMORY, "cannot allocate %zu bytes of host scratch", want);
    }
    bufs_.push_back(Buf{p, want, false});
    best = &bufs_.back();
  }
  best->used = true;
  *out = best->p;
  return BC_OK;
}

void BufferPool::release(void *p) {
  for (Buf &b : bufs_)
    if (b.p == p) b.used = false;
}

void BufferPool::clear() {
  for (Buf &b : bufs_) {
    if (mem_ == BC_MEM_CUDA) cuda_free(b.p);
    else std::free(b.p);
  }
  bufs_.clear();
}

size_t BufferPool::held_bytes() const {
  size_t n = 0;
  for (const Buf &b : bufs_) n += b.bytes;
  return n;
}

}  // namespace bc
