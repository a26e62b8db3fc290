// The UCX worker's send drainer: a thread that progresses the worker while no
// communicator does, so that a message UCX still holds leaves.
//
// Why: UCX 1.13's tcp transport completes a buffered send (bcopy, and short
// messages) as soon as the message is in its own send buffer, of which the
// socket may have taken only a part (the peer's receive window was full); the
// rest leaves only when the worker is progressed again. A rank whose
// all-reduce is complete stops progressing, and when it then waits in an MPI
// call (MPI_Barrier after bc_allreduce, or the calibration's own barrier)
// while its peer still waits for the tail of that message, both wait forever.
// Seen on 8 simulated nodes x 2 ranks on 2 cores: the last ring step's 32 KiB
// never arrived, in 2 of 10 communicator creations under load
// (docs/FAILURES.md, "Avoided: a message left in UCX's send buffer").
// A flush cannot replace this: over tcp it waits for the peer's answer, which
// needs the peer's progress, the same deadlock one step later.
//
// The thread wakes every kDrainFastMs for a second after the worker's last
// send, then every kDrainSlowMs, and progresses the worker when its mutex is
// free (try_lock: a communicator in an operation progresses it anyway).
#pragma once

namespace bc {

struct UcxWorker;

constexpr int kDrainFastMs = 2;
constexpr int kDrainSlowMs = 100;

// Start and stop w's drainer (worker_acquire; worker_stop, and at exit for the
// workers a program never released). Stop joins it and must be called without
// w->mutex held; stopping twice is harmless.
void drain_start(UcxWorker *w);
void drain_stop(UcxWorker *w);
// Records a send (under w->mutex): the drainer wakes often for a second, at
// once when it was in its slow wait.
void drain_note_send(UcxWorker *w);

}  // namespace bc
