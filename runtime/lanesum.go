package runtime

import "github.com/dpfinetune/dpfinetune/runtime/kernels"

// The order of the float64 sums of VectorOps (SumSq, SquaredNorms, Dot,
// AddSumSq, AddDot, AddSumSqProduct): one order every backend follows, so
// that the engine's norms and clip factors are the same bits on each, and
// one that parallel hardware can follow too. A sum in the order of its
// terms is one dependent chain of additions: one thread on a GPU, and on a
// CPU one addition per floating-point latency. Here the terms go in
// consecutive chunks of SumChunk; within a chunk, lane l < SumLanes sums
// the terms l, l + SumLanes, l + 2·SumLanes, … in order from 0, and the
// lanes combine by halves (lane l adds lane l + 16's, then l + 8's, l +
// 4's, l + 2's, l + 1's: a GPU warp's shuffle tree); the chunks' sums add
// in order from 0. A GPU gives a warp to each chunk, and the CPU keeps 32
// independent chains. Each term is exact in float64 (a product of two
// float32s has at most 48 significant bits), so that a fused
// multiply-add gives the same bits as a product and a sum.
const (
	// SumLanes is the number of interleaved partial sums of a chunk.
	SumLanes = 32
	// SumChunk is the number of terms of a chunk.
	SumChunk = 2048
)

// laneTree combines the lanes' sums by halves (SumLanes = 32).
func laneTree[T float32 | float64](acc *[SumLanes]T) T {
	for w := SumLanes / 2; w > 0; w /= 2 {
		for l := 0; l < w; l++ {
			acc[l] += acc[l+w]
		}
	}
	return acc[0]
}

// SumLanes32 returns Σ_k x_k in float32 in the lane order: AddRunSums'
// sums, which a GPU takes a warp per run.
func SumLanes32(x []float32) float32 {
	var s float32
	for c := 0; c < len(x); c += SumChunk {
		ch := x[c:min(c+SumChunk, len(x))]
		var acc [SumLanes]float32
		j := 0
		for ; j+SumLanes <= len(ch); j += SumLanes {
			b := (*[SumLanes]float32)(ch[j : j+SumLanes])
			for l, v := range b {
				acc[l] += v
			}
		}
		for l, v := range ch[j:] {
			acc[l] += v
		}
		s += laneTree(&acc)
	}
	return s
}

// SumSqLanes returns Σ_k x_k² in float64 in the lane order.
func SumSqLanes(x []float32) float64 {
	var s float64
	for c := 0; c < len(x); c += SumChunk {
		ch := x[c:min(c+SumChunk, len(x))]
		var acc [SumLanes]float64
		j := 0
		for ; j+SumLanes <= len(ch); j += SumLanes {
			b := (*[SumLanes]float32)(ch[j : j+SumLanes])
			for l, v := range b {
				acc[l] += float64(v) * float64(v)
			}
		}
		for l, v := range ch[j:] {
			acc[l] += float64(v) * float64(v)
		}
		s += laneTree(&acc)
	}
	return s
}

// DotLanes returns Σ_k a_k·b_k (len(b) ≥ len(a)) in float64 in the lane
// order.
func DotLanes(a, b []float32) float64 {
	b = b[:len(a)]
	var s float64
	for c := 0; c < len(a); c += SumChunk {
		e := min(c+SumChunk, len(a))
		ca, cb := a[c:e], b[c:e]
		var acc [SumLanes]float64
		j := 0
		for ; j+SumLanes <= len(ca); j += SumLanes {
			x, y := (*[SumLanes]float32)(ca[j:j+SumLanes]), (*[SumLanes]float32)(cb[j:j+SumLanes])
			for l := range x {
				acc[l] += float64(x[l]) * float64(y[l])
			}
		}
		for l := range ca[j:] {
			acc[l] += float64(ca[j+l]) * float64(cb[j+l])
		}
		s += laneTree(&acc)
	}
	return s
}

// StdRowSums returns Σg², Σg, Σg·x, Σx², Σx (len(x) ≥ len(g)), each in
// float64 in the lane order: StandardizedNormTerms' sums of a row.
func StdRowSums(g, x []float32) [5]float64 {
	x = x[:len(g)]
	var s [5]float64
	for c := 0; c < len(g); c += SumChunk {
		e := min(c+SumChunk, len(g))
		var acc [5][SumLanes]float64
		a0, a1, a2, a3, a4 := &acc[0], &acc[1], &acc[2], &acc[3], &acc[4]
		j := c
		if kernels.AddStdLaneRows(g[c:e], x[c:e], &acc) {
			j += (e - c) &^ (SumLanes - 1)
		}
		for ; j+SumLanes <= e; j += SumLanes {
			gr, xr := (*[SumLanes]float32)(g[j:j+SumLanes]), (*[SumLanes]float32)(x[j:j+SumLanes])
			for l := range SumLanes {
				gv, xv := float64(gr[l]), float64(xr[l])
				a0[l] += gv * gv
				a1[l] += gv
				a2[l] += gv * xv
				a3[l] += xv * xv
				a4[l] += xv
			}
		}
		for l := range e - j {
			gv, xv := float64(g[j+l]), float64(x[j+l])
			a0[l] += gv * gv
			a1[l] += gv
			a2[l] += gv * xv
			a3[l] += xv * xv
			a4[l] += xv
		}
		for q := range acc {
			s[q] += laneTree(&acc[q])
		}
	}
	return s
}

// StdResidualSq returns ‖g − a·1 − c·x‖² for a row of k elements, a =
// Σg/k and c = Σg·x/k, from its StdRowSums s, expanded (clamped at 0):
// Σg² − 2a·Σg − 2c·Σg·x + a²k + c²·Σx² + 2ac·Σx. Each backend evaluates
// this expression in this order.
func StdResidualSq(s [5]float64, k int) float64 {
	if k == 0 {
		return 0
	}
	kk := float64(k)
	a, c := s[1]/kk, s[2]/kk
	uu := s[0] - 2*a*s[1] - 2*c*s[2] + a*a*kk + c*c*s[3] + 2*a*c*s[4]
	if uu < 0 {
		uu = 0
	}
	return uu
}

// StdGhostTerm returns −cA·(a·a) − cB·(b·b): StandardizedGhostTerms'
// term of a row from its sums a = 1ᵀg and b = x̂ᵀg. Each backend
// evaluates this expression in this order.
func StdGhostTerm(a, b float64, cA, cB float32) float64 {
	return -float64(cA)*(a*a) - float64(cB)*(b*b)
}

// StdVJP returns c·((s − a) − b·x) formed in float64 and rounded once:
// StandardizedVJP's element s of a row (x its x̂) whose sums give a =
// Σs/k and b = Σs·x̂/k. Each backend evaluates this expression in this
// order.
func StdVJP(s, x float32, a, b float64, c float32) float32 {
	return float32(float64(c) * ((float64(s) - a) - b*float64(x)))
}

// laneAcc sums float32 terms in float64 in the lane order (lanesum.go)
// as they come, run after run: t counts the terms so far, lanes holds the
// current chunk's partial sums, total the finished chunks'.
type laneAcc struct {
	lanes [SumLanes]float64
	total float64
	t     int
}

// addScaled adds the terms g_e·(x_e − m)·iv (each rounded to float32) of
// the run g, x, or with x nil the terms g_e, term t + e to lane (t + e)
// mod SumLanes: lane by lane in whole rows of SumLanes where the run
// allows, which gives each lane its terms in the same order.
func (a *laneAcc) addScaled(g, x []float32, m, iv float32) {
	term := func(e int) float64 {
		if x == nil {
			return float64(g[e])
		}
		return float64(g[e] * (x[e] - m) * iv)
	}
	for e := 0; e < len(g); {
		end := min(len(g), e+SumChunk-a.t%SumChunk)
		for ; e < end && a.t%SumLanes != 0; e, a.t = e+1, a.t+1 {
			a.lanes[a.t%SumLanes] += term(e)
		}
		if rows := (end - e) / SumLanes; rows > 0 {
			// The whole rows by vector lanes where the CPU has them,
			// each lane's terms in the same order (kernels.AddLaneRows).
			var xs []float32
			if x != nil {
				xs = x[e : e+rows*SumLanes]
			}
			if kernels.AddLaneRows(g[e:e+rows*SumLanes], xs, m, iv, &a.lanes) {
				e, a.t = e+rows*SumLanes, a.t+rows*SumLanes
			}
		}
		for ; e+SumLanes <= end; e, a.t = e+SumLanes, a.t+SumLanes {
			gs := (*[SumLanes]float32)(g[e : e+SumLanes])
			if x == nil {
				for l, v := range gs {
					a.lanes[l] += float64(v)
				}
				continue
			}
			xs := (*[SumLanes]float32)(x[e : e+SumLanes])
			for l, v := range gs {
				a.lanes[l] += float64(v * (xs[l] - m) * iv)
			}
		}
		for ; e < end; e, a.t = e+1, a.t+1 {
			a.lanes[a.t%SumLanes] += term(e)
		}
		if a.t%SumChunk == 0 {
			a.total += laneTree(&a.lanes)
			a.lanes = [SumLanes]float64{}
		}
	}
}

// sum returns the total of the terms added: the finished chunks' and the
// last, partial one's.
func (a *laneAcc) sum() float64 {
	if a.t%SumChunk != 0 {
		return a.total + laneTree(&a.lanes)
	}
	return a.total
}
