#include "core/log.h"

#include <unistd.h>

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

namespace bc {
namespace {

const char *kLevelNames[] = {"NONE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
const char *kSysNames[] = {"INIT", "TOPO", "PLAN", "SCHED", "TRANSPORT", "API", "PMPI"};

std::atomic<int> g_level[static_cast<int>(LogSys::Count)];
std::mutex g_mutex;
FILE *g_out = nullptr;
std::string g_file_pattern;
int g_rank = -1;

bool iequals(const std::string &a, const char *b) { return strcasecmp(a.c_str(), b) == 0; }

}  // namespace

std::string log_expand_path(const std::string &pattern) {
  std::string out;
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'h') out += host;
      else if (c == 'p') out += std::to_string(getpid());
      else if (c == 'r') out += std::to_string(g_rank);
      else { out += '%'; out += c; }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

namespace {

FILE *output() {
  if (g_out) return g_out;
  if (!g_file_pattern.empty()) g_out = std::fopen(log_expand_path(g_file_pattern).c_str(), "a");
  if (!g_out) g_out = stderr;
  return g_out;
}

}  // namespace

bool log_configure(const char *spec, const char *file_pattern, bool quiet_default,
                   const char **bad_token) {
  static thread_local std::string bad;
  int level = quiet_default ? static_cast<int>(LogLevel::None) : static_cast<int>(LogLevel::Warn);
  int explicit_level = -1;
  bool sys_selected[static_cast<int>(LogSys::Count)] = {};
  bool any_sys = false;
  std::string s = spec ? spec : "";
  size_t pos = 0;
  while (pos <= s.size() && !s.empty()) {
    size_t comma = s.find(',', pos);
    std::string tok = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? s.size() + 1 : comma + 1;
    if (tok.empty()) continue;
    bool matched = false;
    for (int l = 0; l < 6; ++l)
      if (iequals(tok, kLevelNames[l])) { explicit_level = l; matched = true; }
    for (int k = 0; k < static_cast<int>(LogSys::Count); ++k)
      if (iequals(tok, kSysNames[k])) { sys_selected[k] = true; any_sys = true; matched = true; }
    if (iequals(tok, "ALL")) matched = true;
    if (!matched) {
      bad = tok;
      if (bad_token) *bad_token = bad.c_str();
      return false;
    }
  }
  int chosen = explicit_level >= 0 ? explicit_level : (any_sys ? static_cast<int>(LogLevel::Info) : level);
  for (int k = 0; k < static_cast<int>(LogSys::Count); ++k) {
    // Selected subsystems get the chosen level; the others keep the default
    // (errors and warnings still show unless the default is quiet).
    int l = (!any_sys || sys_selected[k]) ? chosen : std::min(level, chosen);
    g_level[k].store(l, std::memory_order_relaxed);
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_file_pattern = file_pattern ? file_pattern : "";
  if (g_out && g_out != stderr) std::fclose(g_out);
  g_out = nullptr;
  return true;
}

bool log_enabled(LogLevel level, LogSys sys) {
  return static_cast<int>(level) <= g_level[static_cast<int>(sys)].load(std::memory_order_relaxed);
}

void log_set_rank(int world_rank) { g_rank = world_rank; }

void log_write(LogLevel level, LogSys sys, const char *file, int line, const char *fmt, ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  std::lock_guard<std::mutex> lock(g_mutex);
  FILE *out = output();
  std::fprintf(out, "%s:%d [%d] BC %s %s %s (%s:%d)\n", host, static_cast<int>(getpid()), g_rank,
               kLevelNames[static_cast<int>(level)], kSysNames[static_cast<int>(sys)], msg, base, line);
  std::fflush(out);
}

}  // namespace bc
