// elementwise.cu: runtime.ElementwiseOps (device_elementwise.go) and
// LinalgOps.Binary: one thread per element written (per element of a
// reduced gradient, which sums its terms in double in a fixed order).
// The activations compute in double from the operators' definitions,
// rounded once, with CUDA's math library (exp, tanh, erf, log1p, pow,
// sin, cos): its functions use fused multiply-adds inside, by design, so
// this module's PTX has them where its own arithmetic has none (the
// module is still compiled with --fmad=false; TestNVRTCNoFMA exempts it).

// The operators of runtime.BinaryOp.
enum { BIN_ADD = 0, BIN_SUB = 1, BIN_MUL = 2, BIN_DIV = 3, BIN_POW = 4 };

// powf_onnx is the CPU's Pow: the exponents 2, 1, 3 and 0.5 exact (x·x,
// x, x·x·x, √x), others in double rounded once.
__device__ __forceinline__ float powf_onnx(float a, float b) {
  if (b == 2.0f) return a * a;
  if (b == 1.0f) return a;
  if (b == 3.0f) return a * a * a;
  if (b == 0.5f) return (float)sqrt((double)a);
  return (float)pow((double)a, (double)b);
}

__device__ __forceinline__ float binary_op(int op, float a, float b) {
  switch (op) {
  case BIN_ADD: return a + b;
  case BIN_SUB: return a - b;
  case BIN_MUL: return a * b;
  case BIN_DIV: return a / b;
  }
  return powf_onnx(a, b);
}

// binary computes y = a op b for the n elements of y (operands 0 and 1 of
// l are a and b; every axis is kept).
extern "C" __global__ void binary(int op, const float *a, const float *b, float *y, long long n, Layout l) {
  FOR_EACH(i, n) {
    long long off[2] = {0, 0};
    layout_offsets(l, 0, l.rank, i, off, 2);
    y[i] = binary_op(op, a[off[0]], b[off[1]]);
  }
}

// binary_same_one computes y = a OP b over n elements of one shape (a
// residual connection's sum): no layout to walk, and only OP's case in
// the kernel (binary's holds Pow's double-precision pow). The same
// arithmetic as binary, so the same bits.
template <int OP>
__device__ __forceinline__ void binary_same_one(const float *a, const float *b, float *y, long long n) {
  FOR_EACH(i, n) y[i] = binary_op(OP, a[i], b[i]);
}

extern "C" __global__ void binary_same_add(const float *a, const float *b, float *y, long long n) { binary_same_one<BIN_ADD>(a, b, y, n); }
extern "C" __global__ void binary_same_sub(const float *a, const float *b, float *y, long long n) { binary_same_one<BIN_SUB>(a, b, y, n); }
extern "C" __global__ void binary_same_mul(const float *a, const float *b, float *y, long long n) { binary_same_one<BIN_MUL>(a, b, y, n); }
extern "C" __global__ void binary_same_div(const float *a, const float *b, float *y, long long n) { binary_same_one<BIN_DIV>(a, b, y, n); }

// binary_term is one term of binary_backward's sums: dy·∂y/∂operand at
// offsets off (dy and y, a, b), in float as the CPU's.
__device__ __forceinline__ float binary_term(int op, int wrt, const float *a, const float *b, const float *y, const float *dy, const long long *off) {
  float g = dy[off[0]], av = a[off[1]], bv = b[off[2]];
  switch (op) {
  case BIN_ADD: return g;
  case BIN_SUB: return wrt == 0 ? g : -g;
  case BIN_MUL: return wrt == 0 ? g * bv : g * av;
  case BIN_DIV: return wrt == 0 ? g / bv : -g * y[off[0]] / bv;
  default:
    if (wrt == 0) return g * bv * powf_onnx(av, bv - 1);
    if (av == 0 && bv >= 0) return 0;
    return g * y[off[0]] * (float)log((double)av);
  }
}

// binary_part is element j's terms r0, r0 + step, … (of m) summed: one
// thread's share in each form below.
__device__ static double binary_part(int op, int wrt, const float *a, const float *b, const float *y, const float *dy,
                                     long long j, long long r0, long long step, long long m, const Layout &l) {
  long long base[3] = {0, 0, 0};
  layout_offsets(l, 0, l.keep, j, base, 3);
  double s = 0;
  for (long long r = r0; r < m; r += step) {
    long long off[3] = {base[0], base[1], base[2]};
    layout_offsets(l, l.keep, l.rank, r, off, 3);
    s += binary_term(op, wrt, a, b, y, dy, off);
  }
  return s;
}

// binary_backward writes the gradient t of y = a op b with respect to a
// (wrt 0) or b (wrt 1): for each of its n elements (the kept axes of l,
// t contiguous over them) the sum over the m looped positions of
// dy·∂y/∂operand, each term in float as the CPU's, summed in double and
// rounded once. l's operands: 0 dy (and y, the same layout), 1 a, 2 b.
// A thread per element of t: for many elements with few terms each.
extern "C" __global__ void binary_backward(int op, int wrt, const float *a, const float *b, const float *y, const float *dy, float *t, long long n, long long m, Layout l) {
  FOR_EACH(j, n) t[j] = (float)binary_part(op, wrt, a, b, y, dy, j, 0, 1, m, l);
}

// binary_backward_block is binary_backward with a block per element of t,
// for few elements with many terms each (a per-channel scale's gradient,
// summed over a batch of feature maps: a thread per channel would leave
// the GPU nearly idle, each thread looping over hundreds of thousands of
// terms): thread k takes the terms k, k + blockDim.x, …, and block_sum
// adds the threads' sums.
extern "C" __global__ void binary_backward_block(int op, int wrt, const float *a, const float *b, const float *y, const float *dy, float *t, long long n, long long m, Layout l) {
  __shared__ double part[32];
  for (long long j = blockIdx.x; j < n; j += gridDim.x) {
    double s = block_sum(binary_part(op, wrt, a, b, y, dy, j, threadIdx.x, blockDim.x, m, l), part);
    if (threadIdx.x == 0) t[j] = (float)s;
  }
}

// binary_backward_cols is binary_backward in column tiles (cols_total),
// where t's elements run along y's innermost axis: a bias added to a batch
// of tokens, whose gradient a block per element read a row apart.
extern "C" __global__ void binary_backward_cols(int op, int wrt, const float *a, const float *b, const float *y, const float *dy, float *t, long long n, long long m, Layout l) {
  __shared__ double part[32][33];
  COL_TILES(j, n) {
    double s = cols_total(j < n ? binary_part(op, wrt, a, b, y, dy, j, threadIdx.y, blockDim.y, m, l) : 0.0, part);
    if (threadIdx.y == 0 && j < n) t[j] = (float)s;
  }
}

// The operators of runtime.UnaryOp, in its order.
enum {
  U_RELU, U_SIGMOID, U_TANH, U_ERF, U_EXP, U_LOG, U_SQRT, U_NEG, U_ABS, U_RECIPROCAL, U_IDENTITY,
  U_LEAKY_RELU, U_ELU, U_HARD_SIGMOID, U_HARD_SWISH, U_SOFTPLUS, U_GELU, U_GELU_TANH, U_SELU, U_CELU,
  U_SIGN, U_SHRINK, U_SOFTSIGN, U_THRESHOLDED_RELU, U_MISH, U_FLOOR, U_CEIL, U_ROUND, U_SIN, U_COS, U_SCALE
};

// softplus is log(1 + eˣ) as max(x, 0) + log1p(e^−|x|), which does not
// overflow.
__device__ __forceinline__ double softplus(double x) { return fmax(x, 0.0) + log1p(exp(-fabs(x))); }

#define SQRT2 1.4142135623730951
#define SQRT_2_OVER_PI 0.7978845608028654
#define SQRT_2PI 2.5066282746310002
#define TWO_OVER_SQRT_PI 1.1283791670955126

// unary_f is op(x) in double, the operators' ONNX definitions; a, b, g
// are α, β, γ. Inlined, so that a kernel for one operator (below) keeps
// only its case.
__device__ __forceinline__ double unary_f(int op, double a, double b, double g, double x) {
  switch (op) {
  case U_RELU: return x < 0 ? 0 : x;
  case U_SIGMOID: return 1 / (1 + exp(-x));
  case U_TANH: return tanh(x);
  case U_ERF: return erf(x);
  case U_EXP: return exp(x);
  case U_LOG: return log(x);
  case U_SQRT: return sqrt(x);
  case U_NEG: return -x;
  case U_ABS: return fabs(x);
  case U_RECIPROCAL: return 1 / x;
  case U_IDENTITY: return x;
  case U_LEAKY_RELU: return x < 0 ? a * x : x;
  case U_ELU: return x < 0 ? a * (exp(x) - 1) : x;
  case U_HARD_SIGMOID: return fmax(0.0, fmin(1.0, a * x + b));
  case U_HARD_SWISH: return x * fmax(0.0, fmin(1.0, x / 6 + 0.5));
  case U_SOFTPLUS: return softplus(x);
  case U_GELU: return 0.5 * x * (1 + erf(x / SQRT2));
  case U_GELU_TANH: return 0.5 * x * (1 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)));
  case U_SELU: return x > 0 ? g * x : g * (a * exp(x) - a);
  case U_CELU: return fmax(0.0, x) + fmin(0.0, a * (exp(x / a) - 1));
  case U_SIGN: return x > 0 ? 1 : x < 0 ? -1 : x;
  case U_SHRINK: return x < -a ? x + b : x > a ? x - b : 0;
  case U_SOFTSIGN: return x / (1 + fabs(x));
  case U_THRESHOLDED_RELU: return x > a ? x : 0;
  case U_MISH: return x * tanh(softplus(x));
  case U_FLOOR: return floor(x);
  case U_CEIL: return ceil(x);
  case U_ROUND: return rint(x);
  case U_SIN: return sin(x);
  case U_COS: return cos(x);
  }
  return a * x; // U_SCALE
}

// unary_grad is op'(x) in double from the input x or the output y (the
// one runtime.ElementwiseOps.UnaryBackward gives the operator).
__device__ __forceinline__ double unary_grad(int op, double a, double b, double g, double x, double y) {
  switch (op) {
  case U_RELU: return y > 0 ? 1 : 0;
  case U_SIGMOID: return y * (1 - y);
  case U_TANH: return 1 - y * y;
  case U_ERF: return TWO_OVER_SQRT_PI * exp(-x * x);
  case U_EXP: return y;
  case U_LOG: return 1 / x;
  case U_SQRT: return 1 / (2 * y);
  case U_NEG: return -1;
  case U_ABS: return x > 0 ? 1 : x < 0 ? -1 : 0;
  case U_RECIPROCAL: return -y * y;
  case U_IDENTITY: return 1;
  case U_LEAKY_RELU: return x < 0 ? a : 1;
  case U_ELU: return x < 0 ? a * exp(x) : 1;
  case U_HARD_SIGMOID: {
    double v = a * x + b;
    return v > 0 && v < 1 ? a : 0;
  }
  case U_HARD_SWISH: return x <= -3 ? 0 : x >= 3 ? 1 : x / 3 + 0.5;
  case U_SOFTPLUS: return 1 / (1 + exp(-x));
  case U_GELU: return 0.5 * (1 + erf(x / SQRT2)) + x * exp(-x * x / 2) / SQRT_2PI;
  case U_GELU_TANH: {
    double t = tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x);
  }
  case U_SELU: return x > 0 ? g : g * a * exp(x);
  case U_CELU: return x > 0 ? 1 : exp(x / a);
  case U_SIGN:
  case U_FLOOR:
  case U_CEIL:
  case U_ROUND: return 0;
  case U_SHRINK: return x < -a || x > a ? 1 : 0;
  case U_SOFTSIGN: {
    double d = 1 + fabs(x);
    return 1 / (d * d);
  }
  case U_THRESHOLDED_RELU: return x > a ? 1 : 0;
  case U_MISH: {
    double t = tanh(softplus(x));
    return t + x * (1 - t * t) * (1 / (1 + exp(-x)));
  }
  case U_SIN: return cos(x);
  case U_COS: return -sin(x);
  }
  return a; // U_SCALE
}

// unary computes y = op(x) over n elements (y may be x).
extern "C" __global__ void unary(int op, float a, float b, float g, const float *x, float *y, long long n) {
  FOR_EACH(i, n) y[i] = (float)unary_f(op, a, b, g, x[i]);
}

// unary_backward computes dx = dy·op'(x) over n elements (dx may be dy);
// x or y is null where the operator does not read it.
extern "C" __global__ void unary_backward(int op, float a, float b, float g, const float *x, const float *y, const float *dy, float *dx, long long n) {
  FOR_EACH(i, n) {
    double xv = x ? x[i] : 0, yv = y ? y[i] : 0;
    dx[i] = (float)((double)dy[i] * unary_grad(op, a, b, g, xv, yv));
  }
}

// unary_one and unary_backward_one are unary and unary_backward for the
// one operator OP: the same arithmetic, and so the same bits. A kernel
// holding every operator's double-precision transcendentals is compiled
// for the registers of its largest case; ReLU's and GELU's, the
// activations of nearly every CNN and ViT, then ran at a fraction of the
// memory's bandwidth (the fifth GPU loan's profiles: ResNet-50's ReLU
// passes 2.2× PyTorch's time, ViT-B/16's GELU more). A kernel of one
// operator (unary_relu, unary_backward_relu, …; op, the first argument,
// ignored) holds its own case alone.
template <int OP>
__device__ __forceinline__ void unary_one(float a, float b, float g, const float *x, float *y, long long n) {
  FOR_EACH(i, n) y[i] = (float)unary_f(OP, a, b, g, x[i]);
}

template <int OP>
__device__ __forceinline__ void unary_backward_one(float a, float b, float g, const float *x, const float *y, const float *dy, float *dx, long long n) {
  FOR_EACH(i, n) {
    double xv = x ? x[i] : 0, yv = y ? y[i] : 0;
    dx[i] = (float)((double)dy[i] * unary_grad(OP, a, b, g, xv, yv));
  }
}

extern "C" __global__ void unary_relu(int op, float a, float b, float g, const float *x, float *y, long long n) { unary_one<U_RELU>(a, b, g, x, y, n); }
extern "C" __global__ void unary_gelu(int op, float a, float b, float g, const float *x, float *y, long long n) { unary_one<U_GELU>(a, b, g, x, y, n); }
extern "C" __global__ void unary_gelu_tanh(int op, float a, float b, float g, const float *x, float *y, long long n) { unary_one<U_GELU_TANH>(a, b, g, x, y, n); }
extern "C" __global__ void unary_sigmoid(int op, float a, float b, float g, const float *x, float *y, long long n) { unary_one<U_SIGMOID>(a, b, g, x, y, n); }
extern "C" __global__ void unary_tanh(int op, float a, float b, float g, const float *x, float *y, long long n) { unary_one<U_TANH>(a, b, g, x, y, n); }

extern "C" __global__ void unary_backward_relu(int op, float a, float b, float g, const float *x, const float *y, const float *dy, float *dx, long long n) {
  unary_backward_one<U_RELU>(a, b, g, x, y, dy, dx, n);
}
extern "C" __global__ void unary_backward_gelu(int op, float a, float b, float g, const float *x, const float *y, const float *dy, float *dx, long long n) {
  unary_backward_one<U_GELU>(a, b, g, x, y, dy, dx, n);
}
extern "C" __global__ void unary_backward_gelu_tanh(int op, float a, float b, float g, const float *x, const float *y, const float *dy, float *dx, long long n) {
  unary_backward_one<U_GELU_TANH>(a, b, g, x, y, dy, dx, n);
}
extern "C" __global__ void unary_backward_sigmoid(int op, float a, float b, float g, const float *x, const float *y, const float *dy, float *dx, long long n) {
  unary_backward_one<U_SIGMOID>(a, b, g, x, y, dy, dx, n);
}
extern "C" __global__ void unary_backward_tanh(int op, float a, float b, float g, const float *x, const float *y, const float *dy, float *dx, long long n) {
  unary_backward_one<U_TANH>(a, b, g, x, y, dy, dx, n);
}

// clip_f computes y = min(max(x, lo), hi) (NaN stays NaN).
extern "C" __global__ void clip_f(const float *x, float lo, float hi, float *y, long long n) {
  FOR_EACH(i, n) {
    float v = x[i];
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    y[i] = v;
  }
}

// clip_backward computes dx = dy where lo ≤ x ≤ hi, 0 elsewhere.
extern "C" __global__ void clip_backward(const float *x, float lo, float hi, const float *dy, float *dx, long long n) {
  FOR_EACH(i, n) dx[i] = lo <= x[i] && x[i] <= hi ? dy[i] : 0.0f;
}

// where_f computes out = cond ? x : y for the n elements of out; l's
// operands: 0 cond, 1 x, 2 y.
extern "C" __global__ void where_f(const unsigned char *cond, const float *x, const float *y, float *out, long long n, Layout l) {
  FOR_EACH(i, n) {
    long long off[3] = {0, 0, 0};
    layout_offsets(l, 0, l.rank, i, off, 3);
    out[i] = cond[off[0]] ? x[off[1]] : y[off[2]];
  }
}

// where_backward writes t[j] (n elements, the kept axes of l) = the sum of
// dout over the m looped positions where (cond != 0) == want, in double.
// l's operands: 0 dout, 1 cond.
extern "C" __global__ void where_backward(const unsigned char *cond, const float *dout, int want, float *t, long long n, long long m, Layout l) {
  FOR_EACH(j, n) {
    long long base[2] = {0, 0};
    layout_offsets(l, 0, l.keep, j, base, 2);
    double s = 0;
    for (long long r = 0; r < m; r++) {
      long long off[2] = {base[0], base[1]};
      layout_offsets(l, l.keep, l.rank, r, off, 2);
      if ((cond[off[1]] != 0) == (want != 0)) s += dout[off[0]];
    }
    t[j] = (float)s;
  }
}

// prelu computes y = x where x > 0, else slope·x, the slope of element j
// slope[s_idx[j]] (slope[j] when s_idx is null).
extern "C" __global__ void prelu(const float *x, const float *slope, const int *s_idx, float *y, long long n) {
  FOR_EACH(j, n) {
    float v = x[j];
    y[j] = v > 0 ? v : slope[s_idx ? s_idx[j] : j] * v;
  }
}

// prelu_backward computes dx = dy (x > 0) or dy·slope, and ds = 0 (x > 0)
// or dy·x; a null dx or ds is skipped.
extern "C" __global__ void prelu_backward(const float *x, const float *slope, const int *s_idx, const float *dy, float *dx, float *ds, long long n) {
  FOR_EACH(j, n) {
    float v = x[j];
    if (dx) dx[j] = v > 0 ? dy[j] : dy[j] * slope[s_idx ? s_idx[j] : j];
    if (ds) ds[j] = v > 0 ? 0.0f : dy[j] * v;
  }
}

// maxmin_at is element j of input i: xs[i][idx[i][j]], or xs[i][j] when
// idx[i] is null.
__device__ __forceinline__ float maxmin_at(const float *const *xs, const int *const *idx, int i, long long j) {
  return idx[i] ? xs[i][idx[i][j]] : xs[i][j];
}

// maxmin_winner is the input whose element j is the extreme (the first
// NaN, else the first attaining it).
__device__ int maxmin_winner(int is_min, int k, const float *const *xs, const int *const *idx, long long j) {
  int w = 0;
  float v = maxmin_at(xs, idx, 0, j);
  for (int i = 1; i < k; i++) {
    float u = maxmin_at(xs, idx, i, j);
    if ((!is_min && u > v) || (is_min && u < v) || (u != u && v == v)) w = i, v = u;
  }
  return w;
}

// maxmin computes y[j] = the max (or min) over the k inputs of element j,
// a NaN winning.
extern "C" __global__ void maxmin(int is_min, int k, const float *const *xs, const int *const *idx, float *y, long long n) {
  FOR_EACH(j, n) y[j] = maxmin_at(xs, idx, maxmin_winner(is_min, k, xs, idx, j), j);
}

// maxmin_winners writes the winner of each element j to w.
extern "C" __global__ void maxmin_winners(int is_min, int k, const float *const *xs, const int *const *idx, int *w, long long n) {
  FOR_EACH(j, n) w[j] = maxmin_winner(is_min, k, xs, idx, j);
}

// maxmin_grad_direct writes dx[j] = dy[j] where input i won element j, 0
// elsewhere (an input not broadcast: element j is its own).
extern "C" __global__ void maxmin_grad_direct(const int *w, int i, const float *dy, float *dx, long long n) {
  FOR_EACH(j, n) dx[j] = w[j] == i ? dy[j] : 0.0f;
}

// maxmin_grad_scatter adds dy[j] into dx[idx[j]] where input i won element
// j, for j in order on one thread (several j share an element of a
// broadcast input, and their order decides its float sum); dx is zeroed
// first (len elements).
extern "C" __global__ void maxmin_grad_scatter(const int *w, int i, const int *idx, const float *dy, float *dx, long long len, long long n) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (long long e = 0; e < len; e++) dx[e] = 0;
  for (long long j = 0; j < n; j++)
    if (w[j] == i) dx[idx[j]] += dy[j];
}
