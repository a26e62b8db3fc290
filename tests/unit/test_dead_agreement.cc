// The survivors' agreement (lib/sched/dead_agreement.h) with every rank a
// thread of one process, over a fake transport (an in-memory wire, matched by
// source and tag as the real ones match) and a fake failure detector that is
// perfect, as the liveness checks are: a rank is reported dead only once it
// has died, to each observer after a delay of its own. Ranks die before the
// agreement, or in its middle: after a number of their sends, so that a round
// or a DECIDED reaches some ranks and not others, the case flooding consensus
// exists for. Every rank that lives must return the same set, which holds
// every rank dead before the agreement and no living one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sched/dead_agreement.h"

using namespace bc;

namespace {

using Clock = std::chrono::steady_clock;

struct Wire {
  struct Message {
    int src;
    uint32_t tag;
    std::vector<uint8_t> data;
  };
  std::mutex mutex;
  std::vector<std::deque<Message>> inbox;       // per destination, in sending order
  std::vector<Clock::time_point> died;          // max(): alive
  std::vector<int> sends_left;                  // it dies at its next send once 0 (-1: never)
  std::vector<std::vector<int>> delay_ms;       // [observer][rank]: how late the observer learns of a death
  explicit Wire(int n)
      : inbox(n), died(n, Clock::time_point::max()), sends_left(n, -1), delay_ms(n, std::vector<int>(n, 0)) {}
  bool dead(int r) const { return died[r] != Clock::time_point::max(); }
};

// What a request's slot holds.
struct Slot {
  void *buf;
  size_t bytes;
  uint32_t tag;
  bool is_send;
};
static_assert(sizeof(Slot) <= sizeof(TransportRequest::slot), "a request's state fits its slot");

class FakeTransport final : public Transport {
 public:
  FakeTransport(Wire *w, int rank) : w_(w), rank_(rank) {}
  const char *name() const override { return "fake"; }
  bool can_connect(int, bc_memtype_t) const override { return true; }
  Status connect(int) override { return BC_OK; }
  Status post_send(int peer, const void *buf, size_t bytes, bc_memtype_t, uint32_t tag,
                   TransportRequest *req) override {
    std::lock_guard<std::mutex> lock(w_->mutex);
    if (w_->sends_left[rank_] == 0) w_->died[rank_] = Clock::now();  // dies instead of sending
    if (w_->dead(rank_)) return BC_FAIL(BC_ERR_TRANSPORT, "fake: rank %d is dead", rank_);
    if (w_->sends_left[rank_] > 0) --w_->sends_left[rank_];
    const auto *p = static_cast<const uint8_t *>(buf);
    if (!w_->dead(peer)) w_->inbox[peer].push_back({rank_, tag, std::vector<uint8_t>(p, p + bytes)});
    start(req, peer, const_cast<void *>(buf), bytes, tag, true);
    return BC_OK;
  }
  Status post_recv(int peer, void *buf, size_t bytes, bc_memtype_t, uint32_t tag, TransportRequest *req) override {
    std::lock_guard<std::mutex> lock(w_->mutex);
    if (w_->dead(rank_)) return BC_FAIL(BC_ERR_TRANSPORT, "fake: rank %d is dead", rank_);
    start(req, peer, buf, bytes, tag, false);
    return BC_OK;
  }
  Status test(TransportRequest *req, bool *done) override {
    std::lock_guard<std::mutex> lock(w_->mutex);
    *done = false;
    if (w_->dead(rank_)) return BC_FAIL(BC_ERR_TRANSPORT, "fake: rank %d is dead", rank_);
    Slot s;
    std::memcpy(&s, req->slot, sizeof s);
    if (s.is_send) {  // eager: done once posted
      *done = true;
      req->active = false;
      return BC_OK;
    }
    std::deque<Wire::Message> &in = w_->inbox[rank_];
    for (auto it = in.begin(); it != in.end(); ++it) {
      if (it->src != req->peer || it->tag != s.tag) continue;
      if (it->data.size() != s.bytes) return BC_FAIL(BC_ERR_TRANSPORT, "fake: size mismatch");
      std::memcpy(s.buf, it->data.data(), s.bytes);
      in.erase(it);
      *done = true;
      req->active = false;
      return BC_OK;
    }
    return BC_OK;
  }
  void cancel(TransportRequest *req) override { req->active = false; }
  Status reopen(int) override {
    std::lock_guard<std::mutex> lock(w_->mutex);
    if (w_->dead(rank_)) return BC_FAIL(BC_ERR_TRANSPORT, "fake: rank %d is dead", rank_);
    return BC_OK;
  }

 private:
  void start(TransportRequest *req, int peer, void *buf, size_t bytes, uint32_t tag, bool is_send) {
    req->transport = this;
    req->peer = peer;
    req->active = true;
    const Slot s{buf, bytes, tag, is_send};
    std::memcpy(req->slot, &s, sizeof s);
  }
  Wire *w_;
  int rank_;
};

struct Outcome {
  Status status = BC_OK;
  std::string error;
  std::vector<int> dead;
  int instances = 0;
};

// One job of n ranks: `before` dead at the start, `sends_left[r] >= 0` dies
// at that send. Returns each rank's outcome (those dead before: untouched).
std::vector<Outcome> run_job(Wire *w, int n, const std::vector<char> &before) {
  std::vector<std::unique_ptr<FakeTransport>> transports;
  for (int r = 0; r < n; ++r) transports.emplace_back(new FakeTransport(w, r));
  std::vector<Outcome> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    if (before[r]) continue;
    threads.emplace_back([&, r] {
      DeadAgreementSetup s;
      s.rank = r;
      s.size = n;
      for (int p = 0; p < n; ++p) s.peer_transport.push_back(transports[r].get());
      s.dead_now = [w, r, n] {
        std::lock_guard<std::mutex> lock(w->mutex);
        std::vector<int> dead;
        const auto now = Clock::now();
        for (int p = 0; p < n; ++p)
          if (w->dead(p) && now >= w->died[p] + std::chrono::milliseconds(w->delay_ms[r][p])) dead.push_back(p);
        return dead;
      };
      s.liveness_interval_ms = 10;
      s.spin_count = 1;
      s.timeout_ms = 10000;  // a hang fails the test instead of stopping it
      DeadAgreementResult res;
      out[r].status = agree_on_dead(s, &res);
      if (out[r].status != BC_OK) out[r].error = last_error();
      clear_error();
      out[r].dead = res.dead;
      out[r].instances = res.instances;
    });
  }
  for (std::thread &t : threads) t.join();
  return out;
}

}  // namespace

TEST_CASE("the survivors agree on who is dead, whoever dies when", "[dead_agreement]") {
  constexpr int kJobs = 120;
  for (int seed = 0; seed < kJobs; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const int n = 2 + seed % 8;
    Wire w(n);
    std::vector<char> before(n, 0);
    // Up to 2 dead as the agreement starts, which the survivors learn of at
    // different times, and 2 more that die in the middle; rank 0 always
    // lives, so that someone is left to agree.
    const int dead_before = static_cast<int>(rng() % 3);
    for (int k = 0; k < dead_before && n > 2; ++k) {
      const int r = 1 + static_cast<int>(rng() % (n - 1));
      before[r] = 1;
      w.died[r] = Clock::now();
    }
    const int dying = static_cast<int>(rng() % 3);
    for (int k = 0; k < dying && n > 2; ++k) {
      const int r = 1 + static_cast<int>(rng() % (n - 1));
      if (!before[r]) w.sends_left[r] = static_cast<int>(rng() % (3 * n));
    }
    for (int o = 0; o < n; ++o)
      for (int p = 0; p < n; ++p) w.delay_ms[o][p] = static_cast<int>(rng() % 40);
    const std::vector<Outcome> out = run_job(&w, n, before);

    std::ostringstream what;
    what << "seed " << seed << ", " << n << " ranks; dead before:";
    for (int r = 0; r < n; ++r)
      if (before[r]) what << " " << r;
    what << "; dying after k sends:";
    for (int r = 0; r < n; ++r)
      if (w.sends_left[r] >= 0 || (w.dead(r) && !before[r])) what << " " << r;
    INFO(what.str());
    const std::vector<int> *agreed = nullptr;
    for (int r = 0; r < n; ++r) {
      if (w.dead(r)) continue;  // dead, before or during: its answer does not count
      INFO("rank " << r << ": " << out[r].error);
      REQUIRE(out[r].status == BC_OK);
      CHECK(out[r].instances >= 2);
      if (!agreed) agreed = &out[r].dead;
      CHECK(out[r].dead == *agreed);  // one set on every survivor
      for (int d : out[r].dead) CHECK(w.dead(d));  // nobody alive in it
      for (int d = 0; d < n; ++d)
        if (before[d]) CHECK(std::find(out[r].dead.begin(), out[r].dead.end(), d) != out[r].dead.end());
    }
  }
}

TEST_CASE("a rank that alone knew of a death, dying halfway through telling it, splits nobody",
          "[dead_agreement]") {
  // 5 ranks; rank 4 is dead at the start, and only rank 1 knows at once (the
  // others learn 60 ms later). Rank 1 sends its first round to ranks 0 and 2,
  // then dies before it reaches rank 3: ranks 0 and 2 hold a set that rank 3
  // never sees. A rank deciding on its first complete round would split them.
  for (int repeat = 0; repeat < 5; ++repeat) {
    const int n = 5;
    Wire w(n);
    std::vector<char> before(n, 0);
    before[4] = 1;
    w.died[4] = Clock::now();
    for (int o = 0; o < n; ++o)
      for (int p = 0; p < n; ++p) w.delay_ms[o][p] = o == 1 ? 0 : 60;
    w.sends_left[1] = 2;
    const std::vector<Outcome> out = run_job(&w, n, before);
    for (int r : {0, 2, 3}) {
      INFO("repeat " << repeat << ", rank " << r << ": " << out[r].error);
      REQUIRE(out[r].status == BC_OK);
      CHECK(out[r].dead == std::vector<int>{1, 4});
    }
  }
}
