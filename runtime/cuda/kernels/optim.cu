// optim.cu: runtime.OptimOps (device_optim.go). Every product and sum is
// rounded to float on its own (the module is compiled without FMA
// contraction) and √v is correctly rounded, so that the update is the
// CPU's bit for bit.

// AdamCoeffs mirrors runtime.AdamCoeffs field for field.
struct AdamCoeffs {
  float grad_scale, l2, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, sqrt_bc2, eps;
};

// adam applies one Adam/AdamW step (PyTorch's formulation):
//   θ ← θ·decay; d ← g·grad_scale (+ l2·θ); m ← β₁m + (1−β₁)d;
//   v ← β₂v + ((1−β₂)d)d; θ ← θ − step_size·m / (√v/sqrt_bc2 + eps).
extern "C" __global__ void adam(float *p, const float *g, float *m, float *v, long long n, AdamCoeffs c) {
  FOR_EACH(i, n) {
    float x = p[i] * c.decay;
    float d = g[i] * c.grad_scale;
    if (c.l2 != 0) d += c.l2 * x;
    float mi = c.beta1 * m[i] + c.one_minus_beta1 * d;
    float vi = c.beta2 * v[i] + (c.one_minus_beta2 * d) * d;
    m[i] = mi;
    v[i] = vi;
    float den = (float)sqrt((double)vi) / c.sqrt_bc2 + c.eps;
    p[i] = x - (c.step_size * mi) / den;
  }
}

// sgd applies one SGD step without momentum: θ ← θ − lr·(g·gs + wd·θ).
extern "C" __global__ void sgd(float *p, const float *g, long long n, float lr, float wd, float gs) {
  FOR_EACH(i, n) p[i] -= lr * (g[i] * gs + wd * p[i]);
}

// sgd_momentum applies one SGD step with momentum μ: d ← g·gs + wd·θ;
// v ← d on the first step, μv + d after; θ ← θ − lr·v.
extern "C" __global__ void sgd_momentum(float *p, const float *g, float *vel, long long n, float lr, float mu, float wd, float gs, int first) {
  FOR_EACH(i, n) {
    float d = g[i] * gs + wd * p[i];
    float v = first ? d : mu * vel[i] + d;
    vel[i] = v;
    p[i] -= lr * v;
  }
}

// average moves the parameters' running average towards them:
// avg ← avg + w·(p − avg), one step of their exponential moving average.
extern "C" __global__ void average(float *avg, const float *p, long long n, float w) {
  FOR_EACH(i, n) avg[i] += w * (p[i] - avg[i]);
}
