package accountant

import "testing"

// BenchmarkPRV10k times the PRV accountant on 10 000 steps (σ=1, q=0.01,
// δ=1e-5): about 0.4 s on 2 cores.
func BenchmarkPRV10k(b *testing.B) {
	for range b.N {
		mustEpsilon(b, PRV, []Phase{{1.0, 0.01, 10000}}, 1e-5)
	}
}

// BenchmarkRDP10k times the RDP accountant on the same run.
func BenchmarkRDP10k(b *testing.B) {
	for range b.N {
		mustEpsilon(b, RDP, []Phase{{1.0, 0.01, 10000}}, 1e-5)
	}
}

// BenchmarkCalibratePRV times a PRV calibration over 2000 steps.
func BenchmarkCalibratePRV(b *testing.B) {
	for range b.N {
		if _, err := CalibrateSigma(PRV, 2, 1e-5, 0.01, 2000); err != nil {
			b.Fatal(err)
		}
	}
}
