//go:build amd64 && !purego

package kernels

import (
	"math"
	"testing"
)

// TestSIMDWidthsAgree: the eight-lane AVX2 kernels give the four-lane SSE
// kernels' bits on every element — ordinary arguments, ±0, subnormals,
// the clamps' edges, infinities and NaN — so that a machine's choice of
// width never changes a result (and the CUDA kernels, which follow the SSE
// sequence, keep matching).
func TestSIMDWidthsAgree(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	x := gridPlus(200003, -12, 12, 0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, 3.99, 4, 4.01, -4, -88, 88, 88.5, -87.34, -87.5, -100,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32)
	x = x[:len(x)&^7]
	dy := make([]float32, len(x))
	for i := range dy {
		dy[i] = float32(math.Sin(1.3 * float64(i)))
	}
	same := func(name string, a, b []float32) {
		t.Helper()
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
				t.Fatalf("%s(%v): AVX2 %v (%#x), SSE %v (%#x)", name, x[i], a[i], math.Float32bits(a[i]), b[i], math.Float32bits(b[i]))
			}
		}
	}
	a, b := make([]float32, len(x)), make([]float32, len(x))
	geluErfAVX2(x, a)
	geluErfSSE(x, b)
	same("gelu", a, b)
	geluErfBackwardAVX2(x, dy, a)
	geluErfBackwardSSE(x, dy, b)
	same("gelu backward", a, b)
	e := make([]float32, len(x))
	for i, v := range x {
		e[i] = min(v, 88) // as Expfs clamps before the kernel's own clamp
	}
	expAVX2(e, a)
	expSSE(e, b)
	same("exp", a, b)
}

// TestRowNormSIMD: the normalizations' elementwise passes four lanes at a
// time (rowApply, rowApplyVec, rowBack) give the scalar expressions' bits
// on every element, with and without a bias, a scale per run or per
// element — at every length from 0 to 37 (the tail done in Go), on
// ordinary values, ±0, subnormals, infinities and NaN.
func TestRowNormSIMD(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, 3, -2.5}
	val := func(i, salt int) float32 {
		if (i+salt)%7 == 3 {
			return specials[(i*salt+salt)%len(specials)]
		}
		return float32(math.Sin(float64(i*(salt+3)) + float64(salt)))
	}
	same := func(what string, n, j int, got, want float32) {
		t.Helper()
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("%s, length %d, element %d: %v (%#x), want %v (%#x)", what, n, j, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
	for _, p := range [][5]float32{{0.25, 1.5, -0.75, 0.5, 0.125}, {-1e-3, 3e4, 2, -1, 7}, {0, float32(math.Inf(1)), 1, 0, -2}} {
		m, iv, sc, mg, mgx := p[0], p[1], p[2], p[3], p[4]
		for n := 0; n <= 37; n++ {
			x, g, scale, bias := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
			for j := range x {
				x[j], g[j], scale[j], bias[j] = val(j, 1), val(j, 2), val(j, 3), val(j, 4)
			}
			y := make([]float32, n)
			b := val(n, 5)
			rowApply(x, y, m, iv, sc, b, true)
			for j := range x {
				same("rowApply with bias", n, j, y[j], (x[j]-m)*iv*sc+b)
			}
			rowApply(x, y, m, iv, sc, 0, false)
			for j := range x {
				same("rowApply", n, j, y[j], (x[j]-m)*iv*sc)
			}
			rowApplyVec(x, scale, bias, y, m, iv)
			for j := range x {
				same("rowApplyVec with bias", n, j, y[j], (x[j]-m)*iv*scale[j]+bias[j])
			}
			rowApplyVec(x, scale, nil, y, m, iv)
			for j := range x {
				same("rowApplyVec", n, j, y[j], (x[j]-m)*iv*scale[j])
			}
			rowBack(x, g, nil, y, m, iv, sc, mg, mgx)
			for j := range x {
				xh := (x[j] - m) * iv
				same("rowBack", n, j, y[j], iv*(g[j]*sc-mg-xh*mgx))
			}
			rowBack(x, g, scale, y, m, iv, 0, mg, mgx)
			for j := range x {
				xh := (x[j] - m) * iv
				same("rowBack with a scale per element", n, j, y[j], iv*(g[j]*scale[j]-mg-xh*mgx))
			}
		}
	}
}

// TestAddLaneRows: the lane-order sums' whole rows by vector lanes give
// every lane the scalar loop's sum bit for bit — the terms g_e and
// g_e·(x_e − m)·iv, lanes starting from nonzero sums, ±0, subnormals and
// large values among the terms (finite, so that no lane's NaN hides
// another's bits) — and leave a partial row alone.
func TestAddLaneRows(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-40, 1e18, -7}
	for _, n := range []int{0, 31, 32, 33, 96, 32*64 + 17} {
		g, x := make([]float32, n), make([]float32, n)
		for e := range g {
			g[e], x[e] = float32(math.Sin(1.7*float64(e))), float32(math.Cos(0.3*float64(e)))*4
			if e%53 == 7 {
				g[e] = specials[e%len(specials)]
			}
		}
		for _, scaled := range []bool{false, true} {
			const m, iv = 0.375, 1.25
			var got, want [32]float64
			for l := range got {
				got[l] = float64(l) * 1e-3
				want[l] = got[l]
			}
			xs := x
			if !scaled {
				xs = nil
			}
			if !AddLaneRows(g, xs, m, iv, &got) {
				t.Fatal("AddLaneRows reported no vector form on a CPU with AVX2")
			}
			for e := 0; e < n&^31; e++ {
				term := float64(g[e])
				if scaled {
					term = float64(g[e] * (x[e] - m) * iv)
				}
				want[e%32] += term
			}
			for l := range got {
				if math.Float64bits(got[l]) != math.Float64bits(want[l]) || math.IsNaN(got[l]) || math.IsInf(got[l], 0) {
					t.Fatalf("%d terms, scaled %v: lane %d: %v, want %v", n, scaled, l, got[l], want[l])
				}
			}
		}
	}
}

// TestAddStdLaneRows: the five sums of a standardized weight's rows
// (runtime.StdRowSums) by vector lanes give every lane of every sum the
// scalar loop's bits, lanes starting from nonzero sums, ±0, subnormals and
// large values among g's and x's terms, and leave a partial row alone.
func TestAddStdLaneRows(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-40, 1e18, -7}
	for _, n := range []int{0, 31, 32, 33, 96, 32*64 + 17} {
		g, x := make([]float32, n), make([]float32, n+5)
		for e := range g {
			g[e], x[e] = float32(math.Sin(1.7*float64(e))), float32(math.Cos(0.3*float64(e)))*4
			if e%53 == 7 {
				g[e] = specials[e%len(specials)]
			}
			if e%41 == 3 {
				x[e] = specials[(e+2)%len(specials)]
			}
		}
		var got, want [5][32]float64
		for q := range got {
			for l := range got[q] {
				got[q][l] = float64(q*32+l) * 1e-3
				want[q][l] = got[q][l]
			}
		}
		if !AddStdLaneRows(g, x, &got) {
			t.Fatal("AddStdLaneRows reported no vector form on a CPU with AVX2")
		}
		for e := 0; e < n&^31; e++ {
			gv, xv := float64(g[e]), float64(x[e])
			for q, term := range []float64{gv * gv, gv, gv * xv, xv * xv, xv} {
				want[q][e%32] += term
			}
		}
		for q := range got {
			for l := range got[q] {
				if math.Float64bits(got[q][l]) != math.Float64bits(want[q][l]) || math.IsNaN(got[q][l]) {
					t.Fatalf("%d terms: sum %d lane %d: %v, want %v", n, q, l, got[q][l], want[q][l])
				}
			}
		}
	}
}

// TestStdVJPRows: the standardization's vector-Jacobian product by AVX
// registers equals the scalar expression (runtime.StdVJP's) bit for bit
// on the leading len/8·8 elements — ±0, subnormals, values whose
// products round in float32, results that overflow float32 — leaves the
// rest alone, and reports how many it did.
func TestStdVJPRows(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-40, 3e38, -7, 1.0000001}
	for _, n := range []int{0, 7, 8, 9, 64, 1000 + 3} {
		s, x := make([]float32, n), make([]float32, n+4)
		for e := range s {
			s[e], x[e] = float32(math.Sin(2.3*float64(e)))*3, float32(math.Cos(0.7*float64(e)))
			if e%13 == 5 {
				s[e] = specials[e%len(specials)]
			}
			if e%11 == 2 {
				x[e] = specials[(e+3)%len(specials)]
			}
		}
		for _, abc := range [][3]float64{{0.1, -0.37, 1.9}, {-2.5e-3, 1e3, 1e-3}, {0, 0, -1}, {1e30, 1e-30, 7}} {
			a, b, c := abc[0], abc[1], abc[2]
			got := append([]float32(nil), s...)
			done := StdVJPRows(got, x, a, b, c)
			if done != n&^7 {
				t.Fatalf("%d elements: did %d, want %d", n, done, n&^7)
			}
			for e := range s {
				want := s[e]
				if e < done {
					want = float32(c * ((float64(s[e]) - a) - b*float64(x[e])))
				}
				if math.Float32bits(got[e]) != math.Float32bits(want) {
					t.Fatalf("%d elements, a b c %v: element %d = %v, want %v", n, abc, e, got[e], want)
				}
			}
		}
	}
}

// TestSums16: the row normalizations' sixteen-chain sums give the same
// bits by AVX registers as by the scalar loops (haveAVX2 off) — chains
// carried from slice to slice, every length from 0 to 50 and a long one,
// ±0, subnormals and large values among the terms (finite, so that no
// chain's NaN hides another's bits) — so that a CPU's instructions never
// change a normalization.
func TestSums16(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	defer func(v bool) { haveAVX2 = v }(haveAVX2)
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-41, 1e18, -7}
	val := func(j, salt int) float32 {
		if (j*7+salt)%41 == 5 {
			return specials[(j+salt)%len(specials)]
		}
		return float32(math.Sin(float64(j)*0.37+float64(salt))) * 3
	}
	type acc struct{ a, b [16]float64 }
	// run applies every sum to slices of the lengths in ns, chains
	// carried, with the vector kernels on or off.
	run := func(ns []int, avx bool) (res [3]acc) {
		haveAVX2 = avx
		for i, n := range ns {
			g, x := make([]float32, n), make([]float32, n)
			for j := range g {
				g[j], x[j] = val(j, i), val(j, i+9)
			}
			sum16(x, &res[0].a)
			sqdev16(x, 0.1, &res[0].b)
			gradSumsVec16(g, x, x, 0.3, 0.9, &res[1].a, &res[1].b)
			paramSums16(g, x, -0.5, 2.3, &res[2].a, &res[2].b)
		}
		return res
	}
	var ns []int
	for n := 0; n <= 50; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 16*300+11)
	vec, scalar := run(ns, true), run(ns, false)
	for i := range vec {
		for c := 0; c < 16; c++ {
			for _, p := range [][2]float64{{vec[i].a[c], scalar[i].a[c]}, {vec[i].b[c], scalar[i].b[c]}} {
				if math.Float64bits(p[0]) != math.Float64bits(p[1]) || math.IsNaN(p[0]) || math.IsInf(p[0], 0) {
					t.Fatalf("sum %d, chain %d: AVX %v, scalar %v", i, c, p[0], p[1])
				}
			}
		}
	}
}

// BenchmarkStdVJPRows: the standardization's vector-Jacobian product over
// ResNet-18's largest weight (512 rows of 4608), by AVX registers and by
// the scalar loop it replaces.
func BenchmarkStdVJPRows(b *testing.B) {
	const rows, k = 512, 4608
	s, x := make([]float32, rows*k), make([]float32, rows*k)
	for e := range s {
		s[e], x[e] = float32(e%97)*1e-3, float32(e%89)*1e-2
	}
	for _, vec := range []bool{true, false} {
		b.Run(map[bool]string{true: "avx", false: "scalar"}[vec], func(b *testing.B) {
			b.SetBytes(int64(8 * len(s)))
			for range b.N {
				for o := range rows {
					r, xr := s[o*k:(o+1)*k], x[o*k:(o+1)*k]
					e := 0
					if vec {
						e = StdVJPRows(r, xr, 0.1, 0.2, 0.9)
					}
					for ; e < k; e++ {
						r[e] = float32(0.9 * ((float64(r[e]) - 0.1) - 0.2*float64(xr[e])))
					}
				}
			}
		})
	}
}
