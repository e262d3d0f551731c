package runtime

import "errors"

// errPlanOnly is what a PlanOnly plan answers to running.
var errPlanOnly = errors.New("runtime: the plan was compiled with PlanOnly: it has no buffers and cannot run")

// errReleased is the error of a plan used after Release.
var errReleased = errors.New("runtime: the plan was released: its memory is the device's again and it cannot run")

// ScratchBytes returns the size in bytes of the workspace the kernels
// share (Scratch), also for a PlanOnly plan, which allocates none.
func (p *Plan) ScratchBytes() int64 { return 4 * int64(p.wsNeed) }

// BatchBytes returns the device memory the plan holds for its batch, that
// is everything but the parameters and their gradients: the arena
// (ArenaBytes), the workspace (ScratchBytes), the loss head's softmax,
// labels, losses and unit weights, and what nodes hold outside the arena
// (MaxPool winners, index tables). It is what a memory estimate's
// activation term must cover; a PlanOnly plan reports it without
// allocating any of it.
func (p *Plan) BatchBytes() int64 {
	n := p.ArenaBytes() + p.ScratchBytes()
	if p.hasLoss {
		o := p.outputs[0]
		// softmax (N·K floats), labels (N int64), losses and unit
		// weights (N floats each)
		n += 4*int64(o.n) + 16*int64(o.shape[0])
	}
	for _, nd := range p.nodes {
		n += nd.auxBytes
	}
	return n
}

// ArenaBuffers returns the number of buffers the arena places: values,
// gradients, gradient scratch and hook buffers. Each is rounded up to 16 floats, so the
// arena of another batch may exceed a linear fit of two plans' arenas by
// up to 60 bytes a buffer.
func (p *Plan) ArenaBuffers() int {
	seen := map[int]bool{}
	for _, t := range p.tensors {
		if t.dataItem >= 0 {
			seen[t.dataItem] = true
		}
		if t.gradItem >= 0 {
			seen[t.gradItem] = true
		}
	}
	n := len(seen)
	for _, nd := range p.nodes {
		for _, i := range nd.scratchItem {
			if i >= 0 && !seen[i] {
				seen[i] = true
				n++
			}
		}
		if nd.hookItem >= 0 {
			n++
		}
	}
	return n
}
