package runtime

import "testing"

// BenchmarkStep times one training step (forward, loss, backward with
// parameter gradients) of each fixture at batch 32.
func BenchmarkStep(b *testing.B) {
	for _, name := range fixtures {
		b.Run(name, func(b *testing.B) {
			g, gold := loadFixture(b, name)
			p, err := CompileForBatch(g, 32, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			lab := make([]int64, 32)
			for i := range lab {
				lab[i] = gold["labels"].I64[i%len(gold["labels"].I64)]
			}
			losses := make([]float32, 32)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := p.Forward(); err != nil {
					b.Fatal(err)
				}
				if err := p.Loss(lab, losses); err != nil {
					b.Fatal(err)
				}
				if err := p.Backward(nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
