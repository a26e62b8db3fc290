// The receiver's cache of opened CUDA IPC memory handles.
//
// A sender names its buffer by (allocation base, allocation size) and sends the
// IPC handle with every descriptor. Opening a handle (cudaIpcOpenMemHandle) is
// slow, so the receiver keeps each mapping, keyed by (peer, base, size). When
// the sender frees an allocation and a new one lands at the same base, the new
// handle's bytes differ: the old mapping is closed and the new one opened —
// that is the invalidation on free. Mappings in use by a copy are pinned; the
// least recently used unpinned ones are closed past `max_entries`
// (BC_CUDA_IPC_CACHE).
//
// No CUDA here: opening and closing go through IpcMapper, so the unit tests
// drive the cache with a fake on every machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>

#include "core/status.h"

namespace bc {

constexpr size_t kIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

struct IpcHandle {
  unsigned char bytes[kIpcHandleBytes];
  bool operator==(const IpcHandle &o) const { return std::memcmp(bytes, o.bytes, kIpcHandleBytes) == 0; }
};

class IpcMapper {
 public:
  virtual ~IpcMapper() = default;
  virtual Status open(int peer, const IpcHandle &h, void **mapped) = 0;
  virtual void close(void *mapped) = 0;
};

class IpcCache {
 public:
  IpcCache(IpcMapper *mapper, size_t max_entries) : mapper_(mapper), max_(max_entries < 1 ? 1 : max_entries) {}
  ~IpcCache() { clear(); }
  IpcCache(const IpcCache &) = delete;
  IpcCache &operator=(const IpcCache &) = delete;

  // The local address of the peer's allocation, pinned until release(mapped).
  Status acquire(int peer, uint64_t base, uint64_t size, const IpcHandle &h, void **mapped);
  void release(void *mapped);
  void clear();  // closes every mapping (call when no copy is in flight)

  size_t size() const { return entries_.size(); }
  uint64_t opens() const { return opens_; }
  uint64_t closes() const { return closes_; }

 private:
  struct Entry {
    int peer;
    uint64_t base, size;
    IpcHandle handle;
    void *mapped;
    int pins;
  };
  void evict();

  IpcMapper *mapper_;
  size_t max_;
  std::list<Entry> entries_;  // least recently used first
  uint64_t opens_ = 0, closes_ = 0;
};

}  // namespace bc
