// Discovery of a rack level above the nodes by measurement (BC_TOPO_DISCOVER;
// docs/TOPOLOGY.md). Collective.
//
// detect.cc calls it when no BC_TOPO, BC_TOPO_FILE or scheduler address gives
// the levels above the node and there are at least 3 nodes, and to check the
// racks a BC_TOPO_FILE or an address gives (a warning where they disagree). The node leaders
// (one rank per node, the smallest) time concurrent pairwise exchanges in
// log2(nodes) rounds (rack_clusters.h says which pairs and why) on a private
// sub-communicator, gather every flow's rate, and rank 0 classifies them
// (rack_clusters); the others wait in a broadcast, sleeping between polls.
// The result, found or not, is stored in the per-user cache
// (core/cache_file.h, DIR/racks-HASH.txt, keyed by the hosts of the nodes in
// rank order), so a later job on the same hosts does not measure again; an
// inconclusive result only for kInconclusiveCacheAgeMs (discover_cache_read).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/status.h"

namespace bc {

// How long a cached inconclusive result ("none": the passes did not agree)
// stands. A noisy moment on the hosts (a busy node, a stalled round) can make
// one; trusted for BC_MODEL_CACHE_AGE (a week by default) it would hide real
// racks from every job on these hosts for that long. Ten minutes still
// spares the communicators of one job, and back-to-back jobs, from paying the
// passes again (up to 6, 0.3-1 s on 4 simulated nodes), and a network at
// the limit of what discovery can tell (an oversubscribed trunk) costs each
// later job one discovery.
constexpr int64_t kInconclusiveCacheAgeMs = 10 * 60 * 1000;

// The result cached in `dir` for `key` (n nodes): true with *rack_of (empty:
// no rack level) and *flat (no level because every flow was fast), or false
// with *why ("no cached racks" when there is none). Racks and "flat" stand
// for max_age_ms (BC_MODEL_CACHE_AGE; 0: no limit), "none" for at most
// kInconclusiveCacheAgeMs.
bool discover_cache_read(const std::string &dir, const std::string &key, int n, int64_t max_age_ms,
                         std::vector<int> *rack_of, bool *flat, std::string *why);

// node_of[r]: the node leader of rank r; host_hash[r]: a hash of rank r's host
// name (every rank passes the same vectors). On return *rack_of_node holds
// the rack of each node, nodes in order of their leaders, or is empty when no
// rack level was found; *how says where it came from ("measured",
// "cached in PATH"); *flat (optional) is true when no level was found because
// two passes agreed that every flow is fast, false when the data were
// inconclusive (or a level was found). A failure while measuring (a leader's
// MPI call) is a warning, not an error: every rank returns with no rack level
// and *how "failed", nothing is cached, and no rank is left waiting. Fails
// only where MPI fails outside the measurement.
Status discover_racks(MPI_Comm comm, const ParamSet &params, const std::vector<int64_t> &node_of,
                      const std::vector<uint64_t> &host_hash, std::vector<int> *rack_of_node, std::string *how,
                      bool *flat = nullptr);

// Tests only (tests/mpi/test_discover.cc): the leader with index `leader`
// among the node leaders takes its pass number `pass` (from 1) as failed,
// after the pass's gather; (-1, 0) turns it off.
void discover_fail_pass_for_testing(int leader, int pass);

}  // namespace bc
