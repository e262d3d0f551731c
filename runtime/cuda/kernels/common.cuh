// common.cuh: what several kernel modules share. It is not a module of its
// own: the Device puts it before every module's source when it loads the
// module (moduleSource in device.go), so that each module compiles alone
// (NVRTC and the emulation get one source each) and the text exists once.
// It holds no kernel (KernelNames finds none here), and its functions are
// inline, so that a module that does not call them compiles none of them.

// The grid-stride loop of element i over n.
#define FOR_EACH(i, n) \
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// The grid-stride loop over n results with lanes threads each, lanes 1 (a
// thread per result, for few terms) or 32 (a warp): the launch gives lanes
// threads per result in blocks of whole warps, so that every lane of a
// warp runs the same iterations, as the shuffles need. LANE_OF is the
// thread's lane; WARP_FOR_EACH and LANE are the loop and lane of a warp
// per result.
#define LANES_FOR_EACH(j, n, lanes)                                                   \
  for (long long j = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / (lanes); j < (n); \
       j += (long long)gridDim.x * blockDim.x / (lanes))
#define LANE_OF(lanes) ((int)(threadIdx.x % (lanes)))
#define WARP_FOR_EACH(j, n) LANES_FOR_EACH(j, n, 32)
#define LANE LANE_OF(32)

// warp_sum returns to lane 0 the sum of the lanes' s by a fixed tree (lane
// l adds lane l + 16's, then l + 8's, …), so that a sum a warp splits
// (lane l taking terms l, l + 32, …) depends on neither the block size
// nor the schedule.
__device__ __forceinline__ double warp_sum(double s) {
#ifdef CUDA_EMU
  return emu_warp_sum(s); // the same tree after one exchange (cuda_emu.h)
#else
  for (int k = 16; k > 0; k /= 2) s += __shfl_down_sync(0xffffffffu, s, k);
  return s;
#endif
}

// warp_sum_f is warp_sum in float (runtime.SumLanes32's halves).
__device__ __forceinline__ float warp_sum_f(float s) {
#ifdef CUDA_EMU
  return emu_warp_sum(s);
#else
  for (int k = 16; k > 0; k /= 2) s += __shfl_down_sync(0xffffffffu, s, k);
  return s;
#endif
}

// block_sum returns to thread 0 the sum of the block's threads' s: each
// warp's by warp_sum, then the warps' sums in order by warp 0 — a fixed
// tree for a given block size, so that a sum a block splits (thread k
// taking terms k, k + blockDim.x, …) depends on nothing else. part is the
// caller's __shared__ double[32]; every thread of the block must call it,
// and it synchronizes after reading part, so the next call may reuse it.
__device__ __forceinline__ double block_sum(double s, double *part) {
  s = warp_sum(s);
  int w = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
  if (threadIdx.x % 32 == 0) part[w] = s;
  __syncthreads();
  if (w == 0) s = warp_sum(threadIdx.x < nw ? part[threadIdx.x] : 0.0);
  __syncthreads();
  return s;
}

// cols_total returns to every thread of a column-tile block — 32 results
// along x, blockDim.y (a power of two, at most 32) threads along y each
// summing every blockDim.y-th term of its result — the sum of its
// column's partial sums s, added by a fixed tree over y (y adds y + h's,
// h halving), so that the order depends on the block's shape alone.
// Neighbouring threads of a warp read neighbouring results' terms, which
// are neighbouring addresses where the results run along x's innermost
// axis: column sums of a rows × columns matrix (a bias's gradient over a
// batch of tokens), which a block or warp per result reads a row apart.
// part is the block's __shared__ double[32][33].
__device__ __forceinline__ double cols_total(double s, double (*part)[33]) {
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  for (int h = blockDim.y / 2; h > 0; h /= 2) {
    if (threadIdx.y < h) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + h][threadIdx.x];
    __syncthreads();
  }
  double t = part[0][threadIdx.x];
  __syncthreads();
  return t;
}

// COL_TILES runs its body for each tile of 32 results of n that a
// column-tile block takes (cols_total), j the thread's result (j ≥ n in a
// last, partial tile: the body must still reach cols_total).
#define COL_TILES(j, n) \
  for (long long j##0 = blockIdx.x * 32LL, j = j##0 + threadIdx.x; j##0 < (n); j##0 += gridDim.x * 32LL, j = j##0 + threadIdx.x)

// FastDiv divides indices by a fixed d the way layout_offsets does (below), its
// constants made on the device, once per thread (one 64-bit division
// there, amortized over a grid-stride loop's elements): for kernels that
// split a linear index into row and column. ok says every index of the
// loop is below 2³¹ (n ≤ 2³¹) and d < 2³¹; else fdiv divides.
struct FastDiv {
  long long d;
  unsigned mul, shr;
  bool ok;
};

__device__ __forceinline__ FastDiv fast_div(long long d, long long n) {
  FastDiv f;
  f.d = d;
  f.ok = d >= 1 && d < (1LL << 31) && n <= (1LL << 31);
  f.mul = 1;
  f.shr = 0;
  if (f.ok) {
    while ((1LL << f.shr) < d) f.shr++;
    f.mul = (unsigned)((((unsigned long long)1 << 32) * (((unsigned long long)1 << f.shr) - (unsigned long long)d)) /
                       (unsigned long long)d + 1);
  }
  return f;
}

__device__ __forceinline__ long long fdiv(const FastDiv &f, long long i) {
  if (f.ok) return (long long)((__umulhi((unsigned)i, f.mul) + (unsigned)i) >> f.shr);
  return i / f.d;
}

// reduce_element returns the flat index in x of the q-th element (in
// increasing order) of those that reduce into y's element j, where sh[0,
// rank) is x's shape and sh[rank, 2·rank) y's, of the same rank with 1 on
// the reduced axes (reduce.cu's reductions, nn.cu's bias gradients).
__device__ __forceinline__ long long reduce_element(const long long *sh, int rank, long long j, long long q) {
  long long off = 0, st = 1;
  for (int a = rank - 1; a >= 0; a--) {
    if (sh[rank + a] == 1) {
      off += q % sh[a] * st;
      q /= sh[a];
    } else {
      off += j % sh[a] * st;
      j /= sh[a];
    }
    st *= sh[a];
  }
  return off;
}

// reduce_element_by is reduce_element with the divisions by sh[a] as
// by[a] (fast_div of each, for indices below the elements of x).
__device__ __forceinline__ long long reduce_element_by(const long long *sh, const FastDiv *by, int rank, long long j,
                                                       long long q) {
  long long off = 0, st = 1;
  for (int a = rank - 1; a >= 0; a--) {
    if (sh[rank + a] == 1) {
      long long d = fdiv(by[a], q);
      off += (q - d * sh[a]) * st;
      q = d;
    } else {
      long long d = fdiv(by[a], j);
      off += (j - d * sh[a]) * st;
      j = d;
    }
    st *= sh[a];
  }
  return off;
}

// lanes_total gives every lane of a result the sum of the lanes' s
// (warp_sum's halves, broadcast from lane 0).
__device__ __forceinline__ double lanes_total(double s, int lanes) {
  if (lanes == 1) return s;
  return __shfl_sync(0xffffffffu, warp_sum(s), 0);
}

// lanes_max gives every lane of a result the largest of the lanes' m, as
// a loop of `if (v > m) m = v` would (NaN never wins; a −∞ start stays
// where every term is NaN).
__device__ __forceinline__ float lanes_max(float m, int lanes) {
  if (lanes == 1) return m;
  for (int k = 16; k > 0; k /= 2) {
    float o = __shfl_down_sync(0xffffffffu, m, k);
    if (o > m) m = o;
  }
  return __shfl_sync(0xffffffffu, m, 0);
}

// Layout is an iteration over a broadcast shape, built on the host
// (iterLayout in linalg.go): unit axes dropped, axes that stay adjacent in
// every operand merged, the axes a thread owns (keep of them) before the
// axes it loops over (a reduction's). st[k][a] is operand k's element
// stride along axis a, 0 where it is broadcast. linalg.cu, layout.cu and
// elementwise.cu use it.
//
// A GPU has no integer divider: a 64-bit division is a subroutine of
// some seventy instructions, and layout_offsets divides once per axis and
// element, which made the broadcast kernels (a normalization's affine, its
// gradient) compute-bound at a fraction of the memory's bandwidth. Where
// every linear index of the layout is below 2^31 (small), each axis's
// division is a multiply-high by a constant chosen on the host instead
// (Granlund and Montgomery's round-up method, layoutMagic in linalg.go):
// with s = ⌈log₂ d⌉ and m = ⌊2³²·(2^s − d)/d⌋ + 1 (32 bits),
// ⌊i/d⌋ = (⌊i·m/2³²⌋ + i) >> s for 0 ≤ i < 2³¹.
#define LAYOUT_MAX_RANK 8
#define LAYOUT_MAX_OPS 4
struct Layout {
  int rank, keep;
  int dim[LAYOUT_MAX_RANK];
  int st[LAYOUT_MAX_OPS][LAYOUT_MAX_RANK];
  unsigned div_mul[LAYOUT_MAX_RANK];
  unsigned char div_shr[LAYOUT_MAX_RANK];
  int small;
};

// layout_offsets adds to off[k] (k < nops) the offsets of operand k at
// linear index i over the axes [lo, hi) of l, row-major.
__device__ __forceinline__ void layout_offsets(const Layout &l, int lo, int hi, long long i, long long *off, int nops) {
  if (l.small) {
    unsigned u = (unsigned)i;
    for (int a = hi - 1; a >= lo; a--) {
      unsigned q = (__umulhi(u, l.div_mul[a]) + u) >> l.div_shr[a];
      long long c = (long long)(u - q * (unsigned)l.dim[a]);
      u = q;
      for (int k = 0; k < nops; k++) off[k] += c * l.st[k][a];
    }
    return;
  }
  for (int a = hi - 1; a >= lo; a--) {
    long long d = l.dim[a], c = i % d;
    i /= d;
    for (int k = 0; k < nops; k++) off[k] += c * l.st[k][a];
  }
}

// d_exp and d_log are e^x and ln x in double, written out (the CUDA math
// library's use fused multiply-adds, which the kernels keep out of their
// code, TestNVRTCNoFMA): within a few units in the last place of a double,
// which the float32 results round away. nn.cu and reduce.cu use them.

// d_pow2 returns 2^j for −1022 ≤ j ≤ 1023.
__device__ inline double d_pow2(long long j) { return __longlong_as_double((j + 1023) << 52); }

// d_exp returns e^x: x = k·ln2 + r with |r| ≤ ln2/2 (ln2 split in two, so
// that r is exact to a double), e^r by its Taylor series to r^14 (the rest
// is below 2^-56 of it), scaled by 2^k.
__device__ inline double d_exp(double x) {
  if (x != x) return x;
  if (x > 709.782712893384) return __longlong_as_double(0x7ff0000000000000LL);
  if (x < -745.2) return 0;
  const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  double kd = x * 1.44269504088896338700e+00;
  long long k = (long long)(kd < 0 ? kd - 0.5 : kd + 0.5);
  double r = (x - (double)k * ln2_hi) - (double)k * ln2_lo;
  const double c[15] = {1.0,
                        1.0,
                        1.0 / 2,
                        1.0 / 6,
                        1.0 / 24,
                        1.0 / 120,
                        1.0 / 720,
                        1.0 / 5040,
                        1.0 / 40320,
                        1.0 / 362880,
                        1.0 / 3628800,
                        1.0 / 39916800,
                        1.0 / 479001600,
                        1.0 / 6227020800.0,
                        1.0 / 87178291200.0};
  double p = c[14];
  for (int i = 13; i >= 0; i--) p = p * r + c[i];
  if (k < -1021) return p * d_pow2(k + 54) * d_pow2(-54);
  if (k > 1023) return p * d_pow2(k - 1) * 2;
  return p * d_pow2(k);
}

// d_log returns ln x: x = 2^e·m with √½ ≤ m < √2, ln m = 2·atanh(s) with
// s = (m − 1)/(m + 1), |s| < 0.172, by its series to s^23.
__device__ inline double d_log(double x) {
  if (x != x) return x;
  if (x < 0) return __longlong_as_double(0x7ff8000000000000LL);
  if (x == 0) return -__longlong_as_double(0x7ff0000000000000LL);
  if (x == __longlong_as_double(0x7ff0000000000000LL)) return x;
  long long e = 0;
  if (x < 2.2250738585072014e-308) {  // subnormal
    x *= d_pow2(54);
    e = -54;
  }
  long long b = __double_as_longlong(x);
  e += ((b >> 52) & 0x7ff) - 1023;
  double m = __longlong_as_double((b & 0x000fffffffffffffLL) | 0x3ff0000000000000LL);
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e++;
  }
  double f = m - 1, s = f / (2 + f), z = s * s, t = 0;
  for (int n = 23; n >= 3; n -= 2) t = (t + 1.0 / n) * z;
  const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  return (double)e * ln2_hi + ((double)e * ln2_lo + (2 * s + 2 * s * t));
}
