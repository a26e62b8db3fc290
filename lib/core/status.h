// Status codes inside the library, and the error trail.
//
// A failure is raised once with BC_FAIL(code, fmt...), which records a readable
// message for the thread. Every BC_CHECK it passes through on the way up
// appends "-> code at file:line", so bc_last_error() shows where it started and
// how it travelled, as NCCL's NCCLCHECK does.
#pragma once

#include <string>

#include "blueconnect.h"

namespace bc {

using Status = bc_status_t;

// Starts a new error: sets the thread's message and returns `code`.
Status fail(Status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Appends one "-> code at file:line" to the thread's trail.
void trail(Status code, const char *file, int line);
void clear_error();
const char *last_error();
// The thread's message without its "code: " head, to be raised again later
// with BC_FAIL(code, "%s", ...) (which adds the head back).
std::string last_error_body(Status code);

// Collective over `comm`: every rank learns the worst status of any rank, so
// that all fail together rather than some waiting forever in the next
// collective. A rank that failed keeps its own message; the others get
// "WHAT failed on another rank".
Status agree_status(MPI_Comm comm, Status mine, const char *what);

}  // namespace bc

#define BC_FAIL(code, ...) ::bc::fail((code), __FILE__, __LINE__, __VA_ARGS__)

#define BC_CHECK(expr)                                \
  do {                                                \
    ::bc::Status bc_check_status_ = (expr);           \
    if (bc_check_status_ != BC_OK) {                  \
      ::bc::trail(bc_check_status_, __FILE__, __LINE__); \
      return bc_check_status_;                        \
    }                                                 \
  } while (0)

// MPI's own text for error code `rc`, in a local char array bc_mpi_msg_.
#define BC_MPI_ERROR_TEXT_(rc)                      \
  char bc_mpi_msg_[MPI_MAX_ERROR_STRING] = "";      \
  int bc_mpi_len_ = 0;                              \
  MPI_Error_string((rc), bc_mpi_msg_, &bc_mpi_len_)

// For MPI calls: turns an MPI error code into BC_ERR_MPI with MPI's own text
// (MPI_Error_string). Only useful where MPI returns errors instead of aborting:
// every communicator the library creates gets MPI_ERRORS_RETURN.
#define BC_MPI_CHECK(call)                                                   \
  do {                                                                       \
    int bc_mpi_rc_ = (call);                                                 \
    if (bc_mpi_rc_ != MPI_SUCCESS) {                                         \
      BC_MPI_ERROR_TEXT_(bc_mpi_rc_);                                        \
      return BC_FAIL(BC_ERR_MPI, "%s failed: %s", #call, bc_mpi_msg_);       \
    }                                                                        \
  } while (0)

// For MPI calls on cleanup paths that cannot return a status (freeing a
// communicator after another failure, destructors): a failure is logged as a
// warning with MPI's text. Needs core/log.h.
#define BC_MPI_WARN(call)                                                    \
  do {                                                                       \
    int bc_mpi_rc_ = (call);                                                 \
    if (bc_mpi_rc_ != MPI_SUCCESS) {                                         \
      BC_MPI_ERROR_TEXT_(bc_mpi_rc_);                                        \
      BC_WARN(Api, "%s failed: %s", #call, bc_mpi_msg_);                     \
    }                                                                        \
  } while (0)
