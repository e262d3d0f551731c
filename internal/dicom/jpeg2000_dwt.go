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
// the low-pass subbands first, the high-pass after them. *scratchI and
// *scratchF are scratch space, kept from call to call.
func j2kInverseDWT(tc *j2kTileComp, scratchI *[]int32, scratchF *[]float32) {
	if tc.ci != nil {
		j2kReconstruct(tc, tc.ci, j2kSR53, j2kLift53, scratchI)
	} else {
		j2kReconstruct(tc, tc.cf, j2kSR97, j2kLift97, scratchF)
	}
}

// j2kReconstruct is j2kInverseDWT on the samples a: at each level the
// one-dimensional reconstruction sr of every row (HOR_SR), then lift, the
// same reconstruction of every column (VER_SR) done a row at a time, on
// strips of j2kStrip columns. Its scratch, grown in *scratch where
// needed, is sized once for the whole tile-component (the last
// level's); nothing in it is read before it is written.
func j2kReconstruct[T int32 | float32](tc *j2kTileComp, a []T, sr func([]T, int, []T), lift func([]T, int, int, int), scratch *[]T) {
	w := tc.x1 - tc.x0
	h := tc.y1 - tc.y0
	nb := max(w, h) + 2*j2kMargin
	if need := nb + j2kStrip*h; cap(*scratch) < need {
		*scratch = make([]T, need)
	}
	buf := (*scratch)[:nb]
	strip := (*scratch)[nb : nb+j2kStrip*h]
	for r := 1; r < len(tc.res); r++ {
		rs := &tc.res[r]
		rw, rh := rs.x1-rs.x0, rs.y1-rs.y0
		if rw == 0 || rh == 0 {
			continue
		}
		for y := 0; y < rh; y++ {
			sr(a[y*w:y*w+rw], rs.x0, buf)
		}
		if rh == 1 {
			// 1D_SR of a single sample (F.3.6).
			if rs.y0&1 != 0 {
				for x := range a[:rw] {
					a[x] /= 2
				}
			}
			continue
		}
		for x := 0; x < rw; x += j2kStrip {
			bw := min(j2kStrip, rw-x)
			t := strip[:bw*rh]
			j2kGatherColumns(t, a, w, x, bw, rh, rs.y0)
			lift(t, bw, rh, rs.y0)
			for y := 0; y < rh; y++ {
				copy(a[y*w+x:y*w+x+bw], t[y*bw:(y+1)*bw])
			}
		}
	}
}

// j2kStrip is how many columns VER_SR reconstructs together: the rows of
// a strip of a tall tile-component stay in cache through the lifting
// steps, each of which runs along rows of contiguous samples. Every
// sample goes through the same arithmetic as a column's 1D_SR would
// give it: the steps are the same and in the same order, and only the
// loops are exchanged.
const j2kStrip = 64

// j2kGatherColumns copies columns x..x+bw−1 of the rh rows of a (row
// stride w) to t (row stride bw), interleaving them as j2kInterleave
// does a signal: the low-pass rows (the first ceil((i0+rh)/2) −
// ceil(i0/2)) to the even absolute indices of i0..i0+rh−1, the
// high-pass ones to the odd.
func j2kGatherColumns[T int32 | float32](t, a []T, w, x, bw, rh, i0 int) {
	lo := (i0 + 1) >> 1
	nL := (i0+rh+1)>>1 - lo
	hi := i0 >> 1
	for j := 0; j < rh; j++ {
		ab := i0 + j
		src := nL + ab>>1 - hi
		if ab&1 == 0 {
			src = ab>>1 - lo
		}
		copy(t[j*bw:(j+1)*bw], a[src*w+x:src*w+x+bw])
	}
}

// j2kRows returns rows j−1, j and j+1 of the strip t (row stride bw, n
// rows), the outer ones by periodic symmetric extension (F.3.7): the
// extension gives a sample outside the signal the value of the sample
// it mirrors, at every stage of the lifting, as the steps are symmetric.
func j2kRows[T int32 | float32](t []T, bw, n, j int) (up, cur, dn []T) {
	u, d := j2kPSE(j-1, n), j2kPSE(j+1, n)
	return t[u*bw : (u+1)*bw], t[j*bw : (j+1)*bw], t[d*bw : (d+1)*bw]
}

// j2kLift53 is the lifting of j2kSR53 on the n ≥ 2 rows of the strip t
// (row stride bw), row j having absolute index i0 + j.
func j2kLift53(t []int32, bw, n, i0 int) {
	for j := i0 & 1; j < n; j += 2 { // even absolute indices (F-5)
		up, cur, dn := j2kRows(t, bw, n, j)
		dn, up = dn[:len(cur)], up[:len(cur)]
		for x := range cur {
			cur[x] -= (up[x] + dn[x] + 2) >> 2
		}
	}
	for j := 1 - i0&1; j < n; j += 2 { // odd (F-6)
		up, cur, dn := j2kRows(t, bw, n, j)
		dn, up = dn[:len(cur)], up[:len(cur)]
		for x := range cur {
			cur[x] += (up[x] + dn[x]) >> 1
		}
	}
}

// j2kLift97 is the scaling and lifting of j2kSR97 on the n ≥ 2 rows of
// the strip t (row stride bw), row j having absolute index i0 + j.
func j2kLift97(t []float32, bw, n, i0 int) {
	even := i0 & 1 // the first row of even absolute index
	const k, ik = float32(j2kK), float32(1 / j2kK)
	for j := 0; j < n; j++ {
		c := ik
		if j&1 == even {
			c = k
		}
		for x, v := range t[j*bw : (j+1)*bw] {
			t[j*bw+x] = v * c
		}
	}
	step := func(first int, c float32) {
		for j := first; j < n; j += 2 {
			up, cur, dn := j2kRows(t, bw, n, j)
			dn, up = dn[:len(cur)], up[:len(cur)]
			for x := range cur {
				// Rounded product, as in j2kSR97.
				cur[x] -= float32(c * (up[x] + dn[x]))
			}
		}
	}
	step(even, j2kDelta)
	step(1-even, j2kGamma)
	step(even, j2kBeta)
	step(1-even, j2kAlpha)
}

// j2kInterleave places a signal's low-pass coefficients (line's first
// ceil(i1/2) − ceil(i0/2)) at even and its high-pass ones at odd absolute
// indices i0..i1−1 of buf (after the margin), and extends it.
func j2kInterleave[T int32 | float32](line []T, i0 int, buf []T) {
	n := len(line)
	nL := (i0+n+1)>>1 - (i0+1)>>1
	// Even absolute indices are those of the parity of i0, filled in
	// order by line[:nL]; the odd ones by line[nL:].
	even := buf[j2kMargin+i0&1 : j2kMargin+n]
	for k, v := range line[:nL] {
		even[2*k] = v
	}
	odd := buf[j2kMargin+1-i0&1 : j2kMargin+n]
	for k, v := range line[nL:] {
		odd[2*k] = v
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
