package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/internal/testhook"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// convRows is how the N batch rows of a convolution hold the physical
// batch's B samples. Usually N = B, a row per sample. A model that folds
// windows into the batch axis before a convolution (EfficientViT's
// cascaded window attention: (B, C, H, W) partitioned into (B·4, C, 7, 7))
// gives each sample k = N/B rows, and the sample's gradient is the sum of
// its rows' — a row taken for a sample would clip each window apart and
// leave the sample's norm unbounded. The runtime's batch stride says
// which rows are whose (runtime.View: element e belongs to sample
// (e / BatchStride) mod B): the rows come in blocks of run consecutive
// rows, block b the sample b mod B's — one block of k rows where a
// sample's windows are contiguous (B·nW, batch outermost), k blocks of
// one row where they are interleaved (nW·B).
type convRows struct {
	B, k, run int
}

// folded reports whether a sample spans more than one row.
func (f convRows) folded() bool { return f.k > 1 }

// row is the index of sample i's j-th row (0 ≤ j < k).
func (f convRows) row(i, j int) int {
	return (i+j/f.run*f.B)*f.run + j%f.run
}

// convRowsOf reads the layout of the N rows of input x and output
// gradient dy over a physical batch of B samples, and refuses a layout
// where a row would hold parts of two samples or the two disagree.
func convRowsOf(N, B int, x, dy *runtime.View) (convRows, error) {
	if N == B || B <= 0 || testhook.ConvWindowsAsSamples {
		return convRows{B: B, k: 1, run: 1}, nil
	}
	fx, okx := viewRows(N, B, x)
	fy, oky := viewRows(N, B, dy)
	if !okx || !oky {
		return convRows{}, fmt.Errorf("convolution over %d rows for a batch of %d samples (input batch stride %d, output %d): a row would hold parts of two samples", N, B, x.BatchStride, dy.BatchStride)
	}
	if fx != fy {
		return convRows{}, fmt.Errorf("convolution over %d rows for a batch of %d samples: the input (batch stride %d) and output gradient (%d) assign its rows to samples differently", N, B, x.BatchStride, dy.BatchStride)
	}
	return fx, nil
}

// viewRows is how v's N rows (v's leading axis) hold B samples, as its
// batch stride says; false where a row would hold parts of two samples
// or the blocks do not cycle through the samples evenly.
func viewRows(N, B int, v *runtime.View) (convRows, bool) {
	if N <= 0 || B <= 0 || N%B != 0 || len(v.Data)%N != 0 {
		return convRows{}, false
	}
	row := len(v.Data) / N
	if row == 0 || v.BatchStride%row != 0 || v.BatchStride == 0 {
		return convRows{}, false
	}
	f := convRows{B: B, k: N / B, run: v.BatchStride / row}
	return f, (N/f.run)%B == 0
}

// foldGeometry is what the folded forms unfold of convolution s: its
// plane's scratch and a row's unfolded input (D × T floats; neither for a
// pointwise convolution, read in place), whether the layer takes a ghost
// norm, and a sample's positions kT.
func foldGeometry(ls *linearState, s *runtime.ConvShape, f convRows) (plane, colLen int, pointwise, ghost bool, KT int) {
	plane, colLen, pointwise = s.PlaneSize(), s.T*s.D, s.Pointwise()
	if pointwise {
		plane, colLen = 0, 0
	}
	return plane, colLen, pointwise, ls.decision == rewrite.Ghost, f.k * s.T
}

// convFoldedUse is convUseOn where each sample spans several rows
// (convRows.folded). Sample i's unfolded input a_i stacks its k rows'
// (kT × D) and its output gradient g_i theirs (kT × P), as the plan
// counts them: a ghost norm is ⟨a_i a_iᵀ, g_i g_iᵀ⟩ with the kT × kT
// Grams formed block by block (k² products of T × T), an instantiated
// gradient g_iᵀa_i = Σ_r g_rᵀa_r one product per row accumulating into
// the sample's. A depthwise gradient is the sum of its rows'.
func convFoldedUse(e *Engine, ls *linearState, us *useState, s *runtime.ConvShape, x, dy *runtime.View, f convRows) error {
	groups := max(s.Group, 1)
	T, D := s.T, s.D
	P := s.M / groups
	inRow, outRow := len(x.Data)/s.N, len(dy.Data)/s.N
	if s.IsDepthwise() {
		size := s.M * s.K
		scratch := e.ops.DepthwiseScratchSize(s)
		bufs, err := e.workerBufs(scratch + 2*size)
		if err != nil {
			return err
		}
		e.forSamples(e.n, func(w, i int) {
			buf := bufs[w]
			ws, inst, sum := buf[:scratch], buf[scratch:scratch+size], buf[scratch+size:scratch+2*size]
			e.lay.Fill(0, sum)
			for j := 0; j < f.k; j++ {
				r := f.row(i, j)
				e.ops.DepthwisePerSampleGrad(s, x.Data[r*inRow:(r+1)*inRow], dy.Data[r*outRow:(r+1)*outRow], inst, ws)
				e.ops.Add(inst, sum)
			}
			us.addSample(e.ops, i, 0, sum)
		})
		return nil
	}
	plane, colLen, pointwise, ghost, KT := foldGeometry(ls, s, f)
	slots := 1 // unfolded rows kept at once: all k for a ghost norm's Grams
	need := plane + colLen + P*D
	if ghost {
		slots = f.k
		need = plane + f.k*colLen + 2*KT*KT
	}
	bufs, err := e.workerBufs(need)
	if err != nil {
		return err
	}
	workers := e.ops.Workers()
	if len(ls.foldCols) < workers*f.k {
		ls.foldCols = make([][]float32, workers*f.k)
	}
	e.forSamples(e.n, func(w, i int) {
		buf := bufs[w]
		pl, rest := buf[:plane], buf[plane:]
		cols := ls.foldCols[w*f.k : (w+1)*f.k]
		for gr := 0; gr < groups; gr++ {
			for j := 0; j < f.k; j++ {
				r := f.row(i, j)
				xr := x.Data[r*inRow : (r+1)*inRow]
				gT := dy.Data[r*outRow+gr*P*T : r*outRow+(gr+1)*P*T]
				// Row j's unfolded group (D × T): read in place where
				// the convolution is pointwise.
				var c []float32
				if pointwise {
					c = xr[gr*D*T : (gr+1)*D*T]
				} else {
					slot := j % slots
					c = rest[slot*colLen : (slot+1)*colLen]
					e.ops.Im2ColPlane(s, xr, gr, c, pl)
				}
				if ghost {
					cols[j] = c
					continue
				}
				var beta float32
				if j > 0 {
					beta = 1
				}
				e.ops.GemmSerial(false, true, P, D, T, 1, gT, T, c, T, beta, rest[colLen:colLen+P*D], D)
			}
			if !ghost {
				us.addSample(e.ops, i, gr*P*D, rest[colLen:colLen+P*D])
				continue
			}
			aa := rest[f.k*colLen : f.k*colLen+KT*KT]
			gg := rest[f.k*colLen+KT*KT : f.k*colLen+2*KT*KT]
			for j := 0; j < f.k; j++ {
				rj := f.row(i, j)
				gj := dy.Data[rj*outRow+gr*P*T : rj*outRow+(gr+1)*P*T]
				for j2 := 0; j2 < f.k; j2++ {
					r2 := f.row(i, j2)
					g2 := dy.Data[r2*outRow+gr*P*T : r2*outRow+(gr+1)*P*T]
					e.ops.GemmSerial(true, false, T, T, D, 1, cols[j], T, cols[j2], T, 0, aa[j*T*KT+j2*T:], KT)
					e.ops.GemmSerial(true, false, T, T, P, 1, gj, T, g2, T, 0, gg[j*T*KT+j2*T:], KT)
				}
			}
			e.ops.AddDot(1, aa, gg, us.p.normSq[i:i+1])
		}
	})
	return nil
}

// scaleConvRows scales the rows of data (a convolution's N rows of row
// elements each) by their samples' factors c: sample i's rows by c[i], as
// book-keeping's Σ_i c_i g_i needs before the weight-gradient kernel.
func scaleConvRows(ops runtime.DPOps, f convRows, c, data []float32, row int) {
	blk := f.run * row // a block: run rows of one sample
	span := f.B * blk  // B blocks, one per sample
	for lo := 0; lo+span <= len(data); lo += span {
		ops.ScaleRows(c[:f.B], 1, data[lo:lo+span], blk, blk)
	}
}

// batchable reports whether the batched forms take the layout: a
// sample's rows in k/run blocks of run consecutive rows, the blocks
// cycling through the samples — one block of k where a sample's rows are
// contiguous, k blocks of one row where they are interleaved, and blocks
// of the views of augmentation multiplicity (rewrite.PlanOptions.
// Multiplicity: B·K rows, a sample's K views consecutive) inside
// interleaved windows. Any other runs sample by sample.
func (f convRows) batchable() bool { return f.run > 0 && f.k%f.run == 0 }

// rowBlocks calls fn with where the rows of a chunk of n samples from i0
// lie, for the batched forms: count rows from first, k/run blocks of
// n·run rows, block b from row (b·B + i0)·run (the chunk's samples' b-th
// runs, one after another). Block b's rows go to slot b·n·run of a
// chunk's per-row scratch, so that row j of the chunk's sample i lies at
// scratch row chunkRow(n, i, j).
func (f convRows) rowBlocks(i0, n int, fn func(slot, first, count int)) {
	for b := 0; b < f.k/f.run; b++ {
		fn(b*n*f.run, (b*f.B+i0)*f.run, n*f.run)
	}
}

// chunkRow is where row j of sample i lies among rows holding blk
// samples' rows laid out as the data's (block-major, then sample, then
// the row within its run): a chunk's per-row scratch (blk = its n
// samples; rowBlocks) or a whole batch of the data's rows (blk = B).
func (f convRows) chunkRow(blk, i, j int) int {
	return (j/f.run)*blk*f.run + i*f.run + j%f.run
}

// foldChunks runs fn on the step's samples in chunks of nb (as many as
// fit batchedScratch and the plan's workspace at per scratch floats a
// sample after fixed ones), each call the chunk's first sample i0 and its
// count n, with the scratch buf (fixed + nb·per floats). It reports
// false, running nothing, where one sample does not fit.
func (e *Engine) foldChunks(fixed, per int, fn func(buf []float32, nb, i0, n int) error) (bool, error) {
	nb := min(e.n, e.fitWorkspace(batchedScratch/max(per, 1), fixed, per))
	if nb < 1 {
		return false, nil
	}
	bufs, err := e.workerBufs(fixed + nb*per)
	if err != nil {
		return false, err
	}
	for i0 := 0; i0 < e.n; i0 += nb {
		e.convChunks++
		if err := fn(bufs[0], nb, i0, min(nb, e.n-i0)); err != nil {
			return true, err
		}
	}
	return true, nil
}

// sumRows adds, for each of n samples, its k rows of size floats in R
// to out (beta 0: writes them), the rows laid out as blk samples' rows
// in the data's order (row j of sample i at chunkRow(blk, i, j)·size:
// i·k·size where a sample's rows are contiguous, (j·blk + i)·size where
// they are interleaved). Row by row in the samples' order, one strided GEMM
// of inner dimension 1 a row (out += 1·R_j: a float32 addition exactly),
// so that the sums are the bits of the per-sample form's Adds.
func (e *Engine) sumRows(f convRows, R []float32, size, n, blk int, beta float32, out []float32) error {
	if len(e.foldOne) == 0 {
		one, err := e.alloc(1, "a folded convolution's one")
		if err != nil {
			return err
		}
		e.lay.Fill(1, one)
		e.foldOne = one
	}
	stride := f.run * size // a sample's, from row j of one to row j of the next
	for j := 0; j < f.k; j++ {
		e.ops.GemmStrided(false, false, 1, size, 1, 1, e.foldOne, 1, 0, R[f.chunkRow(blk, 0, j)*size:], size, stride, beta, out, size, size, n)
		beta = 1
	}
	return nil
}

// convFoldedBatched is convFoldedUse on a device that batches samples
// (Engine.batchSamples), for chunks of samples at once: their rows
// unfolded in one Im2ColBatch a block (a pointwise convolution's read
// in place), then per group either the gradients as k strided GEMMs
// accumulating over the samples' rows, or the kT × kT Grams block by
// block as k² pairs of strided GEMMs and the ghost norms as one AddDots;
// depthwise gradients of the chunk's rows in one DepthwiseGradBatch a
// block, summed per sample (sumRows). It reports false, doing nothing,
// where one sample's share exceeds the scratch; the per-sample form then
// runs.
func convFoldedBatched(e *Engine, ls *linearState, us *useState, s *runtime.ConvShape, x, dy *runtime.View, f convRows) (bool, error) {
	groups := max(s.Group, 1)
	T, D, M := s.T, s.D, s.M
	P := M / groups
	inRow, outRow := len(x.Data)/s.N, len(dy.Data)/s.N
	if s.IsDepthwise() {
		size := M * s.K
		scratch := e.ops.DepthwiseScratchSize(s)
		per := (f.k + 1) * size
		return e.foldChunks(scratch, per, func(buf []float32, nb, i0, n int) error {
			ws, R, out := buf[:scratch], buf[scratch:scratch+nb*f.k*size], buf[scratch+nb*f.k*size:scratch+nb*per]
			f.rowBlocks(i0, n, func(slot, first, count int) {
				e.ops.DepthwiseGradBatch(s, x.Data, dy.Data, first, count, R[slot*size:], ws)
			})
			if err := e.sumRows(f, R, size, n, n, 0, out); err != nil {
				return err
			}
			e.addRows(us, i0, n, out[:n*size])
			return nil
		})
	}
	plane, colLen, pointwise, ghost, KT := foldGeometry(ls, s, f)
	per := f.k * colLen
	if ghost {
		per += 2 * KT * KT
	} else {
		per += M * D
	}
	return e.foldChunks(plane, per, func(buf []float32, nb, i0, n int) error {
		pl, col, rest := buf[:plane], buf[plane:plane+nb*f.k*colLen], buf[plane+nb*f.k*colLen:plane+nb*per]
		for gr := 0; gr < groups; gr++ {
			if !pointwise {
				f.rowBlocks(i0, n, func(slot, first, count int) {
					e.ops.Im2ColBatch(s, x.Data, first, count, gr, col[slot*colLen:(slot+count)*colLen], pl)
				})
			}
			// Row j of sample i0+i: its unfolded input at
			// a(j) + i·sa, its output gradient at g(j) + i·sg.
			sa, sg := f.run*colLen, f.run*outRow
			if pointwise {
				sa = f.run * inRow
			}
			a := func(j int) []float32 {
				if pointwise {
					return x.Data[f.row(i0, j)*inRow+gr*D*T:]
				}
				return col[f.chunkRow(n, 0, j)*colLen:]
			}
			g := func(j int) []float32 { return dy.Data[f.row(i0, j)*outRow+gr*P*T:] }
			if !ghost {
				for j := 0; j < f.k; j++ {
					var beta float32
					if j > 0 {
						beta = 1
					}
					e.ops.GemmStrided(false, true, P, D, T, 1, g(j), T, sg, a(j), T, sa, beta, rest[gr*P*D:], D, M*D, n)
				}
				continue
			}
			aa, gg := rest[:n*KT*KT], rest[n*KT*KT:2*n*KT*KT]
			for j := 0; j < f.k; j++ {
				for j2 := 0; j2 < f.k; j2++ {
					at := j*T*KT + j2*T
					e.ops.GemmStrided(true, false, T, T, D, 1, a(j), T, sa, a(j2), T, sa, 0, aa[at:], KT, KT*KT, n)
					e.ops.GemmStrided(true, false, T, T, P, 1, g(j), T, sg, g(j2), T, sg, 0, gg[at:], KT, KT*KT, n)
				}
			}
			e.ops.AddDots(1, aa, gg, us.p.normSq[i0:i0+n])
		}
		if !ghost {
			e.addRows(us, i0, n, rest[:n*M*D])
		}
		return nil
	})
}

// convBiasFolded is convBias where each sample spans several rows of the
// output gradient dy (convRows), on a device that batches samples: every
// row's channel sums in one AddRunSums, then each sample's rows summed
// (sumRows) into its per-sample gradient or its row of the norms'
// scratch. It reports false, doing nothing, for a layout the batched
// forms do not take (the general path then runs).
func convBiasFolded(e *Engine, p *param, dy *runtime.View, M int) bool {
	N, B := dy.Shape[0], e.cfg.PhysicalBatch
	f, ok := viewRows(N, B, dy)
	if !ok || !f.batchable() || len(dy.Data)%(N*M) != 0 {
		return false
	}
	row := len(dy.Data) / N
	// The rows the step's samples own: the first e.n·k where a sample's
	// rows are contiguous; where they are interleaved, all N (the
	// padding's among them, not summed).
	rows := e.n * f.k
	if f.run != f.k {
		rows = N
	}
	buf, err := growOn(e.dev, e.affineScratch, rows*M+e.n*M)
	if err != nil {
		return false
	}
	e.affineScratch = buf
	sums, out := buf[:rows*M], buf[rows*M:rows*M+e.n*M]
	e.lay.Fill(0, sums)
	e.ops.AddRunSums(dy.Data[:rows*row], sums)
	if p.ps != nil {
		return e.sumRows(f, sums, M, e.n, B, 1, p.ps[:e.n*M]) == nil
	}
	if e.sumRows(f, sums, M, e.n, B, 0, out) != nil {
		return false
	}
	return e.addSampleRows(p, 0, out)
}
