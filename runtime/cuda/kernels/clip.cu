// clip.cu: runtime.ClipOps (device_clip.go).

// The clip functions, as runtime.ClipFn numbers them.
enum { CLIP_ABADI = 0, CLIP_AUTOMATIC = 1, CLIP_GLOBAL = 2 };

// clip_factors writes dst[i] = float(factor(√normSq[i])), the factor in
// float64 as runtime.ClipRule.Factor computes it: 0 for a NaN or infinite
// norm; R/(‖g‖+γ) (automatic); 1[‖g‖ < R] (global); min(1, R/‖g‖) (Abadi,
// 1 when ‖g‖ ≤ R).
extern "C" __global__ void clip_factors(int fn, double r, double gamma, const double *norm_sq, float *dst, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    double norm = sqrt(norm_sq[i]);
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
