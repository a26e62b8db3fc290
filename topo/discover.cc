#include "topo/discover.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "core/cache_file.h"
#include "core/log.h"
#include "topo/rack_clusters.h"

namespace bc {
namespace {

// Each round: a barrier so that every pair's flows run at once, a warm-up
// exchange that opens TCP's window and drains a link shaper's burst, then the
// timed exchange right after it. 384 KiB takes 13 ms at 250 Mbit/s, 63 ms at
// 50 Mbit/s (two nodes sharing a 100 Mbit/s trunk): long enough that a few
// milliseconds of scheduling noise on a busy host stay small beside it.
constexpr int kWarmBytes = 128 * 1024;
constexpr int kTimedBytes = 384 * 1024;
// Pairs below this fraction of the best pair are slow, with no call within
// kMargin of it. Measured on the simulated clusters (docs/TOPOLOGY.md) on a
// busy 2-core host: pairs inside a rack 63-100 % of the best; pairs sharing a
// 100 Mbit/s trunk under 250 Mbit/s node links 12-35 %, a pair alone on it
// 35-42 %.
constexpr double kSlowRatio = 0.55;
constexpr double kMargin = 0.05;
// Passes at most (RackPasses says when fewer decide; docs/TOPOLOGY.md).
constexpr int kMaxPasses = 6;
constexpr char kKind[] = "racks";
constexpr int kGroupTag = 0x6463;  // MPI_Comm_create_group's tag: "dc"
// discover_fail_pass_for_testing: the leader (index among the leaders) whose
// pass number g_fail_pass (from 1) fails after its gather; -1: none.
int g_fail_leader = -1, g_fail_pass = 0;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One round's transfer with `peer`, both ways at once: the warm-up, then the
// timed message. Both receives are posted first (messages of one sender and
// tag match in order); the timed send starts as soon as the warm-up's send
// is done, whatever the other direction does, so a late flow one way does
// not hold the other back. *warm_done and *timed_done: when the two
// messages from `peer` had arrived here.
Status transfer(MPI_Comm lc, int peer, std::vector<char> *sbuf, std::vector<char> *rbuf, double *warm_done,
                double *timed_done) {
  MPI_Request req[4];  // receive warm-up, receive timed, send warm-up, send timed
  BC_MPI_CHECK(MPI_Irecv(rbuf->data(), kWarmBytes, MPI_BYTE, peer, 7, lc, &req[0]));
  BC_MPI_CHECK(MPI_Irecv(rbuf->data(), kTimedBytes, MPI_BYTE, peer, 7, lc, &req[1]));
  BC_MPI_CHECK(MPI_Isend(sbuf->data(), kWarmBytes, MPI_BYTE, peer, 7, lc, &req[2]));
  req[3] = MPI_REQUEST_NULL;
  bool posted = false;
  int left = 4;
  while (left > 0) {
    int idx = MPI_UNDEFINED;
    BC_MPI_CHECK(MPI_Waitany(4, req, &idx, MPI_STATUS_IGNORE));
    if (idx == MPI_UNDEFINED) break;
    --left;
    if (idx == 0) *warm_done = now_s();
    if (idx == 1) *timed_done = now_s();
    if (idx == 2 && !posted) {
      BC_MPI_CHECK(MPI_Isend(sbuf->data(), kTimedBytes, MPI_BYTE, peer, 7, lc, &req[3]));
      posted = true;
    }
  }
  return BC_OK;
}

// This leader's received rate (bytes/s) from `peer` in one round, after a
// barrier that starts every pair's flows at once; 0 where it idles (peer < 0).
Status measure_round(MPI_Comm lc, int peer, std::vector<char> *sbuf, std::vector<char> *rbuf, double *rate) {
  *rate = 0;
  BC_MPI_CHECK(MPI_Barrier(lc));
  if (peer < 0) return BC_OK;
  // Both messages over the time from the barrier to the last one's
  // arrival. Timing the second message alone, from the first one's
  // arrival, read up to 30x the link rate when this process was
  // descheduled as the first arrived (1 Gbit/s links on a busy 2-core
  // host); a link shaper's burst (100 KB) still counts, for every flow.
  const double t0 = now_s();
  double warm = 0, timed = 0;
  BC_CHECK(transfer(lc, peer, sbuf, rbuf, &warm, &timed));
  // The lower of that and the second message alone (from the first's
  // arrival), which leaves out the burst: noise only ever lowers either
  // when the process is late, the first can only read high.
  if (timed > t0) *rate = (kWarmBytes + kTimedBytes) / (timed - t0);
  if (timed > warm && warm > t0) *rate = std::min(*rate, kTimedBytes / (timed - warm));
  return BC_OK;
}

// This leader's received rate (bytes/s) in each round; 0 where it idled.
Status measure(MPI_Comm lc, int i, int n, std::vector<double> *rates) {
  const std::vector<int> rounds = discover_rounds(n);
  std::vector<char> sbuf(kTimedBytes, 1), rbuf(kTimedBytes);
  rates->assign(rounds.size(), 0.0);
  for (size_t r = 0; r < rounds.size(); ++r)
    BC_CHECK(measure_round(lc, discover_partner(i, rounds[r], n), &sbuf, &rbuf, &(*rates)[r]));
  // The first round once more at the end, keeping the faster reading (noise
  // only lowers a rate): two position effects, measured (docs/TOPOLOGY.md,
  // "The first exchange of a pass"). At 1 Gbit/s the first exchange of a
  // pass reads slow (round d=1 220-700 Mbit/s against 440-1,350 for d=2; a
  // flat cluster read as 2 racks in 1 of 6 jobs); at 250 Mbit/s flows into
  // rank 0's node read slow in every exchange but the first (145 against 240
  // Mbit/s). An untimed exchange before the first round fixed the one and
  // spread the other to round d=1, which hid the racks of 3 + 1 in 2 of 10
  // creations on CI.
  if (!rounds.empty()) {
    double again = 0;
    BC_CHECK(measure_round(lc, discover_partner(i, rounds[0], n), &sbuf, &rbuf, &again));
    (*rates)[0] = std::max((*rates)[0], again);
  }
  return BC_OK;
}

// "round d=1: 1->0 243 2->3 240 ...; round d=2: ..." in Mbit/s.
std::string evidence(int n, const std::vector<double> &all) {
  const std::vector<int> rounds = discover_rounds(n);
  std::ostringstream os;
  for (size_t r = 0; r < rounds.size(); ++r) {
    os << (r ? "; " : "") << "d=" << rounds[r] << ":";
    for (int i = 0; i < n; ++i) {
      const int p = discover_partner(i, rounds[r], n);
      if (p < 0) continue;
      char buf[48];
      std::snprintf(buf, sizeof buf, " %d->%d %.0f", p, i, all[i * rounds.size() + r] * 8e-6);
      os << buf;
    }
  }
  return os.str() + " (Mbit/s)";
}

std::string cache_key(const std::vector<int> &leaders, const std::vector<uint64_t> &host_hash) {
  std::ostringstream os;
  os << "racks n=" << leaders.size();
  char buf[24];
  for (int l : leaders) {
    std::snprintf(buf, sizeof buf, " %llx", static_cast<unsigned long long>(host_hash[l]));
    os << buf;
  }
  return os.str();
}

// The body's first line: "racks R0 R1 ...", "flat" (two passes agreed that
// every flow is fast) or "none" (no level, the data inconclusive); false when
// it is none of them.
bool parse_body(const std::string &body, int n, std::vector<int> *rack_of, bool *flat) {
  std::istringstream in(body.substr(0, body.find('\n')));
  std::string word;
  if (!(in >> word)) return false;
  rack_of->clear();
  *flat = word == "flat";
  if (word == "none" || word == "flat") return !(in >> word);
  if (word != "racks") return false;
  int v = 0;
  while (in >> v) {
    if (v < 0 || v >= n) return false;
    rack_of->push_back(v);
  }
  return in.eof() && static_cast<int>(rack_of->size()) == n;
}

}  // namespace

bool discover_cache_read(const std::string &dir, const std::string &key, int n, int64_t max_age_ms,
                         std::vector<int> *rack_of, bool *flat, std::string *why) {
  std::string body;
  int64_t age_s = 0;
  if (!cache_read(dir, kKind, key, max_age_ms, "BC_MODEL_CACHE_AGE", &body, why, &age_s)) return false;
  if (!parse_body(body, n, rack_of, flat)) {
    *why = cache_path(dir, kKind, key) + ": bad body";
    return false;
  }
  // An inconclusive result stands for kInconclusiveCacheAgeMs only (or the
  // age limit, where that is shorter: the read above checked it).
  if (rack_of->empty() && !*flat && age_s * 1000 > kInconclusiveCacheAgeMs) {
    const std::string name = "an inconclusive result's " + std::to_string(kInconclusiveCacheAgeMs / 60000) + " min";
    *why = cache_path(dir, kKind, key) + ": " + cache_too_old(name.c_str(), age_s);
    rack_of->clear();
    return false;
  }
  return true;
}

namespace {

// Waits for a broadcast, sleeping between polls: ranks that do not measure
// leave the cores to those that do.
Status bcast_sleepy(std::vector<int> *msg, MPI_Comm comm) {
  MPI_Request req;
  BC_MPI_CHECK(MPI_Ibcast(msg->data(), static_cast<int>(msg->size()), MPI_INT, 0, comm, &req));
  for (;;) {
    int done = 0;
    BC_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return BC_OK;
    const struct timespec ts = {0, 200 * 1000};
    nanosleep(&ts, nullptr);
  }
}

// One pass over all rounds: measure, gather the rates at leader 0 (*flows
// and *ev on leader 0 only). A leader whose measurement failed sends zeros,
// which classify as "not measured".
Status one_pass(MPI_Comm lc, int i, int n, std::vector<Flow> *flows, std::string *ev) {
  std::vector<double> mine, all;
  const bool ok = measure(lc, i, n, &mine) == BC_OK;
  if (!ok) clear_error();
  const int nr = static_cast<int>(discover_rounds(n).size());
  mine.resize(static_cast<size_t>(nr), 0.0);
  if (!ok) std::fill(mine.begin(), mine.end(), 0.0);
  all.resize(static_cast<size_t>(n) * nr);
  BC_MPI_CHECK(MPI_Gather(mine.data(), nr, MPI_DOUBLE, all.data(), nr, MPI_DOUBLE, 0, lc));
  if (i != 0) return BC_OK;
  const std::vector<int> rounds = discover_rounds(n);
  for (int j = 0; j < n; ++j)
    for (int r = 0; r < nr; ++r) {
      const int p = discover_partner(j, rounds[r], n);
      if (p >= 0) flows->push_back({r, p, j, all[static_cast<size_t>(j) * nr + r]});
    }
  *ev = evidence(n, all);
  return BC_OK;
}

// The leaders' own communicator, made by the leaders alone: the other ranks
// go straight to the broadcast of the result.
Status leader_comm(MPI_Comm comm, const std::vector<int> &leaders, MPI_Comm *lc) {
  MPI_Group all_group = MPI_GROUP_NULL, leader_group = MPI_GROUP_NULL;
  int rc = MPI_Comm_group(comm, &all_group);
  if (rc == MPI_SUCCESS) rc = MPI_Group_incl(all_group, static_cast<int>(leaders.size()), leaders.data(), &leader_group);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(comm, leader_group, kGroupTag, lc);
  if (all_group != MPI_GROUP_NULL) MPI_Group_free(&all_group);
  if (leader_group != MPI_GROUP_NULL) MPI_Group_free(&leader_group);
  if (rc != MPI_SUCCESS) return BC_FAIL(BC_ERR_MPI, "the node leaders' communicator: MPI error %d", rc);
  if (MPI_Comm_set_errhandler(*lc, MPI_ERRORS_RETURN) != MPI_SUCCESS) {
    MPI_Comm_free(lc);
    return BC_FAIL(BC_ERR_MPI, "MPI_Comm_set_errhandler on the node leaders' communicator");
  }
  return BC_OK;
}

// After each pass, every leader learns whether another pass follows (leader
// 0's `more`, from its votes) and whether any leader's pass failed, in one
// allreduce: a leader that failed alone must not leave the others waiting in
// the next pass's gather. *st becomes a failure when any leader failed.
Status pass_agreement(MPI_Comm lc, bool more_mine, Status *st, int *more) {
  int flags[2] = {more_mine ? 1 : 0, *st == BC_OK ? 0 : 1}, agreed[2] = {0, 1};
  *more = 0;
  BC_MPI_CHECK(MPI_Allreduce(flags, agreed, 2, MPI_INT, MPI_MAX, lc));
  if (agreed[1] && *st == BC_OK) *st = BC_FAIL(BC_ERR_MPI, "another node leader's discovery pass failed");
  *more = agreed[1] ? 0 : agreed[0];
  return BC_OK;
}

}  // namespace

void discover_fail_pass_for_testing(int leader, int pass) {
  g_fail_leader = leader;
  g_fail_pass = pass;
}

Status discover_racks(MPI_Comm comm, const ParamSet &params, const std::vector<int64_t> &node_of,
                      const std::vector<uint64_t> &host_hash, std::vector<int> *rack_of_node, std::string *how,
                      bool *flat) {
  const double t0 = now_s();
  int rank = 0;
  BC_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const int size = static_cast<int>(node_of.size());
  std::vector<int> leaders;
  for (int r = 0; r < size; ++r)
    if (node_of[r] == r) leaders.push_back(r);
  const int n = static_cast<int>(leaders.size());
  const bool use_cache = params.get_str(ParamId::TopoDiscover) == "auto";
  const std::string dir = cache_dir(params), key = cache_key(leaders, host_hash);
  // msg[0]: 0 measure, 1 cached, 2 measured, 3 failed; msg[1]: 1 when a level was
  // found, 2 when conclusively flat, 0 otherwise; then the racks.
  std::vector<int> msg(static_cast<size_t>(n) + 2, 0);
  if (rank == 0 && use_cache) {
    std::string why;
    std::vector<int> racks;
    bool flat = false;
    if (!discover_cache_read(dir, key, n, params.get_int(ParamId::ModelCacheAge), &racks, &flat, &why)) {
      if (why != "no cached racks") BC_INFO(Topo, "discovered racks cache not used: %s", why.c_str());
    } else {
      msg[0] = 1;
      msg[1] = racks.empty() ? (flat ? 2 : 0) : 1;
      std::copy(racks.begin(), racks.end(), msg.begin() + 2);
    }
  }
  // Under BC_TOPO_DISCOVER=always every rank knows already that nobody looked.
  if (use_cache) BC_CHECK(bcast_sleepy(&msg, comm));
  if (msg[0] == 0) {
    std::string body;  // rank 0: what the cache file gets
    const bool leader = node_of[rank] == rank;
    if (leader) {
      // Discovery is advisory: a failure here must neither fail the
      // communicator nor leave the other ranks in the broadcast below, so no
      // path returns before it. Every leader leaves the passes together
      // (pass_agreement), and rank 0 broadcasts "failed" as no rack level.
      MPI_Comm lc = MPI_COMM_NULL;
      Status st = leader_comm(comm, leaders, &lc);
      RackPasses passes(n, kMaxPasses, kSlowRatio, kMargin);
      std::string ev;
      const double tm = now_s();
      if (st == BC_OK) {
        // Passes until the conclusive ones decide (RackPasses: 3 agreeing
        // votes for racks, 2 for one rack, and all passes' flows together
        // classifying the same), at most kMaxPasses: a stall of the host
        // during one round (all of its flows at 15 Mbit/s once, under load 12)
        // must not become a level, nor hide one. A pass whose data are
        // inconclusive (a pair in the uncertain band, inconsistent) is no vote
        // for "flat": it was counted as one until a busy host's two such
        // passes hid racks of 3+1.
        int i = 0;
        st = MPI_Comm_rank(lc, &i) == MPI_SUCCESS ? BC_OK : BC_FAIL(BC_ERR_MPI, "MPI_Comm_rank of the leaders");
        for (int more = 1, pass = 1; more && st == BC_OK; ++pass) {
          std::vector<Flow> flows;
          std::string e;
          st = one_pass(lc, i, n, &flows, &e);
          if (st == BC_OK && i == g_fail_leader && pass == g_fail_pass)
            st = BC_FAIL(BC_ERR_MPI, "pass %d failed on leader %d (discover_fail_pass_for_testing)", pass, i);
          ev += (ev.empty() ? "" : "; pass " + std::to_string(pass) + " ") + e;
          const bool mine = i == 0 && st == BC_OK ? !passes.add(flows) : false;
          const Status agreed = pass_agreement(lc, mine, &st, &more);
          if (agreed != BC_OK) st = agreed;  // MPI itself failed: more is 0
        }
        MPI_Comm_free(&lc);
      }
      const RackClusters &c = passes.result();
      const double measure_ms = (now_s() - tm) * 1e3;
      if (st != BC_OK) {
        BC_WARN(Topo, "rack discovery failed after %.0f ms, so no rack level is measured (the communicator goes "
                "on without one): %s", measure_ms, last_error());
        clear_error();
      }
      if (rank == 0 && st != BC_OK) {
        msg[0] = 3;
        msg[1] = 0;
      } else if (rank == 0) {
        BC_INFO(Topo, "discovery over %d nodes in %.0f ms (measuring %.0f): %s: %s; rates %s", n,
                (now_s() - t0) * 1e3, measure_ms, c.found ? "rack level found" : "no rack level", c.why.c_str(),
                ev.c_str());
        msg[0] = 2;
        msg[1] = c.found ? 1 : c.conclusive ? 2 : 0;
        if (c.found) std::copy(c.rack_of.begin(), c.rack_of.end(), msg.begin() + 2);
        std::ostringstream os;
        if (c.found) {
          os << "racks";
          for (int r : c.rack_of) os << " " << r;
        } else {
          os << (c.conclusive ? "flat" : "none");
        }
        os << "\n# " << c.why << "\n# rates " << ev << "\n";
        body = os.str();
      }
    }
    BC_CHECK(bcast_sleepy(&msg, comm));
    // After the broadcast: the others need not wait for the disk. A failed
    // discovery is not cached: the next communicator looks again.
    std::string why;
    if (rank == 0 && msg[0] == 2 && !cache_write(dir, kKind, key, body, &why))
      BC_INFO(Topo, "discovered racks not cached: %s", why.c_str());
  }
  rack_of_node->clear();
  if (msg[1] == 1) rack_of_node->assign(msg.begin() + 2, msg.end());
  if (flat) *flat = msg[1] == 2;
  *how = msg[0] == 1 ? "cached in " + cache_path(dir, kKind, key) : msg[0] == 3 ? "failed" : "measured";
  if (rank == 0 && msg[0] == 1)
    BC_INFO(Topo, "discovery over %d nodes: %s (%s)", n,
            msg[1] == 1 ? "rack level" : msg[1] == 2 ? "no rack level (every flow fast)" : "no rack level",
            how->c_str());
  return BC_OK;
}

}  // namespace bc
