// The per-user cache across jobs (BC_CACHE_DIR): one small text file per kind
// and key, safe against concurrent writers and against stale, foreign or
// tampered files. Used for calibrated cost models (api/model_cache.h) and for
// measured racks (topo/discover.h). No MPI here: one rank reads or writes and
// broadcasts.
//
// DIR/KIND-HASH.txt, HASH = FNV-1a of the key, holds a header, then the body:
//
//   bccache 1
//   library 0.1.0
//   key KEY
//   written 1764629372
//   sum 9a3c5e0f1b2d4e6f
//   BODY...
//
// Nothing in it is trusted before every check passes: the directory belongs to
// the user and is not writable by group or others; the file is a regular file
// (not a link) of the user, not group/world-writable, at most kCacheMaxBytes;
// the magic, the format and the library version are this build's; the key is
// the one asked for (not a hash collision); it is not older than the age limit
// nor from the future; the checksum of the body matches. What the body means
// is the caller's to check.
//
// Writes go to a temporary file opened O_CREAT|O_EXCL (name with pid and a
// counter) with mode 0600, then rename(2) over the final name: a reader sees
// the old file or the new one, never a mix, and two writers at once leave one
// whole file.
#pragma once

#include <cstdint>
#include <string>

#include "core/params.h"

namespace bc {

constexpr int64_t kCacheMaxBytes = 64 * 1024;

// The cache directory: BC_CACHE_DIR, else $XDG_CACHE_HOME/blueconnect, else
// $HOME/.cache/blueconnect; "" when none can be named.
std::string cache_dir(const ParamSet &params);

// The file that holds `key` of `kind` ("model", "racks").
std::string cache_path(const std::string &dir, const char *kind, const std::string &key);

// The body stored for `key`, or false with *why ("no cached KIND" when there
// is none; else why the file is not trusted). max_age_ms 0: no age limit;
// age_param names the limit in messages. *age_s (optional): the file's age in
// seconds, with the body, for a caller whose limit depends on what it holds.
// Never fails otherwise.
bool cache_read(const std::string &dir, const char *kind, const std::string &key, int64_t max_age_ms,
                const char *age_param, std::string *body, std::string *why, int64_t *age_s = nullptr);

// "older than LIMIT (20 min)" / "(3 h)": the message of a file past its age limit.
std::string cache_too_old(const char *limit, int64_t age_s);

// Stores `body` for `key` (creating the directory, mode 0700). False with
// *why when it could not.
bool cache_write(const std::string &dir, const char *kind, const std::string &key, const std::string &body,
                 std::string *why);

}  // namespace bc
