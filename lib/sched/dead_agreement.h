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
// receives DECIDED adopts it and sends it on. With one death before the call,
// two rounds and the DECIDED exchange: about 3n messages per rank. Each rank
// then waits for a DECIDED from every living rank, so that no message of the
// agreement is left unmatched on a living peer's channel.
//
// Whoever was dead when a decider finished the round before its last is in
// the set (every rank waits for it there, so every rank detected it, and a
// detected death is in the next round's message). A rank that dies during
// the last round may be missed: the new communicator's first collective
// finds it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "transports/transport.h"

namespace bc {

class Liveness;

// The agreement's tags, in the program bits (lib/plan/program.cc uses
// (2 * stage + phase) << 12 and 0xFF000): no plan comes near stage 127.
// The round rides in the sequence bits.
constexpr uint32_t kAgreeProposalTag = 0xFE000;
constexpr uint32_t kAgreeDecidedTag = 0xFE001;

struct DeadAgreementSetup {
  int rank = 0;
  int size = 0;
  std::vector<Transport *> peer_transport;  // per rank; this rank's own is not used
  Liveness *liveness = nullptr;             // the failure detector: required
  int64_t spin_count = 1;                   // BC_SPIN_COUNT of the communicator
  int64_t timeout_ms = 0;                   // BC_TIMEOUT: a living rank that does not come (0: wait for ever)
};

struct DeadAgreementResult {
  std::vector<int> dead;  // ascending
  int rounds = 0;         // this rank's rounds (0: it adopted another's decision in round 1)
  bool relayed = false;   // it adopted a DECIDED instead of deciding itself
  int resends = 0;        // times it sent its messages to a still peer again (dead_agreement.cc, kResendFirstMs)
};

// Collective over the ranks that are alive. BC_ERR_TIMEOUT when a rank that
// is alive does not take part within BC_TIMEOUT; a transport that cannot be
// mended fails it with that transport's error.
Status agree_on_dead(const DeadAgreementSetup &setup, DeadAgreementResult *out);

}  // namespace bc
