package accountant

import (
	"fmt"
	"math"
	"runtime"

	par "github.com/dpfinetune/dpfinetune/internal/workers"
)

type prvAccountant struct{ base }

func (a *prvAccountant) Name() string { return PRV }

func (a *prvAccountant) Description() string {
	return fmt.Sprintf("PRV (numerical composition of privacy loss random variables, eps_error %g; reports the upper bound)", a.epsError())
}

func (a *prvAccountant) String() string { return a.Description() }

func (a *prvAccountant) State() State { return a.state(PRV) }

func (a *prvAccountant) epsError() float64 {
	if a.opts.EpsError > 0 {
		return a.opts.EpsError
	}
	return DefaultEpsError
}

func (a *prvAccountant) deltaErrorFraction() float64 {
	if a.opts.DeltaErrorFraction > 0 {
		return a.opts.DeltaErrorFraction
	}
	return DefaultDeltaErrorFraction
}

func (a *prvAccountant) Epsilon(delta float64) (Result, error) {
	if err := ValidateDelta(delta); err != nil {
		return Result{}, err
	}
	r := Result{
		Accountant: PRV,
		Delta:      delta,
		Steps:      a.total,
		EpsError:   a.epsError(),
		DeltaError: delta * a.deltaErrorFraction(),
	}
	if len(a.phases) == 0 {
		return r, nil
	}
	lo, est, up, epsErr, err := prvEpsilon(groupPhases(a.phases), delta, r.EpsError, r.DeltaError)
	if err != nil {
		return Result{}, err
	}
	r.EpsError = epsErr
	r.EpsilonLower, r.EpsilonEstimate, r.EpsilonUpper = lo, est, up
	r.Epsilon = up
	return r, nil
}

// maxPRVGrid bounds the PRV grid (about 32 bytes per point are needed).
const maxPRVGrid = 1 << 23

// maxPRVCoarsen is how much coarser than the ε error budget asks the grid
// may be made to fit maxPRVGrid (the ε error grows by the same factor);
// beyond it the accountant refuses rather than answer with an error bar
// far wider than asked.
const maxPRVCoarsen = 4

// prvGrid is the discretisation used for one query: n points t_k = k·h for
// k in [-n/2, n/2), stored at index k mod n, so that circular convolution
// of two arrays is the distribution of the sum (modulo the period n·h).
type prvGrid struct {
	n int
	h float64
}

// prvDomain chooses the grid of Gopi, Lee, Wutschitz 2021: the domain
// half-width L from RDP tail bounds (Remark 5.6: the composed privacy loss
// exceeds L with probability at most δ_err/4, each single step with
// probability at most δ_err/(8T)), plus 3; the mesh
// h = ε_err / sqrt(T·log(12/δ_err)/2) (Theorem 5.5 with the δ error split
// as in the authors' implementation and Opacus). When that mesh would need
// more than maxPRVGrid points (up to maxPRVCoarsen times more), the mesh is
// widened to fit and the ε error it implies by the same theorem, larger than
// asked, is returned in place of epsErr: the bounds stay rigorous, only
// wider.
func prvDomain(phases []Phase, epsErr, deltaErr float64) (prvGrid, float64, float64, error) {
	total := 0
	for _, p := range phases {
		total += p.Steps
	}
	L := rdpEpsilon(phases, deltaErr/4)
	for _, p := range phases {
		L = math.Max(L, rdpEpsilon([]Phase{{Sigma: p.Sigma, SampleRate: p.SampleRate, Steps: 1}}, deltaErr/(8*float64(total))))
	}
	L = math.Max(L, epsErr) + 3
	if math.IsInf(L, 0) || math.IsNaN(L) {
		return prvGrid{}, 0, 0, fmt.Errorf("PRV accountant: no finite RDP bound to size the domain (noise multiplier too small?)")
	}
	spread := math.Sqrt(float64(total) * math.Log(12/deltaErr) / 2)
	h := epsErr / spread
	need := 2*L/h + 2
	if need > maxPRVGrid {
		if need > maxPRVCoarsen*maxPRVGrid {
			return prvGrid{}, 0, 0, fmt.Errorf("PRV accountant: the grid would need %.3g points (domain ±%.3g, mesh %.3g), more than %d; increase eps_error or use the rdp accountant", need, L, h, maxPRVGrid)
		}
		h = 2 * L / (maxPRVGrid - 2)
		epsErr = h * spread
		need = maxPRVGrid
	}
	n := 2
	for float64(n) < need {
		n <<= 1
	}
	return prvGrid{n: n, h: h}, L, epsErr, nil
}

// prvEpsilon returns a lower bound, an estimate and an upper bound on the ε
// at which the composition of the phases is (ε, δ)-DP. The bounds hold up
// to the error budgets epsErr and deltaErr (Gopi et al. 2021, Theorem 5.5):
// with Ỹ the discretised composed privacy loss, δ_Y(ε+ε_err) - δ_err ≤
// δ_Ỹ(ε) ≤ δ_Y(ε-ε_err) + δ_err, hence ε_Ỹ(δ+δ_err) - ε_err ≤ ε_Y(δ) ≤
// ε_Ỹ(δ-δ_err) + ε_err. Both adjacency directions (removing and adding an
// example) are composed and the larger ε is reported. The ε error used is
// returned: epsErr, or more where the grid had to be coarser (prvDomain).
func prvEpsilon(phases []Phase, delta, epsErr, deltaErr float64) (lo, est, up, epsErrUsed float64, err error) {
	if !(deltaErr > 0 && deltaErr < delta) {
		return 0, 0, 0, 0, invalidf("PRV delta error %v must be in (0, delta=%v)", deltaErr, delta)
	}
	g, _, epsErr, err := prvDomain(phases, epsErr, deltaErr)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	// Rounding in the FFT is of order machine epsilon per point; summed
	// over the grid it must stay well below the δ being resolved.
	if 0x1p-52*float64(g.n) > delta-deltaErr {
		return 0, 0, 0, 0, fmt.Errorf("PRV accountant: delta %v is too small for a grid of %d points (floating-point error would dominate); use a larger delta or the rdp accountant", delta, g.n)
	}
	dists, shifts, err := prvCompose(phases, g)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	lo, est, up = math.Inf(-1), math.Inf(-1), math.Inf(-1)
	for d := range dists {
		t0 := -float64(g.n/2)*g.h + shifts[d]
		up = math.Max(up, epsFromPMF(dists[d], g, t0, delta-deltaErr)+epsErr)
		est = math.Max(est, epsFromPMF(dists[d], g, t0, delta))
		lo = math.Max(lo, epsFromPMF(dists[d], g, t0, delta+deltaErr)-epsErr)
	}
	return math.Max(lo, 0), math.Max(est, 0), math.Max(up, 0), epsErr, nil
}

// Directions of adjacency: remove compares the mixture P = (1-q)N(0,σ²) +
// qN(1,σ²) against Q = N(0,σ²) with the loss log(P/Q) drawn under P; add
// swaps the roles.
const (
	dirRemove = iota
	dirAdd
	numDirs
)

// prvCompose discretises each phase's privacy loss in both directions and
// composes them by FFT. It returns, per direction, the composed masses in
// grid order (index k mod n holds t_k = k·h) and the total mean shift to add
// to every grid point.
func prvCompose(phases []Phase, g prvGrid) ([numDirs][]float64, [numDirs]float64, error) {
	n := g.n
	plan := newFFTPlan(n)
	work := make([]complex128, n)
	// Running products of the spectra; a real sequence's spectrum is
	// Hermitian, so only bins 0..n/2 are kept.
	var acc [numDirs][]complex128
	for d := range acc {
		acc[d] = make([]complex128, n/2+1)
		for m := range acc[d] {
			acc[d][m] = 1
		}
	}
	var shifts [numDirs]float64
	for _, p := range phases {
		// Pack both directions into one complex sequence: re = remove,
		// im = add; one FFT gives both spectra.
		sR := discretizeLoss(dirRemove, p.SampleRate, p.Sigma, g, work, false)
		sA := discretizeLoss(dirAdd, p.SampleRate, p.Sigma, g, work, true)
		// No mass moves by more than h/2, so neither can the mean; a
		// larger shift means the numerics failed.
		for _, s := range []float64{sR, sA} {
			if !(math.Abs(s) <= g.h/2*(1+1e-6)) {
				return [numDirs][]float64{}, [numDirs]float64{}, fmt.Errorf("PRV accountant: discretisation of σ=%v, q=%v failed (mean shift %.3g exceeds half the mesh %.3g)", p.Sigma, p.SampleRate, s, g.h/2)
			}
		}
		shifts[dirRemove] += float64(p.Steps) * sR
		shifts[dirAdd] += float64(p.Steps) * sA
		plan.transform(work, false)
		parallelRange(n/2+1, func(lo, hi int) {
			for m := lo; m < hi; m++ {
				w, wc := work[m], work[(n-m)%n]
				wc = complex(real(wc), -imag(wc))
				xr := (w + wc) / 2
				xa := complex(imag(w-wc)/2, -real(w-wc)/2) // (w - wc)/(2i)
				acc[dirRemove][m] *= powInt(xr, p.Steps)
				acc[dirAdd][m] *= powInt(xa, p.Steps)
			}
		})
	}
	// Rebuild full spectra of the two real results and invert both at once.
	for m := 0; m <= n/2; m++ {
		r, a := acc[dirRemove][m], acc[dirAdd][m]
		work[m] = r + complex(0, 1)*a
		if m > 0 && m < n/2 {
			rc := complex(real(r), -imag(r))
			ac := complex(real(a), -imag(a))
			work[n-m] = rc + complex(0, 1)*ac
		}
	}
	plan.transform(work, true)
	var out [numDirs][]float64
	out[dirRemove] = make([]float64, n)
	out[dirAdd] = make([]float64, n)
	inv := 1 / float64(n)
	for k, v := range work {
		out[dirRemove][k] = real(v) * inv
		out[dirAdd][k] = imag(v) * inv
	}
	return out, shifts, nil
}

// powInt returns z^k by binary exponentiation.
func powInt(z complex128, k int) complex128 {
	r := complex(1, 0)
	for k > 0 {
		if k&1 == 1 {
			r *= z
		}
		z *= z
		k >>= 1
	}
	return r
}

// lossCDF returns F(t) = P[L ≤ t] and S(t) = P[L > t] for the privacy loss
// L of one step of the Poisson-subsampled Gaussian mechanism in the given
// direction, each accurate in its own tail.
//
// Remove: L = log(1 - q + q·exp((2x-1)/(2σ²))) with x ~ P, so L > log(1-q)
// and L ≤ t ⟺ x ≤ x* = σ²·z(t) + 1/2, z(t) = log((e^t - 1 + q)/q):
// F = (1-q)Φ(x*/σ) + qΦ((x*-1)/σ).
// Add: L = -log(1 - q + q·exp((2x-1)/(2σ²))) with x ~ Q, so L < -log(1-q)
// and L ≤ t ⟺ x ≥ x* = σ²·z(-t) + 1/2: F = 1 - Φ(x*/σ).
func lossCDF(dir int, q, sigma, t float64) (F, S float64) {
	switch dir {
	case dirRemove:
		if t <= math.Log1p(-q) {
			return 0, 1
		}
		x := sigma*sigma*logRatio(t, q) + 0.5
		c1, s1 := normBoth(x / sigma)
		c2, s2 := normBoth((x - 1) / sigma)
		return (1-q)*c1 + q*c2, (1-q)*s1 + q*s2
	default:
		if t >= -math.Log1p(-q) {
			return 1, 0
		}
		x := sigma*sigma*logRatio(-t, q) + 0.5
		c, s := normBoth(x / sigma)
		return s, c
	}
}

// logRatio returns log((e^u - (1-q))/q), or -Inf where the argument of the
// logarithm is not positive, without overflow for large u.
func logRatio(u, q float64) float64 {
	if u > 0 {
		return u + math.Log1p(-(1-q)*math.Exp(-u)) - math.Log(q)
	}
	v := math.Expm1(u) + q
	if v <= 0 {
		return math.Inf(-1)
	}
	return math.Log(v) - math.Log(q)
}

// normBoth returns Φ(y) and 1-Φ(y) with one erfc evaluation; the smaller of
// the two is accurate to relative precision.
func normBoth(y float64) (cdf, sf float64) {
	e := 0.5 * math.Erfc(math.Abs(y)/sqrt2)
	if y >= 0 {
		return 1 - e, e
	}
	return e, 1 - e
}

// discretizeLoss writes the discretised, truncated privacy loss of one step
// into the real (toImag=false) or imaginary part of dst and returns the mean
// shift. Grid point t_k gets the mass of the cell [t_k - h/2, t_k + h/2];
// mass outside the grid's cells is dropped and the rest renormalised. The
// discrete variable is then moved by s = mean(continuous, truncated) -
// mean(discrete) so that the means agree, as Gopi et al. require (|s| ≤
// h/2, since no mass moves further than that).
func discretizeLoss(dir int, q, sigma float64, g prvGrid, dst []complex128, toImag bool) float64 {
	n, h := g.n, g.h
	half := n / 2
	edge := func(j int) float64 { return (float64(j-half) - 0.5) * h } // j = 0..n
	// A fixed number of chunks, so that the result does not depend on the
	// number of CPUs.
	const chunks = 64
	per := (n + chunks - 1) / chunks
	partial := make([]float64, chunks) // Σ t_k·mass_k per chunk
	parallelFor(chunks, func(c int) {
		start, end := c*per, min((c+1)*per, n)
		if start >= end {
			return
		}
		aF, aS := lossCDF(dir, q, sigma, edge(start))
		sum := 0.0
		for i := start; i < end; i++ {
			bF, bS := lossCDF(dir, q, sigma, edge(i+1))
			var mass float64
			if aF <= 0.5 {
				mass = bF - aF
			} else {
				mass = aS - bS
			}
			idx := (i - half + n) % n
			if toImag {
				dst[idx] = complex(real(dst[idx]), mass)
			} else {
				dst[idx] = complex(mass, 0)
			}
			sum += float64(i-half) * h * mass
			aF, aS = bF, bS
		}
		partial[c] = sum
	})
	tlo, thi := edge(0), edge(n)
	lowF, _ := lossCDF(dir, q, sigma, tlo)
	_, highS := lossCDF(dir, q, sigma, thi)
	inv := 1 / (1 - lowF - highS)
	for i := range dst {
		if toImag {
			dst[i] = complex(real(dst[i]), imag(dst[i])*inv)
		} else {
			dst[i] = complex(real(dst[i])*inv, 0)
		}
	}
	meanD := 0.0
	for _, s := range partial {
		meanD += s
	}
	return (truncatedLossMoment(dir, q, sigma, tlo, thi) - meanD) * inv
}

// truncatedLossMoment returns E[L·1{tlo < L ≤ thi}] for one step's privacy
// loss L. It integrates in the noise variable x, where L(x) and the
// Gaussian density are smooth: as a function of t the distribution of L can
// be nearly singular (for small σ almost all its mass sits within far less
// than one grid cell of log(1-q)), which defeats quadrature in t. The
// integral over the preimage of (tlo, thi] — cut to ±40σ around the
// Gaussian components, beyond which the density is below e^-800 — uses
// composite Simpson's rule with 200 points per σ (relative error far below
// 1e-10 for these smooth integrands).
func truncatedLossMoment(dir int, q, sigma, tlo, thi float64) float64 {
	s2 := sigma * sigma
	lossAt := func(x float64) float64 {
		y := (2*x - 1) / (2 * s2)
		var l float64
		if y > 0 {
			l = y + math.Log(q+(1-q)*math.Exp(-y))
		} else {
			l = math.Log1p(q * math.Expm1(y))
		}
		if dir == dirAdd {
			return -l
		}
		return l
	}
	density := func(x float64) float64 {
		d := math.Exp(-x * x / (2 * s2))
		if dir == dirRemove {
			d = (1-q)*d + q*math.Exp(-(x-1)*(x-1)/(2*s2))
		}
		return d / (sigma * math.Sqrt(2*math.Pi))
	}
	// preimage of (tlo, thi] in x
	xlo, xhi := math.Inf(-1), math.Inf(1)
	if dir == dirRemove {
		// L increasing in x; L ≤ t ⟺ x ≤ σ²·logRatio(t) + 1/2
		xlo = s2*logRatio(tlo, q) + 0.5
		xhi = s2*logRatio(thi, q) + 0.5
	} else {
		// L decreasing in x; L ≤ t ⟺ x ≥ σ²·logRatio(-t) + 1/2
		xhi = s2*logRatio(-tlo, q) + 0.5
		xlo = s2*logRatio(-thi, q) + 0.5
	}
	xlo = math.Max(xlo, -40*sigma)
	xhi = math.Min(xhi, 1+40*sigma)
	if !(xlo < xhi) {
		return 0
	}
	m := 2 * int(math.Ceil((xhi-xlo)/sigma*100)) // even number of intervals
	dx := (xhi - xlo) / float64(m)
	sum := 0.0
	for i := 0; i <= m; i++ {
		x := xlo + float64(i)*dx
		w := 2.0
		switch {
		case i == 0 || i == m:
			w = 1
		case i%2 == 1:
			w = 4
		}
		sum += w * lossAt(x) * density(x)
	}
	return sum * dx / 3
}

// parallelFor runs f(0..n-1) on up to GOMAXPROCS goroutines. Work is split
// by the caller into a fixed number of pieces, so results do not depend on
// the number of CPUs.
func parallelFor(n int, f func(int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg par.Group
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// epsFromPMF returns the ε with δ(ε) = target for the discrete privacy loss
// with mass p[k mod n] at t0 + (k + n/2)·h, k in [-n/2, n/2), where
// δ(ε) = Σ_{t_j > ε} p_j (1 - e^{ε - t_j}). It scans down from the top
// keeping D = Σ_{j≥k} p_j and E = Σ_{j≥k} p_j e^{t_k - t_j} (so no
// exponential can overflow); δ(t_k) = D - E. It returns -Inf when δ(t) ≤
// target on the whole grid.
func epsFromPMF(p []float64, g prvGrid, t0, target float64) float64 {
	n, h := g.n, g.h
	half := n / 2
	eh := math.Exp(-h)
	D, E := 0.0, 0.0
	for i := n - 1; i >= 0; i-- { // i is the position in increasing-t order
		pk := p[(i-half+n)%n]
		nD, nE := D+pk, pk+eh*E
		if nD-nE > target {
			// ε lies in (t_i, t_{i+1}]: δ(ε) = D - e^{ε - t_{i+1}}·E.
			tNext := t0 + float64(i+1)*h
			if E <= 0 {
				return tNext
			}
			return tNext + math.Log((D-target)/E)
		}
		D, E = nD, nE
	}
	return math.Inf(-1)
}
