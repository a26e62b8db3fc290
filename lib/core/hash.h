// FNV-1a, 64 bits: a stable hash of short strings (host names, settings) that
// every rank computes alike, for keys that ranks compare or agree on.
#pragma once

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

}  // namespace bc
