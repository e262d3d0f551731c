// linalg.cu: runtime.LinalgOps (device_linalg.go) but the GEMMs, which are
// cuBLAS's (Driver.Gemm), and Binary, whose Pow needs the math library
// (elementwise.cu): Axpy, ReduceToShape, and the scaling of C that a GEMM
// with K = 0 or α = 0 reduces to. Nothing here calls the math library,
// so that its PTX has no fused multiply-add (TestNVRTCNoFMA).

// axpy computes y ← y + α·x, the product rounded before the sum.
extern "C" __global__ void axpy(float alpha, const float *x, float *y, long long n) {
  FOR_EACH(i, n) y[i] += alpha * x[i];
}

// reduce_part is result j's terms r0, r0 + step, … (of m) summed: one
// thread's share in either form.
__device__ static double reduce_part(const float *x, long long j, long long r0, long long step, long long m,
                                     const Layout &l) {
  long long base = 0;
  layout_offsets(l, 0, l.keep, j, &base, 1);
  double s = 0;
  for (long long r = r0; r < m; r += step) {
    long long off = base;
    layout_offsets(l, l.keep, l.rank, r, &off, 1);
    s += x[off];
  }
  return s;
}

// reduce_to_shape writes t[j] = Σ x over the looped axes of l (operand 0
// is x), for the n elements of t (the kept axes, t contiguous over them),
// m terms each, in double, rounded once: lanes threads per element
// (LANES_FOR_EACH; one, summing in row-major order, for few terms).
extern "C" __global__ void reduce_to_shape(const float *x, float *t, long long n, long long m, int lanes, Layout l) {
  int lane = LANE_OF(lanes);
  LANES_FOR_EACH(j, n, lanes) {
    double s = lanes_total(reduce_part(x, j, lane, lanes, m, l), lanes);
    if (lane == 0) t[j] = (float)s;
  }
}

// reduce_to_shape_cols is reduce_to_shape in column tiles (cols_total),
// where x's innermost axis is kept and the results are too few for a
// thread each: a bias's gradient summed over a batch of tokens, where a
// warp per result read 32 addresses a row apart (ViT-B/16's biases: 4.8
// ms of a bk step on an H100). lanes is unused.
extern "C" __global__ void reduce_to_shape_cols(const float *x, float *t, long long n, long long m, int lanes, Layout l) {
  __shared__ double part[32][33];
  (void)lanes;
  COL_TILES(j, n) {
    double s = cols_total(j < n ? reduce_part(x, j, threadIdx.y, blockDim.y, m, l) : 0.0, part);
    if (threadIdx.y == 0 && j < n) t[j] = (float)s;
  }
}

// reduce_to_shape_split is reduce_to_shape_cols for few results of many
// terms: each result's m terms cut into segs runs of consecutive terms, a
// block per tile of 32 results and run, the run's sum (cols_total) into
// part[seg·n + j] in double, which reduce_parts adds in run order and
// rounds once. reduce_to_shape_cols gave ViT-B/16's 768 summed biases of
// 6304 terms 24 blocks of an H100's 132 multiprocessors (bk's biases, 2.4
// ms a step in the sixth loan's profile). lanes is unused.
extern "C" __global__ void reduce_to_shape_split(const float *x, double *part, long long n, long long m, long long segs,
                                                 Layout l) {
  __shared__ double sh[32][33];
  long long tiles = (n + 31) / 32;
  for (long long b = blockIdx.x; b < tiles * segs; b += gridDim.x) {
    long long seg = b / tiles, j = (b - seg * tiles) * 32 + threadIdx.x;
    long long lo = seg * m / segs, hi = (seg + 1) * m / segs;
    double s = cols_total(j < n ? reduce_part(x, j, lo + threadIdx.y, blockDim.y, hi, l) : 0.0, sh);
    if (threadIdx.y == 0 && j < n) part[seg * n + j] = s;
  }
}

// reduce_parts writes t[j] = Σ_seg part[seg·n + j] (reduce_to_shape_split's
// runs, in order), rounded once.
extern "C" __global__ void reduce_parts(const double *part, float *t, long long n, long long segs) {
  FOR_EACH(j, n) {
    double s = 0;
    for (long long q = 0; q < segs; q++) s += part[q * n + j];
    t[j] = (float)s;
  }
}

// gemm_ptrs writes the operand addresses of a batched GEMM as
// cublasSgemmBatched reads them (Driver.Gemm's GemmArgs.Ptrs): out[i] =
// B_i, out[batch + i] = A_i, out[2·batch + i] = C_i, each operand's base
// plus i times its stride in floats; on the device, in stream order, so
// that no host copy waits for the kernels before it.
extern "C" __global__ void gemm_ptrs(unsigned long long a, long long sa, unsigned long long b, long long sb,
                                     unsigned long long c, long long sc, long long batch, unsigned long long *out) {
  FOR_EACH(i, batch) {
    out[i] = b + (unsigned long long)(4 * i * sb);
    out[batch + i] = a + (unsigned long long)(4 * i * sa);
    out[2 * batch + i] = c + (unsigned long long)(4 * i * sc);
  }
}

// gemm_scale computes C ← β·C (β = 0: C ← 0, not read) for batch m×n
// matrices, row stride ldc, stride_c apart: a GEMM whose product is empty
// (K = 0) or zero (α = 0).
extern "C" __global__ void gemm_scale(float beta, float *c, long long m, long long n, long long ldc, long long stride_c, long long batch) {
  FOR_EACH(i, batch * m * n) {
    long long b = i / (m * n), r = i / n % m, col = i % n;
    float *p = c + b * stride_c + r * ldc + col;
    *p = beta == 0 ? 0.0f : beta * *p;
  }
}
