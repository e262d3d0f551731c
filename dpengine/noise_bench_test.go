package dpengine

import "testing"

// BenchmarkAddGaussian measures the noise of one logical batch per
// element: go test -run '^$' -bench AddGaussian ./dpengine (the draws
// themselves: BenchmarkGeneratorAdd in runtime/noise)
func BenchmarkAddGaussian(b *testing.B) {
	x := make([]float32, 1<<22)
	s := NewSecureSource()
	b.SetBytes(4 << 22)
	for i := 0; i < b.N; i++ {
		s.AddGaussian(1, x)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(x)), "ns/elem")
}

func BenchmarkNormFloat64(b *testing.B) {
	r := NewSeededSource(1).Rand()
	var s float64
	for i := 0; i < b.N; i++ {
		s += r.NormFloat64()
	}
	_ = s
}
