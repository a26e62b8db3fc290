// The shared-memory transport on its own, below the executor: tag matching in
// any posting order, more outstanding messages than desc slots, a ring full of a
// message nobody receives yet, zero bytes, size mismatches, cancellation, and
// agreement on creation failures. Ranks 0 and 1 talk when they share a node;
// every rank takes part in the collective creation.
#include <catch2/catch.hpp>
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/wait_policy.h"
#include "harness.h"
#include "transports/transport.h"

using namespace bctest;

namespace {

struct ShmFixture {
  MPI_Comm comm = MPI_COMM_NULL;
  bc::ParamSet params;
  bc::TransportSetup setup;
  std::unique_ptr<bc::Transport> t;
  bc::Status created = BC_OK;

  explicit ShmFixture(const char *options) {
    REQUIRE(params.apply_overrides(options) == BC_OK);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm node;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &node);
    int leader = world_rank();
    MPI_Bcast(&leader, 1, MPI_INT, 0, node);
    MPI_Comm_free(&node);
    std::vector<int> leaders(world_size());
    MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm);
    setup.bootstrap = comm;
    setup.rank = world_rank();
    setup.size = world_size();
    setup.node_of.assign(leaders.begin(), leaders.end());
    setup.params = &params;
    created = bc::shm_transport_create(setup, &t);
  }
  ~ShmFixture() {
    t.reset();
    MPI_Comm_free(&comm);
  }
  // Ranks 0 and 1 exchange when both are here and share a node.
  bool pair() const { return world_size() >= 2 && setup.node_of[0] == setup.node_of[1]; }
  int other() const { return 1 - world_rank(); }
};

// Tests every request until all are done; false on error or after 10 s. The
// transport never yields: this loop waits under the library's policy, as
// Operation::wait would (BC_SPIN_COUNT idle passes, then a yield).
bool wait_all(bc::Transport *t, std::vector<bc::TransportRequest> &reqs, std::string *err = nullptr) {
  std::vector<char> done(reqs.size(), 0);
  size_t left = reqs.size();
  bc::WaitPolicy wait(bc::ParamSet().get_int(bc::ParamId::SpinCount));
  auto start = std::chrono::steady_clock::now();
  while (left > 0) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (done[i]) continue;
      bool d = false;
      if (t->test(&reqs[i], &d) != BC_OK) {
        if (err) *err = bc_last_error();
        for (auto &r : reqs)
          if (r.active) t->cancel(&r);
        return false;
      }
      if (d) {
        done[i] = 1;
        --left;
      }
    }
    if (!wait.moved(left)) wait.pause();
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10)) {
      if (err) *err = "timed out";
      for (auto &r : reqs)
        if (r.active) t->cancel(&r);
      return false;
    }
  }
  return true;
}

unsigned char pattern(uint32_t tag, size_t i, int k) { return static_cast<unsigned char>(tag * 31 + i * 7 + k); }

// Eager (BC_SHM_EAGER, 16K by default) covers the small sizes in every mode; the
// last mode sends them by single copy instead.
std::vector<const char *> modes() {
  return {"BC_SHM_MODE=copy;BC_SHM_CHUNK=4K", "BC_SHM_MODE=copy", "BC_SHM_MODE=auto", "BC_SHM_MODE=auto;BC_SHM_EAGER=0"};
}

// Rank 0 sends `sizes[i]` bytes with tag tags[i] in that order; rank 1 posts its
// receives in `recv_order`. Returns an empty string when all arrived intact.
std::string exchange(ShmFixture &f, const std::vector<uint32_t> &tags, const std::vector<size_t> &sizes,
                     const std::vector<size_t> &recv_order) {
  const size_t n = tags.size();
  std::vector<std::vector<unsigned char>> bufs(n);
  std::vector<bc::TransportRequest> reqs(n);
  std::vector<int> copy_of_tag(n, 0);  // k-th message with the same tag
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < i; ++j) copy_of_tag[i] += tags[j] == tags[i];
  const bool sender = world_rank() == 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = sender ? k : recv_order[k];
    bufs[i].assign(sizes[i], 0xEE);
    if (sender) {
      for (size_t b = 0; b < sizes[i]; ++b) bufs[i][b] = pattern(tags[i], b, copy_of_tag[i]);
      if (f.t->post_send(f.other(), bufs[i].data(), sizes[i], BC_MEM_HOST, tags[i], &reqs[k]) != BC_OK)
        return bc_last_error();
    } else if (f.t->post_recv(f.other(), bufs[i].data(), sizes[i], BC_MEM_HOST, tags[i], &reqs[k]) != BC_OK) {
      return bc_last_error();
    }
  }
  std::string err;
  if (!wait_all(f.t.get(), reqs, &err)) return err;
  if (!sender)
    for (size_t i = 0; i < n; ++i)
      for (size_t b = 0; b < sizes[i]; ++b)
        if (bufs[i][b] != pattern(tags[i], b, copy_of_tag[i]))
          return "message " + std::to_string(i) + " byte " + std::to_string(b) + " is wrong";
  return "";
}

}  // namespace

TEST_CASE("shm: tags match in any posting order", "[shm]") {
  for (const char *opt : modes()) {
    ShmFixture f(opt);
    INFO(opt << ": " << bc_last_error());
    REQUIRE(everywhere(f.created == BC_OK));
    if (!f.pair()) continue;
    std::string err;
    if (world_rank() < 2) {
      // Different tags, receives in reverse; sizes around the 4K chunk, the
      // default eager limit (16K) and the ring.
      std::vector<uint32_t> tags = {1, 2, 3, 4, 5, 6, 7, 8};
      std::vector<size_t> sizes = {1, 4096, 4097, 3 * 4096 + 5, 16384, 16385, 100000, 0};
      err = exchange(f, tags, sizes, {7, 6, 5, 4, 3, 2, 1, 0});
      // Equal tags: matched in posting order, interleaved with another tag.
      if (err.empty()) err = exchange(f, {7, 8, 7, 7, 8}, {5000, 10, 70000, 3, 20000}, {1, 0, 4, 2, 3});
      // More outstanding messages than desc slots (64), received in reverse.
      std::vector<uint32_t> many(150);
      std::vector<size_t> many_sizes(150), rev(150);
      for (size_t i = 0; i < many.size(); ++i) {
        many[i] = 1000 + static_cast<uint32_t>(i);
        many_sizes[i] = 1 + (i * 977) % 9000;
        rev[i] = many.size() - 1 - i;
      }
      if (err.empty()) err = exchange(f, many, many_sizes, rev);
    }
    INFO("rank " << world_rank() << ": " << err);
    REQUIRE(everywhere(err.empty()));
  }
}

TEST_CASE("shm: a large message nobody receives yet blocks no other tag", "[shm]") {
  for (const char *opt : modes()) {
    ShmFixture f(opt);
    REQUIRE(everywhere(f.created == BC_OK));
    if (!f.pair()) continue;
    std::string err;
    if (world_rank() < 2) {
      const size_t big = 3 << 20;
      std::vector<unsigned char> a(big), b(64);
      if (world_rank() == 0) {
        for (size_t i = 0; i < big; ++i) a[i] = pattern(1, i, 0);
        for (size_t i = 0; i < b.size(); ++i) b[i] = pattern(2, i, 0);
        // The big one first: its chunks must not clog the ring ahead of the small one.
        std::vector<bc::TransportRequest> reqs(2);
        if (f.t->post_send(1, a.data(), big, BC_MEM_HOST, 1, &reqs[0]) != BC_OK ||
            f.t->post_send(1, b.data(), b.size(), BC_MEM_HOST, 2, &reqs[1]) != BC_OK)
          err = bc_last_error();
        else if (!wait_all(f.t.get(), reqs, &err))
          err = "sender: " + err;
      } else {
        std::vector<bc::TransportRequest> reqs(1);
        if (f.t->post_recv(0, b.data(), b.size(), BC_MEM_HOST, 2, &reqs[0]) != BC_OK) err = bc_last_error();
        if (err.empty() && !wait_all(f.t.get(), reqs, &err)) err = "small receive: " + err;
        reqs.assign(1, bc::TransportRequest{});
        if (err.empty() && f.t->post_recv(0, a.data(), big, BC_MEM_HOST, 1, &reqs[0]) != BC_OK) err = bc_last_error();
        if (err.empty() && !wait_all(f.t.get(), reqs, &err)) err = "big receive: " + err;
        for (size_t i = 0; err.empty() && i < big; ++i)
          if (a[i] != pattern(1, i, 0)) err = "big message byte " + std::to_string(i);
        for (size_t i = 0; err.empty() && i < b.size(); ++i)
          if (b[i] != pattern(2, i, 0)) err = "small message byte " + std::to_string(i);
      }
    }
    INFO(opt << " rank " << world_rank() << ": " << err);
    REQUIRE(everywhere(err.empty()));
  }
}

TEST_CASE("shm: cancelled and mismatched messages fail cleanly", "[shm]") {
  for (const char *opt : modes()) {
    ShmFixture f(opt);
    REQUIRE(everywhere(f.created == BC_OK));
    if (!f.pair()) continue;
    std::string err;
    if (world_rank() < 2) {
      std::vector<unsigned char> buf(20000, 1);
      // An offer nobody takes is withdrawn; a receive nobody feeds is dropped.
      bc::TransportRequest r;
      bc::Status st = world_rank() == 0 ? f.t->post_send(1, buf.data(), buf.size(), BC_MEM_HOST, 50, &r)
                                        : f.t->post_recv(0, buf.data(), buf.size(), BC_MEM_HOST, 51, &r);
      bool d = true;
      if (st == BC_OK) st = f.t->test(&r, &d);
      if (st != BC_OK || d) err = "the unmatched request did not stay pending: " + std::string(bc_last_error());
      f.t->cancel(&r);
      if (r.active) err = "cancel left the request active";
      // A size mismatch fails on both sides with a message (above the eager
      // limit: an eager send completes at the sender, below).
      std::vector<bc::TransportRequest> reqs(1);
      st = world_rank() == 0 ? f.t->post_send(1, buf.data(), 18000, BC_MEM_HOST, 52, &reqs[0])
                             : f.t->post_recv(0, buf.data(), 20000, BC_MEM_HOST, 52, &reqs[0]);
      std::string why;
      if (st != BC_OK) err = bc_last_error();
      else if (wait_all(f.t.get(), reqs, &why)) err = "a size mismatch went through";
      else if (why.find("bytes") == std::string::npos) err = "unclear message: " + why;
      // An eager one (at most BC_SHM_EAGER) completes at the sender, as an MPI
      // eager send does; the receiver fails, and its buffer is untouched.
      std::vector<unsigned char> small(200, 0xEE);
      reqs.assign(1, bc::TransportRequest{});
      st = world_rank() == 0 ? f.t->post_send(1, buf.data(), 100, BC_MEM_HOST, 54, &reqs[0])
                             : f.t->post_recv(0, small.data(), 200, BC_MEM_HOST, 54, &reqs[0]);
      const bool eager = std::string(opt).find("EAGER=0") == std::string::npos;
      const bool sent = st == BC_OK && wait_all(f.t.get(), reqs, &why);
      if (!err.empty()) {
      } else if (st != BC_OK) {
        err = bc_last_error();
      } else if (world_rank() == 1 || !eager) {
        if (sent) err = "a small size mismatch went through";
        else if (why.find("bytes") == std::string::npos) err = "unclear message: " + why;
        else if (world_rank() == 1 && small != std::vector<unsigned char>(200, 0xEE)) err = "refused data landed";
      } else if (!sent) {
        err = "an eager send failed at the sender: " + why;
      }
      // The channels still work: tag 50 was withdrawn, so this matches the new one.
      if (err.empty()) err = exchange(f, {50, 51, 53}, {20000, 0, 7}, {2, 1, 0});
    }
    INFO(opt << " rank " << world_rank() << ": " << err);
    REQUIRE(everywhere(err.empty()));
  }
}

TEST_CASE("shm: a cancelled message is as if never sent, and the other side keeps waiting", "[shm]") {
  // Copy mode, where a message can be cancelled half-way through the ring.
  ShmFixture f("BC_SHM_MODE=copy;BC_SHM_CHUNK=4K");
  REQUIRE(everywhere(f.created == BC_OK));
  if (!f.pair()) return;
  const bool in = world_rank() < 2;
  auto sync = [] { MPI_Barrier(MPI_COMM_WORLD); };
  auto poke = [&](bc::TransportRequest *r, std::string *err) {  // one test(): must stay pending
    bool d = true;
    if (f.t->test(r, &d) != BC_OK) *err = bc_last_error();
    else if (d) *err = "completed although its peer cancelled";
  };
  const size_t big = 1 << 20;
  std::vector<unsigned char> a(big), b(big, 0);
  for (size_t i = 0; i < big; ++i) a[i] = pattern(60, i, world_rank() == 0 ? 0 : 9);
  std::string err;
  bc::TransportRequest s1, r1;
  // 1. The sender cancels after a few chunks went through the ring.
  if (in && world_rank() == 1 && f.t->post_recv(0, b.data(), big, BC_MEM_HOST, 60, &r1) != BC_OK) err = bc_last_error();
  sync();
  if (in && world_rank() == 0 && f.t->post_send(1, a.data(), big, BC_MEM_HOST, 60, &s1) != BC_OK) err = bc_last_error();
  sync();
  if (in && world_rank() == 1) poke(&r1, &err);  // matches it, grants it
  sync();
  if (in && world_rank() == 0) poke(&s1, &err);  // fills the ring
  sync();
  if (in && world_rank() == 1) poke(&r1, &err);  // drains it
  sync();
  if (in && world_rank() == 0) f.t->cancel(&s1);
  sync();
  if (in && world_rank() == 1) poke(&r1, &err);  // back to waiting, not failed
  sync();
  // A new send of the same tag completes that receive, with none of the old bytes.
  for (size_t i = 0; i < big; ++i) a[i] = pattern(60, i, 1);
  if (in && world_rank() == 0) {
    std::vector<bc::TransportRequest> reqs(1);
    if (f.t->post_send(1, a.data(), big, BC_MEM_HOST, 60, &reqs[0]) != BC_OK) err = bc_last_error();
    else if (!wait_all(f.t.get(), reqs, &err)) err = "second send: " + err;
  }
  if (in && world_rank() == 1) {
    std::vector<bc::TransportRequest> reqs = {r1};
    if (err.empty() && !wait_all(f.t.get(), reqs, &err)) err = "receive: " + err;
    for (size_t i = 0; err.empty() && i < big; ++i)
      if (b[i] != pattern(60, i, 1)) err = "byte " + std::to_string(i) + " is stale";
  }
  INFO("sender cancels, rank " << world_rank() << ": " << err);
  REQUIRE(everywhere(err.empty()));

  // 2. The receiver cancels mid-stream: the send stays pending; that channel is
  // then unusable, and says so.
  sync();
  if (in && world_rank() == 0 && f.t->post_send(1, a.data(), big, BC_MEM_HOST, 61, &s1) != BC_OK) err = bc_last_error();
  if (in && world_rank() == 1 && f.t->post_recv(0, b.data(), big, BC_MEM_HOST, 61, &r1) != BC_OK) err = bc_last_error();
  sync();
  if (in && world_rank() == 1) poke(&r1, &err);
  sync();
  if (in && world_rank() == 0) poke(&s1, &err);
  sync();
  if (in && world_rank() == 1) {
    f.t->cancel(&r1);
    bc::TransportRequest r2;
    if (f.t->post_recv(0, b.data(), 8, BC_MEM_HOST, 62, &r2) != BC_ERR_TRANSPORT ||
        std::string(bc_last_error()).find("unusable") == std::string::npos)
      err = "a receive on the abandoned channel was accepted";
  }
  sync();
  if (in && world_rank() == 0) {
    for (int i = 0; i < 3 && err.empty(); ++i) poke(&s1, &err);
    f.t->cancel(&s1);
  }
  INFO("receiver cancels, rank " << world_rank() << ": " << err);
  REQUIRE(everywhere(err.empty()));
}

TEST_CASE("shm: creation fails alike everywhere, and leaves nothing in /dev/shm", "[shm]") {
  {
    // A node map that does not cover every rank: refused on every rank alike.
    // (Bad BC_SHM_CHUNK values no longer get this far: the registry refuses them.)
    ShmFixture f("");
    REQUIRE(everywhere(f.created == BC_OK));
    f.t.reset();
    bc::TransportSetup bad = f.setup;
    bad.node_of.pop_back();
    std::unique_ptr<bc::Transport> t;
    const bc::Status st = bc::shm_transport_create(bad, &t);
    INFO(bc_last_error());
    REQUIRE(everywhere(st == BC_ERR_NOT_SUPPORTED && !t));
    bc::ParamSet ps;
    REQUIRE(ps.apply_overrides("BC_SHM_CHUNK=16") == BC_ERR_PARAM);
  }
  {
    ShmFixture f("BC_SHM_MODE=cma");
    INFO(bc_last_error());
    REQUIRE(everywhere(f.created == BC_OK || f.created == BC_ERR_NOT_SUPPORTED));
    int mine = f.created, lo = 0, hi = 0;
    MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    REQUIRE(lo == hi);
    INFO(bc_last_error());
    REQUIRE(everywhere(f.created == BC_OK ||
                       std::string(bc_last_error()).find("BC_SHM_MODE=cma") != std::string::npos));
  }
  ShmFixture f("");
  REQUIRE(everywhere(f.created == BC_OK));
  // Every node's segment is unlinked once created: no name of ours is left.
  bool clean = true;
  const std::string mine = "bc-shm-" + std::to_string(getpid()) + "-";
  if (DIR *d = opendir("/dev/shm")) {
    while (dirent *e = readdir(d))
      if (std::string(e->d_name).compare(0, mine.size(), mine) == 0) clean = false;
    closedir(d);
  }
  REQUIRE(everywhere(clean));
  const bool peer_ok = !(f.pair() && world_rank() < 2) || f.t->can_connect(f.other(), BC_MEM_HOST);
  REQUIRE(everywhere(peer_ok && !f.t->can_connect(world_rank(), BC_MEM_HOST) &&
                     !f.t->can_connect(0, BC_MEM_CUDA)));
}
