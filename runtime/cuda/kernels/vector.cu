// vector.cu: runtime.VectorOps (device_vector.go). Sums that the contract
// fixes to one order run that order, so that the GPU gives the CPU's bits:
// the float64 norms and dot products in the lane order (runtime/lanesum.go:
// a warp per chunk, lane_chunks, then the chunks in order, lane_finish);
// float32 with four running sums and a column summed row after row on one
// thread per output, parallel across outputs (runs, columns) only.

// lane_chunks writes the chunk sums of the lane order (runtime/lanesum.go)
// of the rows of a (rows of size terms, row stride size): part[r·nch + c]
// = chunk c of row r's Σ_k a_k² (b null) or Σ_k a_k·b_k, a warp per
// chunk, lane l summing the chunk's terms l, l + 32, … in float64 from 0,
// the lanes combined by warp_sum's halves (nch = ⌈size/chunk⌉).
extern "C" __global__ void lane_chunks(const float *a, const float *b, long long size, long long rows, long long chunk,
                                       double *part) {
  long long nch = (size + chunk - 1) / chunk;
  WARP_FOR_EACH(w, rows * nch) {
    long long r = w / nch, c0 = r * size + w % nch * chunk, c1 = r * size + size;
    if (c0 + chunk < c1) c1 = c0 + chunk;
    double s = 0;
    for (long long k = c0 + LANE; k < c1; k += 32) {
      double v = a[k];
      s += v * (b ? (double)b[k] : v);
    }
    s = warp_sum(s);
    if (LANE == 0) part[w] = s;
  }
}

// lane_finish adds each row's chunk sums in order from 0 into S_r and
// writes dst[r] = S_r, or with add dst[r] += α·S_r: SquaredNorms, Dot,
// AddSumSq (α = 1), AddDot.
extern "C" __global__ void lane_finish(const double *part, long long nch, long long rows, int add, double alpha, double *dst) {
  FOR_EACH(r, rows) {
    double s = 0;
    for (long long c = 0; c < nch; c++) s += part[r * nch + c];
    dst[r] = add ? dst[r] + alpha * s : s;
  }
}

// lane_finish_product computes dst[r] += α·(S_a·S_b) for the rows r <
// rows, from the chunk sums of a's row (na chunks) and of b's (nb), each
// added in order from 0 (AddSumSqProduct, AddSumSqProducts).
extern "C" __global__ void lane_finish_product(const double *pa, long long na, const double *pb, long long nb, double alpha,
                                               double *dst, long long rows) {
  FOR_EACH(r, rows) {
    double sa = 0, sb = 0;
    for (long long c = 0; c < na; c++) sa += pa[r * na + c];
    for (long long c = 0; c < nb; c++) sb += pb[r * nb + c];
    dst[r] += alpha * (sa * sb);
  }
}

// scale computes x ← α·x.
extern "C" __global__ void scale(float alpha, float *x, long long n) {
  FOR_EACH(i, n) x[i] *= alpha;
}

// add computes y ← y + x.
extern "C" __global__ void add(const float *x, float *y, long long n) {
  FOR_EACH(i, n) y[i] += x[i];
}

// add_run_sums adds to dst[m] the sum of run m of x (runs of t elements),
// a warp per run (a VGG's first bias sums 50 176 positions a sample and
// channel), in the CPU's lane order (runtime.SumLanes32) in float: per
// chunk of 2048 terms, lane l sums terms l, l + 32, …, the lanes combine
// by halves (lane l adds lane l + 16's, then l + 8's, …), and lane 0 adds
// the chunks in order.
extern "C" __global__ void add_run_sums(const float *x, long long t, float *dst, long long runs) {
  WARP_FOR_EACH(m, runs) {
    const float *r = x + m * t;
    float total = 0;
    for (long long c = 0; c < t; c += 2048) {
      long long e = c + 2048 < t ? c + 2048 : t;
      float s = 0;
      for (long long i = c + LANE; i < e; i += 32) s += r[i];
      total += warp_sum_f(s); // lane 0's is the sum
    }
    if (LANE == 0) dst[m] += total;
  }
}

// scatter_add adds src[j] to dst[idx[j]] for every j < n with idx[j] ≥ 0,
// in the order of j on one thread: two j may name the same element, and
// the order of their additions decides the float32 result.
extern "C" __global__ void scatter_add(float *dst, const float *src, const int *idx, long long n) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (long long j = 0; j < n; j++)
    if (idx[j] >= 0) dst[idx[j]] += src[j];
}

// add_norm_sq computes y ← y + x in float64.
extern "C" __global__ void add_norm_sq(const double *x, double *y, long long n) {
  FOR_EACH(i, n) y[i] += x[i];
}

// sum_rows overwrites out[j] with Σ_t g[t·p + j] for j < p, summed in
// float32 from 0 in the order of t.
extern "C" __global__ void sum_rows(const float *g, long long t, long long p, float *out) {
  FOR_EACH(j, p) {
    float s = 0;
    for (long long r = 0; r < t; r++) s += g[r * p + j];
    out[j] = s;
  }
}

// sum_norm_rows writes dst[j] = Σ_k x[k·n + j] over the rows k < rows,
// added from 0 in the order of k: a thread per column.
extern "C" __global__ void sum_norm_rows(const double *x, long long rows, double *dst, long long n) {
  FOR_EACH(j, n) {
    double s = 0;
    for (long long k = 0; k < rows; k++) s += x[k * n + j];
    dst[j] = s;
  }
}

// zero_f64 sets x[i] = 0 for i < n (ZeroNormSq).
extern "C" __global__ void zero_f64(double *x, long long n) {
  FOR_EACH(i, n) x[i] = 0;
}

// add_scaled_rows computes y[j] += c_i·x[i·n + j] for the rows i < rows of
// non-zero c_i, in the order of i, the product rounded to float before
// each sum as the CPU's Axpy row after row: one thread per element j.
extern "C" __global__ void add_scaled_rows(const float *c, long long rows, const float *x, float *y, long long n) {
  FOR_EACH(j, n) {
    float s = y[j];
    for (long long i = 0; i < rows; i++) {
      float ci = c[i];
      if (ci != 0) s += ci * x[i * n + j];
    }
    y[j] = s;
  }
}

// scale_rows scales element k of x (rows of row elements, n in all) by
// c[s]·α, s = (r·row/stride) mod nc for its row r, the product rounded to
// float first as the CPU's Scale(c_s·α, row r).
// (Its three divisions an element by multiply-high, FastDiv: book-keeping
// scales every convolution's output gradient with it.)
extern "C" __global__ void scale_rows(const float *c, long long nc, float alpha, float *x, long long n, long long row, long long stride) {
  FastDiv byRow = fast_div(row, n), byStride = fast_div(stride, n), byNC = fast_div(nc, n);
  FOR_EACH(k, n) {
    long long r = fdiv(byRow, k), q = fdiv(byStride, r * row);
    float f = c[q - fdiv(byNC, q) * nc] * alpha;
    x[k] *= f;
  }
}

// contract computes out[w] = Σ a[ia]·b[ib] over the loop nest of nl loops
// given in loop (extents, then the strides of out, a and b, nl each), the
// products and sums in float64 in the loop's order (the last loop
// fastest) into acc, each output rounded once: one thread, as the order
// is the contract's (nl ≤ 32).
extern "C" __global__ void contract(const int *loop, int nl, const float *a, const float *b, double *acc, float *out, long long nout) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const int *dims = loop, *so = loop + nl, *sa = loop + 2 * nl, *sb = loop + 3 * nl;
  for (long long j = 0; j < nout; j++) acc[j] = 0;
  bool empty = false;
  for (int k = 0; k < nl; k++)
    if (dims[k] == 0) empty = true;
  long long coord[32];
  for (int k = 0; k < nl; k++) coord[k] = 0;
  long long w = 0, ia = 0, ib = 0;
  while (!empty) {
    acc[w] += (double)a[ia] * (double)b[ib];
    int k = nl - 1;
    for (; k >= 0; k--) {
      coord[k]++;
      w += so[k];
      ia += sa[k];
      ib += sb[k];
      if (coord[k] < dims[k]) break;
      w -= coord[k] * so[k];
      ia -= coord[k] * sa[k];
      ib -= coord[k] * sb[k];
      coord[k] = 0;
    }
    empty = k < 0;
  }
  for (long long j = 0; j < nout; j++) out[j] = (float)acc[j];
}

// norm_affine_sum returns to lane 0 of the calling warp sample i's
// gradient with respect to element k of a normalization's scale (scale ≠
// 0: Σ dy·x̂, each term the float dy·(x − mean)·(1/σ)) or bias (Σ dy),
// over the sample's rows of l elements: its row q is whole-tensor row
// (i + q/per_block·b)·per_block + q mod per_block, whose element j uses
// parameter (row mod g)·cpg + j/s. The terms go in the order of the rows
// and, in each, of the run of elements j whose parameter is k, summed in
// float64 in the lane order (runtime/lanesum.go): chunks of SUM_CHUNK
// terms, term t of a chunk to lane t mod 32, the lanes by warp_sum's
// tree, the chunks in order — the CPU's normAffineSample, bit for bit.
// The data of row q are at q·l in the sample's gathered copy, or (whole)
// at the whole-tensor row's offset. Every lane of the warp calls it.
#define SUM_CHUNK 2048
// The rows' block and place in it are counted, and row mod g divided by
// byG's multiply, rather than three 64-bit divisions a row: on a GPU those
// divisions (a hundred instructions each) cost more than the terms of
// ResNet-50's later GroupNorms (49 a row). And where a block holds whole
// groups of rows (per_block a multiple of g), row q's group is q mod g:
// only every g-th row, from k/cpg's, can hold k's run, as the CPU's sum
// skips (the same terms in the same order).
//
// With bias_total (scale set), the bias's sum of the same run — the terms
// dy alone, in the same lane order and chunks, so the bits of a call
// without the scale — goes there too: one pass over dy for both.
__device__ static double norm_affine_sum(int scale, long long i, long long b, long long per_block, long long l,
                                         const FastDiv &byG, long long cpg, long long s, const float *x,
                                         const float *mean, const float *inv, const float *dy, long long rows, int whole,
                                         long long k, int lane, double *bias_total) {
  double total = 0, part = 0, totalb = 0, partb = 0;
  long long t = 0;          // the terms before this run
  long long q0 = 0, qs = 1;
  if (cpg > 0 && per_block % byG.d == 0) {
    q0 = k / cpg;
    qs = byG.d;
  }
  long long blk = q0 / per_block, w = q0 % per_block; // q / per_block and q mod per_block, counted
  for (long long q = q0; q < rows; q += qs, w += qs, w >= per_block ? (w -= per_block, blk++) : 0) {
    long long row = (i + blk * b) * per_block + w;
    long long d = k - (row - fdiv(byG, row) * byG.d) * cpg;
    if (d < 0 || d * s >= l) continue;
    long long j0 = d * s, len = (j0 + s < l ? j0 + s : l) - j0, off = (whole ? row : q) * l + j0;
    const float *gr = dy + off, *xr = scale ? x + off : 0;
    float mf = scale ? mean[row] : 0, ivf = scale ? inv[row] : 0;
    for (long long e = 0; e < len;) {
      long long end = e + (SUM_CHUNK - t % SUM_CHUNK);
      if (end > len) end = len;
      // This lane's terms of [e, end): those whose index t + (u − e) is
      // its lane mod 32.
      for (long long u = e + ((lane - t) & 31); u < end; u += 32) {
        float g = gr[u], v = g;
        if (scale) v = g * (xr[u] - mf) * ivf;
        part += (double)v;
        if (bias_total) partb += (double)g;
      }
      t += end - e;
      e = end;
      if (t % SUM_CHUNK == 0) {
        total += warp_sum(part);
        part = 0;
        if (bias_total) {
          totalb += warp_sum(partb);
          partb = 0;
        }
      }
    }
  }
  if (t % SUM_CHUNK != 0) {
    total += warp_sum(part);
    if (bias_total) totalb += warp_sum(partb);
  }
  if (bias_total) *bias_total = totalb;
  return total;
}

// norm_affine_grads writes the gradients (norm_affine_sum) of the samples
// i0, i0+1, … (samples of them), sample i0 + j's nout elements at
// out[j·nout:], from rows rows a sample: a sample's gathered copy (whole =
// 0, NormAffineSampleGrad, one sample) or the whole tensors (whole = 1,
// NormAffineGrads). A warp per sample and parameter element (lanes is 32).
// With outb (scale set), the bias's gradients go there from the same pass.
extern "C" __global__ void norm_affine_grads(int scale, long long i0, long long b, long long per_block, long long l,
                                             long long g, long long cpg, long long s, const float *x, const float *mean,
                                             const float *inv, const float *dy, long long rows, int whole, float *out,
                                             long long nout, long long samples, int lanes, float *outb) {
  (void)lanes;
  FastDiv byG = fast_div(g, (i0 + samples + (rows / per_block + 1) * b) * per_block), byOut = fast_div(nout, samples * nout);
  WARP_FOR_EACH(e, samples * nout) {
    long long j = fdiv(byOut, e);
    double vb = 0;
    double v = norm_affine_sum(scale, i0 + j, b, per_block, l, byG, cpg, s, x, mean, inv, dy, rows, whole, e - j * nout,
                               LANE, outb ? &vb : 0);
    if (LANE == 0) out[e] = (float)v;
    if (LANE == 0 && outb) outb[e] = (float)vb;
  }
}

// norm_affine_tiles is norm_affine_grads in LayerNorm's layout (g = 1,
// cpg = 0, s = 1: element k of every row is term k's, one term a row), in
// column tiles: a block takes 32
// consecutive elements k of one sample's output (threadIdx.x) and its
// threads along y the 32 lanes of norm_affine_sum's order (thread y the
// lanes y, y + blockDim.y, …; blockDim.y divides 32), lane u summing the
// terms q ≡ u (mod 32) of each SUM_CHUNK in order, then the lanes added by
// warp_sum's halving tree in shared memory, the chunks in order: the same
// sums in the same order, so the same bits, with a warp reading 32
// neighbouring elements of a row and 32·blockDim.y threads, not one, per
// 32 results. The kernel before it gave a sample and element a thread,
// its terms one after another: 24 576 threads for ViT-B/16's batch of 32,
// 100 µs a LayerNorm where its reads take 12 (the sixth loan's profile of
// a bk step). With outb the bias's sums (dy alone) come from the same
// pass; scale 0 writes the bias's into out.
extern "C" __global__ void norm_affine_tiles(int scale, long long i0, long long b, long long per_block, long long l,
                                             const float *x, const float *mean, const float *inv, const float *dy,
                                             long long rows, int whole, float *out, long long nout, long long samples,
                                             float *outb) {
  __shared__ double part[32][33], partb[32][33];
  long long tiles = (nout + 31) / 32;
  FastDiv byBlock = fast_div(per_block, rows);
  for (long long t = blockIdx.x; t < samples * tiles; t += gridDim.x) {
    long long j = t / tiles, k = (t - j * tiles) * 32 + threadIdx.x, i = i0 + j;
    bool ok = k < nout;
    double total = 0, totalb = 0;
    for (long long c0 = 0; c0 < rows; c0 += SUM_CHUNK) {
      long long c1 = c0 + SUM_CHUNK < rows ? c0 + SUM_CHUNK : rows;
      for (int u = threadIdx.y; u < 32; u += blockDim.y) {
        double s = 0, sb = 0;
        for (long long q = c0 + u; ok && q < c1; q += 32) {
          long long blk = fdiv(byBlock, q), row = (i + blk * b) * per_block + (q - blk * per_block);
          long long off = (whole ? row : q) * l + k;
          float v = dy[off];
          sb += (double)v;
          if (scale) v = v * (x[off] - mean[row]) * inv[row];
          s += (double)v;
        }
        part[u][threadIdx.x] = s;
        partb[u][threadIdx.x] = sb;
      }
      __syncthreads();
      for (int h = 16; h > 0; h /= 2) {
        for (int u = threadIdx.y; u < h; u += blockDim.y) {
          part[u][threadIdx.x] += part[u + h][threadIdx.x];
          partb[u][threadIdx.x] += partb[u + h][threadIdx.x];
        }
        __syncthreads();
      }
      total += part[0][threadIdx.x];
      totalb += partb[0][threadIdx.x];
      __syncthreads(); // part is the next chunk's
    }
    if (ok && threadIdx.y == 0) {
      out[j * nout + k] = (float)total;
      if (outb) outb[j * nout + k] = (float)totalb;
    }
  }
}

// count_non_finite adds to count[0] the number of NaN or infinite
// elements of x (an integer count: the atomic additions' order does not
// matter).
extern "C" __global__ void count_non_finite(const float *x, long long n, unsigned long long *count) {
  unsigned long long c = 0;
  FOR_EACH(i, n) {
    float v = x[i];
    if (isnan(v) || isinf(v)) c++;
  }
  if (c) atomicAdd(count, c);
}
