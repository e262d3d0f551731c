// clip.cu: runtime.ClipOps (device_clip.go).

// The clip functions, as runtime.ClipFn numbers them.
enum { CLIP_ABADI = 0, CLIP_AUTOMATIC = 1, CLIP_GLOBAL = 2 };

// sample_norm is √normSq as runtime.SampleNorm takes it: a squared norm
// rounding made negative (a ghost norm whose terms cancel) counts as 0; a
// NaN stays NaN, and so does −Inf.
__device__ double sample_norm(double s) { return sqrt(s < 0 && !isinf(s) ? 0.0 : s); }

// clip_factors writes dst[i] = float(factor(√normSq[i])), the factor in
// float64 as runtime.ClipRule.Factor computes it: 0 for a NaN or infinite
// norm; R/(‖g‖+γ) (automatic); 1[‖g‖ < R] (global); min(1, R/‖g‖) (Abadi,
// 1 when ‖g‖ ≤ R).
extern "C" __global__ void clip_factors(int fn, double r, double gamma, const double *norm_sq, float *dst, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    double norm = sample_norm(norm_sq[i]);
    double f;
    if (isnan(norm) || isinf(norm))
      f = 0;
    else if (fn == CLIP_AUTOMATIC)
      f = r / (norm + gamma);
    else if (fn == CLIP_GLOBAL)
      f = norm < r ? 1 : 0;
    else
      f = norm <= r ? 1 : r / norm;
    dst[i] = (float)f;
  }
}

// count_clipped writes out[0] = the number of i < n whose norm
// √norm_sq[i] is NaN or infinite and out[1] = the number of i < m with
// factors[i] < 1 (one thread: n and m are a physical batch; the counts
// are integers, exact in a double).
extern "C" __global__ void count_clipped(const double *norm_sq, long long n, const float *factors, long long m, double *out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  long long bad = 0, clipped = 0;
  for (long long i = 0; i < n; i++) {
    double norm = sample_norm(norm_sq[i]);
    if (isnan(norm) || isinf(norm)) bad++;
  }
  for (long long i = 0; i < m; i++)
    if (factors[i] < 1) clipped++;
  out[0] = (double)bad;
  out[1] = (double)clipped;
}
