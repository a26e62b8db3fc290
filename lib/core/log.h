// Logging with levels and subsystems.
//
// BC_DEBUG is a comma list of one level and any subsystems:
//   BC_DEBUG=INFO             every subsystem at INFO
//   BC_DEBUG=PLAN             INFO for the plan only
//   BC_DEBUG=DEBUG,TOPO,SCHED DEBUG for topology and the scheduler
// Levels: NONE ERROR WARN INFO DEBUG TRACE. Subsystems: INIT TOPO PLAN SCHED
// TRANSPORT API PMPI. Lines go to stderr, or to BC_DEBUG_FILE (%h = host,
// %p = pid, %r = MPI world rank).
#pragma once

#include <cstdint>
#include <string>

#include "blueconnect.h"  // BC_API

namespace bc {

enum class LogLevel : int { None = 0, Error, Warn, Info, Debug, Trace };
enum class LogSys : int { Init = 0, Topo, Plan, Sched, Transport, Api, Pmpi, Count };

// Parses BC_DEBUG's value; returns false with *err set on a bad token.
bool log_configure(const char *spec, const char *file_pattern, bool quiet_default,
                   const char **bad_token);
// Exported (BC_API): BC_LOG expands to these in the preload too.
BC_API bool log_enabled(LogLevel level, LogSys sys);
BC_API void log_write(LogLevel level, LogSys sys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void log_set_rank(int world_rank);
// A file name pattern with %h (host), %p (pid) and %r (the world rank of
// log_set_rank) replaced: BC_DEBUG_FILE's and BC_TIMELINE_FILE's.
std::string log_expand_path(const std::string &pattern);

}  // namespace bc

#define BC_LOG(level, sys, ...)                                                  \
  do {                                                                           \
    if (::bc::log_enabled((level), (sys)))                                       \
      ::bc::log_write((level), (sys), __FILE__, __LINE__, __VA_ARGS__);          \
  } while (0)
#define BC_WARN(sys, ...) BC_LOG(::bc::LogLevel::Warn, ::bc::LogSys::sys, __VA_ARGS__)
#define BC_INFO(sys, ...) BC_LOG(::bc::LogLevel::Info, ::bc::LogSys::sys, __VA_ARGS__)
#define BC_DEBUGLOG(sys, ...) BC_LOG(::bc::LogLevel::Debug, ::bc::LogSys::sys, __VA_ARGS__)
#define BC_TRACE(sys, ...) BC_LOG(::bc::LogLevel::Trace, ::bc::LogSys::sys, __VA_ARGS__)
