package noise

import "testing"

// BenchmarkAddGaussian measures the noise of a 2²²-parameter step on all
// cores, per element: go test -run '^$' -bench AddGaussian ./runtime/noise
func BenchmarkAddGaussian(b *testing.B) {
	x := make([]float32, 1<<22)
	b.SetBytes(4 << 22)
	for i := 0; i < b.N; i++ {
		AddGaussian(x, Key{1}, uint64(i), 0, 1, 1)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(x)), "ns/elem")
}

// BenchmarkGeneratorAdd is the noise on one core through each fast path
// the CPU can run, and the scalar loop, to compare them in one run:
// go test -run '^$' -bench GeneratorAdd ./runtime/noise
func BenchmarkGeneratorAdd(b *testing.B) {
	for _, p := range testZigPaths() {
		b.Run(p.name, func(b *testing.B) {
			x := make([]float32, 1<<16)
			g := New(Key{2}, 0)
			for i := 0; i < b.N; i++ {
				g.add(x, uint64(i)<<16, 1, 1, p)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(x)), "ns/elem")
		})
	}
}

// BenchmarkReference is the plain scalar model, per element.
func BenchmarkReference(b *testing.B) {
	x := make([]float32, 1<<12)
	for i := 0; i < b.N; i++ {
		Reference(x, Key{3}, 0, uint64(i)<<12, 1, 1)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(x)), "ns/elem")
}
