// The portable transport: MPI point-to-point on the library's private
// communicator. Every peer is reachable; host memory only (a CUDA-aware MPI
// could take device buffers, but we do not assume one).
#include <climits>
#include <cstring>

#include "core/log.h"
#include "transports/transport.h"

namespace bc {
namespace {

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(const TransportSetup &s) : comm_(s.bootstrap) {
    int flag = 0;
    int *ub = nullptr;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag);
    tag_ub_ = flag && ub ? *ub : 32767;
  }
  const char *name() const override { return "mpi"; }
  bool can_connect(int, bc_memtype_t mem) const override { return mem != BC_MEM_CUDA; }
  Status connect(int) override { return BC_OK; }

  Status post_send(int peer, const void *buf, size_t bytes, bc_memtype_t, uint32_t tag,
                   TransportRequest *req) override {
    BC_CHECK(check_size(bytes));
    MPI_Request *r = slot(req, peer);
    BC_MPI_CHECK(MPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, mpi_tag(tag), comm_, r));
    return BC_OK;
  }
  Status post_recv(int peer, void *buf, size_t bytes, bc_memtype_t, uint32_t tag,
                   TransportRequest *req) override {
    BC_CHECK(check_size(bytes));
    MPI_Request *r = slot(req, peer);
    BC_MPI_CHECK(MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, mpi_tag(tag), comm_, r));
    return BC_OK;
  }
  Status test(TransportRequest *req, bool *done) override {
    int flag = 0;
    MPI_Request *r = reinterpret_cast<MPI_Request *>(req->slot);
    BC_MPI_CHECK(MPI_Test(r, &flag, MPI_STATUS_IGNORE));
    *done = flag != 0;
    if (*done) req->active = false;
    return BC_OK;
  }
  void cancel(TransportRequest *req) override {
    MPI_Request *r = reinterpret_cast<MPI_Request *>(req->slot);
    if (*r != MPI_REQUEST_NULL) {
      MPI_Cancel(r);
      MPI_Request_free(r);
    }
    req->active = false;
  }

 private:
  MPI_Request *slot(TransportRequest *req, int peer) {
    static_assert(sizeof(MPI_Request) <= sizeof(req->slot), "MPI_Request fits the slot");
    req->transport = this;
    req->peer = peer;
    req->active = true;
    MPI_Request *r = reinterpret_cast<MPI_Request *>(req->slot);
    *r = MPI_REQUEST_NULL;
    return r;
  }
  // Programs use tags below 2^20 plus sequence bits above; fold them into MPI's range.
  int mpi_tag(uint32_t tag) const { return static_cast<int>(tag % (static_cast<uint32_t>(tag_ub_) + 1)); }
  Status check_size(size_t bytes) const {
    if (bytes > static_cast<size_t>(INT_MAX))
      return BC_FAIL(BC_ERR_NOT_SUPPORTED, "the MPI transport moves at most 2 GiB per message, asked for %zu bytes",
                     bytes);
    return BC_OK;
  }

  MPI_Comm comm_;
  int tag_ub_ = 32767;
};

}  // namespace

Status mpi_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out) {
  out->reset(new MpiTransport(setup));
  return BC_OK;
}

}  // namespace bc
