// Keeping a node's shared-memory setup for the next communicator over the same
// processes (issue 12, item 5: frameworks create process groups freely).
//
// A new communicator's shm setup costs four collectives, a segment created in
// /dev/shm, mapped by every rank of the node and unlinked: 2.3-2.9 ms of a
// 4.5 ms creation at np 8 on one node (2 cores). A communicator destroyed
// cleanly leaves its transport here instead (at most kIdleMax per process,
// until bc_finalize); the next one over the same processes, in the same order,
// with the same node map and shm settings takes it back after one allreduce.
//
// Why that is safe: the transport continues where the last communicator left
// it (sequence numbers, slots), as if the same communicator went on. It is
// reused only when every rank of the new communicator
//  - holds an idle transport for this membership (keyed locally: world ranks,
//    node map, settings), nothing of its own in flight (locally_idle), and
//  - sees every message of every channel it shares consumed and freed by both
//    sides (quiet: the peers have finished the last communicator too), and
//  - holds the same one: the id chosen by rank 0 at its setup (the allreduce
//    takes the largest of id and -id, so they agree only when all ids match).
// Otherwise every rank drops what it held and sets up anew. A transport whose
// communicator failed (broken, cancelled, refused) is never kept.
#include <mpi.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "core/hash.h"
#include "core/log.h"
#include "transports/shm/shm_transport.h"

namespace bc {
namespace {

constexpr size_t kIdleMax = 4;
constexpr uint64_t kIdMask = (uint64_t{1} << 62) - 1;  // so that -id fits an int64

std::mutex g_idle_mutex;
std::deque<std::unique_ptr<shm::ShmTransport>> *g_idle = new std::deque<std::unique_ptr<shm::ShmTransport>>;

// What a transport was made for: the members as ranks of MPI_COMM_WORLD, in
// communicator order, the node map and the settings that shape the setup.
// Not BC_SPIN_COUNT: a transport never waits (transports/transport.h), the
// communicator's own waiter does. Local: no communication.
Status reuse_key(const TransportSetup &setup, uint64_t *key) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  BC_MPI_CHECK(MPI_Comm_group(setup.bootstrap, &group));
  int rc = MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> mine(static_cast<size_t>(setup.size)), in_world(static_cast<size_t>(setup.size));
  for (int r = 0; r < setup.size; ++r) mine[r] = r;
  if (rc == MPI_SUCCESS) rc = MPI_Group_translate_ranks(group, setup.size, mine.data(), world, in_world.data());
  MPI_Group_free(&group);
  if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
  BC_MPI_CHECK(rc);
  std::string text;
  for (int r : in_world) text += std::to_string(r) + ",";
  text += "/";
  for (int64_t n : setup.node_of) text += std::to_string(n) + ",";
  text += "/" + setup.params->get_str(ParamId::ShmMode) + "/" + std::to_string(setup.params->get_int(ParamId::ShmChunk)) +
          "/" + std::to_string(setup.params->get_int(ParamId::ShmEager)) + "/" + std::to_string(setup.rank);
  *key = fnv1a(text);
  return BC_OK;
}

std::unique_ptr<shm::ShmTransport> take_idle(uint64_t key) {
  std::lock_guard<std::mutex> lock(g_idle_mutex);
  for (auto it = g_idle->begin(); it != g_idle->end(); ++it) {
    if ((*it)->reuse_key != key) continue;
    std::unique_ptr<shm::ShmTransport> t = std::move(*it);
    g_idle->erase(it);
    return t;
  }
  return nullptr;
}

}  // namespace

Status shm_transport_create(const TransportSetup &setup, std::unique_ptr<Transport> *out) {
  uint64_t key = 0;
  BC_CHECK(reuse_key(setup, &key));
  // Claimed here: kept only if every rank can take its own back.
  std::unique_ptr<shm::ShmTransport> idle = take_idle(key);
  int64_t verdict[3] = {1, 0, 0};  // {someone cannot, id, -id}, reduced with MAX
  if (idle && idle->quiet()) {
    const int64_t id = static_cast<int64_t>(idle->instance() & kIdMask);
    verdict[0] = 0;
    verdict[1] = id;
    verdict[2] = -id;
  }
  BC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, verdict, 3, MPI_INT64_T, MPI_MAX, setup.bootstrap));
  if (verdict[0] == 0 && verdict[1] == -verdict[2]) {
    BC_DEBUGLOG(Transport, "shm: rank %d reuses the node setup of an earlier communicator", setup.rank);
    *out = std::move(idle);
    return BC_OK;
  }
  idle.reset();  // another rank has none, or another one: a new setup for all
  std::unique_ptr<shm::Node> node(new shm::Node);
  BC_CHECK(shm::Node::setup(setup, node.get()));  // the same status on every rank
  std::unique_ptr<shm::ShmTransport> t(new shm::ShmTransport(setup, std::move(node)));
  t->reuse_key = key;
  *out = std::move(t);
  return BC_OK;
}

void shm_transport_retire(std::unique_ptr<Transport> t, bool clean) {
  auto *shm_t = dynamic_cast<shm::ShmTransport *>(t.get());
  if (!shm_t || !clean || !shm_t->locally_idle()) return;  // t is destroyed here
  t.release();
  std::unique_ptr<shm::ShmTransport> keep(shm_t);
  std::unique_ptr<shm::ShmTransport> evicted;
  {
    std::lock_guard<std::mutex> lock(g_idle_mutex);
    g_idle->push_back(std::move(keep));
    if (g_idle->size() > kIdleMax) {
      evicted = std::move(g_idle->front());
      g_idle->pop_front();
    }
  }
}

void shm_release_idle() {
  std::deque<std::unique_ptr<shm::ShmTransport>> gone;
  {
    std::lock_guard<std::mutex> lock(g_idle_mutex);
    gone.swap(*g_idle);
  }
}

}  // namespace bc
