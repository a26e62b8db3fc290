// FNV-1a, 64 bits: a stable hash of short strings (host names, settings) that
// every rank computes alike, for keys that ranks compare or agree on.
#pragma once

#include <cstdint>
#include <string>

namespace bc {

inline uint64_t fnv1a(const std::string &s, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace bc
