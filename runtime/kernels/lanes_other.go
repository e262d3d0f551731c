//go:build !amd64 || purego

package kernels

// AddLaneRows reports false: no vector form here, the caller's loop runs.
func AddLaneRows(g, x []float32, m, iv float32, lanes *[32]float64) bool { return false }

func sum16AVX(x []float32, acc *[16]float64)              { panic("kernels: no AVX kernels") }
func sqdev16AVX(x []float32, m float64, acc *[16]float64) { panic("kernels: no AVX kernels") }
func paramSums16AVX(g, x []float32, m, iv float32, s, b *[16]float64) {
	panic("kernels: no AVX kernels")
}
func gradSumsVec16AVX(g, x, scale []float32, m, iv float32, sg, sgx *[16]float64) {
	panic("kernels: no AVX kernels")
}

// AddStdLaneRows reports false: no vector form here, the caller's loop
// runs.
func AddStdLaneRows(g, x []float32, lanes *[5][32]float64) bool { return false }

// StdVJPRows does nothing here and returns 0: the caller's loop runs.
func StdVJPRows(s, x []float32, a, b, c float64) int { return 0 }
