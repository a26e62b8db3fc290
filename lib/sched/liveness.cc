#include "sched/liveness.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/hash.h"
#include "core/log.h"
#include "transports/ucx/ucx_watch.h"

namespace bc {
namespace {

struct Ident {
  int64_t pid;
  uint64_t start;
  uint64_t boot;   // hash of /proc/sys/kernel/random/boot_id: same kernel instance
  uint64_t pidns;  // inode of /proc/self/ns/pid: same pid namespace (0: unknown)
  char host[64];
};

// What /proc/PID/stat says: 1 running (with its start time), 0 gone or a
// zombie, -1 cannot tell (no /proc, no permission).
int read_stat(int64_t pid, uint64_t *start) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%lld/stat", static_cast<long long>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? 0 : -1;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return n == 0 || errno == ESRCH ? 0 : -1;
  buf[n] = '\0';
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // count fields from the last ')'. state is field 3, starttime field 22.
  const char *p = std::strrchr(buf, ')');
  if (!p) return -1;
  ++p;
  char state = 0;
  if (std::sscanf(p, " %c", &state) != 1) return -1;
  if (state == 'Z' || state == 'X' || state == 'x') return 0;
  int field = 3;
  while (*p && field < 22) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
    ++field;
  }
  unsigned long long v = 0;
  if (std::sscanf(p, " %llu", &v) != 1) return -1;
  *start = v;
  return 1;
}

uint64_t boot_id_hash() {
  FILE *f = std::fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f) return 0;
  char id[64] = "";
  const bool ok = std::fgets(id, sizeof id, f) != nullptr;
  std::fclose(f);
  return ok ? fnv1a(id) : 0;
}

uint64_t pid_namespace() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// Whether a and b can look at each other's /proc/PID: same host, kernel
// instance and pid namespace. Every rank computes it alike for every pair.
bool same_place(const Ident &a, const Ident &b) {
  return a.boot != 0 && a.boot == b.boot && a.pidns != 0 && a.pidns == b.pidns && a.start != 0 && b.start != 0 &&
         std::strncmp(a.host, b.host, sizeof a.host) == 0;
}

}  // namespace

uint64_t proc_start_time(int64_t pid) {
  uint64_t start = 0;
  return read_stat(pid, &start) == 1 ? start : 0;
}

Liveness::~Liveness() = default;

Status Liveness::create(const TransportSetup &setup, std::unique_ptr<Liveness> *out) {
  std::unique_ptr<Liveness> l(new Liveness);
  const std::string mode = setup.params->get_str(ParamId::Liveness);
  l->rank_ = setup.rank;
  l->interval_ms_ = setup.params->get_int(ParamId::LivenessInterval);  // 10ms..1m: the registry's range
  l->enabled_ = mode != "off";
  l->peers_.resize(static_cast<size_t>(setup.size));
  l->is_dead_.assign(static_cast<size_t>(setup.size), 0);

  // A process's identity does not change: read once (a fork gets its own pid,
  // so the pid is part of the check).
  static Ident self_ident;
  if (self_ident.pid != static_cast<int64_t>(getpid())) {
    Ident me;
    std::memset(&me, 0, sizeof me);
    me.pid = static_cast<int64_t>(getpid());
    me.start = proc_start_time(me.pid);
    me.boot = boot_id_hash();
    me.pidns = pid_namespace();
    if (gethostname(me.host, sizeof me.host - 1) != 0) std::snprintf(me.host, sizeof me.host, "?");
    self_ident = me;
  }
  const Ident me = self_ident;
  std::vector<Ident> all(static_cast<size_t>(setup.size));
  BC_MPI_CHECK(MPI_Allgather(&me, sizeof me, MPI_BYTE, all.data(), sizeof me, MPI_BYTE, setup.bootstrap));

  std::vector<char> net(static_cast<size_t>(setup.size), 0);
  int need_net = 0;
  for (int r = 0; r < setup.size; ++r) {
    Peer &p = l->peers_[r];
    const Ident &id = all[r];
    p.pid = id.pid;
    p.start = id.start;
    p.host.assign(id.host, strnlen(id.host, sizeof id.host));
    if (r == setup.rank) {
      p.way = Way::Self;
      continue;
    }
    if (!l->enabled_) {
      p.way = Way::None;
      continue;
    }
    // Its /proc/PID is the process that reported: same host, kernel and pid
    // namespace (another pid namespace would show another process, or none,
    // under that pid). Otherwise the TCP watch.
    const bool here = mode == "auto" && same_place(me, id);
    p.way = here ? Way::Proc : Way::Net;
    net[r] = here ? 0 : 1;
  }
  // Whether any rank watches any peer over TCP: every rank knows every
  // identity, so every rank reaches the same answer without a collective.
  // same_place is an equivalence (equal fields, each valid): all pairs share
  // a place exactly when every rank shares rank 0's.
  for (int r = 1; l->enabled_ && r < setup.size && !need_net; ++r)
    need_net = mode != "auto" || !same_place(all[0], all[r]);
  if (need_net) {
    // A process's identity, the same on every rank: the watch keeps one
    // connection per process, whatever communicators it shares with us.
    std::vector<uint64_t> keys(static_cast<size_t>(setup.size));
    for (int r = 0; r < setup.size; ++r) {
      const Ident &id = all[r];
      keys[r] = fnv1a(std::string(id.host, strnlen(id.host, sizeof id.host)) + "/" + std::to_string(id.boot) + "/" +
                      std::to_string(id.pid) + "/" + std::to_string(id.start));
    }
    Status st = UcxWatch::create(setup, net, keys, &l->watch_);
    if (st == BC_ERR_NOT_SUPPORTED) {
      // Every rank gets NotSupported alike. Deaths of these peers then show as
      // transport errors or at BC_TIMEOUT.
      BC_LOG(setup.rank == 0 ? LogLevel::Warn : LogLevel::Debug, LogSys::Transport,
             "liveness: no TCP watch for peers on other hosts (%s); their deaths show only at BC_TIMEOUT "
             "or as transport errors", last_error());
      clear_error();
      for (int r = 0; r < setup.size; ++r)
        if (net[r]) l->peers_[r].way = Way::None;
    } else {
      BC_CHECK(st);
    }
  }
  for (const Peer &p : l->peers_)
    if (p.way == Way::None) ++l->unwatched_;
  if (setup.rank == 0 && log_enabled(LogLevel::Info, LogSys::Transport)) {
    int proc = 0, tcp = 0;
    for (const Peer &p : l->peers_) {
      proc += p.way == Way::Proc;
      tcp += p.way == Way::Net;
    }
    BC_INFO(Transport, "liveness (rank 0): BC_LIVENESS=%s, every %lld ms while waiting: %d peers by /proc, %d by TCP "
            "watch, %d unwatched", mode.c_str(), static_cast<long long>(l->interval_ms_), proc, tcp, l->unwatched_);
  }
  *out = std::move(l);
  return BC_OK;
}

bool Liveness::proc_alive(const Peer &p) const {
  uint64_t start = 0;
  const int s = read_stat(p.pid, &start);
  if (s < 0) return true;  // cannot tell: say nothing rather than something false
  return s == 1 && start == p.start;
}

void Liveness::mark_dead(int rank) {
  if (is_dead_[rank]) return;
  is_dead_[rank] = 1;
  dead_.push_back(rank);
  if (watch_) watch_->forget(rank);
}

std::vector<int> Liveness::dead() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dead_;
}

bool Liveness::check() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!enabled_) return !dead_.empty();
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
    if (peers_[r].way == Way::Proc && !is_dead_[r] && !proc_alive(peers_[r])) mark_dead(r);
  if (watch_) {
    std::vector<int> gone;
    watch_->poll(&gone);
    for (int r : gone) mark_dead(r);
  }
  return !dead_.empty();
}

std::string Liveness::who(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(peers_.size())) return "rank " + std::to_string(rank);
  const Peer &p = peers_[rank];
  return "rank " + std::to_string(rank) + " (host " + p.host + ", pid " + std::to_string(p.pid) + ")";
}

std::string Liveness::who_list(const std::vector<int> &ranks) const {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += i + 1 == ranks.size() ? " and " : ", ";
    out += who(ranks[i]);
  }
  return out;
}

const char *Liveness::how(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(peers_.size())) return "";
  return peers_[rank].way == Way::Proc ? "its process is gone" : "its connection closed without a goodbye";
}

}  // namespace bc
