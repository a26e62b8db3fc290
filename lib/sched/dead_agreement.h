// The survivors' agreement on who is dead, the first step of bc_comm_shrink
// (docs/FAILURES.md, "Shrink and go on").
//
// After a death MPI cannot be trusted with it: Open MPI 4.1 without ULFM
// aborts a process whose send to the dead fails, and any MPI collective would
// wait for the dead for ever. So the survivors agree over the communicator's
// own transports (shm, ucx; Transport::reopen mends what the failure left),
// and the liveness checks (sched/liveness.h) are the failure detector. They
// are a perfect one: a peer is reported dead only when its process is gone
// or its connection closed without a goodbye (accurate), and every death is
// reported within an interval or two (complete). A host that vanishes without
// closing its connections is not seen; a survivor then waits for it up to
// BC_TIMEOUT, as for a late rank.
//
// The algorithm is flooding consensus with a perfect failure detector
// (Guerraoui and Rodrigues, "Introduction to Reliable and Secure Distributed
// Programming", 2nd ed., algorithm 5.1), the value being the set of dead
// ranks. Each round r, every rank sends the union of the sets it has seen,
// plus every death it has detected itself, to every rank it believes alive,
// and waits for round r from each of them, or for its death. A rank whose
// round r came from the same ranks as round r-1 (no death in between)
// decides the union, and sends DECIDED with it to everyone; a rank that
// receives DECIDED adopts it and sends it on. Each rank then waits for a
// DECIDED from every living rank, so that every living rank has decided
// before any leaves.
//
// A decision can miss a rank that sent its last message and then died, which
// some survivor already knew: so instances follow, each starting from the
// last decision plus what each rank has detected, until one decides what the
// last did (both decisions are agreed, so every rank stops after the same
// one). The last decision holds every death a survivor knew of before its
// last message. With one death before the call: two instances of two rounds
// each, about 6n small messages per rank. A rank that dies while the
// survivors build their MPI communicator afterwards is missed.
//
// A rank whose part fails (a channel that cannot be mended) sends ABORT to
// the others, who fail too and pass it on, rather than wait BC_TIMEOUT for it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "transports/transport.h"

namespace bc {

// The agreement's tags, in the program bits (lib/plan/program.cc uses
// (2 * stage + phase) << 12 and 0xFF000): no plan comes near stage 127. Below
// it, instance << 2 | kind (dead_agreement.cc); the round rides in the
// sequence bits.
constexpr uint32_t kAgreeTagBase = 0xFE000;

struct DeadAgreementSetup {
  int rank = 0;
  int size = 0;
  std::vector<Transport *> peer_transport;  // per rank; this rank's own is not used
  // The failure detector: checks the peers and returns every rank known dead
  // (Liveness::check and dead(); a fake in tests/unit/test_dead_agreement.cc).
  std::function<std::vector<int>()> dead_now;
  int64_t liveness_interval_ms = 200;  // BC_LIVENESS_INTERVAL: how often a still wait asks it
  int64_t spin_count = 1;              // BC_SPIN_COUNT of the communicator
  int64_t timeout_ms = 0;              // BC_TIMEOUT: a living rank that does not come (0: wait for ever)
};

struct DeadAgreementResult {
  std::vector<int> dead;  // ascending
  int instances = 0;      // of the consensus (two at least: the second confirms the first)
  int rounds = 0;         // this rank's rounds, over every instance
  bool relayed = false;   // it adopted a DECIDED instead of deciding itself, in some instance
  int resends = 0;        // times it sent its messages to a still peer again (dead_agreement.cc, kResendFirstMs)
};

// Collective over the ranks that are alive. BC_ERR_TIMEOUT when a rank that
// is alive does not take part within BC_TIMEOUT; a channel to a living rank
// that cannot be mended fails it with the transport's error, and the other
// ranks with an error that names this one.
Status agree_on_dead(const DeadAgreementSetup &setup, DeadAgreementResult *out);

}  // namespace bc
