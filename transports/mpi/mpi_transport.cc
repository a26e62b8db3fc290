// The portable transport: MPI point-to-point on the library's private
// communicator. Every peer is reachable; host memory only (a CUDA-aware MPI
// could take device buffers, but we do not assume one).
//
// Receives never hand MPI the caller's buffer before the message's size is
// known. MPI lets a receive take a shorter message than it posted (the rest of
// the buffer silently stays as it was), a longer one is MPI_ERR_TRUNCATE, and
// Open MPI 4.1.4's single-copy shared-memory path (vader with CMA) even writes
// the sender's whole size into the receive buffer whatever the receive says.
// So a receive first matches its message with MPI_Improbe, checks the size with
// MPI_Get_count, and only then takes exactly that message with MPI_Imrecv. A
// message of the wrong size is received into a buffer of its own size (so it
// cannot match anything later, and its sender completes) and the receive fails
// with BC_ERR_TRANSPORT naming the peer, the tag and both sizes.
#include <climits>
#include <chrono>
#include <cstring>
#include <list>
#include <memory>

#include "core/log.h"
#include "core/wait_policy.h"
#include "transports/transport.h"

namespace bc {
namespace {

using Clock = std::chrono::steady_clock;

// How long the destructor waits for drained messages to finish arriving before
// it leaves their buffers to MPI.
constexpr int kDrainWaitMs = 1000;
// How long cancel() lets a send, or a receive already matched, finish before it
// leaves the request to MPI. Neither can be cancelled once under way (Open MPI's
// ob1 never cancels a send), both use the caller's buffer, and the caller may
// free that buffer as soon as the collective has failed: a peer that drains the
// message later would make MPI read freed memory (seen: process_vm_readv EFAULT
// on the receiver, then SIGSEGV in the sender's ob1). A peer that has failed too
// drains what it cannot use at once, so this wait is usually milliseconds.
constexpr int kCancelWaitMs = 200;

// What a TransportRequest's slot holds for this transport.
struct MpiSlot {
  MPI_Request req;   // the send, or the receive once matched (MPI_Imrecv)
  void *buf;         // receives: where the message goes once matched
  size_t bytes;      // the bytes the plan sends or expects
  uint64_t ticket;   // receives: position in the peer's list of unmatched receives
  uint32_t tag;      // the plan's tag (for messages)
  int mpi_tag;       // the tag on the wire
  uint8_t is_recv;
  uint8_t matched;   // receives: MPI_Imrecv posted
};
static_assert(sizeof(MpiSlot) <= sizeof(TransportRequest::slot), "MpiSlot fits the request slot");

MpiSlot *slot_of(TransportRequest *req) { return reinterpret_cast<MpiSlot *>(req->slot); }

std::string mpi_error_text(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(msg, static_cast<size_t>(len));
}

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(const TransportSetup &s)
      : comm_(s.bootstrap), unmatched_(static_cast<size_t>(s.size)), dead_(static_cast<size_t>(s.size), 0) {
    for (std::vector<Pending> &q : unmatched_) q.reserve(kReservedPerPeer);
  }
  ~MpiTransport() override;
  Status init(const ParamSet &params) { return mpi_tags_fit("mpi", params); }
  const char *name() const override { return "mpi"; }
  bool can_connect(int, bc_memtype_t mem) const override { return mem != BC_MEM_CUDA; }
  Status connect(int) override { return BC_OK; }

  Status post_send(int peer, const void *buf, size_t bytes, bc_memtype_t, uint32_t tag,
                   TransportRequest *req) override {
    BC_CHECK(check_size(bytes));
    MpiSlot *s = start(req, peer, false, const_cast<void *>(buf), bytes, tag);
    BC_MPI_CHECK(MPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, s->mpi_tag, comm_, &s->req));
    req->active = true;
    return BC_OK;
  }
  // Only queues the receive: test() matches it once its message is there.
  Status post_recv(int peer, void *buf, size_t bytes, bc_memtype_t, uint32_t tag,
                   TransportRequest *req) override {
    BC_CHECK(check_size(bytes));
    MpiSlot *s = start(req, peer, true, buf, bytes, tag);
    s->ticket = next_ticket_++;
    unmatched_[static_cast<size_t>(peer)].push_back(Pending{s->ticket, s->mpi_tag});
    req->active = true;
    return BC_OK;
  }
  Status test(TransportRequest *req, bool *done) override;
  void cancel(TransportRequest *req) override;
  void peer_died(int peer) override {
    if (peer >= 0 && peer < static_cast<int>(dead_.size())) dead_[static_cast<size_t>(peer)] = 1;
  }

 private:
  struct Pending {
    uint64_t ticket;
    int mpi_tag;
  };
  // A wrong-size message being received into a buffer of its own.
  struct Drain {
    MPI_Request req;
    std::unique_ptr<unsigned char[]> buf;
  };

  MpiSlot *start(TransportRequest *req, int peer, bool is_recv, void *buf, size_t bytes, uint32_t tag) {
    req->transport = this;
    req->peer = peer;
    MpiSlot *s = slot_of(req);
    *s = MpiSlot{MPI_REQUEST_NULL, buf, bytes, 0, tag, mpi_tag(tag), static_cast<uint8_t>(is_recv), 0};
    return s;
  }
  Status match(TransportRequest *req, bool *matched);
  void forget(int peer, uint64_t ticket);
  void advance_drains();
  // Whole: init() refused an MPI whose tags are narrower (mpi_tags_fit).
  static int mpi_tag(uint32_t tag) { return static_cast<int>(tag); }
  Status check_size(size_t bytes) const {
    if (bytes > static_cast<size_t>(INT_MAX))
      return BC_FAIL(BC_ERR_NOT_SUPPORTED, "the MPI transport moves at most 2 GiB per message, asked for %zu bytes",
                     bytes);
    return BC_OK;
  }

  MPI_Comm comm_;
  uint64_t next_ticket_ = 1;
  // Per peer, the receives not matched yet, in posting order. Receives with the
  // same tag match in this order, as MPI_Irecv would have matched them.
  // Vectors: a few entries each, where a deque allocates a block every 32
  // pushes once two or more wait (pipelined chunks); reserved, so that how
  // many wait at once (timing) does not make them grow mid-run.
  static constexpr size_t kReservedPerPeer = 16;
  std::vector<std::vector<Pending>> unmatched_;
  std::list<Drain> drains_;
  std::vector<char> dead_;  // peer_died()
  // The cancels of one failure share one kCancelWaitMs window: MPI progress is
  // global, so waiting on one request moves all of them, and a collective with
  // many chunks in flight would otherwise wait kCancelWaitMs per request (over
  // a second at 4 chunks and 2 transfers each, measured after a kill).
  Clock::time_point cancel_window_end_{};
};

MpiTransport::~MpiTransport() {
  // The senders of drained messages wait for them to arrive: give them time,
  // then leave the buffers to MPI (it may still write into them).
  const auto deadline = Clock::now() + std::chrono::milliseconds(kDrainWaitMs);
  while (!drains_.empty() && Clock::now() < deadline) advance_drains();
  if (!drains_.empty()) {
    BC_WARN(Transport, "mpi transport: %zu wrong-size message(s) still arriving at close; their buffers are left to MPI",
            drains_.size());
    for (Drain &d : drains_) {
      MPI_Request_free(&d.req);
      (void)d.buf.release();
    }
  }
}

void MpiTransport::advance_drains() {
  for (auto it = drains_.begin(); it != drains_.end();) {
    int flag = 0;
    const int rc = MPI_Test(&it->req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      BC_WARN(Transport, "mpi transport: draining a wrong-size message failed: %s", mpi_error_text(rc).c_str());
    if (flag || rc != MPI_SUCCESS) it = drains_.erase(it);
    else ++it;
  }
}

void MpiTransport::forget(int peer, uint64_t ticket) {
  std::vector<Pending> &q = unmatched_[static_cast<size_t>(peer)];
  for (auto it = q.begin(); it != q.end(); ++it)
    if (it->ticket == ticket) {
      q.erase(it);
      return;
    }
}

// Matches receive `req` with its message if that has arrived, and the receive
// is the oldest unmatched one for its peer and tag.
Status MpiTransport::match(TransportRequest *req, bool *matched) {
  MpiSlot *s = slot_of(req);
  *matched = false;
  const std::vector<Pending> &q = unmatched_[static_cast<size_t>(req->peer)];
  for (const Pending &p : q) {
    if (p.mpi_tag != s->mpi_tag) continue;
    if (p.ticket != s->ticket) return BC_OK;  // an older receive takes the next such message
    break;
  }
  int flag = 0;
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Status status;
  BC_MPI_CHECK(MPI_Improbe(req->peer, s->mpi_tag, comm_, &flag, &msg, &status));
  if (!flag) return BC_OK;
  forget(req->peer, s->ticket);
  *matched = true;
  int offered = 0;
  // With MPI_BYTE the count is always defined.
  BC_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &offered));
  if (static_cast<size_t>(offered) == s->bytes) {
    BC_MPI_CHECK(MPI_Imrecv(s->buf, offered, MPI_BYTE, &msg, &s->req));
    s->matched = 1;
    return BC_OK;
  }
  // The wrong size: take the message into a buffer of its own size, so that
  // it cannot match a later receive and its sender completes; the caller's
  // buffer is untouched.
  Drain d{MPI_REQUEST_NULL, std::unique_ptr<unsigned char[]>(new unsigned char[offered > 0 ? offered : 1])};
  const int rc = MPI_Imrecv(d.buf.get(), offered, MPI_BYTE, &msg, &d.req);
  if (rc == MPI_SUCCESS) drains_.push_back(std::move(d));
  else
    BC_WARN(Transport, "mpi transport: could not drain a wrong-size message from rank %d: %s", req->peer,
            mpi_error_text(rc).c_str());
  return BC_FAIL(BC_ERR_TRANSPORT, "mpi transport: receive from rank %d (tag %#x, %zu bytes): the sender offers %d bytes",
                 req->peer, s->tag, s->bytes, offered);
}

Status MpiTransport::test(TransportRequest *req, bool *done) {
  *done = false;
  if (!drains_.empty()) advance_drains();
  MpiSlot *s = slot_of(req);
  if (s->is_recv && !s->matched) {
    bool matched = false;
    Status st = match(req, &matched);
    if (st != BC_OK) {
      req->active = false;
      if (!matched) forget(req->peer, s->ticket);
      return st;
    }
    if (!matched) return BC_OK;
  }
  int flag = 0;
  const int rc = MPI_Test(&s->req, &flag, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    req->active = false;
    return BC_FAIL(BC_ERR_MPI, "mpi transport: %s rank %d (tag %#x, %zu bytes) failed: %s",
                   s->is_recv ? "receive from" : "send to", req->peer, s->tag, s->bytes, mpi_error_text(rc).c_str());
  }
  *done = flag != 0;
  if (*done) req->active = false;
  return BC_OK;
}

void MpiTransport::cancel(TransportRequest *req) {
  if (!req->active) return;
  MpiSlot *s = slot_of(req);
  req->active = false;
  if (s->is_recv && !s->matched) {  // nothing posted to MPI yet
    forget(req->peer, s->ticket);
    return;
  }
  if (s->req == MPI_REQUEST_NULL) return;
  // Let it finish while the caller's buffer is still there (kCancelWaitMs,
  // shared by the cancels of one failure); not when its peer is dead.
  const auto now = Clock::now();
  if (now >= cancel_window_end_ + std::chrono::seconds(1))
    cancel_window_end_ = now + std::chrono::milliseconds(kCancelWaitMs);
  const auto deadline = dead_[static_cast<size_t>(req->peer)] ? now : cancel_window_end_;
  // Done, or failed: either way MPI is through with the buffer. MPI_Test says
  // nothing of progress, so each poll that finds it unfinished yields the
  // core (the peer that would take the message may need it).
  const bool finished = WaitPolicy::poll_until(deadline, [&] {
    int flag = 0;
    const int rc = MPI_Test(&s->req, &flag, MPI_STATUS_IGNORE);
    return rc != MPI_SUCCESS || flag;
  }, [&] {
    if (!drains_.empty()) advance_drains();
    return false;
  });
  if (finished) return;
  // Nobody takes it (a peer that stopped before posting the receive): left to
  // MPI, which reads or writes the buffer only if the peer ever matches it.
  BC_DEBUGLOG(Transport, "mpi transport: a %s rank %d (tag %#x, %zu bytes) did not finish%s; left to MPI",
              s->is_recv ? "receive from" : "send to", req->peer, s->tag, s->bytes,
              dead_[static_cast<size_t>(req->peer)] ? " (its peer is dead)" : " within the cancel window");
  int rc = MPI_Cancel(&s->req);
  if (rc == MPI_SUCCESS) rc = MPI_Request_free(&s->req);
  if (rc != MPI_SUCCESS)
    BC_WARN(Transport, "mpi transport: cancelling a %s rank %d failed: %s", s->is_recv ? "receive from" : "send to",
            req->peer, mpi_error_text(rc).c_str());
}

}  // namespace

Status mpi_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out) {
  std::unique_ptr<MpiTransport> t(new MpiTransport(setup));
  BC_CHECK(t->init(*setup.params));
  *out = std::move(t);
  return BC_OK;
}

}  // namespace bc
