#include "sim/engine.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "core/blocks.h"
#include "sim/flows.h"

namespace bcsim {

SimProgram compact(const bc::Program &prog) {
  SimProgram s;
  s.count = prog.count;
  s.steps.reserve(prog.steps.size());
  for (const bc::Step &st : prog.steps) {
    SimStep c;
    c.tag = st.tag;
    c.reduce = st.combine == bc::Combine::Reduce;
    c.avg = st.finish_avg;
    c.avg_offset = st.avg_range.offset;
    c.avg_count = st.avg_range.count;
    c.first = static_cast<uint32_t>(s.xfers.size());
    c.nsends = static_cast<uint32_t>(st.sends.size());
    c.nrecvs = static_cast<uint32_t>(st.recvs.size());
    for (const bc::Xfer &x : st.sends) s.xfers.push_back(SimXfer{x.peer, x.range.offset, x.range.count});
    for (const bc::Xfer &x : st.recvs) s.xfers.push_back(SimXfer{x.peer, x.range.offset, x.range.count});
    s.steps.push_back(c);
  }
  return s;
}

namespace {

struct Key {
  int src, dst;
  uint32_t tag;
  int64_t chunk;
  bool operator==(const Key &o) const { return src == o.src && dst == o.dst && tag == o.tag && chunk == o.chunk; }
};
struct KeyHash {
  size_t operator()(const Key &k) const {
    const uint64_t a = (static_cast<uint64_t>(static_cast<uint32_t>(k.src)) << 32) | static_cast<uint32_t>(k.dst);
    const uint64_t b = (static_cast<uint64_t>(k.tag) << 40) ^ static_cast<uint64_t>(k.chunk);
    return std::hash<uint64_t>()(a * 0x9E3779B97F4A7C15ULL ^ (b * 0xC2B2AE3D27D4EB4FULL + (a >> 7)));
  }
};

struct Post {
  int rank, slot;
  const SimXfer *x;
  int64_t chunk_at;   // the chunk's first element in the whole buffer
  int payload;        // data mode: index into payloads, else -1
};
struct Pending {
  std::deque<Post> sends, recvs;
};
struct Slot {
  const SimProgram *prog = nullptr;
  int64_t chunk = -1, chunk_at = 0;
  size_t step = 0;
  int pending = 0;
};
struct Msg {  // a matched send and receive
  Post send{}, recv{};
  bool reduce = false;
  int src = 0, dst = 0;
  double bytes = 0;
};
struct Event {
  double t;
  int kind, a, b;
  bool operator>(const Event &o) const { return t > o.t; }
};
enum { kFlowStart = 0, kStepDone = 1 };

class Engine {
 public:
  Engine(const Network &net, const SimJob &job, SimData *data)
      : net_(net), job_(job), data_(data), p_(net.nranks()), slots_(p_), next_chunk_(p_, 0), cpu_free_(p_, 0),
        live_slots_(p_, 0), flows_(net.capacity()) {}

  SimResult run() {
    const int depth = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(job_.depth, job_.nchunks)));
    unfinished_ = p_;
    for (int r = 0; r < p_; ++r) {
      slots_[r].resize(depth);
      for (int s = 0; s < depth; ++s)
        if (start_chunk(r, s)) ++live_slots_[r];
      if (live_slots_[r] == 0) --unfinished_;
      for (int s = 0; s < depth && res_.error.empty(); ++s)
        if (slots_[r][s].prog) post_step(r, s);
    }
    loop();
    if (res_.error.empty()) check_end();
    res_.ok = res_.error.empty();
    return res_;
  }

 private:
  const Network &net_;
  const SimJob &job_;
  SimData *data_;
  int p_;
  std::vector<std::vector<Slot>> slots_;
  std::vector<int64_t> next_chunk_;
  std::vector<double> cpu_free_;
  std::vector<int> live_slots_;
  int unfinished_ = 0;
  std::unordered_map<Key, Pending, KeyHash> posts_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<Msg> msgs_;
  std::vector<int> free_msgs_, msg_of_flow_;
  Flows flows_;
  std::vector<std::vector<int64_t>> payloads_;
  std::vector<int> free_payloads_;
  double now_ = 0;
  SimResult res_;

  void fail(const std::string &what) {
    if (res_.error.empty()) res_.error = what;
  }

  bool start_chunk(int r, int s) {
    Slot &sl = slots_[r][s];
    sl.prog = nullptr;
    if (next_chunk_[r] >= job_.nchunks) return false;
    const int64_t j = next_chunk_[r]++;
    const int64_t n = bc::block_count(job_.count, job_.nchunks, j);
    if (job_.big[r].count == n) sl.prog = &job_.big[r];
    else if (r < static_cast<int>(job_.small.size()) && job_.small[r].count == n) sl.prog = &job_.small[r];
    else { fail("no program for a chunk of " + std::to_string(n) + " elements"); return false; }
    sl.chunk = j;
    sl.chunk_at = bc::block_offset(job_.count, job_.nchunks, j);
    sl.step = 0;
    return true;
  }

  // Posts slot s's current step, or moves the slot on when its chunk is done.
  void post_step(int r, int s) {
    Slot &sl = slots_[r][s];
    while (sl.prog && sl.step >= sl.prog->steps.size()) {
      if (!start_chunk(r, s)) {
        if (--live_slots_[r] == 0) {
          res_.seconds = std::max(res_.seconds, now_);
          --unfinished_;
        }
        return;
      }
    }
    if (!sl.prog) return;
    const SimStep &st = sl.prog->steps[sl.step];
    sl.pending = static_cast<int>(st.nsends + st.nrecvs);
    for (uint32_t i = 0; i < st.nrecvs; ++i) {
      const SimXfer *x = &sl.prog->xfers[st.first + st.nsends + i];
      post(Key{x->peer, r, st.tag, sl.chunk}, false, Post{r, s, x, sl.chunk_at, -1}, st.reduce);
    }
    for (uint32_t i = 0; i < st.nsends; ++i) {
      const SimXfer *x = &sl.prog->xfers[st.first + i];
      int payload = -1;
      if (data_) {  // what the buffer holds now is what goes out
        payload = new_payload();
        const auto &w = data_->work[r];
        payloads_[payload].assign(w.begin() + sl.chunk_at + x->offset, w.begin() + sl.chunk_at + x->offset + x->count);
      }
      post(Key{r, x->peer, st.tag, sl.chunk}, true, Post{r, s, x, sl.chunk_at, payload}, false);
    }
    if (sl.pending == 0) step_complete(r, s);
  }

  int new_payload() {
    if (!free_payloads_.empty()) {
      const int i = free_payloads_.back();
      free_payloads_.pop_back();
      return i;
    }
    payloads_.emplace_back();
    return static_cast<int>(payloads_.size()) - 1;
  }

  void post(const Key &k, bool is_send, const Post &me, bool reduce) {
    Pending &pd = posts_[k];
    std::deque<Post> &other = is_send ? pd.recvs : pd.sends;
    if (other.empty()) {
      (is_send ? pd.sends : pd.recvs).push_back(me);
      return;
    }
    const Post o = other.front();
    other.pop_front();
    if (pd.sends.empty() && pd.recvs.empty()) posts_.erase(k);
    const Post &snd = is_send ? me : o, &rcv = is_send ? o : me;
    if (snd.x->count != rcv.x->count) {
      std::ostringstream os;
      os << "size mismatch: rank " << k.src << " sends " << snd.x->count << " elements to rank " << k.dst
         << ", which receives " << rcv.x->count << " (tag 0x" << std::hex << k.tag << std::dec << ", chunk " << k.chunk
         << ")";
      fail(os.str());
      return;
    }
    int id;
    if (!free_msgs_.empty()) id = free_msgs_.back(), free_msgs_.pop_back();
    else id = static_cast<int>(msgs_.size()), msgs_.emplace_back();
    Msg &m = msgs_[id];
    m.bytes = static_cast<double>(snd.x->count) * static_cast<double>(job_.elem);
    m.send = snd;
    m.recv = rcv;
    m.reduce = is_send ? slots_[rcv.rank][rcv.slot].prog->steps[slots_[rcv.rank][rcv.slot].step].reduce : reduce;
    m.src = k.src;
    m.dst = k.dst;
    ++res_.messages;
    events_.push(Event{now_ + net_.latency(k.src, k.dst), kFlowStart, id, 0});
  }

  void step_complete(int r, int s) {
    const Slot &sl = slots_[r][s];
    const SimStep &st = sl.prog->steps[sl.step];
    int64_t elems = st.avg ? st.avg_count : 0;
    if (st.reduce)
      for (uint32_t i = 0; i < st.nrecvs; ++i) elems += sl.prog->xfers[st.first + st.nsends + i].count;
    double t = now_;
    if (elems > 0 && net_.params().reduce_bw > 0) {
      cpu_free_[r] = std::max(now_, cpu_free_[r]) +
                     static_cast<double>(elems) * static_cast<double>(job_.elem) / net_.params().reduce_bw;
      t = cpu_free_[r];
    }
    events_.push(Event{t, kStepDone, r, s});
  }

  void step_done(int r, int s) {
    Slot &sl = slots_[r][s];
    const SimStep &st = sl.prog->steps[sl.step];
    if (data_ && st.avg)
      for (int64_t i = 0; i < st.avg_count; ++i) data_->work[r][sl.chunk_at + st.avg_offset + i] *= -1;
    ++sl.step;
    post_step(r, s);
  }

  void flow_done(int id) {
    const Msg f = msgs_[id];
    free_msgs_.push_back(id);
    if (data_) {
      auto &w = data_->work[f.recv.rank];
      const auto &msg = payloads_[f.send.payload];
      const int64_t at = f.recv.chunk_at + f.recv.x->offset;
      for (int64_t i = 0; i < f.recv.x->count; ++i) w[at + i] = f.reduce ? w[at + i] + msg[i] : msg[i];
      free_payloads_.push_back(f.send.payload);
    }
    for (const Post *side : {&f.send, &f.recv})
      if (--slots_[side->rank][side->slot].pending == 0) step_complete(side->rank, side->slot);
  }

  void loop() {
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<int> ended;
    int links[4];
    while (res_.error.empty()) {
      const double t = std::min(events_.empty() ? inf : events_.top().t, flows_.next_end());
      if (t == inf) break;
      now_ = t;
      const double eps = 1e-12 * std::max(now_, 1e-9);
      flows_.take_ended(now_, eps, &ended);
      for (int fid : ended) flow_done(msg_of_flow_[fid]);
      while (!events_.empty() && events_.top().t <= now_ + eps && res_.error.empty()) {
        const Event e = events_.top();
        events_.pop();
        if (e.kind == kFlowStart) {
          const Msg &m = msgs_[e.a];
          const int nl = net_.path(m.src, m.dst, links);
          const int fid = flows_.start(links, nl, m.bytes, now_);
          if (fid >= static_cast<int>(msg_of_flow_.size())) msg_of_flow_.resize(fid + 1);
          msg_of_flow_[fid] = e.a;
        } else {
          step_done(e.a, e.b);
        }
      }
      flows_.settle(now_);
    }
    res_.rate_solves = flows_.solves();
  }

  void check_end() {
    if (unfinished_ > 0) {
      std::ostringstream os;
      os << "deadlock at " << now_ * 1e6 << " us:";
      int shown = 0;
      for (int r = 0; r < p_ && shown < 8; ++r)
        for (const Slot &sl : slots_[r])
          if (sl.prog && shown < 8) {
            os << " rank " << r << " chunk " << sl.chunk << " step " << sl.step << "/" << sl.prog->steps.size() << ";";
            ++shown;
          }
      fail(os.str());
      return;
    }
    for (const auto &kv : posts_) {
      const Pending &pd = kv.second;
      if (pd.sends.empty() && pd.recvs.empty()) continue;
      std::ostringstream os;
      os << "unmatched " << (pd.sends.empty() ? "receive" : "send") << ": rank " << kv.first.src << " -> rank "
         << kv.first.dst << " tag 0x" << std::hex << kv.first.tag << std::dec << " chunk " << kv.first.chunk;
      fail(os.str());
      return;
    }
  }
};

}  // namespace

SimResult simulate(const Network &net, const SimJob &job, SimData *data) {
  Engine e(net, job, data);
  return e.run();
}

}  // namespace bcsim
