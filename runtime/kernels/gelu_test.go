package kernels

import (
	"math"
	"testing"
)

func geluRef(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func geluGradRef(x float64) float64 {
	return 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
}

func geluTanhRef(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// gridPlus returns n points spread over [lo, hi] followed by special
// values; n+len(specials) is odd, so the vector kernels have a tail.
func gridPlus(n int, lo, hi float64, specials ...float32) []float32 {
	x := make([]float32, 0, n+len(specials))
	for i := 0; i < n; i++ {
		x = append(x, float32(lo+(hi-lo)*float64(i)/float64(n-1)))
	}
	return append(x, specials...)
}

// TestGeluKernels checks the GELU kernels (the SIMD path with its scalar
// tail, and the scalar path alone) against float64 references: forward
// and backward within 3e-7·max(1, |x|) absolute plus 2e-6 relative
// (Erff's error is below 5e-7), NaN propagated, GELU(+Inf) = +Inf.
func TestGeluKernels(t *testing.T) {
	inf := float32(math.Inf(1))
	x := gridPlus(200001, -12, 12, 0, 1e-30, -1e-30, 30, -30, 1e4, -1e4, inf, -inf, float32(math.NaN()))
	dy := make([]float32, len(x))
	for i := range dy {
		dy[i] = 1 - 0.5*float32(i%3)
	}
	type impl struct {
		name string
		fwd  func(x, y []float32)
		bwd  func(x, dy, dx []float32)
		ref  func(float64) float64
		dref func(float64) float64
	}
	impls := []impl{
		{"erf", GeluErf, GeluErfBackward, geluRef, geluGradRef},
		{"erf_scalar", geluErfGo, geluErfBackwardGo, geluRef, geluGradRef},
		{"tanh", GeluTanh, GeluTanhBackward, geluTanhRef, nil},
	}
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			y, dx := make([]float32, len(x)), make([]float32, len(x))
			im.fwd(x, y)
			im.bwd(x, dy, dx)
			var worstY, worstD float64
			for i, v := range x {
				xv := float64(v)
				switch {
				case math.IsNaN(xv):
					if !math.IsNaN(float64(y[i])) || !math.IsNaN(float64(dx[i])) {
						t.Errorf("x = NaN: y %v, dx %v", y[i], dx[i])
					}
					continue
				case math.IsInf(xv, 0):
					// GELU(+Inf) = +Inf. The derivative there involves
					// ∞·φ(∞) = ∞·0, NaN, as in the exported op chain.
					if xv > 0 && !math.IsInf(float64(y[i]), 1) {
						t.Errorf("GELU(+Inf) = %v", y[i])
					}
					continue
				}
				want := im.ref(xv)
				// Erff is within 5e-7 absolute: ½|x|·5e-7 plus rounding.
				tol := 3e-7*math.Max(1, math.Abs(xv)) + 2e-6*math.Abs(want)
				e := math.Abs(float64(y[i])-want) / tol
				worstY = math.Max(worstY, e)
				var wantD float64
				if im.dref != nil {
					wantD = float64(dy[i]) * im.dref(xv)
				} else { // central difference of the float64 reference
					h := 1e-6 * math.Max(1, math.Abs(xv))
					wantD = float64(dy[i]) * (im.ref(xv+h) - im.ref(xv-h)) / (2 * h)
				}
				ed := math.Abs(float64(dx[i])-wantD) / (3e-7*math.Max(1, math.Abs(xv)) + 2e-6*math.Abs(wantD))
				if math.Abs(xv) < 1e3 { // the difference quotient is noise at 1e4
					worstD = math.Max(worstD, ed)
				}
			}
			if worstY > 1 || worstD > 1 {
				t.Errorf("error / (3e-7·max(1, |x|) + 2e-6·|ref|): forward %.3g, backward %.3g (want ≤ 1)", worstY, worstD)
			}
			t.Logf("error / (3e-7·max(1, |x|) + 2e-6·|ref|): forward %.3g, backward %.3g", worstY, worstD)
		})
	}
}

// TestGeluSIMDMatchesScalar checks that the vector path and its scalar
// tail agree elementwise to a few ulp, for every length mod 4 and with
// the output aliasing the input.
func TestGeluSIMDMatchesScalar(t *testing.T) {
	r := newRand(11)
	for n := 0; n < 13; n++ {
		x := randn(r, n)
		for i := range x {
			x[i] *= 3
		}
		dy := randn(r, n)
		y, y0 := make([]float32, n), make([]float32, n)
		dx, dx0 := make([]float32, n), make([]float32, n)
		GeluErf(x, y)
		geluErfGo(x, y0)
		GeluErfBackward(x, dy, dx)
		geluErfBackwardGo(x, dy, dx0)
		for i := range x {
			if d := math.Abs(float64(y[i] - y0[i])); d > 4e-7*math.Max(1, math.Abs(float64(y0[i]))) {
				t.Errorf("n=%d: y[%d] = %v, scalar %v", n, i, y[i], y0[i])
			}
			if d := math.Abs(float64(dx[i] - dx0[i])); d > 4e-7*math.Max(1, math.Abs(float64(dx0[i]))) {
				t.Errorf("n=%d: dx[%d] = %v, scalar %v", n, i, dx[i], dx0[i])
			}
		}
		in := append([]float32(nil), x...)
		GeluErf(in, in)
		for i := range in {
			if in[i] != y[i] {
				t.Errorf("n=%d: in-place y[%d] = %v, want %v", n, i, in[i], y[i])
			}
		}
	}
}

// TestExpfs checks the vector exp against math.Exp: 3e-7 relative over
// [−87, 88], 0 below −87.34, e^88 above 88, NaN kept, every tail length.
func TestExpfs(t *testing.T) {
	x := gridPlus(400003, -87, 88, -87.5, -100, float32(math.Inf(-1)), 88.5, 1000, float32(math.Inf(1)), float32(math.NaN()), 0)
	y := make([]float32, len(x))
	Expfs(x, y)
	var worst float64
	for i, v := range x {
		xv := float64(v)
		switch {
		case math.IsNaN(xv):
			if !math.IsNaN(float64(y[i])) {
				t.Errorf("Expfs(NaN) = %v", y[i])
			}
		case xv < -87.34:
			if y[i] != 0 {
				t.Errorf("Expfs(%v) = %v, want 0", v, y[i])
			}
		case xv > 88:
			if want := float32(math.Exp(88)); math.Abs(float64(y[i]-want)) > 3e-7*float64(want) {
				t.Errorf("Expfs(%v) = %v, want e^88 = %v", v, y[i], want)
			}
		default:
			want := math.Exp(xv)
			worst = math.Max(worst, math.Abs(float64(y[i])-want)/want)
		}
	}
	if worst > 3e-7 {
		t.Errorf("Expfs: max relative error %.3g > 3e-7", worst)
	}
	for n := 0; n < 9; n++ {
		a := gridPlus(n+2, -5, 5)[:n]
		b := make([]float32, n)
		Expfs(a, b)
		for i, v := range a {
			if e := math.Abs(float64(b[i])-math.Exp(float64(v))) / math.Exp(float64(v)); e > 3e-7 {
				t.Errorf("n=%d: Expfs(%v) = %v", n, v, b[i])
			}
		}
	}
}

// TestNormalizeRows checks the fused LayerNorm normalization against a
// float64 reference (including rows with |mean| ≫ σ and constant rows),
// and its backward against the float64 gradient of the normalization.
func TestNormalizeRows(t *testing.T) {
	r := newRand(3)
	for _, L := range []int{1, 2, 7, 192} {
		rows := 6
		x := randn(r, rows*L)
		for j := 0; j < L; j++ {
			x[L+j] = 1000 + 0.01*x[L+j] // |μ| ≫ σ
			x[2*L+j] = 3                // constant row
		}
		dy := randn(r, rows*L)
		const eps = 1e-5
		y, inv, dx := make([]float32, rows*L), make([]float32, rows), make([]float32, rows*L)
		NormalizeRows(x, y, L, eps, inv, 0, 3)
		NormalizeRows(x, y, L, eps, inv, 3, rows)
		NormalizeRowsBackward(y, dy, inv, L, dx, 0, rows)
		for q := 0; q < rows; q++ {
			xr := x[q*L : (q+1)*L]
			var mu, ss float64
			for _, v := range xr {
				mu += float64(v)
			}
			mu /= float64(L)
			for _, v := range xr {
				ss += (float64(v) - mu) * (float64(v) - mu)
			}
			iv := 1 / math.Sqrt(ss/float64(L)+eps)
			xh := make([]float64, L)
			var mg, mgx float64
			for j, v := range xr {
				xh[j] = (float64(v) - mu) * iv
				mg += float64(dy[q*L+j]) / float64(L)
				mgx += float64(dy[q*L+j]) * xh[j] / float64(L)
			}
			if e := math.Abs(float64(inv[q])-iv) / iv; e > 1e-6 {
				t.Errorf("L=%d row %d: invStd %v, want %v", L, q, inv[q], iv)
			}
			for j := range xr {
				if d := math.Abs(float64(y[q*L+j]) - xh[j]); d > 1e-6*math.Abs(xh[j])+1e-7 {
					t.Errorf("L=%d row %d: y[%d] = %v, want %v", L, q, j, y[q*L+j], xh[j])
				}
				want := iv * (float64(dy[q*L+j]) - mg - xh[j]*mgx)
				if d := math.Abs(float64(dx[q*L+j]) - want); d > 1e-5*(math.Abs(want)+iv*maxAbsF(dy[q*L:(q+1)*L])) {
					t.Errorf("L=%d row %d: dx[%d] = %v, want %v", L, q, j, dx[q*L+j], want)
				}
			}
		}
	}
}

func maxAbsF(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}
