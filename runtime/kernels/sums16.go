package kernels

// The row normalizations' float64 sums (RowNormForward's statistics,
// RowNormBackward's Σ g·γ and Σ g·γ·x̂ of LayerNorm's rows, the per-run
// Σ g·x̂ and Σ g of the others and of RowNormParamGrads)
// in sixteen interleaved chains, so that a CPU adds as many terms per
// floating-point latency as its vector registers hold: of a slice's terms,
// term j of the len &^ 15 leading ones goes to chain j mod 16 and the
// rest to chain 0, each chain's terms in order; the chains are combined
// by halves (tree16). A slice's chains may carry on into the next slice's
// (a row's runs). The same order on every CPU: AVX2 registers where the
// CPU has them (lanes_amd64.s), else the loops below — so a machine's
// instructions never change a result (TestSums16).

// tree16 combines the chains by halves: c[i] + c[i+8], then + 4, + 2, + 1
// (unrolled: a short run's sums call it once each).
func tree16(c *[16]float64) float64 {
	a0, a1, a2, a3 := c[0]+c[8], c[1]+c[9], c[2]+c[10], c[3]+c[11]
	a4, a5, a6, a7 := c[4]+c[12], c[5]+c[13], c[6]+c[14], c[7]+c[15]
	b0, b1, b2, b3 := a0+a4, a1+a5, a2+a6, a3+a7
	return (b0 + b2) + (b1 + b3)
}

// sum16 adds the terms float64(x_j) to acc.
func sum16(x []float32, acc *[16]float64) {
	n := len(x) &^ 15
	if haveAVX2 && n > 0 {
		sum16AVX(x[:n], acc)
	} else {
		for j := 0; j < n; j++ {
			acc[j&15] += float64(x[j])
		}
	}
	for j := n; j < len(x); j++ {
		acc[0] += float64(x[j])
	}
}

// sqdev16 adds the terms (float64(x_j) − m)² to acc.
func sqdev16(x []float32, m float64, acc *[16]float64) {
	n := len(x) &^ 15
	if haveAVX2 && n > 0 {
		sqdev16AVX(x[:n], m, acc)
	} else {
		for j := 0; j < n; j++ {
			d := float64(x[j]) - m
			acc[j&15] += float64(d * d) // the conversion: never fused into the add
		}
	}
	for j := n; j < len(x); j++ {
		d := float64(x[j]) - m
		acc[0] += float64(d * d)
	}
}

// gradSumsVec16 adds a_j = g_j·scale_j to sg and a_j·((x_j − m)·iv) to
// sgx, each rounded to float32 first (LayerNorm's rows: a scale per term).
func gradSumsVec16(g, x, scale []float32, m, iv float32, sg, sgx *[16]float64) {
	x, scale = x[:len(g)], scale[:len(g)]
	n := len(g) &^ 15
	if haveAVX2 && n > 0 {
		gradSumsVec16AVX(g[:n], x[:n], scale[:n], m, iv, sg, sgx)
	} else {
		for j := 0; j < n; j++ {
			a := g[j] * scale[j]
			sg[j&15] += float64(a)
			sgx[j&15] += float64(a * ((x[j] - m) * iv))
		}
	}
	for j := n; j < len(g); j++ {
		a := g[j] * scale[j]
		sg[0] += float64(a)
		sgx[0] += float64(a * ((x[j] - m) * iv))
	}
}

// paramSums16 adds g_j·(x_j − m)·iv (rounded to float32, left to right)
// to s and g_j to b.
func paramSums16(g, x []float32, m, iv float32, s, b *[16]float64) {
	x = x[:len(g)]
	n := len(g) &^ 15
	if haveAVX2 && n > 0 {
		paramSums16AVX(g[:n], x[:n], m, iv, s, b)
	} else {
		for j := 0; j < n; j++ {
			s[j&15] += float64(g[j] * (x[j] - m) * iv)
			b[j&15] += float64(g[j])
		}
	}
	for j := n; j < len(g); j++ {
		s[0] += float64(g[j] * (x[j] - m) * iv)
		b[0] += float64(g[j])
	}
}
