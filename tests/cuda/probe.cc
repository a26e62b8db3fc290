// cuda_probe: exits 0 when a CUDA device is usable, 77 (skip) with the reason
// otherwise. The MPI CUDA tests run it first, so a machine without a GPU
// reports one clean skip line instead of an mpirun failure.
#include "probe.h"

int main() {
  const std::string why = bctest::cuda_missing();
  if (!why.empty()) return bctest::print_skip(why);
  int dev = 0;
  cudaDeviceProp prop{};
  cudaGetDevice(&dev);
  cudaGetDeviceProperties(&prop, dev);
  std::printf("CUDA device %d: %s (sm_%d%d)\n", dev, prop.name, prop.major, prop.minor);
  return 0;
}
