#include "transports/cuda/bounce.h"

namespace bc {

int BouncePool::acquire() {
  for (size_t i = 0; i < used_.size(); ++i)
    if (!used_[i]) {
      used_[i] = 1;
      return static_cast<int>(i);
    }
  return -1;
}

void BouncePool::release(int idx) {
  if (idx >= 0 && static_cast<size_t>(idx) < used_.size()) used_[static_cast<size_t>(idx)] = 0;
}

int BouncePool::free_count() const {
  int n = 0;
  for (char u : used_) n += u ? 0 : 1;
  return n;
}

PieceTracker::PieceTracker(size_t bytes, size_t buf_bytes, int max_inflight)
    : bytes_(bytes), buf_bytes_(buf_bytes < 1 ? 1 : buf_bytes), max_inflight_(max_inflight < 1 ? 1 : max_inflight) {
  // A zero-byte transfer is still one (empty) message, so both sides agree.
  npieces_ = bytes_ == 0 ? 1 : static_cast<int64_t>((bytes_ + buf_bytes_ - 1) / buf_bytes_);
}

bool PieceTracker::can_start() const {
  return next_ < npieces_ && static_cast<int>(inflight_.size()) < max_inflight_;
}

Piece &PieceTracker::start(int buf) {
  Piece p;
  p.index = next_;
  p.offset = static_cast<size_t>(next_) * buf_bytes_;
  p.bytes = p.offset >= bytes_ ? 0 : (bytes_ - p.offset < buf_bytes_ ? bytes_ - p.offset : buf_bytes_);
  p.buf = buf;
  ++next_;
  inflight_.push_back(p);
  return inflight_.back();
}

int PieceTracker::retire_front() {
  const int buf = inflight_.front().buf;
  inflight_.pop_front();
  return buf;
}

}  // namespace bc
