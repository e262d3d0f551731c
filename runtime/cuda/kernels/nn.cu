// nn.cu: runtime.NNOps (device_nn.go): convolutions, poolings, the
// normalizations, LRN and Gemm's bias. Correct and simple first: one
// thread per output element (grid-stride loops), each summing its terms in
// double in a fixed order and rounding once, as the reference backend
// does; a gradient that several outputs feed is gathered by the thread of
// the gradient's element (the window positions that read it enumerated
// backwards), never scattered with atomics, so that results do not depend
// on the schedule. Statistics (a channel's or a row's mean and 1/σ) are
// one thread per channel or row, kept in double in scratch for the
// elementwise pass that follows.

// The geometry of a convolution or pooling (Go: packGeometry), int32s:
// sizes, then per spatial axis (lifted to three by leading unit axes) the
// input size, kernel size, stride, dilation, begin and end pads and the
// output size.
enum {
  G_N,     // batch
  G_C,     // input channels
  G_M,     // output channels (pooling: C)
  G_CG,    // input channels per group
  G_MG,    // output channels per group
  G_K,     // kernel taps ∏kernel
  G_T,     // output positions ∏out
  G_IN,    // input positions ∏in
  G_INCL,  // AveragePool: count_include_pad
  G_INS,   // in[3]
  G_KS = G_INS + 3,
  G_S = G_KS + 3,
  G_D = G_S + 3,
  G_PB = G_D + 3,
  G_PE = G_PB + 3,
  G_OUT = G_PE + 3,
  G_LEN = G_OUT + 3
};

// tap returns the flat input position of tap k of the window at flat
// output position o, or −1 when it lies outside the input; *padded tells
// whether it lies inside the padded input.
//
// A plane's positions and a window's taps are below 2³¹ (the geometry is
// int32s), so the coordinates divide in 32 bits, which a GPU does in a
// third of a 64-bit division's instructions; so do out_pos and
// FOR_TAPS_OF.
__device__ static long long tap(const int *g, long long o64, long long k64, bool *padded) {
  long long idx = 0, st = 1;
  bool inside = true, pad = true;
  unsigned o = (unsigned)o64, k = (unsigned)k64;
  for (int a = 2; a >= 0; a--) {
    unsigned oa = o % (unsigned)g[G_OUT + a], ka = k % (unsigned)g[G_KS + a];
    o /= (unsigned)g[G_OUT + a];
    k /= (unsigned)g[G_KS + a];
    long long i = (long long)oa * g[G_S + a] - g[G_PB + a] + (long long)ka * g[G_D + a];
    if (i < 0 || i >= g[G_INS + a]) inside = false;
    if (i < -g[G_PB + a] || i >= g[G_INS + a] + g[G_PE + a]) pad = false;
    idx += i * st;
    st *= g[G_INS + a];
  }
  if (padded) *padded = pad;
  return inside ? idx : -1;
}

// out_pos finds the output position *oa along axis a whose tap ka reads
// input position ia, if there is one.
__device__ static bool out_pos(const int *g, int a, long long ia, int ka, long long *oa) {
  long long num = ia + g[G_PB + a] - (long long)ka * g[G_D + a];
  if (num < 0) return false;
  unsigned s = (unsigned)g[G_S + a], q = s == 1 ? (unsigned)num : (unsigned)num / s; // num < 2³¹: within the padded plane
  if (q * s != (unsigned)num) return false;
  *oa = q;
  return q < (unsigned)g[G_OUT + a];
}

// AxisTaps are the taps along one axis that can read an input position
// ia (FOR_TAPS_OF): k, k + step, … Without dilation they are exactly the
// taps ≡ ia + pad (mod stride), the j-th of them reading it for output
// position q − j, so that a tap needs no division (exact); with dilation
// every tap is looked at (out_pos). A 2×2 pool of stride 2 visits one tap
// an axis, and divides once an axis, where a division a tap was most of
// its backward's instructions.
struct AxisTaps {
  int k, step;
  long long q;
  bool exact;
};

__device__ __forceinline__ AxisTaps axis_taps(const int *g, int a, long long ia) {
  AxisTaps t;
  if (g[G_D + a] != 1) {
    t.k = 0, t.step = 1, t.q = 0, t.exact = false;
    return t;
  }
  unsigned s = (unsigned)g[G_S + a], base = (unsigned)(ia + g[G_PB + a]); // within the padded plane: < 2³¹
  unsigned q = s == 1 ? base : base / s;
  t.k = (int)(base - q * s), t.step = (int)s, t.q = q, t.exact = true;
  return t;
}

// tap_out finds the output position *oa along axis a that the j-th of t's
// taps, ka, reads ia for, if there is one.
__device__ __forceinline__ bool tap_out(const int *g, int a, const AxisTaps &t, long long ia, int ka, int j,
                                        long long *oa) {
  if (!t.exact) return out_pos(g, a, ia, ka, oa);
  *oa = t.q - j;
  return *oa >= 0 && *oa < g[G_OUT + a];
}

// FOR_TAPS_OF(g, i, o, k) runs the statement that follows for every
// window position o and tap k that read input position i (flat in a
// plane), in increasing order of the kernel tap.
#define FOR_TAPS_OF(g, i, o, k)                                                       \
  long long ia_[3];                                                                   \
  {                                                                                   \
    unsigned r_ = (unsigned)(i);                                                      \
    for (int a_ = 2; a_ >= 0; a_--) {                                                 \
      unsigned n_ = (unsigned)g[G_INS + a_];                                          \
      ia_[a_] = n_ == 1 ? 0 : r_ % n_;                                                \
      r_ = n_ == 1 ? r_ : r_ / n_;                                                    \
    }                                                                                 \
  }                                                                                   \
  AxisTaps t0_ = axis_taps(g, 0, ia_[0]), t1_ = axis_taps(g, 1, ia_[1]), t2_ = axis_taps(g, 2, ia_[2]); \
  long long o0_, o1_, o2_;                                                            \
  for (int k0_ = t0_.k, j0_ = 0; k0_ < g[G_KS]; k0_ += t0_.step, j0_++)               \
    if (tap_out(g, 0, t0_, ia_[0], k0_, j0_, &o0_))                                   \
      for (int k1_ = t1_.k, j1_ = 0; k1_ < g[G_KS + 1]; k1_ += t1_.step, j1_++)       \
        if (tap_out(g, 1, t1_, ia_[1], k1_, j1_, &o1_))                               \
          for (int k2_ = t2_.k, j2_ = 0; k2_ < g[G_KS + 2]; k2_ += t2_.step, j2_++)   \
            if (tap_out(g, 2, t2_, ia_[2], k2_, j2_, &o2_))                           \
              for (long long o = (o0_ * g[G_OUT + 1] + o1_) * g[G_OUT + 2] + o2_,     \
                             k = ((long long)k0_ * g[G_KS + 1] + k1_) * g[G_KS + 2] + k2_, \
                             once_ = 1;                                               \
                   once_; once_ = 0)

// conv_fwd computes y[n,m,o] = bias[m] + Σ_{c in m's group, k} w[m,c,k]·
// x[n,c,tap(o,k)] (bias may be null): Conv, and ConvTranspose's input
// gradient.
extern "C" __global__ void conv_fwd(const int *g, const float *x, const float *w, const float *bias, float *y) {
  long long M = g[G_M], T = g[G_T], In = g[G_IN], K = g[G_K], Cg = g[G_CG];
  FOR_EACH(idx, g[G_N] * M * T) {
    long long n = idx / (M * T), m = idx / T % M, o = idx % T;
    long long c0 = m / g[G_MG] * Cg;
    double s = bias ? (double)bias[m] : 0;
    for (long long cg = 0; cg < Cg; cg++) {
      const float *xp = x + (n * g[G_C] + c0 + cg) * In, *wp = w + (m * Cg + cg) * K;
      for (long long k = 0; k < K; k++) {
        long long i = tap(g, o, k, 0);
        if (i >= 0) s += (double)wp[k] * (double)xp[i];
      }
    }
    y[idx] = (float)s;
  }
}

// conv_dx computes the convolution's input gradient dx[n,c,i] = bias[c] +
// Σ over the positions o and taps k reading i and the group's output
// channels m of dy[n,m,o]·w[m,c,k] (bias may be null): ConvBackward's dx,
// and ConvTranspose with its bias.
extern "C" __global__ void conv_dx(const int *g, const float *dy, const float *w, const float *bias, float *dx) {
  long long C = g[G_C], M = g[G_M], T = g[G_T], In = g[G_IN], K = g[G_K], Cg = g[G_CG], Mg = g[G_MG];
  FOR_EACH(idx, g[G_N] * C * In) {
    long long n = idx / (C * In), c = idx / In % C, i = idx % In;
    long long m0 = c / Cg * Mg, cg = c % Cg;
    double s = bias ? (double)bias[c] : 0;
    FOR_TAPS_OF(g, i, o, k) {
      for (long long m = m0; m < m0 + Mg; m++) s += (double)dy[(n * M + m) * T + o] * (double)w[(m * Cg + cg) * K + k];
    }
    dx[idx] = (float)s;
  }
}

// conv_dw computes the weight gradient dw[m,c,k] = Σ_{n,o} dy[n,m,o]·
// x[n,c,tap(o,k)], summed over the batch: a warp per weight, lane l
// taking the terms (n, o) with n·T + o ≡ l (mod 32).
extern "C" __global__ void conv_dw(const int *g, const float *x, const float *dy, float *dw) {
  long long C = g[G_C], M = g[G_M], T = g[G_T], In = g[G_IN], K = g[G_K], Cg = g[G_CG], NT = g[G_N] * T;
  WARP_FOR_EACH(idx, M * Cg * K) {
    long long m = idx / (Cg * K), cg = idx / K % Cg, k = idx % K;
    long long c = m / g[G_MG] * Cg + cg;
    double s = 0;
    for (long long q = LANE; q < NT; q += 32) {
      long long n = q / T, o = q % T, i = tap(g, o, k, 0);
      if (i >= 0) s += (double)dy[(n * M + m) * T + o] * (double)x[(n * C + c) * In + i];
    }
    s = warp_sum(s);
    if (LANE == 0) dw[idx] = (float)s;
  }
}

// The convolutions through cuBLAS (conv.go): a chunk of nb samples from
// n0 on, one group grp of channels at a time, its unfolded input one
// D × nb·T matrix (row (c·K + k), column j·T + t for sample n0 + j), so
// that the weight gradient is one GEMM over the chunk and the forward and
// input-gradient products are batched GEMMs over its samples (a sample's
// T columns, row stride nb·T). Each kernel is a thread per element written;
// conv_fold gathers its taps (FOR_TAPS_OF) as conv_dx does, so that no
// atomics decide a sum.

// conv_unfold writes col[(c·K + k)·nb·T + j·T + t] = x[n0 + j, grp·Cg + c,
// tap(t, k)], 0 in the padding: a warp per segment of up to UNFOLD_SEG
// positions of a row (c·K + k)·nb + j, whose channel plane and tap
// coordinates are divided out once a segment, a lane dividing only its
// position, in 32 bits (a plane's positions are below 2³¹, as tap's). A
// thread per element divided eight times an element, as im2col did.
#define UNFOLD_SEG 1024
extern "C" __global__ void conv_unfold(const int *g, const float *x, int grp, long long n0, long long nb, float *col) {
  int Cg = g[G_CG], K = g[G_K], T = g[G_T], segs = (T + UNFOLD_SEG - 1) / UNFOLD_SEG;
  long long In = g[G_IN], rows = (long long)Cg * K * nb;
  FastDiv by_segs = fast_div(segs, rows * segs), by_nb = fast_div(nb, rows), by_k = fast_div(K, (long long)Cg * K);
  FastDiv by_k2 = fast_div(g[G_KS + 2], K), by_k1 = fast_div(g[G_KS + 1], K);
  FastDiv by_o2 = fast_div(g[G_OUT + 2], T), by_o1 = fast_div(g[G_OUT + 1], T);
  WARP_FOR_EACH(item, rows * segs) {
    long long r = fdiv(by_segs, item), ck = fdiv(by_nb, r);
    int seg = (int)(item - r * segs), j = (int)(r - ck * nb);
    int c = (int)fdiv(by_k, ck), k = (int)(ck - (long long)c * K);
    int k1 = (int)fdiv(by_k2, k), kw = k - k1 * g[G_KS + 2], kd = (int)fdiv(by_k1, k1), kh = k1 - kd * g[G_KS + 1];
    const float *xp = x + ((n0 + j) * g[G_C] + (long long)grp * Cg + c) * In;
    float *cp = col + r * T;
    int t1 = (seg + 1) * UNFOLD_SEG < T ? (seg + 1) * UNFOLD_SEG : T;
    for (int t = seg * UNFOLD_SEG + LANE; t < t1; t += 32) {
      int q = (int)fdiv(by_o2, t), ow = t - q * g[G_OUT + 2], od = (int)fdiv(by_o1, q), oh = q - od * g[G_OUT + 1];
      int id = od * g[G_S] - g[G_PB] + kd * g[G_D];
      int ih = oh * g[G_S + 1] - g[G_PB + 1] + kh * g[G_D + 1];
      int iw = ow * g[G_S + 2] - g[G_PB + 2] + kw * g[G_D + 2];
      bool inside = id >= 0 && id < g[G_INS] && ih >= 0 && ih < g[G_INS + 1] && iw >= 0 && iw < g[G_INS + 2];
      cp[t] = inside ? xp[(id * g[G_INS + 1] + ih) * g[G_INS + 2] + iw] : 0.0f;
    }
  }
}

// conv_fold is conv_unfold's adjoint, written over group grp's channels of
// the chunk's samples in dx: dx[n0 + j, grp·Cg + c, i] = bias[grp·Cg + c]
// (0 when bias is null) + Σ over the taps k and positions o reading i of
// col[(c·K + k)·nb·T + j·T + o], in double, rounded once.
extern "C" __global__ void conv_fold(const int *g, const float *col, int grp, long long n0, long long nb, const float *bias,
                                     float *dx) {
  long long Cg = g[G_CG], K = g[G_K], T = g[G_T], In = g[G_IN], L = nb * T;
  FastDiv byIn = fast_div(In, nb * Cg * In), byCg = fast_div(Cg, nb * Cg);
  FOR_EACH(idx, nb * Cg * In) {
    long long q = fdiv(byIn, idx), i = idx - q * In, j = fdiv(byCg, q), c = q - j * Cg, ch = grp * Cg + c;
    double s = bias ? (double)bias[ch] : 0;
    const float *cj = col + c * K * L + j * T;
    FOR_TAPS_OF(g, i, o, k) { s += cj[k * L + o]; }
    dx[((n0 + j) * g[G_C] + ch) * In + i] = (float)s;
  }
}

// conv_pack_out gathers group grp's output channels of the chunk's samples
// into one Mg × nb·T matrix: dst[m·nb·T + j·T + t] = y[n0 + j, grp·Mg + m, t].
extern "C" __global__ void conv_pack_out(const int *g, const float *y, int grp, long long n0, long long nb, float *dst) {
  long long Mg = g[G_MG], T = g[G_T], L = nb * T;
  FastDiv byL = fast_div(L, Mg * L), byT = fast_div(T, Mg * L);
  FOR_EACH(idx, Mg * L) {
    long long m = fdiv(byL, idx), jt = idx - m * L, j = fdiv(byT, jt), t = jt - j * T;
    dst[idx] = y[((n0 + j) * g[G_M] + grp * Mg + m) * T + t];
  }
}

// add_channel_bias adds bias[c] to every element of channel c of y
// (N×C×P, n elements).
extern "C" __global__ void add_channel_bias(float *y, const float *bias, long long C, long long P, long long n) {
  FastDiv byP = fast_div(P, n), byC = fast_div(C, n);
  FOR_EACH(i, n) {
    long long q = fdiv(byP, i);
    y[i] += bias[q - fdiv(byC, q) * C];
  }
}

// channel_sums writes the sum over samples and positions of each channel
// of x (N×C×P) to out, a bias gradient: a thread per channel, for few
// terms (launchSums).
extern "C" __global__ void channel_sums(const float *x, long long N, long long C, long long P, float *out) {
  FOR_EACH(c, C) {
    double s = 0;
    for (long long n = 0; n < N; n++)
      for (long long p = 0; p < P; p++) s += x[(n * C + c) * P + p];
    out[c] = (float)s;
  }
}

// channel_sums_block is channel_sums with a block per channel, for many
// terms (a convolution's bias over a batch of feature maps: VGG-16's first
// layers have 64 channels of 1.6 million terms at batch 32, where a warp
// per channel took 6 ms on an H100): thread t takes the terms t,
// t + blockDim.x, … of the channel's N·P, sample by sample, and
// block_sum adds the threads' sums.
extern "C" __global__ void channel_sums_block(const float *x, long long N, long long C, long long P, float *out) {
  __shared__ double part[32];
  FastDiv byP = fast_div(P, N * P);
  for (long long c = blockIdx.x; c < C; c += gridDim.x) {
    double s = 0;
    for (long long q = threadIdx.x; q < N * P; q += blockDim.x) {
      long long n = fdiv(byP, q);
      s += x[(n * C + c) * P + q - n * P];
    }
    s = block_sum(s, part);
    if (threadIdx.x == 0) out[c] = (float)s;
  }
}

// max_winner returns the input position in plane xp of the winner of
// window o — the first maximum; a NaN wins and stays — or −1 for a window
// with no input element.
__device__ static long long max_winner(const int *g, const float *xp, long long o) {
  float best = __uint_as_float(0xff800000u);
  long long bi = -1;
  for (long long k = 0; k < g[G_K]; k++) {
    long long i = tap(g, o, k, 0);
    if (i < 0) continue;
    float v = xp[i];
    if (bi < 0 || v > best || (v != v && best == best)) {
      best = v;
      bi = i;
    }
  }
  return bi;
}

// max_pool computes MaxPool (−∞ and −1 for a window with no input
// element); argmax (or null) receives the winner's position in its plane.
extern "C" __global__ void max_pool(const int *g, const float *x, float *y, int *argmax) {
  long long T = g[G_T], In = g[G_IN];
  FastDiv byT = fast_div(T, g[G_N] * g[G_C] * T);
  FOR_EACH(idx, g[G_N] * g[G_C] * T) {
    long long pl = fdiv(byT, idx);
    const float *xp = x + pl * In;
    long long b = max_winner(g, xp, idx - pl * T);
    y[idx] = b >= 0 ? xp[b] : __uint_as_float(0xff800000u);
    if (argmax) argmax[idx] = (int)b;
  }
}

// max_pool_bwd computes dx[i] = Σ dy[o] over the windows o whose winner
// (argmax) is i.
extern "C" __global__ void max_pool_bwd(const int *g, const float *dy, const int *argmax, float *dx) {
  long long T = g[G_T], In = g[G_IN];
  FastDiv byIn = fast_div(In, g[G_N] * g[G_C] * In);
  FOR_EACH(idx, g[G_N] * g[G_C] * In) {
    long long pl = fdiv(byIn, idx), i = idx - pl * In;
    double s = 0;
    FOR_TAPS_OF(g, i, o, k) {
      if (argmax[pl * T + o] == i) s += dy[pl * T + o];
    }
    dx[idx] = (float)s;
  }
}

// max_pool_winners writes each window's winner as max_pool_bwd reads it,
// found again from the output: the first of the window's elements with
// the bits of its output y (−1 if none), a thread per window. With it
// MaxPoolBackwardFromOutput is max_pool_bwd; a thread per input element
// searching each window that reads it (K² taps per element) was eight
// times slower on ResNet-50's stem.
extern "C" __global__ void max_pool_winners(const int *g, const float *x, const float *y, int *argmax) {
  long long T = g[G_T], In = g[G_IN], K = g[G_K];
  FastDiv byT = fast_div(T, g[G_N] * g[G_C] * T);
  FOR_EACH(q, g[G_N] * g[G_C] * T) {
    long long pl = fdiv(byT, q), o = q - pl * T;
    const float *xp = x + pl * In;
    unsigned yb = __float_as_uint(y[q]);
    int w = -1;
    for (long long k = 0; k < K; k++) {
      long long j = tap(g, o, k, 0);
      if (j >= 0 && __float_as_uint(xp[j]) == yb) {
        w = (int)j;
        break;
      }
    }
    argmax[q] = w;
  }
}

// avg_divisor returns AveragePool's divisor of window o: its taps inside
// the input, or with count_include_pad inside the padded input.
__device__ static long long avg_divisor(const int *g, long long o) {
  long long div = 0;
  for (long long k = 0; k < g[G_K]; k++) {
    bool padded;
    if (tap(g, o, k, &padded) >= 0 || (g[G_INCL] && padded)) div++;
  }
  return div;
}

// avg_pool computes AveragePool (0 for a window with no element).
extern "C" __global__ void avg_pool(const int *g, const float *x, float *y) {
  long long T = g[G_T], In = g[G_IN];
  FastDiv byT = fast_div(T, g[G_N] * g[G_C] * T);
  FOR_EACH(idx, g[G_N] * g[G_C] * T) {
    long long pl = fdiv(byT, idx), o = idx - pl * T;
    const float *xp = x + pl * In;
    double s = 0;
    for (long long k = 0; k < g[G_K]; k++) {
      long long i = tap(g, o, k, 0);
      if (i >= 0) s += xp[i];
    }
    long long div = avg_divisor(g, o);
    y[idx] = (float)(div > 0 ? s / (double)div : s);
  }
}

// avg_pool_bwd computes dx[i] = Σ dy[o]/divisor(o) over the windows o
// reading i.
extern "C" __global__ void avg_pool_bwd(const int *g, const float *dy, float *dx) {
  long long T = g[G_T], In = g[G_IN];
  FastDiv byIn = fast_div(In, g[G_N] * g[G_C] * In);
  FOR_EACH(idx, g[G_N] * g[G_C] * In) {
    long long pl = fdiv(byIn, idx), i = idx - pl * In;
    double s = 0;
    FOR_TAPS_OF(g, i, o, k) { s += (double)dy[pl * T + o] / (double)avg_divisor(g, o); }
    dx[idx] = (float)s;
  }
}

// global_avg_pool writes each plane's mean to y.
extern "C" __global__ void global_avg_pool(const float *x, long long planes, long long spatial, float *y) {
  FOR_EACH(pl, planes) {
    double s = 0;
    for (long long j = 0; j < spatial; j++) s += x[pl * spatial + j];
    y[pl] = (float)(s / (double)spatial);
  }
}

// global_avg_pool_bwd spreads dy/spatial over each plane.
extern "C" __global__ void global_avg_pool_bwd(const float *dy, long long planes, long long spatial, float *dx) {
  FastDiv by = fast_div(spatial, planes * spatial);
  FOR_EACH(i, planes * spatial) dx[i] = (float)((double)dy[fdiv(by, i)] / (double)spatial);
}

// global_max_pool writes each plane's first maximum (the last NaN
// winning) and its position.
extern "C" __global__ void global_max_pool(const float *x, long long planes, long long spatial, float *y, int *argmax) {
  FOR_EACH(pl, planes) {
    const float *r = x + pl * spatial;
    long long b = 0;
    for (long long j = 0; j < spatial; j++)
      if (r[j] > r[b] || r[j] != r[j]) b = j;
    y[pl] = r[b];
    argmax[pl] = (int)b;
  }
}

// global_max_pool_bwd writes dy at each plane's winner and 0 elsewhere.
extern "C" __global__ void global_max_pool_bwd(const float *dy, const int *argmax, long long planes, long long spatial, float *dx) {
  FOR_EACH(i, planes * spatial) dx[i] = i % spatial == argmax[i / spatial] ? dy[i / spatial] : 0.0f;
}

// bn_stats computes channel c's mean and 1/σ — the batch's (two passes)
// when training, else the running ones — into st[2c], st[2c+1] (double)
// and mean, inv_std (float), and when training the updated running
// statistics into new_mean and new_var (either may be null): lanes
// threads per channel (LANES_FOR_EACH).
extern "C" __global__ void bn_stats(const float *x, long long N, long long C, long long S, int training, float eps,
                                    float momentum, const float *run_mean, const float *run_var, double *st, float *mean,
                                    float *inv_std, float *new_mean, float *new_var, int lanes) {
  int lane = LANE_OF(lanes);
  LANES_FOR_EACH(c, C, lanes) {
    double m, v;
    if (training) {
      double M = (double)(N * S), s = 0, ss = 0;
      for (long long q = lane; q < N * S; q += lanes) s += x[(q / S * C + c) * S + q % S];
      m = lanes_total(s, lanes) / M;
      for (long long q = lane; q < N * S; q += lanes) {
        double d = (double)x[(q / S * C + c) * S + q % S] - m;
        ss += d * d;
      }
      v = lanes_total(ss, lanes) / M;
      double mom = momentum;
      if (lane == 0 && new_mean) new_mean[c] = (float)((double)run_mean[c] * mom + m * (1 - mom));
      if (lane == 0 && new_var) new_var[c] = (float)((double)run_var[c] * mom + v * (1 - mom));
    } else {
      m = run_mean[c];
      v = run_var[c];
    }
    double iv = 1 / sqrt(v + (double)eps);
    if (lane == 0) {
      st[2 * c] = m;
      st[2 * c + 1] = iv;
      mean[c] = (float)m;
      inv_std[c] = (float)iv;
    }
  }
}

// bn_apply computes y = (x − μ_c)·σ_c⁻¹·scale_c + bias_c from bn_stats'
// statistics.
extern "C" __global__ void bn_apply(const float *x, long long N, long long C, long long S, const double *st,
                                    const float *scale, const float *bias, float *y) {
  FOR_EACH(i, N * C * S) {
    long long c = i / S % C;
    y[i] = (float)(((double)x[i] - st[2 * c]) * st[2 * c + 1] * (double)scale[c] + (double)bias[c]);
  }
}

// bn_grad_sums computes channel c's Σ dy and Σ dy·x̂ into sums[2c],
// sums[2c+1], and writes them to dbias and dscale (either may be null):
// lanes threads per channel.
extern "C" __global__ void bn_grad_sums(const float *x, const float *dy, long long N, long long C, long long S,
                                        const float *mean, const float *inv_std, double *sums, float *dscale,
                                        float *dbias, int lanes) {
  int lane = LANE_OF(lanes);
  LANES_FOR_EACH(c, C, lanes) {
    double m = mean[c], iv = inv_std[c], sg = 0, sgx = 0;
    for (long long q = lane; q < N * S; q += lanes) {
      long long i = (q / S * C + c) * S + q % S;
      sg += dy[i];
      sgx += (double)dy[i] * ((double)x[i] - m) * iv;
    }
    sg = lanes_total(sg, lanes);
    sgx = lanes_total(sgx, lanes);
    if (lane == 0) {
      sums[2 * c] = sg;
      sums[2 * c + 1] = sgx;
      if (dscale) dscale[c] = (float)sgx;
      if (dbias) dbias[c] = (float)sg;
    }
  }
}

// bn_dx computes dx = scale·σ⁻¹·(dy − mean(dy) − x̂·mean(dy·x̂)) when
// training, else scale·σ⁻¹·dy.
extern "C" __global__ void bn_dx(const float *x, const float *dy, long long N, long long C, long long S,
                                 const float *scale, const float *mean, const float *inv_std, const double *sums,
                                 int training, float *dx) {
  double M = (double)(N * S);
  FOR_EACH(i, N * C * S) {
    long long c = i / S % C;
    double iv = inv_std[c], g = dy[i];
    if (training) {
      double xh = ((double)x[i] - (double)mean[c]) * iv;
      g = g - sums[2 * c] / M - xh * sums[2 * c + 1] / M;
    }
    dx[i] = (float)((double)scale[c] * iv * g);
  }
}

// row_stats computes each row's mean and 1/√(variance + eps) (two passes)
// into st[2r], st[2r+1] (double) and mean (or null) and inv_std: lanes
// threads per row.
extern "C" __global__ void row_stats(const float *x, long long rows, long long L, double eps, double *st, float *mean,
                                     float *inv_std, int lanes) {
  int lane = LANE_OF(lanes);
  LANES_FOR_EACH(r, rows, lanes) {
    const float *xr = x + r * L;
    double s = 0, ss = 0;
    for (long long j = lane; j < L; j += lanes) s += xr[j];
    double m = lanes_total(s, lanes) / (double)L;
    for (long long j = lane; j < L; j += lanes) {
      double d = (double)xr[j] - m;
      ss += d * d;
    }
    double iv = 1 / sqrt(lanes_total(ss, lanes) / (double)L + eps);
    if (lane == 0) {
      st[2 * r] = m;
      st[2 * r + 1] = iv;
      if (mean) mean[r] = (float)m;
      inv_std[r] = (float)iv;
    }
  }
}

// block_row_stats gives every thread of the block the mean *m and
// 1/√(variance + eps) *iv of the row xr of L terms: row_stats' two passes,
// thread k taking the terms k, k + blockDim.x, …, block_sum adding the
// threads' sums (a block per row: a GroupNorm group over a large feature
// map leaves most of the GPU idle with a warp per row). part and sh are
// the block's __shared__ double[32] and double[2]; it synchronizes before
// returning, so the next call may reuse them.
__device__ __forceinline__ void block_row_stats(const float *xr, long long L, double eps, double *part, double *sh,
                                                double *m, double *iv) {
  double s = 0;
  for (long long j = threadIdx.x; j < L; j += blockDim.x) s += xr[j];
  s = block_sum(s, part);
  if (threadIdx.x == 0) sh[0] = s / (double)L;
  __syncthreads();
  double mu = sh[0], ss = 0;
  for (long long j = threadIdx.x; j < L; j += blockDim.x) {
    double d = (double)xr[j] - mu;
    ss += d * d;
  }
  ss = block_sum(ss, part);
  if (threadIdx.x == 0) sh[1] = 1 / sqrt(ss / (double)L + eps);
  __syncthreads();
  *m = mu;
  *iv = sh[1];
  __syncthreads(); // sh is the next call's
}

// row_stats_block is row_stats with a block per row (block_row_stats) for
// long rows. lanes is unused (row_stats' arguments, so that the caller
// packs the same).
extern "C" __global__ void row_stats_block(const float *x, long long rows, long long L, double eps, double *st, float *mean,
                                           float *inv_std, int lanes) {
  __shared__ double part[32];
  __shared__ double sh[2];
  (void)lanes;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    double m, iv;
    block_row_stats(x + r * L, L, eps, part, sh, &m, &iv);
    if (threadIdx.x == 0) {
      st[2 * r] = m;
      st[2 * r + 1] = iv;
      if (mean) mean[r] = (float)m;
      inv_std[r] = (float)iv;
    }
  }
}

// row_normalize writes y = (x − μ)·σ⁻¹ from row_stats' statistics.
extern "C" __global__ void row_normalize(const float *x, long long rows, long long L, const double *st, float *y) {
  FastDiv byL = fast_div(L, rows * L);
  FOR_EACH(i, rows * L) {
    long long r = fdiv(byL, i);
    y[i] = (float)(((double)x[i] - st[2 * r]) * st[2 * r + 1]);
  }
}

// row_grad_sums computes each row's mean(dy) and mean(dy·y) into sums:
// lanes threads per row.
extern "C" __global__ void row_grad_sums(const float *y, const float *dy, long long rows, long long L, double *sums,
                                         int lanes) {
  int lane = LANE_OF(lanes);
  LANES_FOR_EACH(r, rows, lanes) {
    double mg = 0, mgy = 0;
    for (long long i = r * L + lane; i < (r + 1) * L; i += lanes) {
      mg += dy[i];
      mgy += (double)dy[i] * (double)y[i];
    }
    mg = lanes_total(mg, lanes);
    mgy = lanes_total(mgy, lanes);
    if (lane == 0) {
      sums[2 * r] = mg / (double)L;
      sums[2 * r + 1] = mgy / (double)L;
    }
  }
}

// row_grad_sums_block is row_grad_sums with a block per row, for long
// rows (row_stats_block); lanes is unused.
extern "C" __global__ void row_grad_sums_block(const float *y, const float *dy, long long rows, long long L, double *sums,
                                               int lanes) {
  __shared__ double part[32];
  (void)lanes;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    double mg = 0, mgy = 0;
    for (long long i = r * L + threadIdx.x; i < (r + 1) * L; i += blockDim.x) {
      mg += dy[i];
      mgy += (double)dy[i] * (double)y[i];
    }
    mg = block_sum(mg, part);
    mgy = block_sum(mgy, part);
    if (threadIdx.x == 0) {
      sums[2 * r] = mg / (double)L;
      sums[2 * r + 1] = mgy / (double)L;
    }
  }
}

// row_normalize_bwd computes dx = σ⁻¹·(dy − mean(dy) − y·mean(dy·y)).
extern "C" __global__ void row_normalize_bwd(const float *y, const float *dy, const float *inv_std, long long rows,
                                             long long L, const double *sums, float *dx) {
  FastDiv byL = fast_div(L, rows * L);
  FOR_EACH(i, rows * L) {
    long long r = fdiv(byL, i);
    dx[i] = (float)((double)inv_std[r] * ((double)dy[i] - sums[2 * r] - (double)y[i] * sums[2 * r + 1]));
  }
}

// The parameter table of an affine row normalization (Go: normTable),
// int32s: the number ncol of distinct column offsets, row_off[rows],
// col_off[L], then col_start[ncol + 1] and col_list[L], the columns j
// with col_off[j] = b at col_list[col_start[b] .. col_start[b + 1]). The
// parameter of element j of row r is row_off[r] + col_off[j].
#define ROW_OFF(tab) ((tab) + 1)
#define COL_OFF(tab, rows) ((tab) + 1 + (rows))
#define PARAM(tab, rows, r, j) (ROW_OFF(tab)[r] + COL_OFF(tab, rows)[j])

// row_affine writes y = x̂·scale[k] + bias[k] (bias may be null).
extern "C" __global__ void row_affine(const float *x, long long rows, long long L, const double *st, const float *scale,
                                      const float *bias, const int *tab, float *y) {
  FastDiv byL = fast_div(L, rows * L);
  FOR_EACH(i, rows * L) {
    long long r = fdiv(byL, i), k = PARAM(tab, rows, r, i - r * L);
    double v = ((double)x[i] - st[2 * r]) * st[2 * r + 1] * (double)scale[k];
    if (bias) v += bias[k];
    y[i] = (float)v;
  }
}

// affine_grad_part adds to *sg and *sgx the terms g and g·x̂ (g =
// dy·scale[k]) of row r's elements j = first, first + step, …: one
// thread's share of row_affine_grad_sums.
__device__ __forceinline__ void affine_grad_part(const float *x, const float *scale, const float *mean,
                                                 const float *inv_std, const float *dy, long long rows, long long L,
                                                 const int *tab, long long r, long long first, long long step,
                                                 double *sg, double *sgx) {
  double m = mean[r], iv = inv_std[r];
  for (long long j = first; j < L; j += step) {
    long long i = r * L + j;
    double g = (double)dy[i] * (double)scale[PARAM(tab, rows, r, j)];
    *sg += g;
    *sgx += g * ((double)x[i] - m) * iv;
  }
}

// row_affine_grad_sums computes each row's mean(g) and mean(g·x̂), g =
// dy·scale[k], into sums: lanes threads per row.
extern "C" __global__ void row_affine_grad_sums(const float *x, const float *scale, const float *mean,
                                                const float *inv_std, const float *dy, long long rows, long long L,
                                                const int *tab, double *sums, int lanes) {
  int lane = LANE_OF(lanes);
  LANES_FOR_EACH(r, rows, lanes) {
    double sg = 0, sgx = 0;
    affine_grad_part(x, scale, mean, inv_std, dy, rows, L, tab, r, lane, lanes, &sg, &sgx);
    sg = lanes_total(sg, lanes);
    sgx = lanes_total(sgx, lanes);
    if (lane == 0) {
      sums[2 * r] = sg / (double)L;
      sums[2 * r + 1] = sgx / (double)L;
    }
  }
}

// block_affine_grad_sums returns to thread 0 row r's mean(g) in *sg and
// mean(g·x̂) in *sgx (row_affine_grad_sums' sums, the block's threads
// splitting the terms); part is the block's __shared__ double[32].
__device__ __forceinline__ void block_affine_grad_sums(const float *x, const float *scale, const float *mean,
                                                       const float *inv_std, const float *dy, long long rows,
                                                       long long L, const int *tab, long long r, double *part,
                                                       double *sg, double *sgx) {
  double a = 0, b = 0;
  affine_grad_part(x, scale, mean, inv_std, dy, rows, L, tab, r, threadIdx.x, blockDim.x, &a, &b);
  *sg = block_sum(a, part) / (double)L;
  *sgx = block_sum(b, part) / (double)L;
}

// affine_dx is row_affine_dx's element i (row r, column j) given the
// row's mean(g) s0 and mean(g·x̂) s1.
__device__ __forceinline__ float affine_dx(const float *x, const float *scale, const float *mean, const float *inv_std,
                                           const float *dy, long long rows, const int *tab, long long r, long long j,
                                           long long i, double s0, double s1) {
  double iv = inv_std[r], g = (double)dy[i] * (double)scale[PARAM(tab, rows, r, j)];
  double xh = ((double)x[i] - (double)mean[r]) * iv;
  return (float)(iv * (g - s0 - xh * s1));
}

// row_affine_grad_sums_block is row_affine_grad_sums with a block per
// row, for long rows (row_stats_block: GroupNorm's rows of C/G·H·W
// terms); lanes is unused.
extern "C" __global__ void row_affine_grad_sums_block(const float *x, const float *scale, const float *mean,
                                                      const float *inv_std, const float *dy, long long rows,
                                                      long long L, const int *tab, double *sums, int lanes) {
  __shared__ double part[32];
  (void)lanes;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    double sg, sgx;
    block_affine_grad_sums(x, scale, mean, inv_std, dy, rows, L, tab, r, part, &sg, &sgx);
    if (threadIdx.x == 0) {
      sums[2 * r] = sg;
      sums[2 * r + 1] = sgx;
    }
  }
}

// row_affine_dx computes dx = σ⁻¹·(g − mean(g) − x̂·mean(g·x̂)).
extern "C" __global__ void row_affine_dx(const float *x, const float *scale, const float *mean, const float *inv_std,
                                         const float *dy, long long rows, long long L, const int *tab,
                                         const double *sums, float *dx) {
  FastDiv byL = fast_div(L, rows * L);
  FOR_EACH(i, rows * L) {
    long long r = fdiv(byL, i);
    dx[i] = affine_dx(x, scale, mean, inv_std, dy, rows, tab, r, i - r * L, i, sums[2 * r], sums[2 * r + 1]);
  }
}

// row_norm_affine_block is row_stats_block then row_affine in one kernel,
// a block per row: the same sums in the same order and the same
// arithmetic, so the same bits, but the row is read by the second and
// third passes while it is still in the L2 cache — one read of x from
// memory instead of three (GroupNorm's rows of ResNet-50 at batch 32 are
// 100 MB a layer, twice the L2 of an H100, so the separate kernels' passes
// each came from memory). lanes is unused.
extern "C" __global__ void row_norm_affine_block(const float *x, long long rows, long long L, double eps,
                                                 const float *scale, const float *bias, const int *tab, float *mean,
                                                 float *inv_std, float *y, int lanes) {
  __shared__ double part[32];
  __shared__ double sh[2];
  (void)lanes;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * L;
    double m, iv;
    block_row_stats(xr, L, eps, part, sh, &m, &iv);
    if (threadIdx.x == 0) {
      if (mean) mean[r] = (float)m;
      inv_std[r] = (float)iv;
    }
    for (long long j = threadIdx.x; j < L; j += blockDim.x) {
      long long k = PARAM(tab, rows, r, j);
      double v = ((double)xr[j] - m) * iv * (double)scale[k];
      if (bias) v += bias[k];
      y[r * L + j] = (float)v;
    }
  }
}

// row_affine_bwd_block is row_affine_grad_sums_block then row_affine_dx
// in one kernel, a block per row (row_norm_affine_block: the same bits,
// the row's x and dy read again from the L2 cache, not memory). lanes is
// unused.
extern "C" __global__ void row_affine_bwd_block(const float *x, const float *scale, const float *mean,
                                                const float *inv_std, const float *dy, long long rows, long long L,
                                                const int *tab, float *dx, int lanes) {
  __shared__ double part[32];
  __shared__ double sh[2];
  (void)lanes;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    double sg, sgx;
    block_affine_grad_sums(x, scale, mean, inv_std, dy, rows, L, tab, r, part, &sg, &sgx);
    if (threadIdx.x == 0) {
      sh[0] = sg;
      sh[1] = sgx;
    }
    __syncthreads();
    double s0 = sh[0], s1 = sh[1];
    for (long long j = threadIdx.x; j < L; j += blockDim.x)
      dx[r * L + j] = affine_dx(x, scale, mean, inv_std, dy, rows, tab, r, j, r * L + j, s0, s1);
    __syncthreads(); // sh is the next row's
  }
}

// Rows whose parameters run per channel (GroupNormalization with a scale
// per channel, InstanceNormalization: NormRows' ParamMap with cpg > 0)
// are cpg runs of s terms, run i of row r using parameter (r mod g)·cpg +
// i. Their backward keeps each run's Σ dy·x̂ and Σ dy (parts[2(r·cpg + i)]
// and the next), from which a row's gradient sums are a weighted sum over
// its runs and a parameter's gradients a sum over its rows
// (row_param_grads_runs): the parameter gradients' pass over x and dy
// (row_param_grads, 2.9 ms of ResNet-50's step at batch 32 on an H100) is
// folded into the backward's, as the CPU's kernels.RowNormBackward does.

// run_part adds to *ss and *sb a thread's terms of a run's Σ dy·x̂ and
// Σ dy: those of row xr, gr from j up to end, step apart.
__device__ __forceinline__ void run_part(const float *xr, const float *gr, double m, double iv, long long j,
                                         long long end, long long step, double *ss, double *sb) {
  for (; j < end; j += step) {
    double d = gr[j];
    *ss += d * ((double)xr[j] - m) * iv;
    *sb += d;
  }
}

// block_run_sums writes row r's runs' sums into parts. Where the runs
// are at least the block's warps, warp w takes runs w, w + nw, …, its
// lanes splitting a run as warp_sum does; else each run has nw/cpg warps,
// lane l of its warp q taking terms q·32 + l, + (nw/cpg)·32, …, and
// thread i adds run i's warps' sums in order. The order depends on the
// shape and the block's size alone. part is the block's __shared__
// double[32][2]; the block synchronizes before returning, so that parts
// is the block's to read.
__device__ __forceinline__ void block_run_sums(const float *x, const float *mean, const float *inv_std,
                                               const float *dy, long long L, long long r, long long cpg,
                                               long long s, double *parts, double (*part)[2]) {
  const float *xr = x + r * L, *gr = dy + r * L;
  double m = mean[r], iv = inv_std[r], *pr = parts + 2 * r * cpg;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  if (cpg >= nw) {
    for (long long i = w; i < cpg; i += nw) {
      double ss = 0, sb = 0;
      run_part(xr, gr, m, iv, i * s + lane, (i + 1) * s, 32, &ss, &sb);
      ss = warp_sum(ss);
      sb = warp_sum(sb);
      if (lane == 0) {
        pr[2 * i] = ss;
        pr[2 * i + 1] = sb;
      }
    }
  } else {
    int wpr = nw / (int)cpg, q = w % wpr;
    long long i = w / wpr;
    double ss = 0, sb = 0;
    if (i < cpg) run_part(xr, gr, m, iv, i * s + q * 32 + lane, (i + 1) * s, wpr * 32, &ss, &sb);
    ss = warp_sum(ss);
    sb = warp_sum(sb);
    if (lane == 0) {
      part[w][0] = ss;
      part[w][1] = sb;
    }
    __syncthreads();
    if (threadIdx.x < cpg) {
      double a = 0, b = 0;
      for (int k = 0; k < wpr; k++) {
        a += part[threadIdx.x * wpr + k][0];
        b += part[threadIdx.x * wpr + k][1];
      }
      pr[2 * threadIdx.x] = a;
      pr[2 * threadIdx.x + 1] = b;
    }
  }
  __syncthreads();
}

// block_runs_mean_grads returns to every thread of the block row r's
// mean(g) in *s0 and mean(g·x̂) in *s1, g = dy·scale[k], from its runs'
// sums (block_run_sums): lane l of warp 0 takes runs l, l + 32, …, each
// weighted by its parameter's scale, and warp_sum adds the lanes'. sh is
// the block's __shared__ double[2], the caller's to synchronize before
// its next row.
__device__ __forceinline__ void block_runs_mean_grads(const float *scale, const double *parts, long long L,
                                                      long long r, long long g, long long cpg, double *sh,
                                                      double *s0, double *s1) {
  if (threadIdx.x < 32) {
    const double *pr = parts + 2 * r * cpg;
    const float *sc = scale + (r % g) * cpg;
    double a = 0, b = 0;
    for (long long i = threadIdx.x; i < cpg; i += 32) {
      a += (double)sc[i] * pr[2 * i + 1];
      b += (double)sc[i] * pr[2 * i];
    }
    a = warp_sum(a);
    b = warp_sum(b);
    if (threadIdx.x == 0) {
      sh[0] = a / (double)L;
      sh[1] = b / (double)L;
    }
  }
  __syncthreads();
  *s0 = sh[0];
  *s1 = sh[1];
}

// row_run_sums_block writes the runs' sums of every row into parts, a
// block per row, and, where sums is not null, the rows' mean(g) and
// mean(g·x̂) as row_affine_grad_sums does, for row_affine_dx: the
// backward's sums where it does not run as one kernel, and the parameter
// gradients' where no backward kept them (scale and sums null then).
// lanes is unused.
extern "C" __global__ void row_run_sums_block(const float *x, const float *scale, const float *mean,
                                              const float *inv_std, const float *dy, long long rows, long long L,
                                              long long g, long long cpg, long long s, double *parts, double *sums,
                                              int lanes) {
  __shared__ double part[32][2];
  __shared__ double sh[2];
  (void)lanes;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    block_run_sums(x, mean, inv_std, dy, L, r, cpg, s, parts, part);
    if (sums) {
      double s0, s1;
      block_runs_mean_grads(scale, parts, L, r, g, cpg, sh, &s0, &s1);
      if (threadIdx.x == 0) {
        sums[2 * r] = s0;
        sums[2 * r + 1] = s1;
      }
      __syncthreads(); // sh is the next row's
    }
  }
}

// row_affine_bwd_runs_block is row_run_sums_block then row_affine_dx in
// one kernel, a block per row, the same bits; the row's x and dy are read
// again from the L2 cache (row_norm_affine_block). lanes is unused.
extern "C" __global__ void row_affine_bwd_runs_block(const float *x, const float *scale, const float *mean,
                                                     const float *inv_std, const float *dy, long long rows,
                                                     long long L, const int *tab, long long g, long long cpg,
                                                     long long s, double *parts, float *dx, int lanes) {
  __shared__ double part[32][2];
  __shared__ double sh[2];
  (void)lanes;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    double s0, s1;
    block_run_sums(x, mean, inv_std, dy, L, r, cpg, s, parts, part);
    block_runs_mean_grads(scale, parts, L, r, g, cpg, sh, &s0, &s1);
    for (long long j = threadIdx.x; j < L; j += blockDim.x)
      dx[r * L + j] = affine_dx(x, scale, mean, inv_std, dy, rows, tab, r, j, r * L + j, s0, s1);
    __syncthreads(); // sh and parts' reads are the next row's
  }
}

// row_param_grads_runs computes dscale[k] = Σ dy·x̂ and dbias[k] = Σ dy
// (either may be null) from the runs' sums block_run_sums kept: a thread
// per parameter, adding its run's sums over the rows r ≡ k/cpg (mod g) in
// order.
extern "C" __global__ void row_param_grads_runs(const double *parts, long long rows, long long g, long long cpg,
                                                long long params, float *dscale, float *dbias) {
  FOR_EACH(k, params) {
    double ss = 0, sb = 0;
    for (long long r = k / cpg; r < rows; r += g) {
      const double *p = parts + 2 * (r * cpg + k % cpg);
      ss += p[0];
      sb += p[1];
    }
    if (dscale) dscale[k] = (float)ss;
    if (dbias) dbias[k] = (float)sb;
  }
}

// row_param_grads computes, for every parameter k, dscale[k] = Σ dy·x̂ and
// dbias[k] = Σ dy over the elements using it (either may be null), where
// element j of row r uses parameter (r mod g)·cpg + j/s (NormRows'
// ParamMap): a block per parameter. Its terms are the rows r ≡ k/cpg
// (mod g) (every row when cpg = 0: LayerNorm, g = 1), in each the s
// columns from (k mod cpg)·s, counted row by row; thread t takes terms t,
// t + blockDim.x, … and block_sum adds the threads' sums, so the order
// depends on the shape and the block size alone. The lanes-per-parameter
// form this replaces gave GroupNorm's whole sum to one lane (its rows
// n·g + k/cpg all fall on the lane k/cpg mod 32): 17.5 ms for one of
// ResNet-50's layer1 GroupNorms at batch 32 on an H100.
extern "C" __global__ void row_param_grads(const float *x, const float *mean, const float *inv_std, const float *dy,
                                           long long rows, long long L, long long g, long long cpg, long long s,
                                           long long params, float *dscale, float *dbias) {
  __shared__ double part[32];
  for (long long k = blockIdx.x; k < params; k += gridDim.x) {
    long long r0 = cpg ? k / cpg : 0, c0 = cpg ? (k % cpg) * s : k * s;
    long long nr = r0 < rows ? (rows - r0 + g - 1) / g : 0, terms = nr * s;
    FastDiv byS = fast_div(s, terms);
    double ss = 0, sb = 0;
    for (long long q = threadIdx.x; q < terms; q += blockDim.x) {
      long long m = fdiv(byS, q), r = r0 + m * g, i = r * L + c0 + (q - m * s);
      double d = dy[i];
      ss += d * ((double)x[i] - (double)mean[r]) * (double)inv_std[r];
      sb += d;
    }
    ss = block_sum(ss, part);
    sb = block_sum(sb, part);
    if (threadIdx.x == 0 && dscale) dscale[k] = (float)ss;
    if (threadIdx.x == 0 && dbias) dbias[k] = (float)sb;
  }
}

// row_param_grads_cols is row_param_grads in LayerNorm's layout (g = 1,
// cpg = 0, s = 1: parameter k is column k of every row) in column tiles
// (cols_total): neighbouring threads read neighbouring parameters' terms,
// where a block per parameter read its column a row apart.
extern "C" __global__ void row_param_grads_cols(const float *x, const float *mean, const float *inv_std, const float *dy,
                                                long long rows, long long L, long long g, long long cpg, long long s,
                                                long long params, float *dscale, float *dbias) {
  __shared__ double part[32][33];
  (void)g, (void)cpg, (void)s;
  COL_TILES(k, params) {
    double ss = 0, sb = 0;
    if (k < params) {
      for (long long r = threadIdx.y; r < rows; r += blockDim.y) {
        long long i = r * L + k;
        double d = dy[i];
        ss += d * ((double)x[i] - (double)mean[r]) * (double)inv_std[r];
        sb += d;
      }
    }
    ss = cols_total(ss, part);
    sb = cols_total(sb, part);
    if (threadIdx.y == 0 && k < params && dscale) dscale[k] = (float)ss;
    if (threadIdx.y == 0 && k < params && dbias) dbias[k] = (float)sb;
  }
}

// lrn_scale returns s = bias + α/size·Σ x² over the window of channel c at
// inner position k of sample n.
__device__ static double lrn_scale(const float *x, long long C, long long inner, int size, double alpha, double bias,
                                   long long n, long long c, long long k) {
  long long lo = c - (size - 1) / 2, hi = c + size / 2;
  if (lo < 0) lo = 0;
  if (hi > C - 1) hi = C - 1;
  double s = 0;
  for (long long q = lo; q <= hi; q++) {
    double v = x[(n * C + q) * inner + k];
    s += v * v;
  }
  return bias + alpha / size * s;
}

// lrn computes LRN: y = x·s^(−β).
extern "C" __global__ void lrn(const float *x, long long N, long long C, long long inner, int size, double alpha,
                               double beta, double bias, float *y) {
  FOR_EACH(i, N * C * inner) {
    long long n = i / (C * inner), c = i / inner % C, k = i % inner;
    y[i] = (float)((double)x[i] * d_exp(-beta * d_log(lrn_scale(x, C, inner, size, alpha, bias, n, c, k))));
  }
}

// lrn_bwd computes dx_j = dy_j·s_j^(−β) − 2αβ/size·x_j·Σ_{c: j ∈ W(c)}
// dy_c·x_c·s_c^(−β−1).
extern "C" __global__ void lrn_bwd(const float *x, const float *dy, long long N, long long C, long long inner, int size,
                                   double alpha, double beta, double bias, float *dx) {
  FOR_EACH(i, N * C * inner) {
    long long n = i / (C * inner), j = i / inner % C, k = i % inner;
    double v = (double)dy[i] * d_exp(-beta * d_log(lrn_scale(x, C, inner, size, alpha, bias, n, j, k)));
    long long lo = j - size / 2, hi = j + (size - 1) / 2;
    if (lo < 0) lo = 0;
    if (hi > C - 1) hi = C - 1;
    double acc = 0;
    for (long long c = lo; c <= hi; c++) {
      long long ic = (n * C + c) * inner + k;
      acc += (double)dy[ic] * (double)x[ic] * d_exp((-beta - 1) * d_log(lrn_scale(x, C, inner, size, alpha, bias, n, c, k)));
    }
    v -= 2 * alpha / size * beta * (double)x[i] * acc;
    dx[i] = (float)v;
  }
}

// Broadcast shapes (Go: broadcastShapes): sh[0..rank) is the full shape,
// sh[rank..2·rank) the broadcast operand's, aligned to it (1 on the axes
// it is broadcast along, else the full size).

// gemm_bias writes y = β·c broadcast to y's shape.
// The kernels of Gemm's bias divide by multiply-high (FastDiv, the
// constants made once per thread), y's rank at most 8.
extern "C" __global__ void gemm_bias(float beta, const float *c, const long long *sh, int rank, float *y, long long n) {
  FastDiv by[8];
  for (int a = 0; a < rank && a < 8; a++) by[a] = fast_div(sh[a], n);
  FOR_EACH(i, n) {
    long long r = i, idx = 0, st = 1;
    for (int a = rank - 1; a >= 0; a--) {
      long long q = fdiv(by[a], r), ca = r - q * sh[a];
      r = q;
      if (sh[rank + a] != 1) idx += ca * st;
      st *= sh[rank + a];
    }
    y[i] = (float)((double)beta * (double)c[idx]);
  }
}

// gemm_bias_bwd writes dc[j] = β·Σ dy over the elements of y that c's
// element j is broadcast to (reduce_element, sh: y's shape then c's), in
// increasing order: a thread per element of
// c, for many elements with few terms each.
extern "C" __global__ void gemm_bias_bwd(float beta, const float *dy, const long long *sh, int rank, float *dc,
                                         long long nc, long long count) {
  FastDiv by[8];
  for (int a = 0; a < rank && a < 8; a++) by[a] = fast_div(sh[a], nc * count);
  FOR_EACH(j, nc) {
    double s = 0;
    for (long long q = 0; q < count; q++) s += dy[reduce_element_by(sh, by, rank, j, q)];
    dc[j] = (float)((double)beta * s);
  }
}

// gemm_bias_bwd_block is gemm_bias_bwd with a block per element of c, for
// few elements with many terms each (a Linear's bias over a batch of
// tokens): thread k takes the terms k, k + blockDim.x, …, and block_sum
// adds the threads' sums.
extern "C" __global__ void gemm_bias_bwd_block(float beta, const float *dy, const long long *sh, int rank, float *dc,
                                               long long nc, long long count) {
  __shared__ double part[32];
  FastDiv by[8];
  for (int a = 0; a < rank && a < 8; a++) by[a] = fast_div(sh[a], nc * count);
  for (long long j = blockIdx.x; j < nc; j += gridDim.x) {
    double s = 0;
    for (long long q = threadIdx.x; q < count; q += blockDim.x) s += dy[reduce_element_by(sh, by, rank, j, q)];
    s = block_sum(s, part);
    if (threadIdx.x == 0) dc[j] = (float)((double)beta * s);
  }
}
