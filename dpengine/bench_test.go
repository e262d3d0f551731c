package dpengine

import (
	"testing"
)

// BenchmarkStep measures one logical step (physical batch = logical batch)
// of each fixture and mode: go test -run '^$' -bench Step ./dpengine
func BenchmarkStep(b *testing.B) {
	for _, name := range []string{"cnn", "vit"} {
		for _, mode := range Modes() {
			b.Run(name+"/"+string(mode), func(b *testing.B) {
				t := &testing.T{}
				gd := loadGolden(t, name)
				e := newEngineB(b, name, mode, 64)
				x := make([]float32, 0, 64*len(gd.x)/8)
				y := make([]int64, 0, 64)
				for len(y) < 64 {
					x = append(x, gd.x...)
					y = append(y, gd.y...)
				}
				sl := len(gd.x) / 8
				batch := make([]int, 64)
				for i := range batch {
					batch[i] = i
				}
				fill := func(idx []int, xs []float32, ys []int64) error {
					for k, i := range idx {
						copy(xs[k*sl:(k+1)*sl], x[i*sl:(i+1)*sl])
						ys[k] = y[i]
					}
					return nil
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := e.Step(batch, fill); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "samples/s")
			})
		}
	}
}
