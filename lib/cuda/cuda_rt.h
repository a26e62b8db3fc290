// The library's one door to the CUDA runtime, with no CUDA header in sight.
//
// Everything above lib/cuda/ (the API, the scheduler, the PMPI layer) includes
// only this header, so it compiles the same with and without CUDA. Without a
// CUDA build (or on a host with no driver or device) every call that needs a
// GPU returns BC_ERR_NOT_SUPPORTED with the reason, and memtype_of() says
// BC_MEM_HOST for every pointer at the cost of one cached flag.
#pragma once

#include <cstddef>
#include <vector>

#include "blueconnect.h"
#include "core/status.h"

namespace bc {

// Whether this build has CUDA at all (BC_HAVE_CUDA).
bool cuda_built();
// BC_OK when a device is usable from this process; otherwise NotSupported
// with "no CUDA device: cudaGetDeviceCount: <CUDA's text>". Probed once.
Status cuda_usable();
// The reason cuda_usable() failed ("" when usable): for test skip lines.
const char *cuda_unusable_reason();

// BC_MEM_CUDA for device and managed memory, BC_MEM_HOST for anything else
// (host, pinned host, unknown pointers). Never fails; clears CUDA's sticky
// last error after a failed query.
bc_memtype_t memtype_of(const void *p);

// The memory type of a collective's buffers. `declared` BC_MEM_AUTO detects
// from both pointers (`send` may be BC_IN_PLACE or null): a mix of host and
// device buffers is BC_ERR_INVALID_ARG. BC_MEM_CUDA needs a usable device.
Status resolve_memtype(const void *send, const void *recv, bc_memtype_t declared, bc_memtype_t *out);

// Synchronous copies in any direction (cudaMemcpyDefault): start and finish
// of a device collective, and the tests.
Status cuda_copy(void *dst, const void *src, size_t bytes);
Status cuda_memset(void *dst, int value, size_t bytes);
Status cuda_malloc(void **p, size_t bytes);
void cuda_free(void *p);  // null is fine; errors are logged, not returned
Status cuda_host_alloc(void **p, size_t bytes);  // pinned
void cuda_host_free(void *p);
// The calling thread's current device (CUDA's is per thread): the progress
// thread takes the device of the thread that started a request.
Status cuda_current_device(int *dev);
Status cuda_set_device(int dev);

// Scratch memory reused across the collectives of one communicator, of one
// memory type: BC_MEM_HOST (page-aligned host memory) or BC_MEM_CUDA (device
// memory). Kept by size and freed at destroy.
//
// Why a pool, also for host memory: allocating each operation's scratch anew
// made glibc hand it back to the kernel at the end of every call (heap trim or
// munmap), so every back-to-back all-reduce page-faulted its scratch in again;
// with single-copy (CMA) reads into fresh pages, a 4 MiB all-reduce at np 2 on
// one node took 9.5 ms instead of 0.6 ms.
class BufferPool {
 public:
  explicit BufferPool(bc_memtype_t mem) : mem_(mem) {}
  ~BufferPool();
  BufferPool(const BufferPool &) = delete;
  BufferPool &operator=(const BufferPool &) = delete;
  bc_memtype_t memtype() const { return mem_; }
  // A buffer of at least `bytes` (rounded up to a power of two, so a few size
  // classes serve every chunk), reused when one is free.
  Status acquire(size_t bytes, void **out);
  void release(void *p);
  void clear();  // frees every buffer (none may be in use)
  // Bytes held (in use or free): what the pool costs the process.
  size_t held_bytes() const;

 private:
  struct Buf {
    void *p;
    size_t bytes;
    bool used;
  };
  bc_memtype_t mem_;
  std::vector<Buf> bufs_;
};

}  // namespace bc
