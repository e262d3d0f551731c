package nifti

import "math"

// A volume is read in its closest canonical orientation, as nibabel's
// as_closest_canonical reorients it: its voxel axes permuted and flipped
// so that the first runs to the patient's right (R), the second to the
// front (A), the third upwards (S) — RAS+, NIfTI's world axes — as near
// as axes can: the voxel-to-world affine's rotation (its polar factor,
// the zooms and shears taken out) gives each voxel axis, in order, the
// world axis it moves along most, among those not yet taken, and the
// sign. The affine is the sform where sform_code is set, else the qform
// where qform_code is, else Analyze's (x flipped), as nibabel takes it.
// Every file's slices are then planes of one kind (axial, for a volume
// of axial-ish orientation: slice k is a plane of constant S) whatever
// order its converter stored the voxels in. An image of one slice (2-D)
// is read as stored.

// axis maps a canonical axis to a stored one: which, and whether it runs
// the other way.
type axis struct {
	stored int
	flip   bool
}

// geometry is what a header says of its voxels' place in the world.
type geometry struct {
	qcode, scode int
	quat         [3]float64 // quatern_b, _c, _d
	qfac         float64    // pixdim[0]: −1 flips the third axis
	pixdim       [3]float64 // pixdim[1..3]
	srow         [3][3]float64
}

// affine is the 3×3 voxel-to-world matrix nibabel's get_best_affine
// gives (its translation aside).
func (g geometry) affine() [3][3]float64 {
	var m [3][3]float64
	switch {
	case g.scode > 0:
		return g.srow
	case g.qcode > 0:
		b, c, d := g.quat[0], g.quat[1], g.quat[2]
		a := math.Sqrt(max(0, 1-(b*b+c*c+d*d)))
		r := [3][3]float64{
			{a*a + b*b - c*c - d*d, 2 * (b*c - a*d), 2 * (b*d + a*c)},
			{2 * (b*c + a*d), a*a + c*c - b*b - d*d, 2 * (c*d - a*b)},
			{2 * (b*d - a*c), 2 * (c*d + a*b), a*a + d*d - c*c - b*b},
		}
		qfac := 1.0
		if g.qfac < 0 {
			qfac = -1
		}
		zoom := [3]float64{g.pixdim[0], g.pixdim[1], qfac * g.pixdim[2]}
		for i := range 3 {
			for j := range 3 {
				m[i][j] = r[i][j] * zoom[j]
			}
		}
		return m
	}
	m[0][0], m[1][1], m[2][2] = -g.pixdim[0], g.pixdim[1], g.pixdim[2]
	return m
}

// canonical returns, for each canonical axis (R, A, S), the stored axis
// and direction that runs along it (the identity where the affine gives
// no orientation: a zero or non-finite matrix).
func (g geometry) canonical() [3]axis {
	id := [3]axis{{0, false}, {1, false}, {2, false}}
	m := g.affine()
	// The zooms out: each column to unit length (a zero column left).
	for j := range 3 {
		n := math.Sqrt(m[0][j]*m[0][j] + m[1][j]*m[1][j] + m[2][j]*m[2][j])
		if n == 0 {
			continue
		}
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return id
		}
		for i := range 3 {
			m[i][j] /= n
		}
	}
	r, ok := polar(m)
	if !ok {
		r = m // rank-deficient: the columns as they are
	}
	var out [3]axis
	var taken [3]bool
	for in := range 3 {
		best, at := 0.0, -1
		for o := range 3 {
			if !taken[o] && math.Abs(r[o][in]) > best {
				best, at = math.Abs(r[o][in]), o
			}
		}
		if at < 0 {
			return id
		}
		taken[at] = true
		out[at] = axis{in, r[at][in] < 0}
	}
	return out
}

// polar returns the orthogonal factor of m's polar decomposition (the
// rotation nearest m) by Newton's iteration X ← (X + X⁻ᵀ)/2, false where
// m is singular.
func polar(m [3][3]float64) ([3][3]float64, bool) {
	x := m
	for range 100 {
		inv, ok := inverse(x)
		if !ok {
			return m, false
		}
		var next [3][3]float64
		diff := 0.0
		for i := range 3 {
			for j := range 3 {
				next[i][j] = (x[i][j] + inv[j][i]) / 2
				diff = max(diff, math.Abs(next[i][j]-x[i][j]))
			}
		}
		x = next
		if diff < 1e-15 {
			break
		}
	}
	return x, true
}

// inverse is m's inverse by its adjugate, false where m is singular.
func inverse(m [3][3]float64) ([3][3]float64, bool) {
	var c [3][3]float64
	for i := range 3 {
		for j := range 3 {
			i1, i2, j1, j2 := (i+1)%3, (i+2)%3, (j+1)%3, (j+2)%3
			c[j][i] = m[i1][j1]*m[i2][j2] - m[i1][j2]*m[i2][j1]
		}
	}
	det := m[0][0]*c[0][0] + m[0][1]*c[1][0] + m[0][2]*c[2][0]
	if math.Abs(det) < 1e-12 || math.IsNaN(det) {
		return c, false
	}
	for i := range 3 {
		for j := range 3 {
			c[i][j] /= det
		}
	}
	return c, true
}
