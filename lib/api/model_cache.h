// The per-user cache of calibrated cost models, across jobs (BC_MODEL_CACHE,
// BC_CACHE_DIR, BC_MODEL_CACHE_AGE; docs/PLANS.md, "The model cache").
//
// One file per key, DIR/model-HASH.txt, HASH = FNV-1a of the key (the layout
// signature and every rank's host hash, in rank order). The file is a
// header, then the model exactly as BC_MODEL_FILE holds it:
//
//   bccache 1
//   library 0.1.0
//   key p8/L1:g4q2m2/L2:g2q4m4 3f0c... 3f0c... ...
//   written 1764629372
//   sum 9a3c5e0f1b2d4e6f
//   # BlueConnect cost model ...
//   bcmodel 1
//   ...
//
// Nothing in it is trusted before every check passes: the directory belongs to
// the user and is not writable by group or others; the file is a regular file
// (not a link) of the user, not group/world-writable, at most kMaxBytes; the
// magic, the format and the library version are this build's; the key is the
// one asked for (not a hash collision); it is not older than the age limit
// nor from the future; the checksum of the model text matches; the model
// parses for this layout and its numbers are sane. Anything else is ignored
// (logged at INFO, or WARN for permissions) and calibrated anew.
//
// Writes go to a temporary file opened O_CREAT|O_EXCL (name with pid and a
// counter) with mode 0600, then rename(2) over the final name: a reader sees
// the old file or the new one, never a mix, and two writers at once leave one
// whole file. No MPI here: rank 0 calls it, calibrate.cc broadcasts.
#pragma once

#include <cstdint>
#include <string>

#include "core/params.h"
#include "core/status.h"

namespace bc {

constexpr int64_t kModelCacheMaxBytes = 64 * 1024;

// The cache directory: BC_CACHE_DIR, else $XDG_CACHE_HOME/blueconnect, else
// $HOME/.cache/blueconnect; "" when none can be named.
std::string model_cache_dir(const ParamSet &params);

// The file a key is stored in.
std::string model_cache_path(const std::string &dir, const std::string &key);

// The model text (BC_MODEL_FILE format) cached for `key` and `signature`, or
// "" with *why saying why not (no file, stale, foreign, corrupt ...).
// max_age_ms 0: no age limit. Never fails: a bad cache is no cache.
std::string model_cache_load(const std::string &dir, const std::string &key, const std::string &signature,
                             int64_t max_age_ms, std::string *why);

// Stores `model_text` for `key` (creating the directory, mode 0700). Returns
// false with *why when it could not.
bool model_cache_store(const std::string &dir, const std::string &key, const std::string &model_text,
                       std::string *why);

}  // namespace bc
