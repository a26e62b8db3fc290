// Device buffers to other nodes, through pinned host bounce buffers.
//
// Debian's UCX is built without CUDA and the MPI underneath is not assumed
// CUDA-aware, so a device buffer crosses the network as host memory. Each
// transfer is cut into pieces of BC_CUDA_STAGING_CHUNK (bounce.h); per piece:
//
//   send: take a buffer -> cudaMemcpyAsync D->H, event -> event done: post the
//         host transport's send -> it completes: give the buffer back
//   recv: take a buffer -> post the host transport's receive -> it completes:
//         cudaMemcpyAsync H->D, event -> event done: give the buffer back
//
// Two pieces per transfer are in flight, so the copy of one overlaps the
// network transfer of the other; the scheduler keeps several chunks in flight
// on top of that. Sends and receives have separate pools, so receives waiting
// for the network never hold the buffers a send needs.
#include <cstring>
#include <set>

#include "core/log.h"
#include "cuda/cuda_rt.h"
#include "transports/cuda/bounce.h"
#include "transports/cuda/cuda_check.h"
#include "transports/cuda/cuda_transports.h"

namespace bc {
namespace {

enum Stage { kWaitBuf = 0, kCopying, kNetwork };

struct PieceIo {
  TransportRequest net{};
  cudaEvent_t event = nullptr;
};

struct Req {
  bool send = false;
  int peer = -1;
  unsigned char *dev = nullptr;
  uint32_t tag = 0;
  PieceTracker pieces;
  std::vector<PieceIo> io;  // by in-flight slot (piece index % max_inflight)
};

class Pool {
 public:
  Pool(int n, size_t bytes) : book(n, bytes), bufs(static_cast<size_t>(book.size()), nullptr) {}
  BouncePool book;
  std::vector<void *> bufs;  // pinned, allocated on first use
};

constexpr int kInflight = 2;

class StagingTransport final : public Transport {
 public:
  StagingTransport(const TransportSetup &s, const std::vector<Transport *> &host)
      : host_(host),
        send_pool_(static_cast<int>(s.params->get_int(ParamId::CudaStagingBufs)),
                   static_cast<size_t>(s.params->get_int(ParamId::CudaStagingChunk))),
        recv_pool_(send_pool_.book.size(), send_pool_.book.buf_bytes()) {}

  Status init() {
    BC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BC_INFO(Transport,
            "device buffers cross nodes through pinned host staging (%d x %zu B per direction): the UCX "
            "here has no CUDA support and MPI is not assumed CUDA-aware",
            send_pool_.book.size(), send_pool_.book.buf_bytes());
    return BC_OK;
  }

  ~StagingTransport() override {
    for (Req *r : live_) drop(r);
    live_.clear();
    if (stream_) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (Pool *p : {&send_pool_, &recv_pool_})
      for (void *b : p->bufs) cuda_host_free(b);
    cudaGetLastError();
  }

  const char *name() const override { return "staging"; }
  bool can_connect(int peer, bc_memtype_t mem) const override {
    return mem == BC_MEM_CUDA && peer >= 0 && static_cast<size_t>(peer) < host_.size() && host_[peer];
  }
  Status connect(int peer) override { return host_[peer]->connect(peer); }

  Status post_send(int peer, const void *buf, size_t bytes, bc_memtype_t, uint32_t tag, TransportRequest *t) override {
    begin(t, peer, true, const_cast<void *>(buf), bytes, tag);
    return BC_OK;
  }
  Status post_recv(int peer, void *buf, size_t bytes, bc_memtype_t, uint32_t tag, TransportRequest *t) override {
    begin(t, peer, false, buf, bytes, tag);
    return BC_OK;
  }

  Status test(TransportRequest *t, bool *done) override {
    Req *r = *reinterpret_cast<Req **>(t->slot);
    BC_CHECK(advance(r));
    *done = r->pieces.done();
    if (*done) {
      for (PieceIo &io : r->io)
        if (io.event) free_events_.push_back(io.event);
      live_.erase(r);
      delete r;
      t->active = false;
    }
    return BC_OK;
  }

  void cancel(TransportRequest *t) override {
    Req *r = *reinterpret_cast<Req **>(t->slot);
    live_.erase(r);
    drop(r);
    t->active = false;
  }

 private:
  Pool &pool(const Req *r) { return r->send ? send_pool_ : recv_pool_; }

  void begin(TransportRequest *t, int peer, bool send, void *buf, size_t bytes, uint32_t tag) {
    Req *r = new Req;
    r->send = send;
    r->peer = peer;
    r->dev = static_cast<unsigned char *>(buf);
    r->tag = tag;
    r->pieces = PieceTracker(bytes, send_pool_.book.buf_bytes(), kInflight);
    r->io.resize(kInflight);
    t->transport = this;
    t->peer = peer;
    t->active = true;
    *reinterpret_cast<Req **>(t->slot) = r;
    live_.insert(r);
  }

  Status buffer(Pool &p, int idx, void **out) {
    if (!p.bufs[static_cast<size_t>(idx)]) BC_CHECK(cuda_host_alloc(&p.bufs[static_cast<size_t>(idx)], p.book.buf_bytes()));
    *out = p.bufs[static_cast<size_t>(idx)];
    return BC_OK;
  }

  Status event(cudaEvent_t *e) {
    if (*e) return BC_OK;
    if (!free_events_.empty()) {
      *e = free_events_.back();
      free_events_.pop_back();
      return BC_OK;
    }
    BC_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    return BC_OK;
  }

  // Starts pieces while buffers allow, then moves each in-flight piece on;
  // pieces enter the network and retire in order.
  Status advance(Req *r) {
    Pool &p = pool(r);
    while (r->pieces.can_start()) {
      const int idx = p.book.acquire();
      if (idx < 0) break;
      Piece &pc = r->pieces.start(idx);
      PieceIo &io = r->io[static_cast<size_t>(pc.index % kInflight)];
      void *host = nullptr;
      BC_CHECK(buffer(p, idx, &host));
      if (r->send) {
        BC_CHECK(event(&io.event));
        if (pc.bytes) BC_CUDA_CHECK(cudaMemcpyAsync(host, r->dev + pc.offset, pc.bytes, cudaMemcpyDeviceToHost, stream_));
        BC_CUDA_CHECK(cudaEventRecord(io.event, stream_));
        pc.stage = kCopying;
      } else {
        io.net = TransportRequest{};
        BC_CHECK(host_[r->peer]->post_recv(r->peer, host, pc.bytes, BC_MEM_HOST, r->tag, &io.net));
        pc.stage = kNetwork;
      }
    }
    bool earlier_in_copy = false;  // a send enters the network only after the pieces before it
    for (Piece &pc : r->pieces.inflight()) {
      PieceIo &io = r->io[static_cast<size_t>(pc.index % kInflight)];
      if (pc.stage == kCopying) {
        cudaError_t e = cudaEventQuery(io.event);
        if (e == cudaErrorNotReady) {
          earlier_in_copy = true;
          continue;
        }
        BC_CUDA_CHECK(e);
        if (r->send) {
          if (earlier_in_copy) continue;
          io.net = TransportRequest{};
          BC_CHECK(host_[r->peer]->post_send(r->peer, p.bufs[static_cast<size_t>(pc.buf)], pc.bytes, BC_MEM_HOST,
                                             r->tag, &io.net));
          pc.stage = kNetwork;
        } else {
          pc.stage = -1;  // copied back: may retire
        }
      } else if (pc.stage == kNetwork) {
        bool d = false;
        BC_CHECK(io.net.transport->test(&io.net, &d));
        if (!d) continue;
        if (r->send) {
          pc.stage = -1;
        } else {
          BC_CHECK(event(&io.event));
          if (pc.bytes)
            BC_CUDA_CHECK(cudaMemcpyAsync(r->dev + pc.offset, p.bufs[static_cast<size_t>(pc.buf)], pc.bytes,
                                          cudaMemcpyHostToDevice, stream_));
          BC_CUDA_CHECK(cudaEventRecord(io.event, stream_));
          pc.stage = kCopying;
        }
      }
    }
    while (!r->pieces.inflight().empty() && r->pieces.inflight().front().stage == -1)
      p.book.release(r->pieces.retire_front());
    return BC_OK;
  }

  void drop(Req *r) {
    Pool &p = pool(r);
    for (Piece &pc : r->pieces.inflight()) {
      PieceIo &io = r->io[static_cast<size_t>(pc.index % kInflight)];
      if (pc.stage == kNetwork && io.net.active) io.net.transport->cancel(&io.net);
      if (io.event) cudaEventSynchronize(io.event);
      p.book.release(pc.buf);
    }
    for (PieceIo &io : r->io)
      if (io.event) free_events_.push_back(io.event);
    delete r;
  }

  std::vector<Transport *> host_;
  Pool send_pool_, recv_pool_;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> free_events_;
  std::set<Req *> live_;
};

}  // namespace

Status staging_transport_create(const TransportSetup &setup, const std::vector<Transport *> &host,
                                std::unique_ptr<Transport> *out) {
  std::unique_ptr<StagingTransport> t(new StagingTransport(setup, host));
  BC_CHECK(t->init());
  *out = std::move(t);
  return BC_OK;
}

}  // namespace bc
