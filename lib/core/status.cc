#include "core/status.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "core/log.h"

namespace bc {
namespace {
thread_local std::string g_error;

const char *basename_of(const char *path) {
  const char *slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

Status fail(Status code, const char *file, int line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char head[1200];
  std::snprintf(head, sizeof head, "%s: %s (at %s:%d)", bc_strerror(code), msg,
                basename_of(file), line);
  g_error = head;
  BC_LOG(LogLevel::Debug, LogSys::Api, "error raised: %s", head);
  return code;
}

void trail(Status code, const char *file, int line) {
  char step[256];
  std::snprintf(step, sizeof step, "\n  -> %s at %s:%d", bc_strerror(code), basename_of(file), line);
  if (g_error.size() < 8192) g_error += step;
}

void clear_error() { g_error.clear(); }
const char *last_error() { return g_error.c_str(); }

std::string last_error_body(Status code) {
  const std::string head = std::string(bc_strerror(code)) + ": ";
  return g_error.compare(0, head.size(), head) == 0 ? g_error.substr(head.size()) : g_error;
}

Status agree_status(MPI_Comm comm, Status mine, const char *what) {
  int local = mine, worst = 0;
  BC_MPI_CHECK(MPI_Allreduce(&local, &worst, 1, MPI_INT, MPI_MAX, comm));
  if (worst == BC_OK) return BC_OK;
  if (mine != BC_OK) return mine;
  return BC_FAIL(static_cast<Status>(worst), "%s failed on another rank", what);
}

}  // namespace bc
