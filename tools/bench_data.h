// bc_bench's data: exact inputs and references, guarded buffers, and the
// matching MPI datatypes and operations.
//
// Every element is a small integer ("logical value") chosen per (dtype, op, p)
// so that every partial result of the reduction is exactly representable: the
// result is then the same bits in any reduction order, and a check can compare
// bit for bit. Sums of 8-bit types never overflow (Open MPI saturates them).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>

#include "blueconnect.h"

namespace bcbench {

class ExactData {
 public:
  // gather: values for allgather (no reduction); op is then ignored.
  ExactData(bc_dtype_t dtype, bc_op_t op, int nranks, bool gather);
  // Writes rank's input for global elements [first, first + n) into buf[0, n).
  void fill_input(void *buf, int rank, int64_t first, int64_t n) const;
  // Writes the expected result for global elements [first, first + n): the
  // reduction over all ranks, or (gather) the input of the rank owning each
  // element, block = elements per rank.
  void fill_expected(void *buf, int64_t first, int64_t n, int64_t block) const;
  // A line for the header: which values are used.
  const char *describe() const { return text_; }

 private:
  double input_float(int rank, int64_t i) const;
  uint64_t input_int(int rank, int64_t i) const;
  void put(void *buf, int64_t j, double fv, uint64_t iv) const;

  bc_dtype_t dtype_;
  bc_op_t op_;
  int p_;
  bool gather_;
  bool float_;
  bool signed_;
  int64_t amp_ = 0;   // sum: |value| <= amp (0: one rank contributes 1 per element); avg: max base
  int64_t period_ = 3;  // prod: every period-th rank contributes 2, the rest 1
  char text_[160];
};

// A host buffer with guard bytes on both sides, 64-byte aligned.
class GuardedBuf {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kGuardByte = 0xA5;
  GuardedBuf() = default;
  ~GuardedBuf();
  GuardedBuf(const GuardedBuf &) = delete;
  GuardedBuf &operator=(const GuardedBuf &) = delete;
  // Returns false when the memory is not available.
  bool allocate(size_t bytes);
  void *data() { return base_ + kGuard; }
  const void *data() const { return base_ + kGuard; }
  size_t bytes() const { return bytes_; }
  void poison(unsigned char byte);
  // 1 when a guard zone was overwritten (and is restored now), else 0.
  int repair_guards();

 private:
  unsigned char *base_ = nullptr;
  size_t bytes_ = 0;
};

// Elements of `got` that differ bit for bit from `want`.
int64_t count_wrong(const void *got, const void *want, int64_t n, size_t elem);

MPI_Datatype mpi_datatype(bc_dtype_t t);  // MPI_DATATYPE_NULL for float16 / bfloat16
MPI_Op mpi_op(bc_op_t op);                // MPI_OP_NULL for avg

}  // namespace bcbench
