// Runs one rank's Program over the transports: the progress engine.
//
// Execution is non-blocking: progress() posts the current Step's receives and
// sends, tests them, reduces what arrived and moves on, never waiting. wait()
// drives progress() until done, yielding the core when nothing moves (ranks
// often outnumber cores), and fails with BC_ERR_TIMEOUT when no transfer
// completes for BC_TIMEOUT.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "blueconnect.h"
#include "plan/plan.h"
#include "transports/transport.h"

namespace bc {

struct ExecContext {
  const std::vector<Transport *> *peer_transport = nullptr;  // per rank of the communicator
  bc_memtype_t mem = BC_MEM_HOST;
  bc_dtype_t dtype = BC_FLOAT32;
  bc_op_t op = BC_SUM;
  int nranks = 1;
  int64_t timeout_ms = 0;  // 0: wait forever
  int64_t spin_count = 64;
};

class Execution {
 public:
  // `work` has prog.count elements; `scratch` at least prog.scratch_elems.
  Execution(const Program &prog, const ExecContext &ctx, void *work, void *scratch, uint32_t seq);
  ~Execution();
  Execution(const Execution &) = delete;
  Execution &operator=(const Execution &) = delete;

  Status progress(bool *done);
  Status wait();
  // Seconds spent in each hierarchy stage (index = stage), for bc_bench --stages.
  const std::vector<double> &stage_seconds() const { return stage_seconds_; }

 private:
  Status post_step();
  Status finish_step();
  void cancel_all();
  std::string pending_peers() const;

  const Program &prog_;
  ExecContext ctx_;
  unsigned char *work_;
  unsigned char *scratch_;
  size_t elem_;
  uint32_t seq_bits_;
  size_t step_ = 0;
  bool posted_ = false;
  std::vector<TransportRequest> reqs_;
  std::vector<char> req_done_;
  size_t remaining_ = 0;
  std::vector<double> stage_seconds_;
  std::chrono::steady_clock::time_point step_start_;
};

}  // namespace bc
