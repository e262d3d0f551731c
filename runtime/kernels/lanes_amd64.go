//go:build amd64 && !purego

package kernels

//go:noescape
func laneRowsAVX(g []float32, lanes *[32]float64)

//go:noescape
func laneRowsScaledAVX(g, x []float32, m, iv float32, lanes *[32]float64)

// AddLaneRows adds the len(g)/32 whole rows of 32 terms of g to lanes,
// term l of a row to lane l, row after row — the terms g_e, or with x
// g_e·(x_e − m)·iv rounded to float32 as the scalar expression
// g[e] * (x[e] - m) * iv is — eight AVX registers of float64 lanes, so
// that each lane's sum is the scalar loop's bit for bit (the lane order
// of runtime/lanesum.go). It reports false, adding nothing, on a CPU
// without AVX2; the caller's loop runs then.
func AddLaneRows(g, x []float32, m, iv float32, lanes *[32]float64) bool {
	if !haveAVX2 {
		return false
	}
	n := len(g) &^ 31
	if n == 0 {
		return true
	}
	if x == nil {
		laneRowsAVX(g[:n], lanes)
		return true
	}
	laneRowsScaledAVX(g[:n], x[:n], m, iv, lanes)
	return true
}

//go:noescape
func stdLanesAVX(g, x []float32, lanes *[5][32]float64)

// AddStdLaneRows adds the len(g)/32 whole rows of 32 terms of g and x
// (len(x) ≥ len(g)) to the lanes of five sums — g², g, g·x, x², x, in
// float64 (runtime.StdRowSums) — term l of a row to lane l, row after
// row, bit for bit the scalar loop's. It reports false, adding nothing,
// on a CPU without AVX2; the caller's loop runs then.
func AddStdLaneRows(g, x []float32, lanes *[5][32]float64) bool {
	if !haveAVX2 {
		return false
	}
	if n := len(g) &^ 31; n > 0 {
		stdLanesAVX(g[:n], x[:n], lanes)
	}
	return true
}

//go:noescape
func stdVJPAVX(s, x []float32, a, b, c float64)

// StdVJPRows sets s[e] = float32(c·((s[e] − a) − b·x[e])), in float64 —
// runtime.StdVJP, the standardization's vector-Jacobian product of a
// row — for the len(s)/8·8 leading elements (len(x) ≥ len(s)), the
// scalar expression's bits, and returns how many it did: 0 on a CPU
// without AVX2, where the caller's loop does them all.
func StdVJPRows(s, x []float32, a, b, c float64) int {
	if !haveAVX2 {
		return 0
	}
	n := len(s) &^ 7
	if n > 0 {
		stdVJPAVX(s[:n], x[:n], a, b, c)
	}
	return n
}

// sum16AVX, sqdev16AVX, gradSumsVec16AVX and paramSums16AVX are sums16's
// chains (graphnn.go) over the len &^ 15 leading terms.
//
//go:noescape
func sum16AVX(x []float32, acc *[16]float64)

//go:noescape
func sqdev16AVX(x []float32, m float64, acc *[16]float64)

//go:noescape
func paramSums16AVX(g, x []float32, m, iv float32, s, b *[16]float64)

//go:noescape
func gradSumsVec16AVX(g, x, scale []float32, m, iv float32, sg, sgx *[16]float64)
