// Bookkeeping of the pinned host bounce buffers that carry device buffers
// across nodes (staging_transport.cc). Pure: indices and byte ranges, no CUDA,
// so the unit tests run it everywhere.
//
// A transfer larger than one bounce buffer is cut into pieces of at most
// buffer size. Each piece takes a buffer, is copied (device->host for a send,
// host->device after the network for a receive) and gives the buffer back.
// A transfer keeps at most `max_inflight` pieces at once (2: the copy of one
// piece overlaps the network transfer of the other), so one large transfer
// cannot starve the others of buffers. Pieces are handed to the network, and
// retire, strictly in order: the network side matches them by order under one
// tag (MPI's and UCX's tag matching do not overtake between one pair).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace bc {

class BouncePool {
 public:
  BouncePool(int nbufs, size_t buf_bytes) : buf_bytes_(buf_bytes), used_(static_cast<size_t>(nbufs < 1 ? 1 : nbufs), 0) {}
  int acquire();         // a free buffer's index, or -1 when all are taken
  void release(int idx);
  int free_count() const;
  int size() const { return static_cast<int>(used_.size()); }
  size_t buf_bytes() const { return buf_bytes_; }

 private:
  size_t buf_bytes_;
  std::vector<char> used_;
};

struct Piece {
  int64_t index = 0;
  size_t offset = 0;  // into the transfer
  size_t bytes = 0;
  int buf = -1;       // bounce buffer
  int stage = 0;      // owned by the transport: where this piece is in its pipeline
};

// One transfer's pieces.
class PieceTracker {
 public:
  PieceTracker() = default;
  PieceTracker(size_t bytes, size_t buf_bytes, int max_inflight = 2);
  int64_t pieces() const { return npieces_; }
  // Whether another piece may start (pieces left and fewer than max in flight).
  bool can_start() const;
  // Starts the next piece in buffer `buf`; returns it (valid until retire).
  Piece &start(int buf);
  // The in-flight pieces, oldest first.
  std::deque<Piece> &inflight() { return inflight_; }
  // Retires the oldest piece and returns its buffer.
  int retire_front();
  bool done() const { return next_ == npieces_ && inflight_.empty(); }

 private:
  size_t bytes_ = 0, buf_bytes_ = 1;
  int max_inflight_ = 2;
  int64_t npieces_ = 0, next_ = 0;
  std::deque<Piece> inflight_;
};

}  // namespace bc
