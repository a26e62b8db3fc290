// Pipelining (many chunks through every stage) and the non-blocking API.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>

#include "harness.h"

using namespace bctest;

namespace {

// The smallest chunks BC_CHUNK allows (4 KiB), and sizes that are no multiple
// of any element size, so that chunks end mid-element-block.
std::vector<std::string> pipeline_layouts(int p) {
  std::vector<std::string> out = {"BC_CHUNK=4K;BC_PIPELINE_DEPTH=3"};
  if (p % 2 == 0 && p > 2) out.push_back("BC_CHUNK=4100;BC_PIPELINE_DEPTH=4;BC_TOPO=2");
  if (p >= 3) out.push_back("BC_CHUNK=5000;BC_PIPELINE_DEPTH=1;BC_TOPO=1," + std::to_string(p - 1));
  if (p >= 4) out.push_back("BC_CHUNK=4099;BC_PIPELINE_DEPTH=8;BC_TOPO=2,2," + std::to_string(p - 4 > 0 ? p - 4 : 0));
  if (p == 4) out.back() = "BC_CHUNK=4099;BC_PIPELINE_DEPTH=8;BC_TOPO=2x2";
  return out;
}

}  // namespace

TEST_CASE("pipelined all-reduce: the smallest chunks through every stage", "[pipeline]") {
  const int p = world_size(), r = world_rank();
  for (const std::string &layout : pipeline_layouts(p)) {
    bc_comm_t comm = nullptr;
    INFO("layout " << layout << ": " << bc_last_error());
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, layout.c_str(), &comm) == BC_OK));
    for (bc_dtype_t t : {BC_FLOAT32, BC_FLOAT64, BC_BFLOAT16, BC_INT8, BC_UINT64})
      for (bc_op_t op : {BC_SUM, BC_MAX, BC_AVG, BC_BXOR}) {
        if (!op_valid_for(op, t)) continue;
        for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{1009}, int64_t{20011}, int64_t{70001}}) {
          Case c{t, op, n, nullptr};
          c.fill(r, p);
          bc_status_t st = bc_allreduce(BC_IN_PLACE, c.buf->data(), n, t, op, comm);
          INFO(bc_dtype_name(t) << " " << bc_op_name(op) << " count " << n << ": " << bc_last_error());
          REQUIRE(everywhere(st == BC_OK && c.right(p)));
        }
      }
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
}

// Regression: the mpi transport read MPI_TAG_UB from its own communicator,
// where Open MPI has none after MPI_Comm_split, fell back to 32767 and folded
// the chunks' sequence bits away: chunks matched each other's messages and
// ranks returned BC_OK with wrong results. Pipelined on split communicators.
TEST_CASE("pipelined all-reduce on split sub-communicators", "[pipeline][comm]") {
  const int p = world_size(), r = world_rank();
  if (p < 2) return;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, r % 2, p - r, &sub);  // two groups, reversed order
  int sr = 0, sp = 1;
  MPI_Comm_rank(sub, &sr);
  MPI_Comm_size(sub, &sp);
  bc_comm_t comm = nullptr;
  INFO(bc_last_error());
  REQUIRE(everywhere(bc_comm_create_with(sub, "BC_CHUNK=4K;BC_PIPELINE_DEPTH=4", &comm) == BC_OK));
  for (int64_t n : {int64_t{70001}, int64_t{100003}}) {  // 69 and 98 chunks, two sizes of chunk each
    Case c{BC_INT32, BC_SUM, n, nullptr};
    c.fill(sr, sp);
    const bc_status_t st = bc_allreduce(BC_IN_PLACE, c.buf->data(), n, c.dtype, c.op, comm);
    INFO("count " << n << ": " << bc_last_error());
    REQUIRE(everywhere(st == BC_OK && c.right(sp)));
  }
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  MPI_Comm_free(&sub);
}

TEST_CASE("non-blocking all-reduce: several in flight, completed by test and wait", "[nonblocking]") {
  const int p = world_size(), r = world_rank();
  for (const char *options : {"", "BC_CHUNK=4K;BC_PIPELINE_DEPTH=2"}) {
    bc_comm_t comm = nullptr;
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, options, &comm) == BC_OK));
    std::vector<Case> cases;
    cases.push_back(Case{BC_FLOAT32, BC_SUM, 5003, nullptr});
    cases.push_back(Case{BC_INT32, BC_MIN, 17, nullptr});
    cases.push_back(Case{BC_FLOAT64, BC_AVG, 999, nullptr});
    cases.push_back(Case{BC_UINT8, BC_BOR, 0, nullptr});
    std::vector<bc_request_t> reqs(cases.size(), nullptr);
    bool ok = true;
    for (size_t i = 0; i < cases.size(); ++i) {
      cases[i].fill(r, p);
      ok = ok && bc_iallreduce(BC_IN_PLACE, cases[i].buf->data(), cases[i].count, cases[i].dtype, cases[i].op,
                               comm, &reqs[i]) == BC_OK;
    }
    INFO(options << ": " << bc_last_error());
    REQUIRE(everywhere(ok));
    // The communicator cannot go while operations are in flight.
    if (cases[0].count > 0 && reqs[0]) {
      bc_comm_t keep = comm;
      REQUIRE(bc_comm_destroy(&keep) == BC_ERR_INVALID_ARG);
    }
    // Complete the last ones by polling, the first by waiting.
    for (size_t i = cases.size(); i-- > 1;) {
      int done = 0;
      for (int spins = 0; !done && spins < 10000000; ++spins) ok = ok && bc_test(&reqs[i], &done) == BC_OK;
      ok = ok && done && reqs[i] == nullptr;
    }
    ok = ok && bc_wait(&reqs[0]) == BC_OK && reqs[0] == nullptr;
    for (Case &c : cases) ok = ok && c.right(p);
    REQUIRE(everywhere(ok));
    bc_request_t none = nullptr;
    int done = 0;
    REQUIRE(bc_test(&none, &done) == BC_ERR_INVALID_ARG);
    REQUIRE(bc_wait(nullptr) == BC_ERR_INVALID_ARG);
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
}

TEST_CASE("BC_PLAN: leader shape for small buffers, split and chunks for large", "[plan][pipeline]") {
  const int p = world_size(), r = world_rank();
  std::vector<std::string> lays = {"BC_PLAN=-4K:shape=leader,algo=direct|4K-:chunk=4K,depth=3",
                                   "BC_PLAN=-:top=rd", "BC_PLAN=-8K:shape=leader,top=rd|8K-:top=rd,chunk=4K",
                                   "BC_PLAN=-:top=all", "BC_PLAN=-:shape=flat,top=all",
                                   "BC_PLAN=-8K:shape=leader,top=all|8K-:top=all,chunk=4K"};
  if (p >= 3) lays.push_back("BC_TOPO=1," + std::to_string(p - 1) + ";BC_PLAN=-:shape=leader");
  // rhd needs a power-of-two number of leaders (p/2 of them here).
  if (p >= 4 && p % 2 == 0)
    lays.push_back(std::string("BC_TOPO=2;BC_PLAN=-1K:shape=leader,algo=") + ((p / 2) % 2 == 0 ? "rhd" : "direct") +
                   "|1K-:algo=ring,chunk=4K");
  for (const std::string &layout : lays) {
    bc_comm_t comm = nullptr;
    INFO("layout " << layout << ": " << bc_last_error());
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, layout.c_str(), &comm) == BC_OK));
    for (bc_dtype_t t : {BC_FLOAT32, BC_INT64, BC_FLOAT16})
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{300}, int64_t{2049}, int64_t{30011}}) {
        Case c{t, BC_SUM, n, nullptr};
        c.fill(r, p);
        bc_status_t st = bc_allreduce(BC_IN_PLACE, c.buf->data(), n, t, BC_SUM, comm);
        INFO(bc_dtype_name(t) << " count " << n << ": " << bc_last_error());
        REQUIRE(everywhere(st == BC_OK && c.right(p)));
      }
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
  bc_comm_t comm = nullptr;
  REQUIRE(bc_comm_create_with(MPI_COMM_WORLD, "BC_PLAN=-1K:shape=ring", &comm) == BC_ERR_PARAM);
  // Chunks and depths outside BC_CHUNK's and BC_PIPELINE_DEPTH's ranges, on every rank alike.
  REQUIRE(bc_comm_create_with(MPI_COMM_WORLD, "BC_PLAN=-:chunk=1K", &comm) == BC_ERR_PARAM);
  REQUIRE(std::string(bc_last_error()).find("BC_CHUNK=1K is outside its range") != std::string::npos);
  REQUIRE(bc_comm_create_with(MPI_COMM_WORLD, "BC_PLAN=1M-:depth=0", &comm) == BC_ERR_PARAM);
  REQUIRE(bc_comm_create_with(MPI_COMM_WORLD, "BC_CHUNK=1", &comm) == BC_ERR_PARAM);
  REQUIRE(bc_comm_create_with(MPI_COMM_WORLD, "BC_PIPELINE_DEPTH=0", &comm) == BC_ERR_PARAM);
  REQUIRE(comm == nullptr);
}

TEST_CASE("every rank gets the same bits, whatever the top stage", "[plan][pipeline]") {
  // Float sums of values that round differently in every order: the ranks
  // must still agree bit for bit. Flat top=all combines in rank order, so it
  // must equal that sum exactly.
  const int p = world_size(), r = world_rank();
  const int64_t n = 1000;
  for (const char *plan : {"BC_PLAN=-:shape=flat,top=all", "BC_PLAN=-:top=all", "BC_PLAN=-:top=rd",
                           "BC_PLAN=-:top=split", "BC_PLAN=-:shape=leader,top=all"}) {
    bc_comm_t comm = nullptr;
    INFO(plan << ": " << bc_last_error());
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, plan, &comm) == BC_OK));
    auto value = [](int rank, int64_t i) { return 0.1f * static_cast<float>(rank + 1) + 1.3e-3f * static_cast<float>(i % 97); };
    std::vector<float> buf(n);
    for (int64_t i = 0; i < n; ++i) buf[i] = value(r, i);
    REQUIRE(everywhere(bc_allreduce(BC_IN_PLACE, buf.data(), n, BC_FLOAT32, BC_SUM, comm) == BC_OK));
    std::vector<float> first(buf);
    MPI_Bcast(first.data(), static_cast<int>(n), MPI_FLOAT, 0, MPI_COMM_WORLD);
    REQUIRE(everywhere(std::memcmp(first.data(), buf.data(), n * sizeof(float)) == 0));
    if (std::strstr(plan, "shape=flat,top=all")) {
      bool in_order = true;
      for (int64_t i = 0; i < n; ++i) {
        float want = value(0, i);
        for (int k = 1; k < p; ++k) want += value(k, i);
        in_order = in_order && std::memcmp(&want, &buf[i], sizeof want) == 0;
      }
      REQUIRE(everywhere(in_order));
    }
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
}

namespace {

// The same on every rank (of `comm`)?
bool same_everywhere(const std::string &s, MPI_Comm comm = MPI_COMM_WORLD) {
  const long long h = static_cast<long long>(std::hash<std::string>()(s) & 0x7FFFFFFFFFFFLL);
  long long lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_LONG_LONG, MPI_MIN, comm);
  MPI_Allreduce(&h, &hi, 1, MPI_LONG_LONG, MPI_MAX, comm);
  return lo == hi;
}

}  // namespace

TEST_CASE("the calibrated cost model: same plan on every rank, exact results", "[pipeline][model]") {
  const int p = world_size(), r = world_rank();
  std::vector<std::string> layouts = {"BC_MODEL=calibrate"};
  if (p >= 3) layouts.push_back("BC_MODEL=calibrate;BC_TOPO=1," + std::to_string(p - 1));
  if (p % 2 == 0 && p > 2) layouts.push_back("BC_MODEL=calibrate;BC_TOPO=2");
  if (p == 8) layouts.push_back("BC_MODEL=calibrate;BC_TOPO=2x2x2");
  for (const std::string &layout : layouts) {
    bc_comm_t comm = nullptr;
    INFO("layout " << layout << ": " << bc_last_error());
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, layout.c_str(), &comm) == BC_OK));
    const std::string text = describe(comm);
    INFO(text);
    if (p > 1) REQUIRE(everywhere(text.find("cost model (calibrated") != std::string::npos));
    // Sizes across the model's choices: latency plans, one chunk, many chunks.
    for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{1009}, int64_t{65539}, int64_t{700001}}) {
      char plan[256] = "";
      double predicted = -2;
      REQUIRE(bc_comm_plan_for(comm, n * 4, plan, sizeof plan, &predicted) == BC_OK);
      INFO("count " << n << ": plan " << plan << ", predicted " << predicted << " s");
      REQUIRE(everywhere(p == 1 || predicted > 0));
      REQUIRE(same_everywhere(plan));
      for (bc_dtype_t t : {BC_FLOAT32, BC_BFLOAT16, BC_INT32})
        for (bc_op_t op : {BC_SUM, BC_AVG, BC_MAX}) {
          if (!op_valid_for(op, t)) continue;
          Case c{t, op, n, nullptr};
          c.fill(r, p);
          bc_status_t st = bc_allreduce(BC_IN_PLACE, c.buf->data(), n, t, op, comm);
          INFO(bc_dtype_name(t) << " " << bc_op_name(op) << ": " << bc_last_error());
          REQUIRE(everywhere(st == BC_OK && c.right(p)));
        }
    }
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
}

TEST_CASE("the cost model is calibrated once per process and layout, and agreed", "[model]") {
  const int p = world_size(), r = world_rank();
  if (p < 4 || p % 2) return;  // two halves of at least 2 ranks
  const char *opts = "BC_MODEL=calibrate;BC_TOPO=1";
  // Each half calibrates its own communicator of p/2 one-rank "nodes".
  MPI_Comm half = MPI_COMM_NULL, mixed = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, r < p / 2, r, &half);
  bc_comm_t comm = nullptr;
  REQUIRE(everywhere(bc_comm_create_with(half, opts, &comm) == BC_OK));
  REQUIRE(everywhere(describe(comm).find("cost model (calibrated") != std::string::npos));
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  // The same layout on the same hosts, other members: every rank has a cached
  // model (from different calibrations), and rank 0's goes to all.
  MPI_Comm_split(MPI_COMM_WORLD, r % 2, p - r, &mixed);
  REQUIRE(everywhere(bc_comm_create_with(mixed, opts, &comm) == BC_OK));
  const std::string text = describe(comm);
  INFO(text);
  REQUIRE(everywhere(text.find("cost model (calibrated earlier in this process") != std::string::npos));
  for (int64_t n : {int64_t{13}, int64_t{65539}, int64_t{700001}}) {
    char plan[256] = "";
    double predicted = 0;
    REQUIRE(bc_comm_plan_for(comm, n * 4, plan, sizeof plan, &predicted) == BC_OK);
    REQUIRE(everywhere(same_everywhere(plan, mixed)));  // the two mixed groups may differ
    Case c{BC_INT32, BC_SUM, n, nullptr};
    int mr = 0, mp = 0;
    MPI_Comm_rank(mixed, &mr);
    MPI_Comm_size(mixed, &mp);
    c.fill(mr, mp);
    bc_status_t st = bc_allreduce(BC_IN_PLACE, c.buf->data(), n, c.dtype, c.op, comm);
    INFO("count " << n << ": " << bc_last_error());
    REQUIRE(everywhere(st == BC_OK && c.right(mp)));
  }
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  MPI_Comm_free(&half);
  MPI_Comm_free(&mixed);
}

TEST_CASE("the cost model file: written once, loaded next time, bad files refused", "[model]") {
  const int p = world_size();
  if (p == 1) return;  // one rank has no stages and no model
  long long id = static_cast<long long>(getpid());
  MPI_Bcast(&id, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  const std::string path = "/tmp/bc-model-test-" + std::to_string(id) + ".txt";
  const std::string opts = "BC_MODEL=calibrate;BC_MODEL_FILE=" + path;
  bc_comm_t comm = nullptr;
  REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, opts.c_str(), &comm) == BC_OK));
  REQUIRE(everywhere(describe(comm).find("cost model (calibrated") != std::string::npos));
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  REQUIRE(everywhere(access(path.c_str(), R_OK) == 0));  // rank 0 wrote it before creation returned
  // Loaded, not measured again.
  REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, opts.c_str(), &comm) == BC_OK));
  REQUIRE(everywhere(describe(comm).find("cost model (file " + path) != std::string::npos));
  REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  // Another layout: calibrated again, and the file rewritten for it.
  if (p >= 4 && p % 2 == 0) {
    const std::string other = opts + ";BC_TOPO=2";
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, other.c_str(), &comm) == BC_OK));
    REQUIRE(everywhere(describe(comm).find("cost model (calibrated") != std::string::npos));
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
  // A damaged file fails creation on every rank, with the file named.
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    FILE *f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fputs("bcmodel 1\nfit 1 ring fast slow\n", f);
    std::fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const bc_status_t st = bc_comm_create_with(MPI_COMM_WORLD, opts.c_str(), &comm);
  INFO(bc_last_error());
  REQUIRE(everywhere(st != BC_OK && comm == nullptr));
  if (world_rank() == 0) {
    REQUIRE(st == BC_ERR_PARAM);
    REQUIRE(std::string(bc_last_error()).find("BC_MODEL_FILE") != std::string::npos);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::remove(path.c_str());
}

TEST_CASE("BC_MODEL=auto: on across nodes only; BC_MODEL=off: the fixed defaults", "[model]") {
  // One node here, or several (the simulated cluster)?
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  const bool one_node = everywhere(node_size == world_size());
  const std::string off = world_size() % 2 == 0 ? "BC_MODEL=off;BC_TOPO=2" : "BC_MODEL=off";
  for (const char *opts : {"", off.c_str()}) {
    bc_comm_t comm = nullptr;
    INFO(opts << ": " << bc_last_error());
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, opts, &comm) == BC_OK));
    const bool model_on = *opts == '\0' && !one_node;
    double predicted = 0;
    REQUIRE(bc_comm_plan_for(comm, 4096, nullptr, 0, &predicted) == BC_OK);
    REQUIRE(everywhere(model_on ? predicted > 0 : predicted == -1));
    REQUIRE(everywhere((describe(comm).find("cost model: off") != std::string::npos) != model_on));
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
}
