package blas

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkSgemm measures square products on every available backend and
// reports GFLOP/s (2·m·n·k flops per product).
func BenchmarkSgemm(b *testing.B) {
	for _, be := range Available() {
		for _, n := range []int{128, 512, 1024} {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}} {
				name := fmt.Sprintf("%s/n=%d/tA=%v/tB=%v", be, n, tr[0], tr[1])
				b.Run(name, func(b *testing.B) {
					prev, _ := SetBackend(be)
					defer SetBackend(prev)
					r := rand.New(rand.NewPCG(1, 1))
					x, y, z := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
					for b.Loop() {
						Sgemm(tr[0], tr[1], n, n, n, 1, x, n, y, n, 0, z, n)
					}
					b.ReportMetric(2*float64(n)*float64(n)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}
