// bc_copybw: the bandwidth of a plain device-to-device cudaMemcpy, the
// yardstick for the intra-node stage on device buffers (docs/CUDA.md: the
// device check compares bc_bench --mem cuda against it, goal >= 80%).
// Usage: bc_copybw [MIN_BYTES [MAX_BYTES [ITERS]]]; sizes double from MIN.
// Prints "bytes  GB/s" per size (GB = 1e9 bytes, counting bytes copied once).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char **argv) {
  const long long min = argc > 1 ? std::atoll(argv[1]) : 1 << 20;
  const long long max = argc > 2 ? std::atoll(argv[2]) : 256 << 20;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 20;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::printf("skipped: no CUDA device: cudaGetDeviceCount: %s\n", cudaGetErrorString(e));
    return 77;
  }
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, max) != cudaSuccess || cudaMalloc(&b, max) != cudaSuccess) {
    std::fprintf(stderr, "bc_copybw: cudaMalloc(%lld) failed\n", max);
    return 1;
  }
  std::printf("# bytes GB/s (device-to-device cudaMemcpy, %d iterations)\n", iters);
  for (long long s = min; s <= max; s *= 2) {
    cudaMemcpy(b, a, s, cudaMemcpyDeviceToDevice);  // warm-up
    cudaDeviceSynchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) cudaMemcpy(b, a, s, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    std::printf("%lld %.3f\n", s, s / sec * 1e-9);
  }
  cudaFree(a);
  cudaFree(b);
  return 0;
}
