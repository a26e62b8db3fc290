// The executor (lib/sched/executor.cc) with every rank in one process over a
// fake transport that reads a send's data only when it delivers it, as shm's
// CMA mode does (the receiver copies from the sender's buffer, at its own
// time). Deliveries are held back as long as possible: every rank runs until
// nothing moves, then one message is delivered: the oldest, the newest (which
// keeps old sends out longest) or a random one.
// A step ends once its receives are in while its sends may still be out
// ("Sends that outlive their step"), so a rank runs ahead of the readers of
// its buffer; an executor that wrote a range still being sent would hand the
// reader changed data, and the exact integer sums below would show it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include "plan/plan.h"
#include "sched/executor.h"
#include "topo/topo.h"

using namespace bc;

namespace {

enum class Delivery { Oldest, Newest, Random };
const char *delivery_name(Delivery d) {
  return d == Delivery::Oldest ? "oldest first" : d == Delivery::Newest ? "newest first" : "random";
}

struct Message {
  int src, dst;
  uint32_t tag;
  const void *buf;  // the sender's: read at delivery
  size_t bytes;
  bool delivered = false;
  bool cancelled = false;
};
struct Receive {
  int rank, src;
  uint32_t tag;
  void *buf;
  size_t bytes;
  bool done = false;
  bool cancelled = false;
};

struct Wire {
  std::vector<Message> sends;
  std::vector<Receive> recvs;
  std::string error;

  // Pairs in posting order per (source, destination, tag), as transports match.
  bool deliver(Delivery order, std::mt19937 *rng) {
    std::vector<std::pair<size_t, size_t>> ready;
    for (size_t s = 0; s < sends.size(); ++s) {
      const Message &m = sends[s];
      if (m.delivered || m.cancelled) continue;
      bool earlier = false;  // an older undelivered send of the same triple goes first
      for (size_t o = 0; o < s && !earlier; ++o)
        earlier = !sends[o].delivered && !sends[o].cancelled && sends[o].src == m.src && sends[o].dst == m.dst &&
                  sends[o].tag == m.tag;
      if (earlier) continue;
      for (size_t r = 0; r < recvs.size(); ++r) {
        const Receive &v = recvs[r];
        if (!v.done && !v.cancelled && v.rank == m.dst && v.src == m.src && v.tag == m.tag) {
          ready.emplace_back(s, r);
          break;
        }
      }
    }
    if (ready.empty()) return false;
    const auto pick = order == Delivery::Oldest   ? ready.front()
                      : order == Delivery::Newest ? ready.back()
                                                  : ready[(*rng)() % ready.size()];
    Message &m = sends[pick.first];
    Receive &v = recvs[pick.second];
    if (m.bytes != v.bytes) error = "size mismatch";
    std::memcpy(v.buf, m.buf, std::min(m.bytes, v.bytes));
    m.delivered = v.done = true;
    return true;
  }
};

class FakeTransport final : public Transport {
 public:
  FakeTransport(Wire *wire, int rank) : wire_(wire), rank_(rank) {}
  const char *name() const override { return "fake"; }
  bool can_connect(int, bc_memtype_t) const override { return true; }
  Status connect(int) override { return BC_OK; }
  Status post_send(int peer, const void *buf, size_t bytes, bc_memtype_t, uint32_t tag, TransportRequest *req) override {
    wire_->sends.push_back(Message{rank_, peer, tag, buf, bytes});
    return begin(req, peer, 2 * (wire_->sends.size() - 1));
  }
  Status post_recv(int peer, void *buf, size_t bytes, bc_memtype_t, uint32_t tag, TransportRequest *req) override {
    wire_->recvs.push_back(Receive{rank_, peer, tag, buf, bytes});
    return begin(req, peer, 2 * (wire_->recvs.size() - 1) + 1);
  }
  Status test(TransportRequest *req, bool *done) override {
    const size_t id = index(req);
    *done = id % 2 ? wire_->recvs[id / 2].done : wire_->sends[id / 2].delivered;
    if (*done) req->active = false;
    return BC_OK;
  }
  void cancel(TransportRequest *req) override {
    const size_t id = index(req);
    if (id % 2) wire_->recvs[id / 2].cancelled = true;
    else wire_->sends[id / 2].cancelled = true;
    req->active = false;
  }

 private:
  Status begin(TransportRequest *req, int peer, size_t id) {
    req->transport = this;
    req->peer = peer;
    req->active = true;
    std::memcpy(req->slot, &id, sizeof id);
    return BC_OK;
  }
  static size_t index(const TransportRequest *req) {
    size_t id;
    std::memcpy(&id, req->slot, sizeof id);
    return id;
  }
  Wire *wire_;
  int rank_;
};

// Runs every rank's program to the end; returns each rank's work buffer as it
// was when its Execution said done. The buffer is then scribbled over, as a
// caller reusing it would, so a send still out at that point hands its reader
// garbage.
std::vector<std::vector<int64_t>> run_programs(const std::vector<Program> &progs,
                                               std::vector<std::vector<int64_t>> work, Delivery order,
                                               std::mt19937 *rng) {
  const int p = static_cast<int>(progs.size());
  Wire wire;
  std::vector<std::unique_ptr<FakeTransport>> transports;
  for (int r = 0; r < p; ++r) transports.emplace_back(new FakeTransport(&wire, r));
  // Rank r reaches every peer through its own transport.
  std::vector<std::vector<Transport *>> peer_of(static_cast<size_t>(p));
  std::vector<std::vector<int64_t>> scratch(static_cast<size_t>(p)), result(static_cast<size_t>(p));
  std::vector<std::unique_ptr<Execution>> ex;
  for (int r = 0; r < p; ++r) {
    peer_of[r].assign(static_cast<size_t>(p), transports[r].get());
    scratch[r].assign(static_cast<size_t>(std::max<int64_t>(progs[r].scratch_elems, 1)), -1);
    ExecContext ctx;
    ctx.peer_transport = &peer_of[r];
    ctx.dtype = BC_INT64;
    ctx.op = BC_SUM;
    ctx.nranks = p;
    ex.emplace_back(new Execution);
    ex.back()->start(progs[r], ctx, work[r].data(), scratch[r].data(), 7);
  }
  std::vector<bool> done(static_cast<size_t>(p), false);
  for (;;) {
    // Every rank as far as it can go before anything more is delivered.
    bool moved = true;
    while (moved) {
      moved = false;
      for (int r = 0; r < p; ++r) {
        if (done[r]) continue;
        const uint64_t before = ex[r]->completions();
        bool d = false;
        REQUIRE(ex[r]->progress(&d) == BC_OK);
        if (d) {
          done[r] = true;
          result[r] = work[r];
          std::fill(work[r].begin(), work[r].end(), int64_t{-999});
        }
        moved = moved || d || ex[r]->completions() != before;
      }
    }
    if (std::all_of(done.begin(), done.end(), [](bool b) { return b; })) break;
    if (!wire.deliver(order, rng)) {
      std::ostringstream os;
      for (int r = 0; r < p; ++r) os << " rank " << r << ":" << ex[r]->pending();
      FAIL("nothing to deliver, and not done:" << os.str());
    }
  }
  REQUIRE(wire.error.empty());
  for (const Message &m : wire.sends) REQUIRE(m.delivered);  // done means every send was taken
  return result;
}

int64_t contrib(int r, int64_t i) { return (int64_t{1} << r) * (1 + i % 5); }

// One all-reduce of n int64 elements on every rank of `h`.
void run_allreduce(const Hierarchy &h, int p, int64_t n, Algo algo, Hierarchy::Shape shape, Top top,
                   Delivery order, std::mt19937 *rng) {
  INFO("p=" << p << " n=" << n << " algo=" << algo_name(algo) << " shape=" << shape_name(shape)
            << " top=" << top_name(top) << " delivery " << delivery_name(order));
  std::vector<Program> progs(static_cast<size_t>(p));
  std::vector<std::vector<int64_t>> work(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    REQUIRE(build_program(h, r, CollKind::Allreduce, n, algo, false, &progs[r], top) == BC_OK);
    size_t sends = 0;  // Program::sends sizes the executor's list of sends still out
    for (const Step &st : progs[r].steps) sends += st.sends.size();
    REQUIRE(progs[r].sends == sends);
    work[r].resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) work[r][i] = contrib(r, i);
  }
  const auto out = run_programs(progs, work, order, rng);
  const int64_t full = (int64_t{1} << p) - 1;
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < n; ++i)
      if (out[r][i] != full * (1 + i % 5))
        FAIL("rank " << r << " element " << i << ": " << out[r][i] << " != " << full * (1 + i % 5));
}

}  // namespace

TEST_CASE("executor: sends read at delivery, held back as long as possible, give exact sums", "[executor]") {
  std::mt19937 rng(12345);
  struct Case {
    const char *spec;
    int p;
  };
  for (Case c : {Case{"2", 2}, Case{"3", 3}, Case{"2x2", 4}, Case{"5", 5}, Case{"3x2", 6}, Case{"7", 7},
                 Case{"2x2x2", 8}, Case{"4x2", 8}, Case{"3,2,3", 8}, Case{"1,3", 4}}) {
    Topology t;
    REQUIRE(topo_parse(c.spec, c.p, &t) == BC_OK);
    for (int64_t n : {int64_t{1}, int64_t{c.p + 1}, int64_t{13}, int64_t{1009}}) {
      // The combinations tests/unit/test_plan.cc checks with data copied at posting.
      struct Variant {
        Hierarchy::Shape shape;
        Algo algo;
        Top top;
      };
      using S = Hierarchy::Shape;
      for (Variant v : {Variant{S::Split, Algo::Ring, Top::Split}, Variant{S::Split, Algo::Direct, Top::Split},
                        Variant{S::Split, Algo::Auto, Top::Split}, Variant{S::Split, Algo::Ring, Top::Rd},
                        Variant{S::Split, Algo::Ring, Top::All}, Variant{S::Leader, Algo::Direct, Top::Split},
                        Variant{S::Leader, Algo::Direct, Top::Rd}, Variant{S::Leader, Algo::Direct, Top::All},
                        Variant{S::Flat, Algo::Auto, Top::Rd}, Variant{S::Flat, Algo::Auto, Top::All},
                        Variant{S::Flat, Algo::Rhd, Top::Split}}) {
        const Hierarchy h = Hierarchy::build(t, v.shape);
        for (Delivery d : {Delivery::Oldest, Delivery::Newest, Delivery::Random})
          run_allreduce(h, c.p, n, v.algo, v.shape, v.top, d, &rng);
      }
    }
  }
}

// A copying step whose receive overwrites what an earlier step still sends.
// Rank 0 sends R to rank 1 while receiving X from rank 2 (step 0, which ends
// once X is in), then receives R from rank 2 (step 1). Rank 2's two sends do
// not wait for rank 1, so an executor that posted step 1's receive while the
// send of R was still out could let rank 2's R land first, and rank 1 would
// get rank 2's data instead of rank 0's.
TEST_CASE("executor: a copying step does not receive over a range still being sent", "[executor]") {
  std::mt19937 rng(777);
  const int64_t m = 3;
  const Range R{0, m}, X{m, m};
  std::vector<Program> progs(3);
  for (Program &pr : progs) pr.count = 2 * m;
  progs[0].steps.resize(2);
  progs[0].steps[0].tag = 1;
  progs[0].steps[0].sends.push_back(Xfer{1, R});
  progs[0].steps[0].recvs.push_back(Xfer{2, X});
  progs[0].steps[1].tag = 2;
  progs[0].steps[1].recvs.push_back(Xfer{2, R});
  progs[1].steps.resize(1);
  progs[1].steps[0].tag = 1;
  progs[1].steps[0].recvs.push_back(Xfer{0, R});
  progs[2].steps.resize(2);
  progs[2].steps[0].tag = 1;
  progs[2].steps[0].sends.push_back(Xfer{0, X});
  progs[2].steps[1].tag = 2;
  progs[2].steps[1].sends.push_back(Xfer{0, R});
  progs[0].sends = 1;  // as build_program counts them
  progs[2].sends = 2;
  for (Delivery d : {Delivery::Oldest, Delivery::Newest, Delivery::Random}) {
    INFO("delivery " << delivery_name(d));
    const std::vector<std::vector<int64_t>> work = {{10, 11, 12, 13, 14, 15}, {-1, -1, -1, -1, -1, -1},
                                                    {30, 31, 32, 33, 34, 35}};
    const auto out = run_programs(progs, work, d, &rng);
    REQUIRE(out[0] == work[2]);                                         // R and X from rank 2
    REQUIRE(out[1] == std::vector<int64_t>{10, 11, 12, -1, -1, -1});  // rank 0's R as it was
  }
}
