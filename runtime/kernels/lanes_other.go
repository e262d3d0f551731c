//go:build !amd64 || purego

package kernels

// AddLaneRows reports false: no vector form here, the caller's loop runs.
func AddLaneRows(g, x []float32, m, iv float32, lanes *[32]float64) bool { return false }
