// The torch backend's checks and conversions of tensors, dtypes and reduce
// ops, done on the caller's thread so that a bad argument raises there (a
// Python RuntimeError), and the byte helpers the collectives' bodies use
// (sizes, pointers, pack/unpack). Separate because every collective file
// shares them and none of them touches a communicator.
#include "process_group_internal.h"

#include <climits>
#include <cstring>

namespace bctorch {

void check_tensor(const at::Tensor &t, const char *what) {
  TORCH_CHECK(t.defined(), "blueconnect: ", what, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "blueconnect: ", what, ": the tensor is on ", t.device(),
              "; this build of the blueconnect backend serves CPU tensors only");
  TORCH_CHECK(t.layout() == c10::kStrided, "blueconnect: ", what, ": only dense (strided) tensors are supported");
  TORCH_CHECK(t.is_contiguous(), "blueconnect: ", what,
              ": the tensor is not contiguous; pass tensor.contiguous() (and copy the result back)");
}

void check_one(const std::vector<at::Tensor> &ts, const char *what) {
  TORCH_CHECK(ts.size() == 1, "blueconnect: ", what, ": expects exactly one tensor per process, got ", ts.size());
  check_tensor(ts[0], what);
}

void check_same(const at::Tensor &a, const at::Tensor &b, const char *what) {
  check_tensor(b, what);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "blueconnect: ", what, ": dtypes differ (", a.scalar_type(),
              " and ", b.scalar_type(), ")");
  TORCH_CHECK(a.numel() == b.numel(), "blueconnect: ", what, ": sizes differ (", a.numel(), " and ", b.numel(),
              " elements)");
}

namespace {
bool bitwise(bc_op_t op) { return op == BC_BAND || op == BC_BOR || op == BC_BXOR; }
}  // namespace

bc_op_t to_bc_op(const c10d::ReduceOp &rop, const char *what) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(rop)) {
    case c10d::ReduceOp::SUM: return BC_SUM;
    case c10d::ReduceOp::AVG: return BC_AVG;
    case c10d::ReduceOp::PRODUCT: return BC_PROD;
    case c10d::ReduceOp::MIN: return BC_MIN;
    case c10d::ReduceOp::MAX: return BC_MAX;
    case c10d::ReduceOp::BAND: return BC_BAND;
    case c10d::ReduceOp::BOR: return BC_BOR;
    case c10d::ReduceOp::BXOR: return BC_BXOR;
    default: break;
  }
  TORCH_CHECK(false, "blueconnect: ", what, ": reduce op ", static_cast<int>(static_cast<c10d::ReduceOp::RedOpType>(rop)),
              " is not supported (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR are)");
}

bc_dtype_t to_bc_dtype(at::ScalarType s, bc_op_t op, const char *what) {
  bool floating = false;
  bc_dtype_t d = BC_FLOAT32;
  switch (s) {
    case at::kFloat: d = BC_FLOAT32; floating = true; break;
    case at::kDouble: d = BC_FLOAT64; floating = true; break;
    case at::kHalf: d = BC_FLOAT16; floating = true; break;
    case at::kBFloat16: d = BC_BFLOAT16; floating = true; break;
    case at::kChar: d = BC_INT8; break;
    case at::kByte: d = BC_UINT8; break;
    case at::kInt: d = BC_INT32; break;
    case at::kLong: d = BC_INT64; break;
    case at::kBool:
      // 0/1 bytes: and, or, xor, min and max stay 0/1; sum and product would not.
      TORCH_CHECK(bitwise(op) || op == BC_MIN || op == BC_MAX, "blueconnect: ", what, ": bool tensors reduce only with "
                  "BAND, BOR, BXOR, MIN or MAX, not ", bc_op_name(op));
      return BC_UINT8;
    default:
      TORCH_CHECK(false, "blueconnect: ", what, ": dtype ", s, " is not supported for reductions (float32, float64, "
                  "float16, bfloat16, int8, uint8, int32, int64; bool with the bitwise ops)");
  }
  TORCH_CHECK(!(floating && bitwise(op)), "blueconnect: ", what, ": ", bc_op_name(op), " needs an integer dtype, not ", s);
  TORCH_CHECK(!(!floating && op == BC_AVG), "blueconnect: ", what, ": AVG needs a floating dtype, not ", s);
  return d;
}

size_t nbytes(const at::Tensor &t) { return t.numel() * t.element_size(); }

int to_int(size_t n, const char *what) {
  if (n > static_cast<size_t>(INT_MAX)) fail(std::string(what) + ": more than 2 GiB in one MPI call is not supported");
  return static_cast<int>(n);
}

char *ptr(const at::Tensor &t) { return static_cast<char *>(t.data_ptr()); }

at::Tensor pack(const std::vector<at::Tensor> &ts) {
  size_t total = 0;
  for (auto &t : ts) total += nbytes(t);
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, at::kByte);
  size_t off = 0;
  for (auto &t : ts) {
    if (nbytes(t)) std::memcpy(ptr(flat) + off, ptr(t), nbytes(t));
    off += nbytes(t);
  }
  return flat;
}
void unpack(const char *src, const std::vector<at::Tensor> &ts) {
  size_t off = 0;
  for (auto &t : ts) {
    if (nbytes(t)) std::memcpy(ptr(t), src + off, nbytes(t));
    off += nbytes(t);
  }
}

}  // namespace bctorch
