// The per-user cache of calibrated cost models, across jobs (BC_MODEL_CACHE,
// BC_CACHE_DIR, BC_MODEL_CACHE_AGE; docs/PLANS.md, "The model cache").
//
// One file per key, DIR/model-HASH.txt (core/cache_file.h: header, checks,
// atomic writes), HASH = FNV-1a of the key (the layout signature and every
// rank's host hash, in rank order); the body is the model exactly as
// BC_MODEL_FILE holds it. On top of the file's checks the model must parse
// for this layout and its numbers must be sane; anything else is ignored
// (logged at INFO, or WARN for permissions) and calibrated anew. No MPI here:
// rank 0 calls it, calibrate.cc broadcasts.
#pragma once

#include <cstdint>
#include <string>

#include "core/cache_file.h"
#include "core/params.h"
#include "core/status.h"

namespace bc {

constexpr int64_t kModelCacheMaxBytes = kCacheMaxBytes;

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
