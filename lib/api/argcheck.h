// Argument agreement (BC_CHECK_ARGS): before a collective moves any byte, the
// ranks check that they all called the same collective with the same count,
// dtype and op.
//
// Why a flag and not every call: agreement needs one more message round, and
// one MPI round on one node costs 4 us (2 ranks, quiet) to hundreds of us
// (8 ranks on 2 cores; docs/FAILURES.md has the measurements), against 5 us
// at 4 bytes and 1 % at 64 KiB that an always-on check may cost. No message the library already exchanges can carry a signature
// for free: a small all-reduce's first step may go to one peer only, so a
// rank that differs from a rank it never hears from would go unseen. Without
// the check the default path stays memory-safe: every transport checks each
// received size against the posted one (a mismatch is a size error or a
// timeout, never wrong data reported as BC_OK).
#pragma once

#include "api/comm.h"

namespace bc {

// The agreement of one call, as a request's first phase: posted at the call,
// advanced by test() without blocking. A non-blocking call (bc_iallreduce)
// returns with it pending, so calls on different communicators may be started
// in different orders on different ranks (each agreement is a non-blocking
// collective of its own communicator). Collective over comm->mpi; agreements
// of one communicator complete in the order their calls were made.
class ArgAgreement {
 public:
  ~ArgAgreement();
  // Posts the first round. `local` is this rank's own verdict on its
  // arguments (BC_OK or the error it raised, whose message is kept).
  static Status post(bc_comm *c, const CollArgs &a, Status local, std::unique_ptr<ArgAgreement> *out);
  // Advances the rounds once. *done when the verdict is known; then returns it:
  //   - BC_OK when every rank passed the same arguments and every rank's own
  //     check passed;
  //   - the rank's own error (and message) when its arguments were refused;
  //   - that rank's code, naming it, when another rank's were refused;
  //   - BC_ERR_MISMATCH naming the ranks and what each passed;
  //   - BC_ERR_TIMEOUT (or BC_ERR_MPI) when a round did not complete within
  //     BC_TIMEOUT of the post: a rank never came.
  // Nothing else is sent, so the communicator stays usable after any but the last.
  Status test(bc_comm *c, bool *done);
  // A refused call: progressing other requests while it waits would let their
  // failures overwrite this rank's message, which says what was wrong.
  bool refused_here() const;
  // The communicator broke while this agreement was pending: its MPI request
  // may still complete later, so its buffers are kept for the process's life.
  void abandon();

 private:
  struct Exchange;
  ArgAgreement() = default;
  std::unique_ptr<Exchange> ex_;
};

// One agreement, blocking: post, then test until the verdict. While waiting,
// it progresses the communicator's open non-blocking requests (no progress
// thread: nobody else would) and the agreements of earlier non-blocking calls,
// so that a peer waiting for one of them is not kept waiting by this rank.
// Called without the communicator's lock (the progress thread keeps running).
Status args_agree(bc_comm *c, const CollArgs &a, Status local);

// The one-line description of a call's arguments used in the messages:
// "allreduce count 500 float32 sum".
std::string args_describe(int kind, int64_t count, int dtype, int op);

}  // namespace bc
