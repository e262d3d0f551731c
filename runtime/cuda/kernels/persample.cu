// persample.cu: runtime.PerSampleOps (device_dp.go): the unfolded inputs
// of samples (im2col), a warp per segment of a row, and the direct
// weight gradient of a convolution (summed over the batch, or one
// sample's of a depthwise convolution), a warp per weight, its sum in
// double in a fixed order, rounded once. They need no scratch; the
// convolutions that run as GEMMs (conv.go) use nn.cu's kernels.

// ConvGeom is runtime.ConvShape's geometry lifted to three spatial axes
// (leading unit axes), built on the host (convGeom in persample.go).
struct ConvGeom {
  int in[3], k[3], s[3], d[3], pb[3], out[3];
  int n, c, m, group, t, kk, dd, in_size;
};

// conv_tap returns the offset in a channel plane of the input element that
// kernel tap k reads for output position t, or −1 in the padding.
__device__ __forceinline__ long long conv_tap(const ConvGeom &g, long long k, long long t) {
  long long kw = k % g.k[2], kh = k / g.k[2] % g.k[1], kd = k / ((long long)g.k[2] * g.k[1]);
  long long ow = t % g.out[2], oh = t / g.out[2] % g.out[1], od = t / ((long long)g.out[2] * g.out[1]);
  long long id = od * g.s[0] - g.pb[0] + kd * g.d[0];
  long long ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
  long long iw = ow * g.s[2] - g.pb[2] + kw * g.d[2];
  if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || iw < 0 || iw >= g.in[2]) return -1;
  return (id * g.in[1] + ih) * g.in[2] + iw;
}

// im2col writes group grp's unfolded inputs of the first samples of x
// (one for Im2ColPlane, a chunk for Im2ColBatch), sample j's D×T at col +
// j·D·T: col[j·D·T + (c·K + k)·T + t] = the element of channel
// grp·C/group + c that tap k reads for output position t (0 in the
// padding), for rows = samples·D rows of T.
//
// A warp takes a segment of up to IM2COL_SEG positions of one row (sample
// j, channel c, tap k): the row's channel plane and tap coordinates are
// divided out once a segment, and a lane divides only its position, in 32
// bits (the host checks that a row's plane and positions fit them). A
// thread per element divided nine times an element, in 64 bits: the
// per-sample norms' costliest kernel on a GPU after the products.
#define IM2COL_SEG 1024
extern "C" __global__ void im2col(ConvGeom g, const float *x, int grp, float *col, long long rows, int segs) {
  FastDiv by_segs = fast_div(segs, rows * segs), by_dd = fast_div(g.dd, rows), by_kk = fast_div(g.kk, g.dd);
  FastDiv by_k2 = fast_div(g.k[2], g.kk), by_k1 = fast_div(g.k[1], g.kk);
  FastDiv by_o2 = fast_div(g.out[2], g.t), by_o1 = fast_div(g.out[1], g.t);
  WARP_FOR_EACH(item, rows * segs) {
    long long r = fdiv(by_segs, item), j = fdiv(by_dd, r);
    int seg = (int)(item - r * segs), e = (int)(r - j * g.dd);
    int c = (int)fdiv(by_kk, e), k = e - c * g.kk;
    int k1 = (int)fdiv(by_k2, k), kw = k - k1 * g.k[2], kd = (int)fdiv(by_k1, k1), kh = k1 - kd * g.k[1];
    const float *xp = x + (j * g.c + (long long)grp * (g.c / g.group) + c) * g.in_size;
    float *cp = col + r * g.t;
    int t1 = (seg + 1) * IM2COL_SEG < g.t ? (seg + 1) * IM2COL_SEG : g.t;
    for (int t = seg * IM2COL_SEG + LANE; t < t1; t += 32) {
      int q = (int)fdiv(by_o2, t), ow = t - q * g.out[2], od = (int)fdiv(by_o1, q), oh = q - od * g.out[1];
      int id = od * g.s[0] - g.pb[0] + kd * g.d[0];
      int ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
      int iw = ow * g.s[2] - g.pb[2] + kw * g.d[2];
      bool pad = id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || iw < 0 || iw >= g.in[2];
      cp[t] = pad ? 0.0f : xp[(id * g.in[1] + ih) * g.in[2] + iw];
    }
  }
}

// conv_wg_lane is lane LANE's share of weight w's gradient (w = m·D + c·K
// + k; channel: c of m's group) over the count samples from first on: the
// terms (i, t) with (i − first)·T + t ≡ LANE (mod 32), in double.
__device__ double conv_wg_lane(const ConvGeom &g, const float *x, const float *dy, long long w, long long first,
                               long long count) {
  long long m = w / g.dd, r = w % g.dd, c = r / g.kk, k = r % g.kk;
  long long ch = m / (g.m / g.group) * (g.c / g.group) + c;
  double s = 0;
  for (long long q = LANE; q < count * g.t; q += 32) {
    long long i = first + q / g.t, t = q % g.t, off = conv_tap(g, k, t);
    if (off >= 0) s += (double)dy[(i * g.m + m) * g.t + t] * x[(i * g.c + ch) * g.in_size + off];
  }
  return s;
}

// conv_weight_grad writes dw[w] = Σ_i Σ_t dy[i, m, t] · x[i, channel,
// tap (k, t)] over the `samples` samples, for the n = M·D weights: a warp
// per weight (conv_wg_lane's lanes, combined by warp_sum).
extern "C" __global__ void conv_weight_grad(ConvGeom g, const float *x, const float *dy, float *dw, int samples, long long n) {
  WARP_FOR_EACH(w, n) {
    double s = warp_sum(conv_wg_lane(g, x, dy, w, 0, samples));
    if (LANE == 0) dw[w] = (float)s;
  }
}

// conv_weight_grad_rows writes the nb samples' weight gradients from
// sample n0 on as rows of n = M·D: dw[j·n + w] is conv_weight_grad's
// weight w over sample n0 + j alone, a warp per (j, w), so that a row is
// the same bits as a one-sample conv_weight_grad of that sample.
extern "C" __global__ void conv_weight_grad_rows(ConvGeom g, const float *x, const float *dy, float *dw, long long n0,
                                                 long long nb, long long n) {
  WARP_FOR_EACH(jw, nb * n) {
    double s = warp_sum(conv_wg_lane(g, x, dy, jw % n, n0 + jw / n, 1));
    if (LANE == 0) dw[jw] = (float)s;
  }
}

// conv_tap_grams writes the ghost-norm Grams of an ungrouped convolution
// from its samples' input Grams X (S×S each, S the input positions):
// aa[i·T² + t·T + u] = Σ_k X_i[p_k(t)·S + p_k(u)] over the taps k, in
// order, whose input positions p_k(t) and p_k(u) both lie inside the
// input, in double, rounded once (the CPU's gather of the taps and
// ReduceToShape over them), for the n = samples·T² elements: a thread per
// element, consecutive threads along u, so that a warp reads a run of a
// row of X.
extern "C" __global__ void conv_tap_grams(ConvGeom g, const float *X, float *aa, long long n) {
  long long T = g.t, S = g.in_size;
  FastDiv byT = fast_div(T, n), by_o2 = fast_div(g.out[2], T), by_o1 = fast_div(g.out[1], T);
  FOR_EACH(idx, n) {
    long long q = fdiv(byT, idx), u = idx - q * T, i = fdiv(byT, q), t = q - i * T;
    int tq = (int)fdiv(by_o2, t), tw = (int)t - tq * g.out[2], td = (int)fdiv(by_o1, tq), th = tq - td * g.out[1];
    int uq = (int)fdiv(by_o2, u), uw = (int)u - uq * g.out[2], ud = (int)fdiv(by_o1, uq), uh = uq - ud * g.out[1];
    const float *Xi = X + i * S * S;
    double s = 0;
    for (int kd = 0; kd < g.k[0]; kd++) {
      int at = td * g.s[0] - g.pb[0] + kd * g.d[0], au = ud * g.s[0] - g.pb[0] + kd * g.d[0];
      if (at < 0 || at >= g.in[0] || au < 0 || au >= g.in[0]) continue;
      for (int kh = 0; kh < g.k[1]; kh++) {
        int bt = th * g.s[1] - g.pb[1] + kh * g.d[1], bu = uh * g.s[1] - g.pb[1] + kh * g.d[1];
        if (bt < 0 || bt >= g.in[1] || bu < 0 || bu >= g.in[1]) continue;
        const float *row = Xi + ((long long)at * g.in[1] + bt) * g.in[2] * S + ((long long)au * g.in[1] + bu) * g.in[2];
        for (int kw = 0; kw < g.k[2]; kw++) {
          int ct = tw * g.s[2] - g.pb[2] + kw * g.d[2], cu = uw * g.s[2] - g.pb[2] + kw * g.d[2];
          if (ct < 0 || ct >= g.in[2] || cu < 0 || cu >= g.in[2]) continue;
          s += row[(long long)ct * S + cu];
        }
      }
    }
    aa[idx] = (float)s;
  }
}

// std_norm_terms: runtime.PerSampleOps.StandardizedNormTerms. A warp per
// row o of sample j (w = j·rows + o): the five sums Σg², Σg, Σg·x̂, Σx̂²,
// Σx̂ in the lane order (runtime.StdRowSums: lane l takes a chunk's terms
// l, l + 32, …, the lanes combined by warp_sum, the chunks in order), then
// lane 0 writes coefW_o·‖g_o − a·1 − c·x̂_o‖² expanded as
// runtime.StdResidualSq, and coefG_o·(Σg·x̂)² where tg is not null.
extern "C" __global__ void std_norm_terms(const float *g, const float *xh, const float *cw, const float *cg, long long rows,
                                          long long k, long long n, long long ld, long long chunk, double *tw, double *tg) {
  WARP_FOR_EACH(w, n * rows) {
    long long j = w / rows, o = w % rows;
    const float *gr = g + w * k, *xr = xh + o * k;
    double s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0;
    for (long long c0 = 0; c0 < k; c0 += chunk) {
      long long c1 = c0 + chunk < k ? c0 + chunk : k;
      double a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0;
      for (long long e = c0 + LANE; e < c1; e += 32) {
        double gv = gr[e], xv = xr[e];
        a1 += gv * gv;
        a2 += gv;
        a3 += gv * xv;
        a4 += xv * xv;
        a5 += xv;
      }
      s1 += warp_sum(a1);
      s2 += warp_sum(a2);
      s3 += warp_sum(a3);
      s4 += warp_sum(a4);
      s5 += warp_sum(a5);
    }
    if (LANE == 0) {
      double uu = 0;
      if (k > 0) {
        double kk = (double)k, a = s2 / kk, c = s3 / kk;
        uu = s1 - 2 * a * s2 - 2 * c * s3 + a * a * kk + c * c * s4 + 2 * a * c * s5;
        if (uu < 0) uu = 0;
      }
      tw[o * ld + j] = (double)cw[o] * uu;
      if (tg) tg[o * ld + j] = (double)cg[o] * (s3 * s3);
    }
  }
}

// std_ghost_terms: runtime.PerSampleOps.StandardizedGhostTerms. A warp per
// row o of sample j (w = j·rows + o): a = Σ dy·u and b = Σ dy·z over the
// row's t positions in the lane order (runtime.DotLanes), then lane 0
// writes −ca_o·(a·a) − cb_o·(b·b) (runtime.StdGhostTerm) and
// cg_o·(b·b) where tg is not null. z is x̂·a_t in dy's layout, u the
// patch sums of each group (groups×t a sample).
extern "C" __global__ void std_ghost_terms(const float *dy, const float *z, const float *u, const float *ca,
                                           const float *cb, const float *cg, long long rows, long long groups,
                                           long long t, long long n, long long ld, long long chunk, double *tw,
                                           double *tg) {
  WARP_FOR_EACH(w, n * rows) {
    long long j = w / rows, o = w % rows, p = rows / groups;
    const float *d = dy + w * t, *zr = z + w * t, *ur = u + (j * groups + o / p) * t;
    double sa = 0, sb = 0;
    for (long long c0 = 0; c0 < t; c0 += chunk) {
      long long c1 = c0 + chunk < t ? c0 + chunk : t;
      double a = 0, b = 0;
      for (long long e = c0 + LANE; e < c1; e += 32) {
        double dv = d[e];
        a += dv * (double)ur[e];
        b += dv * (double)zr[e];
      }
      sa += warp_sum(a);
      sb += warp_sum(b);
    }
    if (LANE == 0) {
      tw[o * ld + j] = -(double)ca[o] * (sa * sa) - (double)cb[o] * (sb * sb);
      if (tg) tg[o * ld + j] = (double)cg[o] * (sb * sb);
    }
  }
}

// std_vjp: runtime.PerSampleOps.StandardizedVJP. A warp per row o: Σs and
// Σs·x̂ in the lane order (runtime.StdRowSums'), broadcast from lane 0,
// then each lane rewrites
// its elements as c_o·((s − a) − b·x̂) in double, rounded once
// (runtime.StdVJP), and lane 0 the gain's gs_o·Σs·x̂ where gain is not
// null.
extern "C" __global__ void std_vjp(float *s, const float *xh, const float *c, const float *gs, long long rows,
                                   long long k, long long chunk, float *gain) {
  WARP_FOR_EACH(o, rows) {
    float *r = s + o * k;
    const float *x = xh + o * k;
    double s2 = 0, s3 = 0;
    for (long long c0 = 0; c0 < k; c0 += chunk) {
      long long c1 = c0 + chunk < k ? c0 + chunk : k;
      double a2 = 0, a3 = 0;
      for (long long e = c0 + LANE; e < c1; e += 32) {
        double gv = r[e], xv = x[e];
        a2 += gv;
        a3 += gv * xv;
      }
      s2 += warp_sum(a2);
      s3 += warp_sum(a3);
    }
    // The sums are lane 0's (warp_sum): every lane's elements need them.
    s2 = __shfl_sync(0xffffffffu, s2, 0);
    s3 = __shfl_sync(0xffffffffu, s3, 0);
    double a = s2 / (double)k, b = s3 / (double)k, co = c[o];
    for (long long e = LANE; e < k; e += 32) r[e] = (float)(co * (((double)r[e] - a) - b * (double)x[e]));
    if (gain && LANE == 0) gain[o] = (float)((double)gs[o] * s3);
  }
}
