// Same-node device buffers over CUDA IPC.
//
//   sender                                  receiver
//   post_send: Isend(desc) + Irecv(ack)     post_recv: Irecv(desc)
//                                           test: desc arrived -> open (cache) ->
//                                                 cudaMemcpyAsync on our stream,
//                                                 cudaEventRecord
//                                           test: cudaEventQuery done -> Isend(ack)
//   test: ack arrived -> done               test: ack sent -> done
//
// The host never waits on the device: test() polls events. The sender's
// buffer is ready when post_send is called (device reductions and the start
// copy are synchronous), and stays untouched until the ack.
// Descriptors and acks use two private duplicates of the bootstrap
// communicator, so they never meet each other or anyone else's messages.
#include <cuda.h>

#include <climits>
#include <cstring>
#include <set>

#include "core/log.h"
#include "cuda/cuda_rt.h"
#include "transports/cuda/cuda_check.h"
#include "transports/cuda/cuda_transports.h"
#include "transports/cuda/ipc_cache.h"

namespace bc {
namespace {

using GetRangeFn = CUresult (*)(CUdeviceptr *, size_t *, CUdeviceptr);

struct Desc {
  IpcHandle handle{};
  uint64_t base = 0, size = 0;  // the sender's allocation
  uint64_t offset = 0;          // of the buffer within it
  uint64_t bytes = 0;
};

enum class Phase { WaitDesc, Copying, Acking, WaitAck, Done };

struct Req {
  Phase phase = Phase::WaitDesc;
  bool send = false;
  int peer = -1;
  void *buf = nullptr;
  size_t bytes = 0;
  int tag = 0;
  Desc desc;
  char ack = 1;
  MPI_Request mpi[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  cudaEvent_t event = nullptr;
  void *mapped = nullptr;  // pinned in the cache while copying
};

class CudaMapper final : public IpcMapper {
 public:
  Status open(int peer, const IpcHandle &h, void **mapped) override {
    cudaIpcMemHandle_t ch;
    static_assert(sizeof ch == kIpcHandleBytes, "IPC handle size");
    std::memcpy(&ch, h.bytes, sizeof ch);
    cudaError_t e = cudaIpcOpenMemHandle(mapped, ch, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return BC_FAIL(BC_ERR_TRANSPORT, "cudaIpcOpenMemHandle of rank %d's buffer: %s", peer, cudaGetErrorString(e));
    }
    return BC_OK;
  }
  void close(void *mapped) override {
    if (cudaIpcCloseMemHandle(mapped) != cudaSuccess) cudaGetLastError();
  }
};

class CudaTransport final : public Transport {
 public:
  CudaTransport(const TransportSetup &s, GetRangeFn range)
      : node_of_(s.node_of), rank_(s.rank), range_(range),
        cache_(&mapper_, static_cast<size_t>(s.params->get_int(ParamId::CudaIpcCache))) {}

  Status init(MPI_Comm bootstrap) {
    BC_MPI_CHECK(MPI_Comm_dup(bootstrap, &desc_comm_));
    BC_MPI_CHECK(MPI_Comm_dup(bootstrap, &ack_comm_));
    // A duplicate inherits the bootstrap's MPI_ERRORS_RETURN; say so anyway.
    BC_MPI_CHECK(MPI_Comm_set_errhandler(desc_comm_, MPI_ERRORS_RETURN));
    BC_MPI_CHECK(MPI_Comm_set_errhandler(ack_comm_, MPI_ERRORS_RETURN));
    BC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    return BC_OK;
  }

  ~CudaTransport() override {
    for (Req *r : live_) drop(r);
    live_.clear();
    if (stream_) cudaStreamSynchronize(stream_);
    cache_.clear();
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
    cudaGetLastError();
    if (desc_comm_ != MPI_COMM_NULL) BC_MPI_WARN(MPI_Comm_free(&desc_comm_));
    if (ack_comm_ != MPI_COMM_NULL) BC_MPI_WARN(MPI_Comm_free(&ack_comm_));
  }

  const char *name() const override { return "cuda"; }
  bool can_connect(int peer, bc_memtype_t mem) const override {
    return mem == BC_MEM_CUDA && peer != rank_ && node_of_[peer] == node_of_[rank_];
  }
  Status connect(int) override { return BC_OK; }

  Status post_send(int peer, const void *buf, size_t bytes, bc_memtype_t, uint32_t tag,
                   TransportRequest *treq) override {
    Req *r = begin(treq, peer, true, const_cast<void *>(buf), bytes, tag);
    CUdeviceptr base = 0;
    size_t size = 0;
    if (bytes > 0) {
      CUresult cr = range_(&base, &size, reinterpret_cast<CUdeviceptr>(buf));
      if (cr != CUDA_SUCCESS)
        return BC_FAIL(BC_ERR_TRANSPORT, "cuMemGetAddressRange on a send buffer failed (CUresult %d): not device memory?",
                       static_cast<int>(cr));
      cudaIpcMemHandle_t h;
      cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void *>(base));
      if (e != cudaSuccess) {
        cudaGetLastError();
        // Managed memory and stream-ordered pool allocations have no legacy IPC handle.
        return BC_FAIL(BC_ERR_NOT_SUPPORTED,
                       "cudaIpcGetMemHandle on the send buffer: %s; CUDA IPC needs cudaMalloc memory "
                       "(BC_CUDA_IPC=0 sends through host staging instead)", cudaGetErrorString(e));
      }
      std::memcpy(r->desc.handle.bytes, &h, sizeof h);
    }
    r->desc.base = base;
    r->desc.size = size;
    r->desc.offset = bytes > 0 ? reinterpret_cast<uintptr_t>(buf) - base : 0;
    r->desc.bytes = bytes;
    BC_MPI_CHECK(MPI_Irecv(&r->ack, 1, MPI_CHAR, peer, r->tag, ack_comm_, &r->mpi[1]));
    BC_MPI_CHECK(MPI_Isend(&r->desc, sizeof(Desc), MPI_BYTE, peer, r->tag, desc_comm_, &r->mpi[0]));
    r->phase = Phase::WaitAck;
    return BC_OK;
  }

  Status post_recv(int peer, void *buf, size_t bytes, bc_memtype_t, uint32_t tag, TransportRequest *treq) override {
    Req *r = begin(treq, peer, false, buf, bytes, tag);
    BC_MPI_CHECK(MPI_Irecv(&r->desc, sizeof(Desc), MPI_BYTE, peer, r->tag, desc_comm_, &r->mpi[0]));
    r->phase = Phase::WaitDesc;
    return BC_OK;
  }

  Status test(TransportRequest *treq, bool *done) override {
    Req *r = *reinterpret_cast<Req **>(treq->slot);
    *done = false;
    int flag = 0;
    switch (r->phase) {
      case Phase::WaitAck:  // sender: both the descriptor and the ack
        BC_MPI_CHECK(MPI_Testall(2, r->mpi, &flag, MPI_STATUSES_IGNORE));
        if (flag) r->phase = Phase::Done;
        break;
      case Phase::WaitDesc:
        BC_MPI_CHECK(MPI_Test(&r->mpi[0], &flag, MPI_STATUS_IGNORE));
        if (flag) BC_CHECK(start_copy(r));
        break;
      case Phase::Copying: {
        cudaError_t e = cudaEventQuery(r->event);
        if (e == cudaErrorNotReady) break;
        BC_CUDA_CHECK(e);
        if (r->mapped) cache_.release(r->mapped);
        r->mapped = nullptr;
        BC_MPI_CHECK(MPI_Isend(&r->ack, 1, MPI_CHAR, r->peer, r->tag, ack_comm_, &r->mpi[1]));
        r->phase = Phase::Acking;
      }
        [[fallthrough]];  // the ack is usually sent at once
      case Phase::Acking:
        BC_MPI_CHECK(MPI_Test(&r->mpi[1], &flag, MPI_STATUS_IGNORE));
        if (flag) r->phase = Phase::Done;
        break;
      case Phase::Done:
        break;
    }
    if (r->phase == Phase::Done) {
      finish(treq, r);
      *done = true;
    }
    return BC_OK;
  }

  void cancel(TransportRequest *treq) override {
    Req *r = *reinterpret_cast<Req **>(treq->slot);
    drop(r);
    live_.erase(r);
    treq->active = false;
  }

 private:
  Req *begin(TransportRequest *treq, int peer, bool send, void *buf, size_t bytes, uint32_t tag) {
    Req *r = new Req;
    r->send = send;
    r->peer = peer;
    r->buf = buf;
    r->bytes = bytes;
    r->tag = static_cast<int>(tag);  // whole: cuda_transport_create checked MPI's bound
    treq->transport = this;
    treq->peer = peer;
    treq->active = true;
    static_assert(sizeof(Req *) <= sizeof(treq->slot), "pointer fits the slot");
    *reinterpret_cast<Req **>(treq->slot) = r;
    live_.insert(r);
    return r;
  }

  Status start_copy(Req *r) {
    if (r->desc.bytes != r->bytes)
      return BC_FAIL(BC_ERR_TRANSPORT, "cuda transport: receive from rank %d (tag %#x, %zu bytes): the sender offers %llu bytes",
                     r->peer, static_cast<unsigned>(r->tag), r->bytes, static_cast<unsigned long long>(r->desc.bytes));
    if (!r->event) {
      if (!free_events_.empty()) {
        r->event = free_events_.back();
        free_events_.pop_back();
      } else {
        BC_CUDA_CHECK(cudaEventCreateWithFlags(&r->event, cudaEventDisableTiming));
      }
    }
    if (r->bytes > 0) {
      BC_CHECK(cache_.acquire(r->peer, r->desc.base, r->desc.size, r->desc.handle, &r->mapped));
      const void *src = static_cast<const unsigned char *>(r->mapped) + r->desc.offset;
      // Default kind: with unified addressing the runtime picks a peer copy
      // when the mapping lives on another device, a device copy otherwise.
      BC_CUDA_CHECK(cudaMemcpyAsync(r->buf, src, r->bytes, cudaMemcpyDefault, stream_));
    }
    BC_CUDA_CHECK(cudaEventRecord(r->event, stream_));
    r->phase = Phase::Copying;
    return BC_OK;
  }

  void finish(TransportRequest *treq, Req *r) {
    if (r->event) free_events_.push_back(r->event);
    r->event = nullptr;
    live_.erase(r);
    delete r;
    treq->active = false;
  }

  // Best effort after a failure: the peer may never answer.
  void drop(Req *r) {
    for (MPI_Request &m : r->mpi)
      if (m != MPI_REQUEST_NULL) {
        BC_MPI_WARN(MPI_Cancel(&m));
        BC_MPI_WARN(MPI_Request_free(&m));
      }
    if (r->event) {
      cudaEventSynchronize(r->event);
      cudaEventDestroy(r->event);
    }
    if (r->mapped) cache_.release(r->mapped);
    delete r;
  }

  std::vector<int64_t> node_of_;
  int rank_;
  GetRangeFn range_;
  CudaMapper mapper_;
  IpcCache cache_;
  MPI_Comm desc_comm_ = MPI_COMM_NULL, ack_comm_ = MPI_COMM_NULL;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> free_events_;
  std::set<Req *> live_;
};

// cuMemGetAddressRange through the runtime's entry-point query, so that the
// library does not link libcuda.so (it must load on hosts without a driver).
Status find_get_range(GetRangeFn *out) {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  BC_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &q));
  if (!fn || q != cudaDriverEntryPointSuccess)
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "the CUDA driver has no cuMemGetAddressRange");
  *out = reinterpret_cast<GetRangeFn>(fn);
  return BC_OK;
}

}  // namespace

Status cuda_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out) {
  BC_CHECK(mpi_tags_fit("cuda", *setup.params));  // the same verdict on every rank
  GetRangeFn range = nullptr;
  Status mine = cuda_usable();
  if (mine == BC_OK) mine = find_get_range(&range);
  int ok = mine == BC_OK ? 1 : 0, all = 0;
  BC_MPI_CHECK(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, setup.bootstrap));
  if (!all) {
    if (mine == BC_OK) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "another rank has no usable CUDA device");
    return mine;  // with this rank's own reason
  }
  std::unique_ptr<CudaTransport> t(new CudaTransport(setup, range));
  BC_CHECK(t->init(setup.bootstrap));
  *out = std::move(t);
  return BC_OK;
}

}  // namespace bc
