// Test kernels of the emulation header (emu/cuda_emu.h): each exercises
// one built-in, and emu_test.go checks its result from CUDA's definition.

// ids writes each thread's (threadIdx, blockIdx, blockDim, gridDim) at its
// global linear index, 8 ints a thread.
extern "C" __global__ void ids(int *out) {
  unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  int *o = out + 8 * (bid * nt + tid);
  o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
  o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
  o[6] = blockDim.x * 10000 + blockDim.y * 100 + blockDim.z;
  o[7] = gridDim.x * 10000 + gridDim.y * 100 + gridDim.z;
}

// reverse reverses each block's run of blockDim.x elements of x through a
// static __shared__ array: every thread reads a value another wrote, so
// the barrier and the sharing both must hold.
extern "C" __global__ void reverse(float *x, int n) {
  __shared__ float s[1024];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - threadIdx.x);
  if (i < n && j < n) x[i] = s[blockDim.x - 1 - threadIdx.x];
}

// block_sum writes the sum of each block's elements (as integers in float,
// exact) to out[blockIdx.x], with a tree reduction in dynamic shared memory
// (blockDim.x a power of two).
extern "C" __global__ void block_sum(const float *x, float *out, int n) {
  DYN_SHARED(float, s);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

// atomics: every thread adds to shared counters in each type, races a
// compare-and-swap increment and an atomicMax, and swaps its id in.
extern "C" __global__ void atomics(int *ci, unsigned *cu, unsigned long long *cull, float *cf, double *cd, int *cas, int *mx, int *exch) {
  int g = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(ci, 1);
  atomicAdd(cu, 2u);
  atomicAdd(cull, 3ull);
  atomicAdd(cf, 0.5f);
  atomicAdd(cd, 0.25);
  int old = *cas, seen;
  while ((seen = atomicCAS(cas, old, old + 1)) != old) old = seen;
  atomicMax(mx, g);
  __threadfence();
  atomicExch(exch, g);
}

// shuffles: per warp, the sum of the lanes' values by __shfl_down_sync
// (lane 0's result), the sum by a __shfl_xor_sync butterfly (every lane's
// result), lane 3's value broadcast by __shfl_sync, a width-8 down shuffle
// and a double's exchange.
extern "C" __global__ void shuffles(const int *x, int *down, int *bfly, int *bcast, int *down8, double *dx) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = x[i];
  int s = v;
  for (int k = 16; k > 0; k /= 2) s += __shfl_down_sync(0xffffffffu, s, k);
  down[i] = s;
  int b = v;
  for (int k = 1; k < 32; k *= 2) b += __shfl_xor_sync(0xffffffffu, b, k);
  bfly[i] = b;
  bcast[i] = __shfl_sync(0xffffffffu, v, 3);
  down8[i] = __shfl_down_sync(0xffffffffu, v, 2, 8);
  dx[i] = __shfl_xor_sync(0xffffffffu, (double)v + 0.5, 1);
}

// warp_sums: per thread, its warp's down-shuffle reduction of x's values
// in double and in float (scaled, so that the sums round), once through
// the emulation's one-exchange emu_warp_sum (the shuffle loop itself on a
// GPU) and once through the shuffle loop: the two must agree bit for bit
// in every lane, partial warps included.
extern "C" __global__ void warp_sums(const int *x, double *fast, double *loop, float *fastf, float *loopf) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  double s = x[i] * 0.1, l = s;
  float f = x[i] * 0.3f, lf = f;
#ifdef CUDA_EMU
  s = emu_warp_sum(s);
  f = emu_warp_sum(f);
#else
  for (int k = 16; k > 0; k /= 2) s += __shfl_down_sync(0xffffffffu, s, k);
  for (int k = 16; k > 0; k /= 2) f += __shfl_down_sync(0xffffffffu, f, k);
#endif
  for (int k = 16; k > 0; k /= 2) l += __shfl_down_sync(0xffffffffu, l, k);
  for (int k = 16; k > 0; k /= 2) lf += __shfl_down_sync(0xffffffffu, lf, k);
  fast[i] = s;
  loop[i] = l;
  fastf[i] = f;
  loopf[i] = lf;
}

// bits checks the bit casts and the math functions the kernels use.
extern "C" __global__ void bits(const float *x, unsigned *u, float *back, float *rs, float *sq, float *ex, float *lg, double *dbits) {
  int i = threadIdx.x;
  u[i] = __float_as_uint(x[i]);
  back[i] = __uint_as_float(u[i]) + __int_as_float(__float_as_int(0.0f));
  rs[i] = rsqrtf(x[i]);
  sq[i] = sqrtf(x[i]);
  ex[i] = expf(-x[i]);
  lg[i] = logf(x[i]);
  dbits[i] = __longlong_as_double(__double_as_longlong((double)x[i]));
}
