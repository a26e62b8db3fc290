// DevicePool: the bookkeeping is plain C++; only cuda_malloc/cuda_free touch CUDA.
#include "cuda/cuda_rt.h"

namespace bc {

DevicePool::~DevicePool() { clear(); }

Status DevicePool::acquire(size_t bytes, void **out) {
  size_t want = 256;
  while (want < bytes) want <<= 1;
  // The smallest free buffer that fits: chunks of one collective share a class.
  Buf *best = nullptr;
  for (Buf &b : bufs_)
    if (!b.used && b.bytes >= want && (!best || b.bytes < best->bytes)) best = &b;
  if (!best) {
    void *p = nullptr;
    BC_CHECK(cuda_malloc(&p, want));
    bufs_.push_back(Buf{p, want, false});
    best = &bufs_.back();
  }
  best->used = true;
  *out = best->p;
  return BC_OK;
}

void DevicePool::release(void *p) {
  for (Buf &b : bufs_)
    if (b.p == p) b.used = false;
}

void DevicePool::clear() {
  for (Buf &b : bufs_) cuda_free(b.p);
  bufs_.clear();
}

}  // namespace bc
