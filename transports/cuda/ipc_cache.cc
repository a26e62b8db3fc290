#include "transports/cuda/ipc_cache.h"

namespace bc {

Status IpcCache::acquire(int peer, uint64_t base, uint64_t size, const IpcHandle &h, void **mapped) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->peer != peer || it->base != base || it->size != size) continue;
    if (!(it->handle == h)) {
      // Same range, new allocation: the old one was freed. A pinned mapping of
      // it would mean a copy still reads memory the sender has freed.
      if (it->pins > 0)
        return BC_FAIL(BC_ERR_INTERNAL, "rank %d reallocated a buffer that a copy still reads", peer);
      mapper_->close(it->mapped);
      ++closes_;
      entries_.erase(it);
      break;
    }
    entries_.splice(entries_.end(), entries_, it);  // most recently used last
    ++it->pins;
    *mapped = it->mapped;
    return BC_OK;
  }
  void *m = nullptr;
  BC_CHECK(mapper_->open(peer, h, &m));
  ++opens_;
  entries_.push_back(Entry{peer, base, size, h, m, 1});
  *mapped = m;
  evict();
  return BC_OK;
}

void IpcCache::release(void *mapped) {
  for (Entry &e : entries_)
    if (e.mapped == mapped && e.pins > 0) {
      --e.pins;
      break;
    }
  evict();
}

void IpcCache::evict() {
  for (auto it = entries_.begin(); it != entries_.end() && entries_.size() > max_;) {
    if (it->pins > 0) {
      ++it;
      continue;
    }
    mapper_->close(it->mapped);
    ++closes_;
    it = entries_.erase(it);
  }
}

void IpcCache::clear() {
  for (Entry &e : entries_) {
    mapper_->close(e.mapped);
    ++closes_;
  }
  entries_.clear();
}

}  // namespace bc
