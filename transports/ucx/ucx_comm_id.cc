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
// each of its members once the rounds in flight there end, and takes one. A
// creation alone in its processes takes an id in its first round, as before:
// one allgather of 272 bytes a rank.
//
// An offer of every free id is held only for one allgather, and every member
// reaches it soon: the round runs after the creation's address exchange, so
// all of them are already inside this creation (a rank that comes late to a
// creation waits in its earlier collectives, holding nothing here).
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

// What each rank sends in a round.
struct IdRound {
  uint64_t key;      // rank 0's is the creation's key (first round)
  int32_t give_up;   // this rank's BC_TIMEOUT passed while retrying
  int32_t pad;
  uint8_t busy[kCommIds / 8];   // in use, quarantined or recently released here
  uint8_t offer[kCommIds / 8];  // offered to this creation here
};

void to_bytes(const IdSet &set, uint8_t *bytes) {
  std::memset(bytes, 0, kCommIds / 8);
  for (int id = 0; id < kCommIds; ++id)
    if (set.test(static_cast<size_t>(id))) bytes[id / 8] |= static_cast<uint8_t>(1 << (id % 8));
}

bool has(const uint8_t *bytes, int id) { return (bytes[id / 8] >> (id % 8)) & 1; }

// This creation's offer and its place among the retrying ones, withdrawn on
// every way out.
class Offer {
 public:
  explicit Offer(UcxWorker *w) : w_(w) {}
  ~Offer() {
    std::lock_guard<std::recursive_mutex> lock(w_->mutex);
    w_->offered &= ~mine_;
    if (waiting_) w_->retry_keys.erase(w_->retry_keys.find(key_));
  }
  // Fills this rank's part of a round (under the worker's mutex).
  void make(int attempt, IdRound *round) {
    std::lock_guard<std::recursive_mutex> lock(w_->mutex);
    IdSet busy = w_->in_use | w_->quarantined;
    for (int id : w_->recent) busy.set(static_cast<size_t>(id));
    const bool may_offer = waiting_ ? *w_->retry_keys.begin() == key_ : w_->retry_keys.empty();
    mine_ = may_offer ? ~(busy | w_->offered) : IdSet();
    w_->offered |= mine_;
    to_bytes(busy, round->busy);
    to_bytes(mine_, round->offer);
    round->key = attempt == 0 ? fresh_nonce() : key_;
  }
  // Ends a round: the offer goes back, and `id` (if >= 0) is taken, in one
  // step, so that no other creation here can be offered it in between.
  void end_round(int id) {
    std::lock_guard<std::recursive_mutex> lock(w_->mutex);
    w_->offered &= ~mine_;
    mine_.reset();
    if (id >= 0) w_->in_use.set(static_cast<size_t>(id));
  }
  void wait_with_key(uint64_t key) {
    if (waiting_) return;
    std::lock_guard<std::recursive_mutex> lock(w_->mutex);
    key_ = key;
    waiting_ = true;
    w_->retry_keys.insert(key_);
  }

 private:
  UcxWorker *w_;
  IdSet mine_;
  uint64_t key_ = 0;
  bool waiting_ = false;
};

}  // namespace

Status ucx_agree_comm_id(UcxWorker *w, MPI_Comm bootstrap, int64_t timeout_ms, int *id) {
  *id = -1;
  int n = 0;
  BC_MPI_CHECK(MPI_Comm_size(bootstrap, &n));
  Offer offer(w);
  const auto start = Clock::now();
  std::vector<IdRound> all(static_cast<size_t>(n));
  for (int attempt = 0;; ++attempt) {
    IdRound mine;
    std::memset(&mine, 0, sizeof mine);
    offer.make(attempt, &mine);
    const double waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    mine.give_up = attempt > 0 && timeout_ms > 0 && waited_ms > static_cast<double>(timeout_ms);
    const int rc = MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, bootstrap);
    if (rc != MPI_SUCCESS) {
      offer.end_round(-1);
      BC_MPI_CHECK(rc);
    }
    bool any_free = false, give_up = false;
    int agreed = -1;
    for (int i = 0; i < kCommIds; ++i) {
      bool busy = false, offered = true;
      for (const IdRound &r : all) {
        busy = busy || has(r.busy, i);
        offered = offered && has(r.offer, i);
      }
      any_free = any_free || !busy;
      if (offered && agreed < 0) agreed = i;
    }
    for (const IdRound &r : all) give_up = give_up || r.give_up;
    offer.end_round(agreed);
    if (agreed >= 0) {
      if (attempt > 0)
        BC_DEBUGLOG(Transport, "ucx: communicator id %d agreed in round %d (other creations ran at the same time)",
                    agreed, attempt + 1);
      *id = agreed;
      return BC_OK;
    }
    if (!any_free)
      return BC_FAIL(BC_ERR_NOT_SUPPORTED, "ucx: all %d communicator ids are in use on some rank (destroy "
                     "communicators, or the ones broken by failures keep theirs)", kCommIds);
    if (give_up)
      return BC_FAIL(BC_ERR_TIMEOUT, "ucx: no communicator id agreed in %d rounds (%.0f ms, BC_TIMEOUT): other "
                     "communicators were being created at the same time in these processes all along", attempt + 1,
                     waited_ms);
    // Free ids exist but other creations held them here or on another
    // member: wait our turn by key (the same on every member), and try again.
    offer.wait_with_key(all[0].key);
    std::this_thread::sleep_for(std::chrono::microseconds(100 << (attempt < 5 ? attempt : 5)));
  }
}

}  // namespace bc
