// The collectives against an exact reference, on every layout we can make with
// the ranks of this run: flat, even hierarchies, uneven ones, sub-communicators
// and reversed rank order; in-place and out-of-place; guard bytes and poisoned
// outputs; the send buffer must come back unchanged.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <sstream>

#include "harness.h"

using namespace bctest;

namespace {

const bc_dtype_t kDtypes[] = {BC_FLOAT32, BC_FLOAT64, BC_FLOAT16, BC_BFLOAT16, BC_INT8,
                              BC_UINT8,   BC_INT32,   BC_UINT32,  BC_INT64,    BC_UINT64};
const bc_op_t kOps[] = {BC_SUM, BC_PROD, BC_MIN, BC_MAX, BC_AVG, BC_BAND, BC_BOR, BC_BXOR};

// Layout options for a communicator of p ranks: flat, every two-level even
// split, one three-level split, and uneven splits.
std::vector<std::string> layouts(int p) {
  std::vector<std::string> out = {"", "BC_TOPO=" + std::to_string(p)};
  for (int a = 2; a < p; ++a)
    if (p % a == 0) out.push_back("BC_TOPO=" + std::to_string(a) + "x" + std::to_string(p / a));
  if (p % 4 == 0) out.push_back("BC_TOPO=2x2x" + std::to_string(p / 4));
  // Uneven: nodes of 3,2,3,2,... ranks, and 1 + the rest.
  if (p >= 3) {
    std::string spec;
    int left = p, k = 0;
    while (left > 0) {
      int take = std::min(left, k % 2 ? 2 : 3);
      spec += (spec.empty() ? "" : ",") + std::to_string(take);
      left -= take;
      ++k;
    }
    out.push_back("BC_TOPO=" + spec);
    out.push_back("BC_TOPO=1," + std::to_string(p - 1));
  }
  if (p >= 6) out.push_back("BC_TOPO=2,2," + std::to_string(p - 4) + "/2,1");
  return out;
}

std::string describe_case(const std::string &layout, bc_dtype_t t, bc_op_t op, int64_t n, bool inplace) {
  std::ostringstream os;
  os << "layout '" << layout << "' " << bc_dtype_name(t) << " " << bc_op_name(op) << " count " << n
     << (inplace ? " in-place" : "");
  return os.str();
}

// One allreduce, checked. Returns an empty string when right, else what went wrong.
std::string check_allreduce(bc_comm_t comm, MPI_Comm mpi, bc_dtype_t t, bc_op_t op, int64_t n, bool inplace) {
  int r = 0, p = 1;
  MPI_Comm_rank(mpi, &r);
  MPI_Comm_size(mpi, &p);
  const size_t es = bc_dtype_size(t), bytes = es * static_cast<size_t>(n);
  Guarded send(bytes), recv(bytes);
  for (int64_t i = 0; i < n; ++i) put(send.data(), t, i, input_value(op, t, r, p, i));
  std::vector<unsigned char> send_copy(static_cast<unsigned char *>(send.data()),
                                       static_cast<unsigned char *>(send.data()) + bytes);
  if (inplace) std::memcpy(recv.data(), send.data(), bytes);
  bc_status_t st = bc_allreduce(inplace ? BC_IN_PLACE : send.data(), recv.data(), n, t, op, comm);
  if (st != BC_OK) return std::string("status ") + bc_strerror(st) + ": " + bc_last_error();
  std::vector<unsigned char> want(es);
  for (int64_t i = 0; i < n; ++i) {
    put(want.data(), t, 0, expected_value(op, t, p, i));
    if (std::memcmp(want.data(), static_cast<unsigned char *>(recv.data()) + i * es, es) != 0)
      return "wrong element " + std::to_string(i);
  }
  if (!recv.guards_intact() || !send.guards_intact()) return "guard bytes overwritten";
  if (!inplace && bytes > 0 && std::memcmp(send_copy.data(), send.data(), bytes) != 0) return "send buffer changed";
  return "";
}

void sweep_allreduce(MPI_Comm mpi, const std::vector<std::string> &lays, const std::vector<int64_t> &counts) {
  for (const std::string &layout : lays) {
    bc_comm_t comm = nullptr;
    bc_status_t st = bc_comm_create_with(mpi, layout.c_str(), &comm);
    INFO("layout '" << layout << "': " << bc_last_error());
    REQUIRE(everywhere(st == BC_OK, mpi));
    int k = 0;
    for (bc_dtype_t t : kDtypes)
      for (bc_op_t op : kOps) {
        if (!op_valid_for(op, t)) continue;
        for (int64_t n : counts) {
          const bool inplace = (k++ % 2) == 1;
          std::string err = check_allreduce(comm, mpi, t, op, n, inplace);
          INFO(describe_case(layout, t, op, n, inplace) << ": " << err);
          REQUIRE(everywhere(err.empty(), mpi));
        }
      }
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
    REQUIRE(comm == nullptr);
  }
}

std::vector<int64_t> small_counts(int p) { return {0, 1, 2, std::max(1, p - 1), p + 1, 13, 1009}; }

}  // namespace

TEST_CASE("allreduce: every dtype x op x count on every layout", "[allreduce]") {
  const int p = world_size();
  // Each layout with the default plan choice (small buffers through node
  // leaders and recursive doubling) and with BlueConnect's split at every size.
  std::vector<std::string> lays;
  for (const std::string &l : layouts(p)) {
    lays.push_back(l);
    lays.push_back(l + (l.empty() ? "" : ";") + "BC_PLAN=");
  }
  sweep_allreduce(MPI_COMM_WORLD, lays, small_counts(p));
}

TEST_CASE("allreduce: forced algorithms", "[allreduce]") {
  const int p = world_size();
  std::vector<std::string> lays;
  for (const char *algo : {"ring", "direct", "rhd"})  // rhd folds pairs when p is not a power of two
    for (const std::string &l : {std::string(""), std::string(p >= 3 ? "BC_TOPO=1," + std::to_string(p - 1) : "")})
      lays.push_back(l + (l.empty() ? "" : ";") + "BC_ALGO=" + algo);
  sweep_allreduce(MPI_COMM_WORLD, lays, {0, 1, std::max(1, p - 1), p + 1, 97});
}

TEST_CASE("allreduce: a million and three elements, every dtype x op", "[allreduce][large]") {
  const int p = world_size();
  const int64_t n = 1000003;
  // Every pair on the detected layout; a hierarchical and an uneven layout get
  // a pair per element size.
  sweep_allreduce(MPI_COMM_WORLD, {""}, {n});
  std::vector<std::string> lays;
  if (p >= 4 && p % 2 == 0) lays.push_back("BC_TOPO=2");
  if (p >= 3) lays.push_back("BC_TOPO=1," + std::to_string(p - 1));
  for (const std::string &layout : lays) {
    bc_comm_t comm = nullptr;
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, layout.c_str(), &comm) == BC_OK));
    int k = 0;
    for (auto c : {std::make_pair(BC_FLOAT32, BC_SUM), std::make_pair(BC_FLOAT64, BC_MAX),
                   std::make_pair(BC_BFLOAT16, BC_SUM), std::make_pair(BC_FLOAT16, BC_AVG),
                   std::make_pair(BC_INT8, BC_SUM), std::make_pair(BC_UINT64, BC_BXOR)}) {
      const bool inplace = (k++ % 2) == 1;
      std::string err = check_allreduce(comm, MPI_COMM_WORLD, c.first, c.second, n, inplace);
      INFO(describe_case(layout, c.first, c.second, n, inplace) << ": " << err);
      REQUIRE(everywhere(err.empty()));
    }
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
}

TEST_CASE("sub-communicators, reversed and shuffled rank order", "[allreduce][comm]") {
  const int p = world_size(), r = world_rank();
  // Reversed order on the whole world.
  MPI_Comm rev;
  MPI_Comm_split(MPI_COMM_WORLD, 0, p - r, &rev);
  sweep_allreduce(rev, {"", "BC_TOPO=" + std::string(p % 2 == 0 && p > 2 ? "2" : std::to_string(p))}, {1, 13, 1009});
  MPI_Comm_free(&rev);
  // Odd and even ranks apart, each in a scrambled order.
  if (p >= 2) {
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, r % 2, (r * 7919) % 13, &half);
    int hp = 0;
    MPI_Comm_size(half, &hp);
    // Both halves must run the same sequence of collectives on WORLD for the
    // agreement, so use layouts valid for both sizes.
    sweep_allreduce(half, {""}, {0, 1, 5, 1009});
    MPI_Comm_free(&half);
  }
}

TEST_CASE("reduce_scatter and allgather", "[reduce_scatter][allgather]") {
  const int p = world_size(), r = world_rank();
  for (const std::string &layout : layouts(p)) {
    bc_comm_t comm = nullptr;
    REQUIRE(everywhere(bc_comm_create_with(MPI_COMM_WORLD, layout.c_str(), &comm) == BC_OK));
    int k = 0;
    for (bc_dtype_t t : {BC_FLOAT32, BC_FLOAT16, BC_INT8, BC_UINT64}) {
      const size_t es = bc_dtype_size(t);
      for (int64_t rc : {0, 1, 3, 257}) {
        const bool inplace = (k++ % 2) == 1;
        const size_t total = static_cast<size_t>(rc) * p;
        // reduce_scatter: sum
        Guarded send(total * es), recv((inplace ? total : rc) * es);
        for (size_t i = 0; i < total; ++i) put(send.data(), t, i, input_value(BC_SUM, t, r, p, i));
        if (inplace) std::memcpy(recv.data(), send.data(), total * es);
        bc_status_t st = bc_reduce_scatter(inplace ? BC_IN_PLACE : send.data(), recv.data(), rc, t, BC_SUM, comm);
        bool ok = st == BC_OK && recv.guards_intact() && send.guards_intact();
        std::vector<unsigned char> want(es);
        for (int64_t i = 0; ok && i < rc; ++i) {
          put(want.data(), t, 0, expected_value(BC_SUM, t, p, r * rc + i));
          ok = std::memcmp(want.data(), static_cast<unsigned char *>(recv.data()) + i * es, es) == 0;
        }
        INFO("reduce_scatter " << describe_case(layout, t, BC_SUM, rc, inplace) << ": " << bc_last_error());
        REQUIRE(everywhere(ok));

        // allgather: rank r gives values 1000*r + i (wrapped by put)
        Guarded mine(rc * es), all(total * es);
        for (int64_t i = 0; i < rc; ++i) put(inplace ? all.data() : mine.data(), t, inplace ? r * rc + i : i, 3 * r + i % 5);
        st = bc_allgather(inplace ? BC_IN_PLACE : mine.data(), all.data(), rc, t, comm);
        ok = st == BC_OK && all.guards_intact() && mine.guards_intact();
        for (int q = 0; ok && q < p; ++q)
          for (int64_t i = 0; ok && i < rc; ++i) {
            put(want.data(), t, 0, 3 * q + i % 5);
            ok = std::memcmp(want.data(), static_cast<unsigned char *>(all.data()) + (q * rc + i) * es, es) == 0;
          }
        INFO("allgather " << describe_case(layout, t, BC_SUM, rc, inplace) << ": " << bc_last_error());
        REQUIRE(everywhere(ok));
      }
    }
    REQUIRE(bc_comm_destroy(&comm) == BC_OK);
  }
}
