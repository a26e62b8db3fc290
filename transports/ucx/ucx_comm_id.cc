// A UCX communicator's id: the tag bits that keep the messages of the
// communicators sharing one worker apart (ucx_transport.h, "Isolation").
// Its ranks agree on one that is free on every one of them, and that no other
// creation running at the same time in any of their processes can take.
//
// Why offers, not a snapshot of the ids in use: two threads of a process may
// create communicators at once (over different MPI communicators, as
// MPI_THREAD_MULTIPLE allows). With a snapshot, both saw the same free ids
// before either marked its choice, and two communicators over the same
// processes took the same id: their all-reduces read each other's messages
// (tests/mpi/test_threads.cc, wrong elements at np 3). Now each creation
// offers ids, and an id offered by one creation in a process is offered by
// no other there until that creation has ended its round (taking it or not);
// the id a communicator takes was offered by it on every member, so no other
// communicator over any of them can take it at the same time.
//
// Progress: a creation offers only when no creation of this process that is
// retrying has a smaller key (a random number its rank 0 drew, the same on
// every member); in its first round, only when none is retrying at all. So
// the retrying creation with the smallest key is offered every free id on
// each of its members once the rounds in flight there end, and takes one.
//
// Cost: the first round rides on the creation's first allgather (ucx_setup.cc,
// Hello), so a creation alone in its processes takes its id with no
// collective of its own, as before; only a creation that found no common id
// runs rounds of its own. A round of its own on 4 simulated nodes cost about
// 1.3 ms of a 25 ms creation.
//
// An offer of every free id is held only until every member has joined the
// round, and they join soon: the first round rides on the transport's first
// allgather, after the creation's earlier collectives (the private
// MPI_Comm_dup, the topology), so all members are already inside this
// creation; a rank that comes late to a creation waits in those, holding
// nothing here. The longest wait seen is a member starting its UCX worker
// (22-45 ms, once per process).
#include <mpi.h>

#include <bitset>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/hash.h"
#include "core/log.h"
#include "transports/ucx/ucx_transport.h"

namespace bc {
namespace {

using Clock = std::chrono::steady_clock;
using IdSet = std::bitset<kCommIds>;

void to_bytes(const IdSet &set, uint8_t *bytes) {
  std::memset(bytes, 0, kCommIds / 8);
  for (int id = 0; id < kCommIds; ++id)
    if (set.test(static_cast<size_t>(id))) bytes[id / 8] |= static_cast<uint8_t>(1 << (id % 8));
}

bool has(const uint8_t *bytes, int id) { return (bytes[id / 8] >> (id % 8)) & 1; }

}  // namespace

UcxIdAgreement::~UcxIdAgreement() {
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  w_->offered &= ~mine_;
  if (waiting_) w_->retry_keys.erase(w_->retry_keys.find(key_));
}

void UcxIdAgreement::make(int round, UcxIdRound *part) {
  std::memset(part, 0, sizeof *part);
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  IdSet busy = w_->in_use | w_->quarantined;
  for (int id : w_->recent) busy.set(static_cast<size_t>(id));
  const bool may_offer = waiting_ ? *w_->retry_keys.begin() == key_ : w_->retry_keys.empty();
  mine_ = may_offer ? ~(busy | w_->offered) : IdSet();
  w_->offered |= mine_;
  to_bytes(busy, part->busy);
  to_bytes(mine_, part->offer);
  part->key = round == 0 ? fresh_nonce() : key_;
}

void UcxIdAgreement::end_round(int id) {
  std::lock_guard<std::recursive_mutex> lock(w_->mutex);
  w_->offered &= ~mine_;
  mine_.reset();
  if (id >= 0) w_->in_use.set(static_cast<size_t>(id));
}

void UcxIdAgreement::first_round(UcxIdRound *part) {
  start_ = Clock::now();
  make(0, part);
}

Status UcxIdAgreement::finish(std::vector<UcxIdRound> all, MPI_Comm bootstrap, int64_t timeout_ms, int *id) {
  *id = -1;
  for (int round = 0;; ++round) {
    if (round > 0) {
      UcxIdRound mine;
      make(round, &mine);
      const double waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
      mine.give_up = timeout_ms > 0 && waited_ms > static_cast<double>(timeout_ms);
      const int rc = MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, bootstrap);
      if (rc != MPI_SUCCESS) {
        end_round(-1);
        BC_MPI_CHECK(rc);
      }
    }
    bool any_free = false, give_up = false;
    int agreed = -1;
    for (int i = 0; i < kCommIds; ++i) {
      bool busy = false, offered = true;
      for (const UcxIdRound &r : all) {
        busy = busy || has(r.busy, i);
        offered = offered && has(r.offer, i);
      }
      any_free = any_free || !busy;
      if (offered && agreed < 0) agreed = i;
    }
    for (const UcxIdRound &r : all) give_up = give_up || r.give_up;
    end_round(agreed);
    if (agreed >= 0) {
      if (round > 0)
        BC_DEBUGLOG(Transport, "ucx: communicator id %d agreed in round %d (other creations ran at the same time)",
                    agreed, round + 1);
      *id = agreed;
      return BC_OK;
    }
    if (!any_free)
      return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx: all %d communicator ids are in use on some rank (destroy "
                     "communicators, or the ones broken by failures keep theirs)", kCommIds);
    if (give_up)
      return BC_FAIL(BC_ERR_TIMEOUT, "ucx: no communicator id agreed in %d rounds (%.0f ms, BC_TIMEOUT): other "
                     "communicators were being created at the same time in these processes all along", round + 1,
                     std::chrono::duration<double, std::milli>(Clock::now() - start_).count());
    // Free ids exist but other creations held them here or on another
    // member: wait our turn by key (the same on every member), and try again.
    if (!waiting_) {
      std::lock_guard<std::recursive_mutex> lock(w_->mutex);
      key_ = all[0].key;
      waiting_ = true;
      w_->retry_keys.insert(key_);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100 << (round < 5 ? round : 5)));
  }
}

}  // namespace bc
