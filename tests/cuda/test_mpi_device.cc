// Collectives on device buffers under mpirun (2-4 ranks may share one GPU:
// CUDA IPC between processes on one device). Exact small-integer data, so
// every result is compared bit for bit; outputs are poisoned first and
// guarded by bytes on both sides. BC_CUDA_IPC=0 sends every peer through the
// pinned-host staging path, as across nodes. Run through run_mpi.sh, which
// skips (77) with the reason when no GPU is present.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "../mpi/catch_mpi_session.h"
#include "../mpi/harness.h"
#include "blueconnect.h"

using namespace bctest;

namespace {

// A device buffer with 64 guard bytes on each side.
class DevGuarded {
 public:
  static constexpr size_t kGuard = 64;
  explicit DevGuarded(size_t bytes) : bytes_(bytes) {
    REQUIRE(cudaMalloc(&base_, bytes + 2 * kGuard) == cudaSuccess);
    REQUIRE(cudaMemset(base_, 0xA5, bytes + 2 * kGuard) == cudaSuccess);
    REQUIRE(cudaMemset(data(), 0xCD, bytes) == cudaSuccess);  // poison
  }
  ~DevGuarded() { cudaFree(base_); }
  void *data() { return static_cast<unsigned char *>(base_) + kGuard; }
  void upload(const std::vector<unsigned char> &h) {
    REQUIRE(cudaMemcpy(data(), h.data(), bytes_, cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<unsigned char> download() {
    std::vector<unsigned char> h(bytes_);
    REQUIRE(cudaMemcpy(h.data(), data(), bytes_, cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
  bool guards_intact() {
    std::vector<unsigned char> h(bytes_ + 2 * kGuard);
    if (cudaMemcpy(h.data(), base_, h.size(), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    for (size_t i = 0; i < kGuard; ++i)
      if (h[i] != 0xA5 || h[kGuard + bytes_ + i] != 0xA5) return false;
    return true;
  }

 private:
  void *base_ = nullptr;
  size_t bytes_;
};

const char *const kOptions[] = {"", "BC_CUDA_IPC=0", "BC_CHUNK=4K;BC_PIPELINE_DEPTH=3",
                                "BC_CUDA_IPC=0;BC_CUDA_STAGING_CHUNK=4K;BC_CUDA_STAGING_BUFS=2"};
const bc_dtype_t kFloats[] = {BC_FLOAT32, BC_FLOAT64, BC_FLOAT16, BC_BFLOAT16};
const bc_op_t kOps[] = {BC_SUM, BC_PROD, BC_MIN, BC_MAX, BC_AVG};

std::vector<unsigned char> inputs(bc_op_t op, bc_dtype_t t, int r, int p, int64_t n, int64_t first = 0) {
  std::vector<unsigned char> h(static_cast<size_t>(n) * bc_dtype_size(t));
  for (int64_t i = 0; i < n; ++i) put(h.data(), t, static_cast<size_t>(i), input_value(op, t, r, p, first + i));
  return h;
}
std::vector<unsigned char> expected(bc_op_t op, bc_dtype_t t, int p, int64_t n, int64_t first = 0) {
  std::vector<unsigned char> h(static_cast<size_t>(n) * bc_dtype_size(t));
  for (int64_t i = 0; i < n; ++i) put(h.data(), t, static_cast<size_t>(i), expected_value(op, t, p, first + i));
  return h;
}

}  // namespace

TEST_CASE("device allreduce, out of place and in place, every float dtype and op") {
  const int r = world_rank(), p = world_size();
  for (const char *opts : kOptions) {
    bc_comm_t comm = nullptr;
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, opts, &comm) == BC_OK));
    for (bc_dtype_t t : kFloats)
      for (bc_op_t op : kOps)
        for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000), int64_t(100003)}) {
          INFO("options '" << opts << "' " << bc_dtype_name(t) << " " << bc_op_name(op) << " n=" << n);
          const size_t bytes = static_cast<size_t>(n) * bc_dtype_size(t);
          const auto in = inputs(op, t, r, p, n);
          const auto want = expected(op, t, p, n);
          DevGuarded send(bytes), recv(bytes);
          send.upload(in);
          const bc_status_t st = bc_allreduce(send.data(), recv.data(), n, t, op, comm);
          if (st != BC_OK) UNSCOPED_INFO(bc_last_error());
          REQUIRE(everywhere(st == BC_OK));
          CHECK(everywhere(recv.download() == want));
          CHECK(everywhere(send.download() == in));
          CHECK(everywhere(send.guards_intact() && recv.guards_intact()));
          // In place, and declared rather than detected.
          const bc_status_t st2 = bc_allreduce_mem(BC_IN_PLACE, send.data(), n, t, op, BC_MEM_CUDA, comm);
          REQUIRE(everywhere(st2 == BC_OK));
          CHECK(everywhere(send.download() == want));
          CHECK(everywhere(send.guards_intact()));
        }
    REQUIRE(everywhere(bc_comm_destroy(&comm) == BC_OK));
  }
}

TEST_CASE("device reduce_scatter and allgather") {
  const int r = world_rank(), p = world_size();
  for (const char *opts : kOptions) {
    bc_comm_t comm = nullptr;
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, opts, &comm) == BC_OK));
    for (bc_dtype_t t : {BC_FLOAT32, BC_FLOAT16})
      for (int64_t n : {int64_t(1), int64_t(1000), int64_t(70001)}) {
        INFO("options '" << opts << "' " << bc_dtype_name(t) << " n=" << n);
        const size_t elem = bc_dtype_size(t);
        // reduce_scatter: p*n in, block r out.
        DevGuarded rs_in(n * p * elem), rs_out(n * elem);
        const auto in = inputs(BC_SUM, t, r, p, n * p);
        rs_in.upload(in);
        REQUIRE(everywhere(bc_reduce_scatter(rs_in.data(), rs_out.data(), n, t, BC_SUM, comm) == BC_OK));
        CHECK(everywhere(rs_out.download() == expected(BC_SUM, t, p, n, n * r)));
        CHECK(everywhere(rs_in.guards_intact() && rs_out.guards_intact()));
        // In place: the result lands at the start of the buffer.
        rs_in.upload(in);
        REQUIRE(everywhere(bc_reduce_scatter(BC_IN_PLACE, rs_in.data(), n, t, BC_SUM, comm) == BC_OK));
        auto got = rs_in.download();
        got.resize(n * elem);
        CHECK(everywhere(got == expected(BC_SUM, t, p, n, n * r)));
        // allgather: n each, p*n out in rank order.
        DevGuarded ag_in(n * elem), ag_out(n * p * elem);
        ag_in.upload(inputs(BC_MAX, t, r, p, n));
        REQUIRE(everywhere(bc_allgather(ag_in.data(), ag_out.data(), n, t, comm) == BC_OK));
        std::vector<unsigned char> want;
        for (int q = 0; q < p; ++q) {
          const auto part = inputs(BC_MAX, t, q, p, n);
          want.insert(want.end(), part.begin(), part.end());
        }
        CHECK(everywhere(ag_out.download() == want));
        CHECK(everywhere(ag_in.guards_intact() && ag_out.guards_intact()));
      }
    REQUIRE(everywhere(bc_comm_destroy(&comm) == BC_OK));
  }
}

TEST_CASE("device buffers: mixed host/device and integer reductions are refused clearly") {
  bc_comm_t comm = nullptr;
  REQUIRE(everywhere(bc_comm_create(MPI_COMM_WORLD, &comm) == BC_OK));
  DevGuarded d(64);
  std::vector<float> h(16);
  CHECK(everywhere(bc_allreduce(h.data(), d.data(), 16, BC_FLOAT32, BC_SUM, comm) == BC_ERR_INVALID_ARG));
  CHECK(std::string(bc_last_error()).find("same side") != std::string::npos);
  CHECK(everywhere(bc_allreduce(d.data(), d.data(), 16, BC_INT32, BC_SUM, comm) == BC_ERR_NOT_SUPPORTED));
  CHECK(std::string(bc_last_error()).find("int32 sum") != std::string::npos);
  // Integer allgather needs no reduction: allowed.
  DevGuarded out(64 * world_size());
  CHECK(everywhere(bc_allgather(d.data(), out.data(), 16, BC_INT32, comm) == BC_OK));
  REQUIRE(everywhere(bc_comm_destroy(&comm) == BC_OK));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Several ranks share the GPUs round-robin (one GPU: all on device 0).
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) cudaSetDevice(rank % ndev);
  return bctest::catch_mpi_session(argc, argv);
}
