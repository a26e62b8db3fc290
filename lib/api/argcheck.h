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

// One agreement round on comm->mpi, collective over the communicator. `local`
// is this rank's own verdict on its arguments (BC_OK or the error it raised,
// whose message is kept). Returns BC_OK when every rank passed the same
// arguments and every rank's own check passed; else, on every rank:
//   - the rank's own error when its arguments were refused;
//   - that rank's code, naming it, when another rank's were refused;
//   - BC_ERR_MISMATCH naming the ranks and what each passed.
// Nothing else is sent, so the communicator stays usable after any of these.
// While waiting, it progresses the communicator's open non-blocking requests
// (no progress thread: nobody else would), so that a peer waiting for one of
// them is not kept waiting by this rank; not when this rank refused its own
// arguments, whose message a failing request would overwrite. BC_ERR_TIMEOUT (or BC_ERR_MPI) when
// the round does not complete within BC_TIMEOUT: a rank never came.
// Called without the communicator's lock (the progress thread keeps running).
// It blocks, also for bc_iallreduce: non-blocking calls on different
// communicators started in different orders on different ranks wait for each
// other until BC_TIMEOUT (docs/FAILURES.md, known limitation).
Status args_agree(bc_comm *c, const CollArgs &a, Status local);

// The one-line description of a call's arguments used in the messages:
// "allreduce count 500 float32 sum".
std::string args_describe(int kind, int64_t count, int dtype, int op);

}  // namespace bc
