// reduce.cu: runtime.ReduceOps (device_reduce.go): reductions over axes,
// softmax and log-softmax, the softmax cross-entropy head and the scatter
// reductions. One thread per output (a reduction's element) sums its
// terms in the order of the input, as the CPU does (float64 but for
// ReduceSum's and ReduceMean's float32, as the contract says); a softmax
// line or a sample's logits are a warp's when they are long and
// contiguous (lanes_total's order: the double sums round to the same
// float all but never); the backward passes are one thread per input
// element.
// ScatterReduce runs on one thread: two updates may land on one element,
// and the order of their combination decides the result.

// The reductions (runtime.ReduceOp).
enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_SUM_SQUARE, R_LOG_SUM, R_LOG_SUM_EXP };

// Shapes (Go: reduceShapes): sh[0..rank) is x's shape, sh[rank..2·rank)
// y's, of the same rank with 1 on the reduced axes.

// group returns the element of y that x's element i reduces into.
__device__ static long long group(const long long *sh, int rank, long long i) {
  long long g = 0, st = 1;
  for (int a = rank - 1; a >= 0; a--) {
    long long c = i % sh[a];
    i /= sh[a];
    if (sh[rank + a] != 1) g += c * st;
    st *= sh[rank + a];
  }
  return g;
}

// reduce_axes computes y[j] = op over the count elements of x reducing
// into it, leaving state for reduce_axes_bwd (runtime.ReduceStateLen):
// the winner's index (ReduceMax, ReduceMin), the product of the nonzero
// elements and the count of zeros (ReduceProd, at j and ny + j), the sum
// (the others). scale is ReduceMean's 1/count.
extern "C" __global__ void reduce_axes(int op, const float *x, const long long *sh, int rank, float *y, double *state,
                                       long long ny, long long count, float scale) {
  FOR_EACH(j, ny) {
    switch (op) {
      case R_SUM:
      case R_MEAN: {
        float s = 0;
        for (long long q = 0; q < count; q++) s += x[reduce_element(sh, rank, j, q)];
        y[j] = op == R_MEAN ? s * scale : s;
        break;
      }
      case R_MAX:
      case R_MIN: {
        long long a = -1;
        for (long long q = 0; q < count; q++) {
          long long i = reduce_element(sh, rank, j, q);
          float v = x[i];
          if (a < 0 || (v != v && x[a] == x[a]) || (op == R_MAX && v > x[a]) || (op == R_MIN && v < x[a])) a = i;
        }
        state[j] = (double)a;
        y[j] = x[a];
        break;
      }
      case R_PROD: {
        double nz = 1, zeros = 0;
        for (long long q = 0; q < count; q++) {
          float v = x[reduce_element(sh, rank, j, q)];
          if (v == 0)
            zeros++;
          else
            nz *= (double)v;
        }
        state[j] = nz;
        state[ny + j] = zeros;
        y[j] = zeros > 0 ? 0.0f : (float)nz;
        break;
      }
      case R_LOG_SUM_EXP: {
        // Shifted by the maximum, so that large inputs do not overflow.
        double m = -__longlong_as_double(0x7ff0000000000000LL);
        for (long long q = 0; q < count; q++) m = fmax(m, (double)x[reduce_element(sh, rank, j, q)]);
        float mf = (float)m;
        double s = 0;
        for (long long q = 0; q < count; q++) s += d_exp((double)(x[reduce_element(sh, rank, j, q)] - mf));
        state[j] = s;
        y[j] = mf + (float)d_log(s);
        break;
      }
      default: {
        double s = 0;
        for (long long q = 0; q < count; q++) {
          double f = x[reduce_element(sh, rank, j, q)];
          s += op == R_L1 ? fabs(f) : op == R_LOG_SUM ? f : f * f;
        }
        state[j] = s;
        y[j] = (float)(op == R_L2 ? sqrt(s) : op == R_LOG_SUM ? d_log(s) : s);
      }
    }
  }
}

// reduce_axes_bwd computes dx[i] from dy at x's element i's group g: dy
// (ReduceSum), dy·scale (ReduceMean), dy at the winner (ReduceMax,
// ReduceMin), and the derivative of the others.
extern "C" __global__ void reduce_axes_bwd(int op, const float *x, const long long *sh, int rank, const float *y,
                                           const float *dy, const double *state, long long ny, float *dx, long long nx,
                                           float scale) {
  FOR_EACH(i, nx) {
    long long g = group(sh, rank, i);
    float v = x ? x[i] : 0, d = dy[g], r;
    switch (op) {
      case R_SUM:
        r = d;
        break;
      case R_MEAN:
        r = d * scale;
        break;
      case R_MAX:
      case R_MIN:
        r = (long long)state[g] == i ? 0.0f + d : 0.0f;
        break;
      case R_PROD: {
        double nz = state[g], zeros = state[ny + g];
        if (zeros == 0)
          r = d * (float)(nz / (double)v);
        else if (zeros == 1 && v == 0)
          r = d * (float)nz;
        else
          r = 0;
        break;
      }
      case R_L1:
        r = v > 0 ? d : v < 0 ? -d : 0.0f;
        break;
      case R_L2:
        r = y[g] == 0 ? 0.0f : d * v / y[g];
        break;
      case R_SUM_SQUARE:
        r = 2 * d * v;
        break;
      case R_LOG_SUM:
        r = d * (float)d_exp(-(double)y[g]);
        break;
      default: // R_LOG_SUM_EXP
        r = d * (float)d_exp((double)(v - y[g]));
    }
    dx[i] = r;
  }
}

// softmax computes the softmax (or, with log_softmax, the log-softmax) of
// x viewed as outer × n × inner along n, lanes threads per line (a warp
// along a contiguous line, inner = 1; else a thread, neighbouring lines
// being neighbouring addresses): y = e/Σe with e = exp(x − max) in float,
// the sum in double.
// A warp's contiguous line of at most 32·SOFTMAX_REGS elements stays in
// its lanes' registers (lane l holding elements l, l + 32, …): one read of
// x and one write of y instead of three passes over the line and y
// written twice (ViT-B/16's attention, lines of 197). The same operations
// in the same order, so the same bits (TestSoftmaxRegisters). regs = 0
// takes the passes.
#define SOFTMAX_REGS 8

extern "C" __global__ void softmax(const float *x, long long outer, long long n, long long inner, float *y,
                                   int log_softmax, int regs, int lanes) {
  int lane = LANE_OF(lanes);
  LANES_FOR_EACH(line, outer * inner, lanes) {
    long long base = line / inner * n * inner + line % inner;
    if (regs && lanes == 32 && inner == 1 && n <= 32 * SOFTMAX_REGS) {
      float v[SOFTMAX_REGS], m = __uint_as_float(0xff800000u);
#pragma unroll
      for (int q = 0; q < SOFTMAX_REGS; q++) {
        long long j = lane + 32 * q;
        v[q] = j < n ? x[base + j] : 0.0f;
        if (j < n && v[q] > m) m = v[q];
      }
      m = lanes_max(m, lanes);
      double s = 0;
#pragma unroll
      for (int q = 0; q < SOFTMAX_REGS; q++) {
        if (lane + 32 * q < n) {
          float e = (float)d_exp((double)(v[q] - m));
          s += e;
          if (!log_softmax) v[q] = e;
        }
      }
      s = lanes_total(s, lanes);
      float ls = log_softmax ? (float)d_log(s) : 0.0f, inv = log_softmax ? 0.0f : (float)(1 / s);
#pragma unroll
      for (int q = 0; q < SOFTMAX_REGS; q++) {
        long long j = lane + 32 * q;
        if (j < n) y[base + j] = log_softmax ? v[q] - m - ls : v[q] * inv;
      }
      continue;
    }
    float m = __uint_as_float(0xff800000u);
    for (long long j = lane; j < n; j += lanes) {
      float v = x[base + j * inner];
      if (v > m) m = v;
    }
    m = lanes_max(m, lanes);
    double s = 0;
    for (long long j = lane; j < n; j += lanes) {
      float e = (float)d_exp((double)(x[base + j * inner] - m));
      s += e;
      if (!log_softmax) y[base + j * inner] = e;
    }
    s = lanes_total(s, lanes);
    if (log_softmax) {
      float ls = (float)d_log(s);
      for (long long j = lane; j < n; j += lanes) y[base + j * inner] = x[base + j * inner] - m - ls;
    } else {
      float inv = (float)(1 / s);
      for (long long j = lane; j < n; j += lanes) y[base + j * inner] *= inv;
    }
  }
}

// softmax_bwd computes dx = y ⊙ (dy − Σ dy ⊙ y) along n from the softmax
// y, or with log_softmax dx = dy − exp(y)·Σ dy from the log-softmax y,
// lanes threads per line as softmax.
extern "C" __global__ void softmax_bwd(const float *y, const float *dy, long long outer, long long n, long long inner,
                                       float *dx, int log_softmax, int regs, int lanes) {
  int lane = LANE_OF(lanes);
  LANES_FOR_EACH(line, outer * inner, lanes) {
    long long base = line / inner * n * inner + line % inner;
    if (regs && lanes == 32 && inner == 1 && n <= 32 * SOFTMAX_REGS) { // y and dy in registers, as softmax
      float yv[SOFTMAX_REGS], gv[SOFTMAX_REGS];
      double s = 0;
#pragma unroll
      for (int q = 0; q < SOFTMAX_REGS; q++) {
        long long j = lane + 32 * q;
        yv[q] = j < n ? y[base + j] : 0.0f;
        gv[q] = j < n ? dy[base + j] : 0.0f;
        if (j < n) s += log_softmax ? (double)gv[q] : (double)(gv[q] * yv[q]);
      }
      s = lanes_total(s, lanes);
#pragma unroll
      for (int q = 0; q < SOFTMAX_REGS; q++) {
        long long j = lane + 32 * q;
        if (j < n) dx[base + j] = log_softmax ? gv[q] - (float)d_exp((double)yv[q]) * (float)s : yv[q] * (gv[q] - (float)s);
      }
      continue;
    }
    double s = 0;
    if (log_softmax) {
      for (long long j = lane; j < n; j += lanes) s += dy[base + j * inner];
      s = lanes_total(s, lanes);
      for (long long j = lane; j < n; j += lanes) {
        long long k = base + j * inner;
        dx[k] = dy[k] - (float)d_exp((double)y[k]) * (float)s;
      }
    } else {
      for (long long j = lane; j < n; j += lanes) {
        long long k = base + j * inner;
        s += (double)(dy[k] * y[k]);
      }
      s = lanes_total(s, lanes);
      for (long long j = lane; j < n; j += lanes) {
        long long k = base + j * inner;
        dx[k] = y[k] * (dy[k] - (float)s);
      }
    }
  }
}

// softmax_xent computes, per sample i, the softmax of its k logits into
// probs and the loss log Σ exp(z) − Σ_j t_j z_j into losses, t the label
// smoothed by alpha (t_j = (1−α)[j = label] + α/k): lanes threads per
// sample.
extern "C" __global__ void softmax_xent(const float *logits, const long long *labels, long long n, long long k,
                                        float alpha, float *losses, float *probs, int lanes) {
  int lane = LANE_OF(lanes);
  LANES_FOR_EACH(i, n, lanes) {
    const float *row = logits + i * k;
    float *pr = probs + i * k;
    float m = __uint_as_float(0xff800000u);
    for (long long j = lane; j < k; j += lanes)
      if (row[j] > m) m = row[j];
    m = lanes_max(m, lanes);
    double s = 0;
    for (long long j = lane; j < k; j += lanes) {
      double e = d_exp((double)(row[j] - m));
      pr[j] = (float)e;
      s += e;
    }
    s = lanes_total(s, lanes);
    float inv = (float)(1 / s);
    for (long long j = lane; j < k; j += lanes) pr[j] *= inv;
    double all = 0;
    if (alpha != 0) {
      for (long long j = lane; j < k; j += lanes) all += (double)(row[j] - m);
      all = lanes_total(all, lanes);
    }
    if (lane == 0) {
      double target = (double)(row[labels[i]] - m);
      if (alpha != 0) target = (1 - (double)alpha) * target + (double)alpha / (double)k * all;
      losses[i] = (float)(d_log(s) - target);
    }
  }
}

// softmax_xent_bwd writes dlogits = w_i·(probs − t_i), t_i the label
// smoothed by alpha (onehot(label_i) at α = 0), as the CPU does.
extern "C" __global__ void softmax_xent_bwd(const float *probs, const long long *labels, const float *weights,
                                            long long n, long long k, float alpha, float *dlogits) {
  float off = (float)((double)alpha / (double)k), on = 1 - alpha;
  FOR_EACH(e, n * k) {
    long long i = e / k;
    float w = weights[i], d;
    if (alpha == 0) {
      d = w * probs[e];
      if (e % k == labels[i]) d -= w;
    } else {
      d = w * (probs[e] - off);
      if (e % k == labels[i]) d -= w * on;
    }
    dlogits[e] = d;
  }
}

// label_bit is label j of sample i in label sets of k labels, 2·⌈k/64⌉
// words a sample (runtime.LabelWords: the set's words, bit j%64 of word
// j/64, then its ignored labels'): 1 where it applies, else 0.
__device__ __forceinline__ long long label_bit(const long long *labels, long long k, long long i, long long j) {
  long long v = (k + 63) >> 6;
  return (long long)(((unsigned long long)labels[i * 2 * v + (j >> 6)] >> (j & 63)) & 1);
}

// label_ignored is 1 where sample i ignores label j (bit j%64 of word
// j/64 of the sample's second ⌈k/64⌉ words), else 0.
__device__ __forceinline__ long long label_ignored(const long long *labels, long long k, long long i, long long j) {
  long long v = (k + 63) >> 6;
  return (long long)(((unsigned long long)labels[i * 2 * v + v + (j >> 6)] >> (j & 63)) & 1);
}

// sigmoid_xent computes, per sample i (a thread each), the binary
// cross-entropy of each of its k logits' sigmoid against label j of its
// label set (label_bit; none where it ignores the label, label_ignored,
// but for an uncertain one's soft target uncertain[j] > 0)
// smoothed by alpha towards ½, its positive term weighed by
// pos_weight[j], averaged over the labels, into losses, and σ(z) into
// probs: the CPU's terms in double, c·max(z, 0) − z·(p·t) + c·log(1 +
// e^{−|z|}), c = 1 + (p − 1)·t.
extern "C" __global__ void sigmoid_xent(const float *logits, const long long *labels, long long n, long long k,
                                        float alpha, const float *pos_weight, const float *uncertain, float *losses,
                                        float *probs) {
  double a = (double)alpha;
  FOR_EACH(i, n) {
    const float *row = logits + i * k;
    float *pr = probs + i * k;
    double s = 0;
    for (long long j = 0; j < k; j++) {
      double z = (double)row[j];
      double e = d_exp(z < 0 ? z : -z);
      pr[j] = (float)(z >= 0 ? 1 / (1 + e) : e / (1 + e));
      double t = (1 - a) * (double)label_bit(labels, k, i, j) + a / 2;
      if (label_ignored(labels, k, i, j)) {
        if (uncertain[j] <= 0) continue;  // no term; the mean still over k
        t = (1 - a) * (double)uncertain[j] + a / 2;  // an uncertain label's soft target
      }
      double p = (double)pos_weight[j];
      double c = 1 + (p - 1) * t;
      s += c * (z > 0 ? z : 0) - z * (p * t) + c * d_log(1 + e);
    }
    losses[i] = (float)(s / (double)k);
  }
}

// sigmoid_xent_bwd writes dlogits = w_i/k·((1 + (p − 1)·t)·probs − p·t)
// (0 for an ignored label),
// t the label set smoothed by alpha and p the label's pos_weight, in
// float as the CPU does: (probs − t) + (p − 1)·t·(probs − 1).
extern "C" __global__ void sigmoid_xent_bwd(const float *probs, const long long *labels, const float *weights,
                                            long long n, long long k, float alpha, const float *pos_weight,
                                            const float *uncertain, float *dlogits) {
  float inv = 1 / (float)k, off = alpha / 2, on = 1 - alpha / 2;
  FOR_EACH(e, n * k) {
    long long i = e / k, j = e % k;
    float t = label_bit(labels, k, i, j) ? on : off;
    if (label_ignored(labels, k, i, j)) {
      if (uncertain[j] <= 0) {
        dlogits[e] = 0;
        continue;
      }
      t = (1 - alpha) * uncertain[j] + off;
    }
    float w = weights[i] * inv;
    dlogits[e] = w * ((probs[e] - t) + (pos_weight[j] - 1) * t * (probs[e] - 1));
  }
}

// The scatter reductions (runtime.ScatterReduction).
enum { S_NONE, S_ADD, S_MUL, S_MAX, S_MIN };

// scatter_reduce combines u[i] into y[idx[i]] for i < n in increasing i,
// on one thread (Max and Min propagate NaN).
extern "C" __global__ void scatter_reduce(int red, const float *u, const int *idx, long long n, float *y) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (long long i = 0; i < n; i++) {
    float *t = y + idx[i];
    float v = u[i];
    switch (red) {
      case S_NONE:
        *t = v;
        break;
      case S_ADD:
        *t += v;
        break;
      case S_MUL:
        *t *= v;
        break;
      case S_MAX: // as Go's max: NaN wins, +0 over −0
        if (*t == *t && (v != v || v > *t || (v == 0 && *t == 0 && (__float_as_uint(*t) >> 31)))) *t = v;
        break;
      default: // as Go's min: NaN wins, −0 over +0
        if (*t == *t && (v != v || v < *t || (v == 0 && *t == 0 && (__float_as_uint(v) >> 31)))) *t = v;
    }
  }
}
