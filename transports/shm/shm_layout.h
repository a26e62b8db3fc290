// The shared-memory transport's segment layout and protocol.
//
// One POSIX shm segment per node and communicator. The node's lowest rank
// creates it, every rank of the node maps it, and it is unlinked as soon as all
// have mapped it, so /dev/shm keeps nothing even if a rank is killed later (a
// rank killed inside that setup window leaves a name behind, which the next
// leader on the machine removes: shm_node.cc). A communicator destroyed
// cleanly leaves its mapping to the next one over the same processes
// (shm_reuse.cc), until bc_finalize.
// Inside, one Channel per directed pair of the node's ranks (i -> j):
//
//   sender i                       Channel i -> j (shared)                  receiver j
//   --------                       -----------------------                  ----------
//   post_send(tag, buf, n)         published  : last seq posted   (i)       post_recv, then test():
//    take a FREE desc slot,        grant      : seq allowed to stream (j)    when `published` moved:
//    fill {tag, n, &buf},          head, tail : chunks in / out   (i, j)     read the new seqs' slots
//    state = (seq, POSTED),        slot_of_seq: slot by seq % 64  (i)        (all 64 if a hint fails),
//    slot_of_seq[seq] = slot ----> desc[64]   : state = seq<<3 | st,         keep the POSTED ones
//    published = seq                            tag, size, addr              match each unmatched recv
//                                  ring[K]    : K chunks of BC_SHM_CHUNK     with the lowest-seq desc
//                                               (copy mode only)             of its tag:
//                                                                            CAS POSTED -> MATCHED
//   eager: a message of at most BC_SHM_EAGER bytes goes into its desc slot's inline area (the
//         first kEagerSlots slots have one) and the send is complete once published; j copies it
//         out at the match and frees the slot. Two small copies, no system call, and the sender
//         never waits for the receiver to be scheduled: small messages are latency, not bandwidth.
//   cma : j reads i's buffer with process_vm_readv(&buf) and sets DONE; i sees DONE, frees the slot,
//         and the send is complete. One copy, no ring.
//   copy: j queues its matched receives and sets grant = seq of the first. i, seeing grant == seq of
//         one of its sends, copies chunks into the ring while head - tail < K (the send is complete
//         once its last chunk is in). j copies chunks out, frees the slot after the last one, and
//         grants the next matched receive.
//
// Only a matched message ever streams, so a ring can never fill with a message
// nobody is receiving: sends and receives of different tags may be posted in any
// order on the two sides, and any number of them may be outstanding (a sender
// with all 64 desc slots in use keeps further sends queued locally, in order).
// Among equal tags, sends match receives in posting order: seqs are given in
// posting order, and the receiver only considers descs up to `published`, all of
// which it has seen.
//
// Desc states (the low 3 bits of the state word; the seq above them makes every
// CAS specific to one message, so a slot that was freed and reused never matches
// a stale expectation):
//
//   FREE --i--> POSTED --j--> MATCHED --j--> FREE                     (copy mode, eager, 0 bytes)
//                 |              |------j--> DONE --i--> FREE         (cma)
//                 |              |------j--> REFUSED --i--> FREE      (size mismatch, failed read)
//                 |              |------i--> SEND_CANCEL --j--> FREE  (sender gave up)
//                 |              '------j--> RECV_CANCEL --i--> FREE  (receiver gave up)
//                 '--i (cancel)--> FREE
//
// A cancelled message is as if never posted, as with MPI_Cancel: the other side
// is not failed but keeps waiting (a receive goes back to matching, a send stays
// pending) until its own BC_TIMEOUT, so a rank that stops answering surfaces as
// a timeout everywhere. A REFUSED message fails both sides. A receive cancelled
// while its message streams leaves unknown chunks in the ring: that channel then
// fails every later receive.
//
// Ordering: data and desc fields are written before the release store that
// publishes them (state, published, head, tail, grant) and read after the
// acquire load that observes it. Every shared field is a lock-free std::atomic.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace bc {
namespace shm {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "64-bit atomics must be lock-free in shared memory");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "32-bit atomics must be lock-free in shared memory");

constexpr uint64_t kMagic = 0x424353484d303033ULL;  // "BCSHM003"
constexpr uint32_t kDescSlots = 64;   // outstanding messages per directed pair
constexpr uint32_t kRingSlots = 4;    // copy mode: chunks in flight per directed pair
constexpr uint32_t kEagerSlots = 8;   // desc slots 0..7 have an inline area of eager_bytes
constexpr size_t kHeaderBytes = 4096;

enum DescState : uint64_t {
  kFree = 0,
  kPosted = 1,
  kMatched = 2,
  kDone = 3,
  kSendCancel = 4,
  kRecvCancel = 5,
  kRefused = 6,
};
inline uint64_t desc_word(uint64_t seq, uint64_t st) { return (seq << 3) | st; }
inline uint64_t desc_seq(uint64_t word) { return word >> 3; }
inline uint64_t desc_state(uint64_t word) { return word & 7; }

// One message offer. tag/size/addr are written by the sender while the slot is
// FREE; the receiver trusts them only once its CAS to MATCHED succeeds.
struct alignas(64) Desc {
  std::atomic<uint64_t> state;
  std::atomic<uint64_t> size;
  std::atomic<uint64_t> addr;  // the sender's buffer, in the sender's address space
  std::atomic<uint32_t> tag;
  std::atomic<uint32_t> eager;  // 1: the bytes are in this slot's inline area, not at addr
};

// One direction between two ranks of the node. Each counter has its own cache
// line: the sender writes published and head, the receiver grant and tail.
// slot_of_seq[seq % kDescSlots] is the desc slot of offer seq, written by the
// sender before it publishes seq: the receiver reads the slots of the new
// offers (one line each) instead of all 64 descs. A hint only: the receiver
// checks that the slot holds that seq, POSTED, and scans every slot when it
// does not (withdrawn, or the sender has run 64 offers ahead meanwhile).
struct Channel {
  alignas(64) std::atomic<uint64_t> published;
  alignas(64) std::atomic<uint64_t> grant;
  alignas(64) std::atomic<uint64_t> head;
  alignas(64) std::atomic<uint64_t> tail;
  alignas(64) std::atomic<uint8_t> slot_of_seq[kDescSlots];
  Desc desc[kDescSlots];
};
static_assert(kDescSlots <= 256, "a desc slot index fits slot_of_seq's bytes");
static_assert(std::atomic<uint8_t>::is_always_lock_free, "8-bit atomics must be lock-free in shared memory");

// At offset 0 of the segment; written by the leader before any other rank maps it.
struct Header {
  uint64_t magic;
  uint32_t nlocal;
  uint32_t copy_mode;
  uint32_t ring_slots;
  uint32_t reserved;
  uint64_t chunk;
  uint64_t channels_offset;
  uint64_t data_offset;   // rings (copy mode), one per directed pair
  uint64_t eager_bytes;   // inline area per eager desc slot; 0: no eager path
  uint64_t eager_offset;  // inline areas: per directed pair, kEagerSlots x eager_bytes
  uint64_t total_bytes;
};
static_assert(sizeof(Header) <= kHeaderBytes, "header fits its page");

}  // namespace shm
}  // namespace bc
