// Shared by the CUDA test programs: whether a device is here, and the skip
// line meson and scripts/count-results expect (exit 77, reason on the last
// stdout line).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

namespace bctest {

// "" when a device is usable, else the reason.
inline std::string cuda_missing() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: cudaGetDeviceCount: ") + cudaGetErrorString(e);
  }
  if (n == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  return "";
}

constexpr int kSkipExit = 77;

inline int print_skip(const std::string &reason) {
  std::printf("%s\n", reason.c_str());  // scripts/count-results prints it after "skipped: NAME:"
  std::fflush(stdout);
  return kSkipExit;
}

}  // namespace bctest
