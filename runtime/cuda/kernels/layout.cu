// layout.cu: runtime.LayoutOps (device_layout.go): copies, fills, index
// maps, permutations and row blocks, one thread per element moved (per
// element of x for a gather's adjoint, which sums its readers in order).

// fill_f sets the n elements of y to v.
extern "C" __global__ void fill_f(float v, float *y, long long n) {
  FOR_EACH(i, n) y[i] = v;
}

// index_gather computes y[i] = x[idx[i]], or fill where idx[i] < 0.
extern "C" __global__ void index_gather(const float *x, const int *idx, float fill, float *y, long long n) {
  FOR_EACH(i, n) {
    int j = idx[i];
    y[i] = j < 0 ? fill : x[j];
  }
}

// index_gather_backward overwrites dx[j] (j < n) with the sum of dy[i]
// over the i that read j, listed in increasing order in
// readers[start[j] : start[j+1]]: summed in float from 0 in that order, as
// the CPU's.
extern "C" __global__ void index_gather_backward(const float *dy, const int *start, const int *readers, float *dx, long long n) {
  FOR_EACH(j, n) {
    float s = 0;
    for (int p = start[j]; p < start[j + 1]; p++) s += dy[readers[p]];
    dx[j] = s;
  }
}

// index_gather_backward_rows is index_gather_backward on rows of dy (len
// elements each) and dx (src elements each): dx[r·src + j] sums dy[r·len
// + i] over the i that read j, in index_gather_backward's order, for the
// n = rows·src elements of dx.
extern "C" __global__ void index_gather_backward_rows(const float *dy, const int *start, const int *readers, float *dx,
                                                      long long len, long long src, long long n) {
  FOR_EACH(q, n) {
    long long r = q / src, j = q % src;
    const float *row = dy + r * len;
    float s = 0;
    for (int p = start[j]; p < start[j + 1]; p++) s += row[readers[p]];
    dx[q] = s;
  }
}

// permute moves the n elements of a permutation: y[i] = x[off(i)], or with
// scatter x[off(i)] = y[i] (the inverse), off from operand 0 of l (every
// axis kept, y contiguous).
extern "C" __global__ void permute(float *x, float *y, int scatter, long long n, Layout l) {
  FOR_EACH(i, n) {
    long long off = 0;
    layout_offsets(l, 0, l.rank, i, &off, 1);
    if (scatter)
      x[off] = y[i];
    else
      y[i] = x[off];
  }
}

// rows_copy moves a part of Concat or Split: row o of the part (size
// elements at part[o·size]) is elements [off, off+size) of the whole's row
// o (row elements); whole ← part, or with split part ← whole.
extern "C" __global__ void rows_copy(float *whole, long long row, long long off, float *part, long long size, int split, long long n) {
  FastDiv bySize = fast_div(size, n);
  FOR_EACH(i, n) {
    long long o = fdiv(bySize, i), c = i - o * size;
    float *w = whole + o * row + off + c;
    if (split)
      part[i] = *w;
    else
      *w = part[i];
  }
}

// expand computes y[i] = x[off(i)] for the n elements of y, x broadcast
// onto y's shape (operand 0 of l).
extern "C" __global__ void expand(const float *x, float *y, long long n, Layout l) {
  FOR_EACH(i, n) {
    long long off = 0;
    layout_offsets(l, 0, l.rank, i, &off, 1);
    y[i] = x[off];
  }
}
