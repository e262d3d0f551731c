package dpengine

import (
	"crypto/aes"
	"testing"
)

// BenchmarkAddGaussian measures the noise of one logical batch per
// element: go test -run '^$' -bench AddGaussian ./dpengine
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

// BenchmarkGaussianInto is the ziggurat on one core, per element, with the
// fast path the CPU gets (zigBest).
func BenchmarkGaussianInto(b *testing.B) { benchGaussianInto(b, zigBest) }

// BenchmarkGaussianIntoPaths is BenchmarkGaussianInto through each fast
// path the CPU can run, and the scalar loop, to compare them in one run:
// go test -run '^$' -bench GaussianIntoPaths ./dpengine
func BenchmarkGaussianIntoPaths(b *testing.B) {
	for _, p := range testZigPaths() {
		b.Run(p.name, func(b *testing.B) { benchGaussianInto(b, p) })
	}
}

func benchGaussianInto(b *testing.B, p zigPath) {
	x := make([]float32, 1<<16)
	var g noiseBits
	block, _ := aes.NewCipher(make([]byte, 32))
	g.reset(block, 0)
	for i := 0; i < b.N; i++ {
		gaussianIntoPath(&g, x, 1, 1, p)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(x)), "ns/elem")
}
