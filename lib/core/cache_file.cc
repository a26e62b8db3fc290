// The per-user cache files. See cache_file.h for the format and its checks.
#include "core/cache_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>

#include "blueconnect.h"  // BC_VERSION_*
#include "core/hash.h"

namespace bc {
namespace {

constexpr int kFormat = 1;
// A file written this far in the future (clock skew between the hosts of a
// shared home) is still taken; further, it is not.
constexpr int64_t kFutureSlackSeconds = 300;

std::string library_version() {
  return std::to_string(BC_VERSION_MAJOR) + "." + std::to_string(BC_VERSION_MINOR) + "." +
         std::to_string(BC_VERSION_PATCH);
}

// "" when `st` describes something only this user can change, else why not.
std::string unsafe_because(const struct stat &st, const char *what) {
  if (st.st_uid != geteuid())
    return std::string(what) + " belongs to uid " + std::to_string(static_cast<long long>(st.st_uid)) +
           ", not to this user";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return std::string(what) + " is writable by group or others";
  return "";
}

// Creates `dir` and its missing parents with mode 0700.
bool make_dirs(const std::string &dir, std::string *why) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      *why = "cannot create " + part + ": " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

// The directory exists, is a directory, and is safe to trust.
bool dir_ok(const std::string &dir, const char *kind, std::string *why) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    *why = errno == ENOENT ? std::string("no cached ") + kind : dir + ": " + std::strerror(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    *why = dir + " is not a directory";
    return false;
  }
  *why = unsafe_because(st, dir.c_str());
  return why->empty();
}

// Reads at most kCacheMaxBytes of a regular file of this user that
// nobody else can write; false with *why otherwise.
bool read_trusted(const std::string &path, const char *kind, std::string *text, std::string *why) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *why = errno == ENOENT ? std::string("no cached ") + kind : path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st;
  bool ok = fstat(fd, &st) == 0;
  if (!ok) *why = path + ": " + std::strerror(errno);
  if (ok && !S_ISREG(st.st_mode)) *why = path + " is not a regular file", ok = false;
  if (ok) *why = unsafe_because(st, path.c_str()), ok = why->empty();
  if (ok && st.st_size > kCacheMaxBytes)
    *why = path + " is larger than " + std::to_string(static_cast<long long>(kCacheMaxBytes)) + " bytes",
    ok = false;
  if (ok) {
    text->assign(static_cast<size_t>(kCacheMaxBytes) + 1, '\0');
    size_t got = 0;
    for (;;) {
      const ssize_t n = read(fd, &(*text)[got], text->size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        *why = path + ": " + std::strerror(errno);
        ok = false;
        break;
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
      if (got == text->size()) {
        *why = path + " grew past " + std::to_string(static_cast<long long>(kCacheMaxBytes)) + " bytes";
        ok = false;
        break;
      }
    }
    text->resize(got);
  }
  close(fd);
  return ok;
}

// The next line of `text` from *pos, without its newline; false at the end.
bool next_line(const std::string &text, size_t *pos, std::string *line) {
  if (*pos >= text.size()) return false;
  const size_t eol = text.find('\n', *pos);
  *line = text.substr(*pos, eol == std::string::npos ? std::string::npos : eol - *pos);
  *pos = eol == std::string::npos ? text.size() : eol + 1;
  return true;
}

// "VALUE" of a header line "NAME VALUE", or false.
bool header_value(const std::string &line, const char *name, std::string *value) {
  const size_t n = std::strlen(name);
  if (line.compare(0, n, name) != 0 || line.size() <= n || line[n] != ' ') return false;
  *value = line.substr(n + 1);
  return true;
}

}  // namespace

std::string cache_dir(const ParamSet &params) {
  const std::string set = params.get_str(ParamId::CacheDir);
  if (!set.empty()) return set;
  // Not BC_* knobs: where the user's cache lives by the XDG convention.
  const char *xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/blueconnect";
  const char *home = std::getenv("HOME");
  if (home && home[0] == '/') return std::string(home) + "/.cache/blueconnect";
  return "";
}

std::string cache_path(const std::string &dir, const char *kind, const std::string &key) {
  return dir + "/" + kind + "-" + hex64(fnv1a(key)) + ".txt";
}

std::string cache_too_old(const char *limit, int64_t age_s) {
  const std::string age = age_s < 2 * 3600 ? std::to_string(age_s / 60) + " min" : std::to_string(age_s / 3600) + " h";
  return std::string("older than ") + limit + " (" + age + ")";
}

bool cache_read(const std::string &dir, const char *kind, const std::string &key, int64_t max_age_ms,
                const char *age_param, std::string *body, std::string *why, int64_t *age_s) {
  why->clear();
  if (dir.empty()) {
    *why = "no cache directory (set BC_CACHE_DIR, XDG_CACHE_HOME or HOME)";
    return false;
  }
  if (!dir_ok(dir, kind, why)) return false;
  const std::string path = cache_path(dir, kind, key);
  std::string text;
  if (!read_trusted(path, kind, &text, why)) return false;
  size_t pos = 0;
  std::string line, value, written, sum;
  const auto fail = [&](const std::string &reason) {
    *why = path + ": " + reason;
    return false;
  };
  if (!next_line(text, &pos, &line) || line != "bccache " + std::to_string(kFormat))
    return fail("not a BlueConnect cache file of format " + std::to_string(kFormat));
  if (!next_line(text, &pos, &line) || !header_value(line, "library", &value))
    return fail("no 'library' line");
  if (value != library_version()) return fail("written by BlueConnect " + value + ", this is " + library_version());
  if (!next_line(text, &pos, &line) || !header_value(line, "key", &value)) return fail("no 'key' line");
  if (value != key) return fail("written for another key: another layout or other hosts (key '" + value + "')");
  if (!next_line(text, &pos, &line) || !header_value(line, "written", &written)) return fail("no 'written' line");
  if (!next_line(text, &pos, &line) || !header_value(line, "sum", &sum)) return fail("no 'sum' line");
  char *end = nullptr;
  errno = 0;
  const long long when = std::strtoll(written.c_str(), &end, 10);
  if (errno || end == written.c_str() || *end) return fail("bad 'written' time '" + written + "'");
  const long long now = static_cast<long long>(std::time(nullptr));
  if (when > now + kFutureSlackSeconds) return fail("written in the future (" + written + ")");
  if (max_age_ms > 0 && (now - when) * 1000 > max_age_ms) return fail(cache_too_old(age_param, now - when));
  *body = text.substr(pos);
  if (sum != hex64(fnv1a(*body))) return fail("checksum mismatch (truncated or edited)");
  if (age_s) *age_s = std::max<int64_t>(0, now - when);
  return true;
}

bool cache_write(const std::string &dir, const char *kind, const std::string &key, const std::string &body,
                 std::string *why) {
  why->clear();
  if (dir.empty()) {
    *why = "no cache directory (set BC_CACHE_DIR, XDG_CACHE_HOME or HOME)";
    return false;
  }
  if (!make_dirs(dir, why) || !dir_ok(dir, kind, why)) return false;
  std::ostringstream os;
  os << "bccache " << kFormat << "\nlibrary " << library_version() << "\nkey " << key << "\nwritten "
     << static_cast<long long>(std::time(nullptr)) << "\nsum " << hex64(fnv1a(body)) << "\n"
     << body;
  const std::string text = os.str();
  if (static_cast<int64_t>(text.size()) > kCacheMaxBytes) {
    *why = std::string("the ") + kind + " is larger than the cache's limit";
    return false;
  }
  const std::string path = cache_path(dir, kind, key);
  static std::atomic<unsigned> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    const auto ns = std::chrono::steady_clock::now().time_since_epoch().count();
    tmp = path + ".tmp." + std::to_string(static_cast<long long>(getpid())) + "." +
          std::to_string(counter.fetch_add(1)) + "." + std::to_string(static_cast<long long>(ns % 1000000007));
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    *why = "cannot create a temporary file in " + dir + ": " + std::strerror(errno);
    return false;
  }
  size_t done = 0;
  bool ok = true;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (ok && fsync(fd) != 0) ok = false;
  if (close(fd) != 0) ok = false;
  if (ok && rename(tmp.c_str(), path.c_str()) != 0) ok = false;
  if (!ok) {
    *why = "cannot write " + path + ": " + std::strerror(errno);
    unlink(tmp.c_str());
  }
  return ok;
}

}  // namespace bc
