// Node setup for the shared-memory transport, collective over the bootstrap
// communicator. Four steps, each ended by one collective so that every rank
// takes the same path and returns the same status:
//
//   1. allgather {pid, address and value of a probe word}
//   2. each rank tries process_vm_readv of every node peer's probe word (unless
//      BC_SHM_MODE=copy); allgather the results; each node picks cma or copy
//   3. the node's lowest rank creates, sizes and initialises the segment;
//      allgather {status, name}
//   4. the other ranks of the node map it; allreduce the status; the creator
//      unlinks it (on success and on failure alike)
#include "transports/shm/shm_node.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <new>

#include "core/hash.h"
#include "core/log.h"

namespace bc {
namespace shm {
namespace {

struct Hello {
  int64_t pid;
  uint64_t probe_addr;
  uint64_t probe_value;
  uint64_t instance;  // rank 0's is the setup's id (Node::instance)
};
struct ProbeResult {
  int32_t result;  // 1: read every node peer; 0: failed; -1: not tried
  int32_t err;     // errno of the first failure (0: read a wrong value)
  int32_t peer;    // communicator rank it failed on
};
struct Made {
  int32_t status;
  char name[60];
};

std::atomic<uint64_t> g_segments{0};


size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace

SegmentSize fit_segment(size_t avail, size_t fixed, size_t npairs, size_t eager_bytes, uint32_t ring_slots,
                        size_t chunk) {
  SegmentSize s{eager_bytes, ring_slots, 0};
  auto total = [&] { return fixed + npairs * (kEagerSlots * s.eager_bytes + s.ring_slots * chunk); };
  while (total() > avail && s.eager_bytes > 64) s.eager_bytes = round_up(s.eager_bytes / 2, 64);
  if (total() > avail) s.eager_bytes = 0;
  if (total() > avail && s.ring_slots > 2) s.ring_slots = 2;
  s.total = total();
  return s;
}

namespace {

// A segment is unlinked as soon as every rank of its node has mapped it, so one
// can only be left behind by a rank killed during setup. Leaders remove such
// leftovers: our names whose creating process is gone, and which are older than
// any setup takes (another pid namespace may share /dev/shm).
void remove_stale_segments() {
  DIR *dir = opendir("/dev/shm");
  if (!dir) return;
  const time_t now = time(nullptr);
  while (dirent *e = readdir(dir)) {
    int pid = 0;
    unsigned long long counter = 0;
    unsigned nonce = 0;
    if (std::sscanf(e->d_name, "bc-shm-%d-%llu-%x", &pid, &counter, &nonce) != 3 || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    struct stat sb;
    const std::string path = std::string("/dev/shm/") + e->d_name;
    if (stat(path.c_str(), &sb) != 0 || now - sb.st_mtime < 60) continue;
    if (shm_unlink((std::string("/") + e->d_name).c_str()) == 0)
      BC_DEBUGLOG(Transport, "shm: removed /dev/shm/%s, left by process %d", e->d_name, pid);
  }
  closedir(dir);
}

}  // namespace

Node::~Node() {
  unlink_created();  // only after a failed setup
  unmap();
}

void Node::unmap() {
  if (base_) munmap(base_, length_);
  base_ = nullptr;
  header_ = nullptr;
  length_ = 0;
}

Channel *Node::channel(int from, int to) const {
  auto *first = reinterpret_cast<Channel *>(base_ + header_->channels_offset);
  return first + pair_index(from, to);
}

unsigned char *Node::ring(int from, int to) const {
  return base_ + header_->data_offset + static_cast<size_t>(pair_index(from, to)) * ring_slots_ * chunk_;
}

unsigned char *Node::eager(int from, int to) const {
  if (eager_bytes_ == 0) return nullptr;
  return base_ + header_->eager_offset + static_cast<size_t>(pair_index(from, to)) * kEagerSlots * eager_bytes_;
}

// The leader's part of step 3: a fresh segment, sized and initialised.
Status Node::create_segment(char *name, size_t name_size) {
  // Leftovers come from processes killed before this one started: one look per
  // process is enough (the scan of /dev/shm cost a part of every creation).
  static std::once_flag scanned;
  std::call_once(scanned, remove_stale_segments);
  const int nlocal = this->nlocal();
  const size_t npairs = static_cast<size_t>(nlocal) * (nlocal - 1);
  const size_t data_offset = round_up(kHeaderBytes + npairs * sizeof(Channel), 4096);
  int fd = -1;
  const uint64_t counter = g_segments.fetch_add(1);
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    std::snprintf(name, name_size, "/bc-shm-%d-%llu-%08x", static_cast<int>(getpid()),
                  static_cast<unsigned long long>(counter), static_cast<unsigned>(fresh_nonce()));
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return BC_FAIL(BC_ERR_NOT_SUPPORTED, "shm transport: shm_open(%s) failed: %s", name, std::strerror(errno));
  created_ = name;
  // Rings of 4 chunks per pair, or 2 where /dev/shm is tight.
  struct statvfs vfs;
  const size_t avail = fstatvfs(fd, &vfs) == 0 ? static_cast<size_t>(vfs.f_bavail) * vfs.f_frsize : SIZE_MAX;
  // Eager areas are written only as small messages use them (tmpfs pages are
  // allocated on first touch), but the size must fit (a container's /dev/shm
  // is often 64 MiB: 16 KiB areas fit 23 ranks, 4 KiB 45).
  const SegmentSize fit = fit_segment(avail, data_offset, npairs, eager_bytes_, cma_ ? 0 : kRingSlots, chunk_);
  if (fit.eager_bytes != eager_bytes_)
    BC_WARN(Transport, "shm transport: /dev/shm has %zu MiB free, too little for %zu B eager areas "
                       "(BC_SHM_EAGER) between %d ranks: %s", avail >> 20, eager_bytes_, nlocal,
                       fit.eager_bytes ? ("eager messages up to " + std::to_string(fit.eager_bytes) + " B").c_str()
                                       : "small messages take the single-copy path");
  eager_bytes_ = fit.eager_bytes;
  ring_slots_ = fit.ring_slots;
  const size_t total = fit.total;
  Status st = BC_OK;
  void *p = MAP_FAILED;
  if (total > avail)
    st = BC_FAIL(BC_ERR_NOT_SUPPORTED,
                 "shm transport: the segment for %d ranks needs %zu MiB but /dev/shm has %zu MiB free "
                 "(lower BC_SHM_CHUNK or enlarge /dev/shm)", nlocal, total >> 20, avail >> 20);
  else if (ftruncate(fd, static_cast<off_t>(total)) != 0)
    st = BC_FAIL(BC_ERR_NOT_SUPPORTED, "shm transport: ftruncate(%s, %zu) failed: %s", name, total, std::strerror(errno));
  else if ((p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    st = BC_FAIL(BC_ERR_NOT_SUPPORTED, "shm transport: mmap of %zu bytes failed: %s", total, std::strerror(errno));
  close(fd);
  BC_CHECK(st);
  base_ = static_cast<unsigned char *>(p);
  length_ = total;
  const size_t eager_offset = data_offset + npairs * ring_slots_ * chunk_;
  header_ = new (base_) Header{kMagic, static_cast<uint32_t>(nlocal), cma_ ? 0u : 1u, ring_slots_, 0,
                               chunk_, kHeaderBytes, data_offset, eager_bytes_, eager_offset, total};
  auto *ch = reinterpret_cast<Channel *>(base_ + kHeaderBytes);
  for (size_t i = 0; i < npairs; ++i) new (&ch[i]) Channel();
  return BC_OK;
}

// Step 4 on the other ranks: map the leader's segment and check it.
Status Node::open_segment(const char *name) {
  int fd = shm_open(name, O_RDWR, 0);
  if (fd < 0)
    return BC_FAIL(BC_ERR_NOT_SUPPORTED, "shm transport: shm_open(%s) of rank %d's segment failed: %s", name,
                   ranks_[0], std::strerror(errno));
  struct stat sb;
  Status st = BC_OK;
  void *p = MAP_FAILED;
  if (fstat(fd, &sb) != 0 || sb.st_size < static_cast<off_t>(kHeaderBytes))
    st = BC_FAIL(BC_ERR_NOT_SUPPORTED, "shm transport: segment %s is missing or too small", name);
  else if ((p = mmap(nullptr, static_cast<size_t>(sb.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
           MAP_FAILED)
    st = BC_FAIL(BC_ERR_NOT_SUPPORTED, "shm transport: mmap of %s failed: %s", name, std::strerror(errno));
  close(fd);
  BC_CHECK(st);
  base_ = static_cast<unsigned char *>(p);
  length_ = static_cast<size_t>(sb.st_size);
  header_ = reinterpret_cast<Header *>(p);
  const Header &h = *header_;
  if (h.magic != kMagic || h.nlocal != static_cast<uint32_t>(nlocal()) || h.total_bytes != length_ ||
      (h.copy_mode != 0) == cma_ || h.chunk != chunk_)
    return BC_FAIL(BC_ERR_INTERNAL, "shm transport: segment %s does not match this node's setup", name);
  ring_slots_ = h.ring_slots;
  eager_bytes_ = h.eager_bytes;  // the leader may have dropped the eager path for space
  return BC_OK;
}

void Node::unlink_created() {
  if (!created_.empty()) shm_unlink(created_.c_str());
  created_.clear();
}

Status Node::setup(const TransportSetup &s, Node *out) {
  MPI_Comm comm = s.bootstrap;
  const std::string mode = s.params->get_str(ParamId::ShmMode);
  const int64_t chunk_param = s.params->get_int(ParamId::ShmChunk);  // 64..64M: the registry's range
  Status st = BC_OK;
  if (static_cast<int64_t>(s.node_of.size()) != s.size)
    st = BC_FAIL(BC_ERR_NOT_SUPPORTED, "shm transport: no node map (node_of has %zu entries for %d ranks)",
                 s.node_of.size(), s.size);
  // node_of comes from the agreed topology: every rank reaches the same verdict
  // without a collective.
  BC_CHECK(st);
  out->chunk_ = round_up(static_cast<size_t>(chunk_param), 64);
  out->eager_bytes_ = round_up(static_cast<size_t>(s.params->get_int(ParamId::ShmEager)), 64);

  // Who shares my node.
  out->local_of_.assign(s.size, -1);
  for (int r = 0; r < s.size; ++r)
    if (s.node_of[r] == s.node_of[s.rank]) {
      out->local_of_[r] = static_cast<int>(out->ranks_.size());
      out->ranks_.push_back(r);
    }
  out->me_ = out->local_of_[s.rank];
  const int nlocal = out->nlocal();
  const bool leader = out->me_ == 0;

  // 1. Pids and probe words.
  const uint64_t probe_word = fresh_nonce();  // its address escapes to MPI: it stays in memory
  Hello hello{static_cast<int64_t>(getpid()), reinterpret_cast<uintptr_t>(&probe_word), probe_word, fresh_nonce()};
  std::vector<Hello> hellos(s.size);
  BC_MPI_CHECK(MPI_Allgather(&hello, sizeof hello, MPI_BYTE, hellos.data(), sizeof hello, MPI_BYTE, comm));
  out->instance_ = hellos[0].instance;
  for (int r : out->ranks_) out->pids_.push_back(static_cast<pid_t>(hellos[r].pid));

  // 2. Can I read every node peer's memory directly?
  ProbeResult mine{-1, 0, -1};
  if (mode != "copy" && nlocal > 1) {
    mine.result = 1;
    for (int r : out->ranks_) {
      if (r == s.rank) continue;
      uint64_t got = 0;
      struct iovec local = {&got, sizeof got};
      struct iovec remote = {reinterpret_cast<void *>(hellos[r].probe_addr), sizeof got};
      ssize_t n = process_vm_readv(static_cast<pid_t>(hellos[r].pid), &local, 1, &remote, 1, 0);
      if (n != static_cast<ssize_t>(sizeof got) || got != hellos[r].probe_value) {
        mine = {0, n < 0 ? errno : 0, r};
        break;
      }
    }
  }
  std::vector<ProbeResult> probes(s.size);
  BC_MPI_CHECK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, probes.data(), sizeof mine, MPI_BYTE, comm));
  // Every rank sees every probe, so every rank reaches the same verdict.
  auto failure = [&](int r) {
    const ProbeResult &f = probes[r];
    return "process_vm_readv from rank " + std::to_string(r) + " to rank " + std::to_string(f.peer) +
           " failed: " + (f.err ? std::strerror(f.err) : "it read a wrong value (another pid namespace?)");
  };
  out->cma_ = mode != "copy" && nlocal > 1;
  std::string why = mode == "copy" ? "BC_SHM_MODE=copy" : "";  // why this node copies
  for (int r = 0; r < s.size; ++r) {
    if (probes[r].result != 0) continue;
    if (mode == "cma")
      return BC_FAIL(BC_ERR_NOT_SUPPORTED,
                     "BC_SHM_MODE=cma, but single-copy reads are not allowed here: %s (seccomp, ptrace "
                     "restrictions or a container block them); use BC_SHM_MODE=auto or copy",
                     failure(r).c_str());
    if (out->local_of_[r] >= 0 && out->cma_) {
      out->cma_ = false;
      why = failure(r);
    }
  }
  if (leader && nlocal > 1)
    BC_INFO(Transport, "shm: node of %d ranks (leader rank %d) uses %s (%s)", nlocal, s.rank,
            out->cma_ ? "cma: single copy with process_vm_readv" : "copy: two copies through the segment",
            out->cma_ ? "process_vm_readv works between all of them" : why.c_str());
  if (nlocal == 1) BC_DEBUGLOG(Transport, "shm: rank %d is alone on its node; no segment", s.rank);

  // 3. The leader creates the segment; its name travels with the verdict.
  Made made{BC_OK, {0}};
  if (leader && nlocal > 1) made.status = out->create_segment(made.name, sizeof made.name);
  std::vector<Made> mades(s.size);
  int rc = MPI_Allgather(&made, sizeof made, MPI_BYTE, mades.data(), sizeof made, MPI_BYTE, comm);
  // Every rank sees every leader's status: the same verdict everywhere, no
  // second collective.
  for (int r = 0; rc == MPI_SUCCESS && r < s.size && st == BC_OK; ++r) {
    if (mades[r].status == BC_OK) continue;
    st = r == s.rank ? static_cast<Status>(made.status)
                     : BC_FAIL(static_cast<Status>(mades[r].status), "shm transport: segment creation failed on rank %d", r);
  }
  if (rc != MPI_SUCCESS || st != BC_OK) out->unlink_created();
  BC_MPI_CHECK(rc);
  BC_CHECK(st);

  // 4. The others map it; then nobody needs the name any more.
  if (!leader && nlocal > 1) st = out->open_segment(mades[out->ranks_[0]].name);
  st = agree_status(comm, st, "shm transport: segment mapping");
  out->unlink_created();
  BC_CHECK(st);
  return BC_OK;
}

}  // namespace shm
}  // namespace bc
