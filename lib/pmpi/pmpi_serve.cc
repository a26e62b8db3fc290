// Whether BlueConnect can serve a call exactly as the MPI library would: the
// datatypes it reduces (with their sizes in this MPI), the ops, the layouts
// it moves as bytes, BC_PMPI_MIN_BYTES, the communicator and device buffers.
// Each step answers kServe or the Reason the call goes to MPI (pmpi.h), which
// the statistics count. The learned choice between two libraries that both
// could serve a call is elsewhere (pmpi_learn.cc, pmpi_route.cc).
#include <cstdint>
#include <vector>

#include "pmpi/pmpi_internal.h"
#include "blueconnect.h"
#include "blueconnect_preload.h"

namespace bc {
namespace pmpi {

std::vector<TypeEntry> g_types;  // written once in ensure_init, read-only after

// ---- datatypes and ops ----

void build_type_table() {
  struct Candidate {
    MPI_Datatype dt;
    char kind;  // f: floating, s: signed integer, u: unsigned integer
  };
  const Candidate candidates[] = {
      {MPI_FLOAT, 'f'},         {MPI_DOUBLE, 'f'},         {MPI_INT, 's'},
      {MPI_UNSIGNED, 'u'},      {MPI_LONG, 's'},           {MPI_UNSIGNED_LONG, 'u'},
      {MPI_INT64_T, 's'},       {MPI_UINT64_T, 'u'},       {MPI_INT32_T, 's'},
      {MPI_UINT32_T, 'u'},      {MPI_INT8_T, 's'},         {MPI_UINT8_T, 'u'},
      {MPI_LONG_LONG_INT, 's'}, {MPI_LONG_LONG, 's'},      {MPI_UNSIGNED_LONG_LONG, 'u'},
      {MPI_SIGNED_CHAR, 's'},   {MPI_UNSIGNED_CHAR, 'u'},
      // Fortran names: their sizes depend on how the MPI library was built.
      {MPI_REAL, 'f'},          {MPI_DOUBLE_PRECISION, 'f'}, {MPI_INTEGER, 's'},
#ifdef MPI_REAL4
      {MPI_REAL4, 'f'},
#endif
#ifdef MPI_REAL8
      {MPI_REAL8, 'f'},
#endif
#ifdef MPI_INTEGER1
      {MPI_INTEGER1, 's'},
#endif
#ifdef MPI_INTEGER4
      {MPI_INTEGER4, 's'},
#endif
#ifdef MPI_INTEGER8
      {MPI_INTEGER8, 's'},
#endif
  };
  g_types.clear();
  for (const Candidate &c : candidates) {
    if (c.dt == MPI_DATATYPE_NULL) continue;
    bool seen = false;
    for (const TypeEntry &e : g_types) seen = seen || e.dt == c.dt;
    if (seen) continue;
    int size = 0;
    if (PMPI_Type_size(c.dt, &size) != MPI_SUCCESS) continue;
    bc_dtype_t bt;
    if (c.kind == 'f' && size == 4) bt = BC_FLOAT32;
    else if (c.kind == 'f' && size == 8) bt = BC_FLOAT64;
    else if (c.kind == 's' && size == 1) bt = BC_INT8;
    else if (c.kind == 's' && size == 4) bt = BC_INT32;
    else if (c.kind == 's' && size == 8) bt = BC_INT64;
    else if (c.kind == 'u' && size == 1) bt = BC_UINT8;
    else if (c.kind == 'u' && size == 4) bt = BC_UINT32;
    else if (c.kind == 'u' && size == 8) bt = BC_UINT64;
    else continue;  // 16-bit integers, long double, ...: the MPI library reduces them
    g_types.push_back({c.dt, bt, size});
  }
}

const TypeEntry *find_type(MPI_Datatype dt) {
  for (const TypeEntry &e : g_types)
    if (e.dt == dt) return &e;
  return nullptr;
}

namespace {

bool is_named(MPI_Datatype dt) {
  int ni = 0, na = 0, nd = 0, combiner = MPI_COMBINER_NAMED;
  if (PMPI_Type_get_envelope(dt, &ni, &na, &nd, &combiner) != MPI_SUCCESS) return true;
  return combiner == MPI_COMBINER_NAMED;
}

// A datatype that is not in the table: unsupported predefined, or derived.
Reason type_reason(MPI_Datatype dt) { return is_named(dt) ? Reason::Dtype : Reason::Derived; }

// True when the type, built only from MPI_Type_dup and MPI_Type_contiguous over
// a predefined type, keeps its bytes in signature order; a permuting indexed
// type can be dense and still reorder them.
bool in_order(MPI_Datatype dt, int depth) {
  int ni = 0, na = 0, nd = 0, combiner = MPI_COMBINER_NAMED;
  if (PMPI_Type_get_envelope(dt, &ni, &na, &nd, &combiner) != MPI_SUCCESS) return false;
  if (combiner == MPI_COMBINER_NAMED) return true;
  if (depth > 16 || (combiner != MPI_COMBINER_DUP && combiner != MPI_COMBINER_CONTIGUOUS) || nd != 1 ||
      ni > 1 || na != 0)
    return false;
  int ints[1] = {0};
  MPI_Aint addrs[1] = {0};
  MPI_Datatype inner = MPI_DATATYPE_NULL;
  if (PMPI_Type_get_contents(dt, 1, 0, 1, ints, addrs, &inner) != MPI_SUCCESS) return false;
  const bool ok = in_order(inner, depth + 1);
  if (!is_named(inner)) PMPI_Type_free(&inner);  // get_contents returns new handles for derived types
  return ok;
}

}  // namespace

// Bytes per element when `dt` describes `size` bytes stored contiguously and in
// order from the buffer's address; 0 otherwise (then the MPI library moves it).
int64_t dense_size(MPI_Datatype dt) {
  if (const TypeEntry *e = find_type(dt)) return e->size;
  int size = 0;
  MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
  if (PMPI_Type_size(dt, &size) != MPI_SUCCESS || size <= 0) return 0;
  if (PMPI_Type_get_extent(dt, &lb, &extent) != MPI_SUCCESS) return 0;
  if (PMPI_Type_get_true_extent(dt, &true_lb, &true_extent) != MPI_SUCCESS) return 0;
  if (lb != 0 || true_lb != 0 || extent != size || true_extent != size) return 0;
  if (!in_order(dt, 0)) return 0;
  return size;
}

namespace {

bool map_op(MPI_Op op, bc_op_t *out, Reason *why) {
  if (op == MPI_SUM) *out = BC_SUM;
  else if (op == MPI_MAX) *out = BC_MAX;
  else if (op == MPI_MIN) *out = BC_MIN;
  else if (op == MPI_PROD) *out = BC_PROD;
  else if (op == MPI_BAND) *out = BC_BAND;
  else if (op == MPI_BOR) *out = BC_BOR;
  else if (op == MPI_BXOR) *out = BC_BXOR;
  else {
    const bool predefined = op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR || op == MPI_MINLOC ||
                            op == MPI_MAXLOC || op == MPI_REPLACE || op == MPI_NO_OP;
    *why = predefined ? Reason::Op : Reason::UserOp;
    return false;
  }
  return true;
}

// Bitwise ops on floating types are erroneous in MPI: let MPI say so.
bool op_fits(bc_dtype_t t, bc_op_t op) {
  const bool floating = t == BC_FLOAT32 || t == BC_FLOAT64;
  return !(floating && (op == BC_BAND || op == BC_BOR || op == BC_BXOR));
}

}  // namespace

// ---- the route ----

// The communicator's part of the route (creates the state on first use).
Reason comm_route(MPI_Comm comm, CommState **cs) {
  if (comm_state(comm, cs) != MPI_SUCCESS) return Reason::InvalidArgs;
  if ((*cs)->pass_reason >= 0) return static_cast<Reason>((*cs)->pass_reason);
  return kServe;
}

// The route of the reductions, once MPI's own argument checks passed.
// `elems` is the length of the whole vector, for BC_PMPI_MIN_BYTES.
Reason reduction_route(int64_t elems, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, const TypeEntry **t,
                       bc_op_t *bop, CommState **cs) {
  Reason why = kServe;
  if (!map_op(op, bop, &why)) return why;
  if (!(*t = find_type(dt))) return type_reason(dt);
  if (!op_fits((*t)->bc, *bop)) return Reason::OpDtype;
  if (elems * (*t)->size < g_min_bytes) return Reason::Small;
  return comm_route(comm, cs);
}

// Device buffers (detected from recvbuf; a host/device mix is refused by the
// API with a message): served only when the GPU kernels cover (dtype, op).
Reason device_route(const void *recvbuf, bc_dtype_t dtype, bc_op_t op) {
  if (!on_device(recvbuf)) return kServe;
  return preload::device_reduces(dtype, op) ? kServe : Reason::DeviceOpDtype;
}

}  // namespace pmpi
}  // namespace bc
