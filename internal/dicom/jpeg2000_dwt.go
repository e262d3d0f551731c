package dicom

// The inverse discrete wavelet transforms of JPEG 2000 (T.800 Annex F):
// 2D_SR (F.3.2) applied level after level, each an interleave of the four
// subbands (F.3.3), a one-dimensional reconstruction of every row
// (HOR_SR, F.3.4) and then of every column (VER_SR, F.3.5), each by
// 1D_SR (F.3.6): periodic symmetric extension (F.3.7) and the lifting
// steps of the 5/3 reversible (F.3.8.1) or 9/7 irreversible (F.3.8.2)
// filter.

// j2kMargin is the extension on each side of a signal: 4 samples cover
// the 9/7 filter (Table F.3), and more than the 5/3 filter needs.
const j2kMargin = 4

// Lifting constants of the 9/7 filter (Table F.4).
const (
	j2kAlpha = -1.586134342059924
	j2kBeta  = -0.052980118572961
	j2kGamma = 0.882911075530934
	j2kDelta = 0.443506852043971
	j2kK     = 1.230174104914001
)

// j2kPSE returns the index within [0, n) that the periodic symmetric
// extension of F.3.7 (Figure F.4) maps index k to; n ≥ 2.
func j2kPSE(k, n int) int {
	period := 2 * (n - 1)
	k %= period
	if k < 0 {
		k += period
	}
	if k >= n {
		k = period - k
	}
	return k
}

// j2kInverseDWT reconstructs a tile-component's samples in place from its
// subbands, which lie in its array in the Mallat layout: at each level
// the low-pass subbands first, the high-pass after them.
func j2kInverseDWT(tc *j2kTileComp) {
	if tc.ci != nil {
		j2kReconstruct(tc, tc.ci, j2kSR53)
	} else {
		j2kReconstruct(tc, tc.cf, j2kSR97)
	}
}

// j2kReconstruct is j2kInverseDWT on the samples a, by the
// one-dimensional reconstruction sr: every row of a level, then every
// column, its scratch sized once for the whole tile-component (the last
// level's).
func j2kReconstruct[T int32 | float32](tc *j2kTileComp, a []T, sr func([]T, int, []T)) {
	w := tc.x1 - tc.x0
	n := max(w, tc.y1-tc.y0)
	buf := make([]T, n+2*j2kMargin)
	cols := j2kColumnLines[T](n)
	for r := 1; r < len(tc.res); r++ {
		rs := &tc.res[r]
		rw, rh := rs.x1-rs.x0, rs.y1-rs.y0
		if rw == 0 || rh == 0 {
			continue
		}
		for y := 0; y < rh; y++ {
			sr(a[y*w:y*w+rw], rs.x0, buf)
		}
		j2kColumns(a, w, rw, rh, rs.y0, cols, buf, sr)
	}
}

// j2kColumnBlock is how many columns VER_SR gathers at once: a row's
// block is one cache line of int32 or float32 samples, read once for
// all of them instead of once a column.
const j2kColumnBlock = 16

// j2kColumnLines allocates the column buffers of j2kColumns for columns
// of up to n samples.
func j2kColumnLines[T int32 | float32](n int) [][]T {
	lines := make([][]T, j2kColumnBlock)
	for k := range lines {
		lines[k] = make([]T, n)
	}
	return lines
}

// j2kColumns runs the one-dimensional reconstruction sr over every column
// of the rw×rh region at the start of a (row stride w), whose first row
// has absolute index y0 (F.3.5): j2kColumnBlock columns gathered a row at
// a time, reconstructed one by one, and written back.
func j2kColumns[T int32 | float32](a []T, w, rw, rh, y0 int, lines [][]T, buf []T, sr func([]T, int, []T)) {
	for x := 0; x < rw; x += j2kColumnBlock {
		nb := min(j2kColumnBlock, rw-x)
		for y := 0; y < rh; y++ {
			row := a[y*w+x : y*w+x+nb]
			for k, v := range row {
				lines[k][y] = v
			}
		}
		for k := range nb {
			sr(lines[k][:rh], y0, buf)
		}
		for y := 0; y < rh; y++ {
			row := a[y*w+x : y*w+x+nb]
			for k := range row {
				row[k] = lines[k][y]
			}
		}
	}
}

// j2kInterleave places a signal's low-pass coefficients (line's first
// ceil(i1/2) − ceil(i0/2)) at even and its high-pass ones at odd absolute
// indices i0..i1−1 of buf (after the margin), and extends it.
func j2kInterleave[T int32 | float32](line []T, i0 int, buf []T) {
	n := len(line)
	lo := (i0 + 1) >> 1
	nL := (i0+n+1)>>1 - lo
	hi := i0 >> 1
	for i := 0; i < n; i++ {
		a := i0 + i
		if a&1 == 0 {
			buf[j2kMargin+i] = line[a>>1-lo]
		} else {
			buf[j2kMargin+i] = line[nL+a>>1-hi]
		}
	}
	for j := 1; j <= j2kMargin; j++ {
		buf[j2kMargin-j] = buf[j2kMargin+j2kPSE(-j, n)]
		buf[j2kMargin+n-1+j] = buf[j2kMargin+j2kPSE(n-1+j, n)]
	}
}

// j2kSR53 is 1D_SR with the reversible 5/3 filter (F-5, F-6).
func j2kSR53(line []int32, i0 int, buf []int32) {
	n := len(line)
	if n == 1 {
		if i0&1 != 0 {
			line[0] /= 2
		}
		return
	}
	j2kInterleave(line, i0, buf)
	end := n + 2*j2kMargin
	b := buf[:end]
	// Positions j of buf hold absolute index i0 + j − margin; the
	// margin is even, so j's parity is i0 + j's.
	for j := 1 + (i0+1)&1; j < end-1; j += 2 {
		b[j] -= (b[j-1] + b[j+1] + 2) >> 2
	}
	for j := 2 + (i0+1)&1; j < end-2; j += 2 {
		b[j] += (b[j-1] + b[j+1]) >> 1
	}
	copy(line, b[j2kMargin:j2kMargin+n])
}

// j2kSR97 is 1D_SR with the irreversible 9/7 filter (F-7), in float32.
func j2kSR97(line []float32, i0 int, buf []float32) {
	n := len(line)
	if n == 1 {
		if i0&1 != 0 {
			line[0] /= 2
		}
		return
	}
	j2kInterleave(line, i0, buf)
	end := n + 2*j2kMargin
	b := buf[:end]
	even := (i0) & 1 // first j with even absolute index: j ≡ i0 (mod 2)
	odd := 1 - even
	const k, ik = float32(j2kK), float32(1 / j2kK)
	for j := even; j < end; j += 2 {
		b[j] *= k
	}
	for j := odd; j < end; j += 2 {
		b[j] *= ik
	}
	step := func(first, lo, hi int, c float32) {
		j := first
		for j < lo {
			j += 2
		}
		for ; j < hi; j += 2 {
			// The conversion rounds the product, so that no
			// platform fuses it with the subtraction (Go spec,
			// floating-point operators): results are the same
			// everywhere.
			b[j] -= float32(c * (b[j-1] + b[j+1]))
		}
	}
	step(even, 1, end-1, j2kDelta)
	step(odd, 2, end-2, j2kGamma)
	step(even, 3, end-3, j2kBeta)
	step(odd, 4, end-4, j2kAlpha)
	copy(line, b[j2kMargin:j2kMargin+n])
}
