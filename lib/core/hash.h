// FNV-1a, 64 bits: a stable hash of short strings (host names, settings) that
// every rank computes alike, for keys that ranks compare or agree on.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace bc {

inline uint64_t fnv1a(const std::string &s, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// A hash as 16 hex digits: cache file names and checksums, key parts.
inline std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// splitmix64's finaliser: spreads every input bit over the output.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A number no other call in this process, and most likely no other process,
// returns: names and keys that must not collide (not a secret).
inline uint64_t fresh_nonce() {
  static std::atomic<uint64_t> calls{0};
  return mix64(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               (static_cast<uint64_t>(getpid()) << 32) ^ calls.fetch_add(1));
}

}  // namespace bc
