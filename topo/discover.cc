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
// timed exchange right after it. 512 KiB takes 17 ms at 250 Mbit/s, 84 ms at
// 50 Mbit/s (two nodes sharing a 100 Mbit/s trunk): long enough that a few
// milliseconds of scheduling noise on a busy host stay small beside it.
constexpr int kWarmBytes = 128 * 1024;
constexpr int kTimedBytes = 512 * 1024;
// Passes over all rounds; each flow keeps its best. One: the two directions
// of a pair already give two samples (rack_clusters.h), and a second pass
// doubles the cost.
constexpr int kPasses = 1;
// Pairs below this fraction of the best pair are slow, with no call within
// kMargin of it. Measured on the simulated clusters (docs/TOPOLOGY.md) on a
// busy 2-core host: pairs inside a rack 63-100 % of the best, pairs across a
// 100 Mbit/s trunk under 250 Mbit/s node links 12-45 %.
constexpr double kSlowRatio = 0.5;
constexpr double kMargin = 0.05;
constexpr char kKind[] = "racks";
constexpr int kGroupTag = 0x6463;  // MPI_Comm_create_group's tag: "dc"

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sends and receives `bytes` with `peer` at once; *recv_done: when the
// receive completed.
Status exchange(MPI_Comm lc, int peer, std::vector<char> *sbuf, std::vector<char> *rbuf, int bytes,
                double *recv_done) {
  MPI_Request req[2];
  BC_MPI_CHECK(MPI_Irecv(rbuf->data(), bytes, MPI_BYTE, peer, 7, lc, &req[0]));
  BC_MPI_CHECK(MPI_Isend(sbuf->data(), bytes, MPI_BYTE, peer, 7, lc, &req[1]));
  BC_MPI_CHECK(MPI_Wait(&req[0], MPI_STATUS_IGNORE));
  *recv_done = now_s();
  BC_MPI_CHECK(MPI_Wait(&req[1], MPI_STATUS_IGNORE));
  return BC_OK;
}

// This leader's received rate (bytes/s) in each round, the better of
// kPasses passes over all rounds; 0 where it idled.
Status measure(MPI_Comm lc, int i, int n, std::vector<double> *rates) {
  const std::vector<int> rounds = discover_rounds(n);
  std::vector<char> sbuf(kTimedBytes, 1), rbuf(kTimedBytes);
  rates->assign(rounds.size(), 0.0);
  for (int pass = 0; pass < kPasses; ++pass) {
    for (size_t r = 0; r < rounds.size(); ++r) {
      const int peer = discover_partner(i, rounds[r], n);
      BC_MPI_CHECK(MPI_Barrier(lc));
      if (peer < 0) continue;
      // The timed message follows the warm-up at once, and its time runs
      // from the warm-up's arrival to its own: the link stays busy, so the
      // shaper's bucket stays empty (an idle millisecond refills 31 KB of
      // burst at 250 Mbit/s), and data the sender had queued early counts.
      double warm = 0, timed = 0;
      BC_CHECK(exchange(lc, peer, &sbuf, &rbuf, kWarmBytes, &warm));
      BC_CHECK(exchange(lc, peer, &sbuf, &rbuf, kTimedBytes, &timed));
      if (timed > warm) (*rates)[r] = std::max((*rates)[r], kTimedBytes / (timed - warm));
    }
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

// The body's first line: "racks R0 R1 ..." or "none"; false when it is neither.
bool parse_body(const std::string &body, int n, std::vector<int> *rack_of) {
  std::istringstream in(body.substr(0, body.find('\n')));
  std::string word;
  if (!(in >> word)) return false;
  rack_of->clear();
  if (word == "none") return !(in >> word);
  if (word != "racks") return false;
  int v = 0;
  while (in >> v) {
    if (v < 0 || v >= n) return false;
    rack_of->push_back(v);
  }
  return in.eof() && static_cast<int>(rack_of->size()) == n;
}

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

}  // namespace

Status discover_racks(MPI_Comm comm, const ParamSet &params, const std::vector<int64_t> &node_of,
                      const std::vector<uint64_t> &host_hash, std::vector<int> *rack_of_node, std::string *how) {
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
  // msg[0]: 0 measure, 1 cached, 2 measured; msg[1]: 1 when a level was found; then the racks.
  std::vector<int> msg(static_cast<size_t>(n) + 2, 0);
  if (rank == 0 && use_cache) {
    std::string body, why;
    std::vector<int> racks;
    if (!cache_read(dir, kKind, key, params.get_int(ParamId::ModelCacheAge), "BC_MODEL_CACHE_AGE", &body, &why)) {
      if (why != "no cached racks") BC_INFO(Topo, "discovered racks cache not used: %s", why.c_str());
    } else if (!parse_body(body, n, &racks)) {
      BC_INFO(Topo, "discovered racks cache not used: %s: bad body", cache_path(dir, kKind, key).c_str());
    } else {
      msg[0] = 1;
      msg[1] = racks.empty() ? 0 : 1;
      std::copy(racks.begin(), racks.end(), msg.begin() + 2);
    }
  }
  // Under BC_TOPO_DISCOVER=always every rank knows already that nobody looked.
  if (use_cache) BC_CHECK(bcast_sleepy(&msg, comm));
  if (msg[0] == 0) {
    std::string body;  // rank 0: what the cache file gets
    // The leaders' own communicator, made by the leaders alone: the other
    // ranks go straight to the broadcast of the result.
    const bool leader = node_of[rank] == rank;
    MPI_Comm lc = MPI_COMM_NULL;
    if (leader) {
      MPI_Group all_group = MPI_GROUP_NULL, leader_group = MPI_GROUP_NULL;
      BC_MPI_CHECK(MPI_Comm_group(comm, &all_group));
      int rc = MPI_Group_incl(all_group, n, leaders.data(), &leader_group);
      if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(comm, leader_group, kGroupTag, &lc);
      MPI_Group_free(&all_group);
      if (leader_group != MPI_GROUP_NULL) MPI_Group_free(&leader_group);
      BC_MPI_CHECK(rc);
    }
    if (leader) {
      int i = 0;
      std::vector<double> mine, all;
      Status st = MPI_Comm_rank(lc, &i) == MPI_SUCCESS ? BC_OK : BC_ERR_MPI;
      const double tm = now_s();
      if (st == BC_OK) st = measure(lc, i, n, &mine);
      const double measure_ms = (now_s() - tm) * 1e3;
      const int nr = static_cast<int>(discover_rounds(n).size());
      mine.resize(static_cast<size_t>(nr), 0.0);
      if (st != BC_OK) std::fill(mine.begin(), mine.end(), 0.0);  // classified as not measured
      all.resize(static_cast<size_t>(n) * nr);
      const int rc = MPI_Gather(mine.data(), nr, MPI_DOUBLE, all.data(), nr, MPI_DOUBLE, 0, lc);
      MPI_Comm_free(&lc);
      BC_MPI_CHECK(rc);
      if (rank == 0) {
        std::vector<Flow> flows;
        const std::vector<int> rounds = discover_rounds(n);
        for (int j = 0; j < n; ++j)
          for (int r = 0; r < nr; ++r) {
            const int p = discover_partner(j, rounds[r], n);
            if (p >= 0) flows.push_back({r, p, j, all[static_cast<size_t>(j) * nr + r]});
          }
        const RackClusters c = rack_clusters(n, flows, kSlowRatio, kMargin);
        const std::string ev = evidence(n, all);
        BC_INFO(Topo, "discovery over %d nodes in %.0f ms (measuring %.0f): %s: %s; rates %s", n,
                (now_s() - t0) * 1e3, measure_ms,
                c.found ? "rack level found" : "no rack level", c.why.c_str(), ev.c_str());
        msg[0] = 2;
        msg[1] = c.found ? 1 : 0;
        if (c.found) std::copy(c.rack_of.begin(), c.rack_of.end(), msg.begin() + 2);
        std::ostringstream os;
        if (c.found) {
          os << "racks";
          for (int r : c.rack_of) os << " " << r;
        } else {
          os << "none";
        }
        os << "\n# " << c.why << "\n# rates " << ev << "\n";
        body = os.str();
      }
    }
    BC_CHECK(bcast_sleepy(&msg, comm));
    // After the broadcast: the others need not wait for the disk.
    std::string why;
    if (rank == 0 && !cache_write(dir, kKind, key, body, &why))
      BC_INFO(Topo, "discovered racks not cached: %s", why.c_str());
  }
  rack_of_node->clear();
  if (msg[1]) rack_of_node->assign(msg.begin() + 2, msg.end());
  *how = msg[0] == 1 ? "cached in " + cache_path(dir, kKind, key) : "measured";
  if (rank == 0 && msg[0] == 1)
    BC_INFO(Topo, "discovery over %d nodes: %s (%s)", n, msg[1] ? "rack level" : "no rack level", how->c_str());
  return BC_OK;
}

}  // namespace bc
