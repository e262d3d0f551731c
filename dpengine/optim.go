package dpengine

import (
	"errors"
	"fmt"
	"math"

	par "github.com/dpfinetune/dpfinetune/internal/workers"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Optimizer updates parameters from the private gradient. Params and grads
// are parallel lists of flat tensors; the optimizer keeps its own state per
// tensor.
type Optimizer interface {
	// Step applies one update with the given gradients.
	Step(params, grads [][]float32) error
	// State returns a copy of the optimizer's state for a checkpoint.
	State() *OptimizerState
	// SetState restores a state returned by State.
	SetState(*OptimizerState) error
	// Name is "sgd", "adam" or "adamw".
	Name() string
	// SetLR sets the learning rate of the updates from the next Step on:
	// a learning-rate schedule's value for that step (dptrain.Schedule).
	SetLR(lr float64)
}

// scaledOptimizer is an Optimizer that can multiply the gradients by a
// factor as it reads them: the engine then skips a separate pass over every
// gradient (the division by the expected batch size of non-private
// training). Step(p, g) is stepScaled(p, g, 1).
type scaledOptimizer interface {
	Optimizer
	stepScaled(params, grads [][]float32, gradScale float32) error
	// begin starts one update and returns the update of the piece
	// [lo, hi) of tensor k; the caller must run it on every element
	// exactly once (pieces in any order, concurrently) before the next
	// step. stepScaled is begin followed by spans. The engine runs the
	// pieces right after drawing their noise, while they are in cache.
	begin(params, grads [][]float32, gradScale float32) (func(k, lo, hi int), error)
	// beginBlock is begin for params and grads that are the back-to-back
	// views of the blocks pAll and gAll, in order: its update takes the
	// piece [lo, hi) of the blocks, so that one device call can update
	// every parameter (the optimizer's state is such a block too).
	beginBlock(params, grads [][]float32, pAll, gAll []float32, gradScale float32) (func(lo, hi int), error)
	// setDevice makes the optimizer update on the device of ops (the
	// engine's); until then it updates on the CPU.
	setDevice(ops runtime.DPOps)
	// setMemory makes the optimizer keep the state it allocates from then
	// on in dev's memory (the engine's device); until then in the CPU's.
	setMemory(dev runtime.Device)
}

// onDevice is the device an optimizer updates on and keeps its state in;
// the zero value is the CPU, for an optimizer used outside an Engine.
type onDevice struct {
	ops runtime.DPOps
	dev runtime.Device
}

func (d *onDevice) setDevice(ops runtime.DPOps) { d.ops = ops }

func (d *onDevice) setMemory(dev runtime.Device) { d.dev = dev }

func (d *onDevice) device() runtime.DPOps {
	if d.ops == nil {
		return runtime.CPU{}
	}
	return d.ops
}

func (d *onDevice) memory() runtime.Device {
	if d.dev == nil {
		return runtime.CPU{}
	}
	return d.dev
}

// slot is an optimizer state slot (a momentum, Adam's m or v): one
// device block holding the tensors in the parameters' order at
// runtime.BlockOffsets (the layout of the plan's parameter block and the
// engine's accumulators), its views per tensor, which the update
// operations take — or the whole block at once (beginBlock) — and the
// views' offsets.
type slot struct {
	views [][]float32
	offs  []int
	all   []float32
	buf   runtime.Buffer
}

// zeros allocates a slot of the shapes of xs on the device, zeroed.
func (d *onDevice) zeros(xs [][]float32) (*slot, error) {
	sizes := make([]int, len(xs))
	for i, x := range xs {
		sizes[i] = len(x)
	}
	offs, total := runtime.BlockOffsets(sizes)
	b, err := d.memory().Alloc(total)
	if err != nil {
		return nil, fmt.Errorf("optimizer: allocating state of %d elements on %s: %w", total, d.memory().Name(), err)
	}
	s := &slot{views: make([][]float32, len(xs)), offs: offs, all: b.Floats()[:total:total], buf: b}
	for i, x := range xs {
		s.views[i] = s.all[offs[i] : offs[i]+len(x) : offs[i]+len(x)]
	}
	return s, nil
}

// load returns a slot on the device holding a copy of xs (nil for nil).
func (d *onDevice) load(xs [][]float32) (*slot, error) {
	if xs == nil {
		return nil, nil
	}
	s, err := d.zeros(xs)
	if err != nil {
		return nil, err
	}
	for i, x := range xs {
		if err := d.memory().CopyIn(s.buf, s.offs[i], x); err != nil {
			return nil, fmt.Errorf("optimizer: loading state: %w", err)
		}
	}
	return s, nil
}

// save returns a host copy of a slot, a tensor each (host read: CopyOut).
// A CopyOut of the optimizer's own buffer fails only on a broken device,
// which State, having no error to return, reports by panicking.
func (d *onDevice) save(s *slot) [][]float32 {
	if s == nil {
		return nil
	}
	out := make([][]float32, len(s.views))
	for i, v := range s.views {
		out[i] = make([]float32, len(v))
		if err := d.memory().CopyOut(out[i], s.buf, s.offs[i]); err != nil {
			panic(fmt.Sprintf("optimizer: saving state from %s: %v", d.memory().Name(), err))
		}
	}
	return out
}

// checkBlock checks that the blocks pAll and gAll and the optimizer's slot
// s (nil: none) all hold params laid out at runtime.BlockOffsets of their
// sizes.
func checkBlock(params [][]float32, pAll, gAll []float32, s *slot) error {
	total := 0 // runtime.BlockOffsets' total, without its offsets: a step allocates nothing
	for _, x := range params {
		total += runtime.BlockSpan(len(x))
	}
	if len(pAll) != total || len(gAll) != total || s != nil && len(s.all) != total {
		return fmt.Errorf("optimizer: blocks of %d parameters and %d gradients for tensors of %d elements laid out at runtime.BlockOffsets", len(pAll), len(gAll), total)
	}
	return nil
}

// OptimizerState is the serializable state of an optimizer.
type OptimizerState struct {
	Name  string
	Step  int64
	Slots map[string][][]float32 // "momentum", or "m" and "v"
}

// SGD is DP-SGD's update: v ← μ·v + (g + λ·θ); θ ← θ − η·v (PyTorch's
// convention, with λ the L2 weight decay applied to the private gradient).
type SGD struct {
	LR, Momentum, WeightDecay float64
	step                      int64
	vel                       *slot // nil without momentum
	onDevice
}

// Name implements Optimizer.
func (o *SGD) Name() string { return "sgd" }

// SetLR implements Optimizer.
func (o *SGD) SetLR(lr float64) { o.LR = lr }

// Step implements Optimizer.
func (o *SGD) Step(params, grads [][]float32) error { return o.stepScaled(params, grads, 1) }

// stepScaled implements scaledOptimizer.
func (o *SGD) stepScaled(params, grads [][]float32, gradScale float32) error {
	upd, err := o.begin(params, grads, gradScale)
	if err != nil {
		return err
	}
	spans(o.device().Workers(), params, upd)
	return nil
}

// begin implements scaledOptimizer.
func (o *SGD) begin(params, grads [][]float32, gradScale float32) (func(k, lo, hi int), error) {
	c, err := o.prepare(params, grads, gradScale)
	if err != nil {
		return nil, err
	}
	ops := o.device()
	return func(k, lo, hi int) {
		var vel []float32
		if o.vel != nil {
			vel = o.vel.views[k][lo:hi]
		}
		ops.SGDUpdate(params[k][lo:hi], grads[k][lo:hi], vel, c)
	}, nil
}

// beginBlock implements scaledOptimizer.
func (o *SGD) beginBlock(params, grads [][]float32, pAll, gAll []float32, gradScale float32) (func(lo, hi int), error) {
	c, err := o.prepare(params, grads, gradScale)
	if err == nil {
		err = checkBlock(params, pAll, gAll, o.vel)
	}
	if err != nil {
		return nil, err
	}
	ops := o.device()
	return func(lo, hi int) {
		var vel []float32
		if o.vel != nil {
			vel = o.vel.all[lo:hi]
		}
		ops.SGDUpdate(pAll[lo:hi], gAll[lo:hi], vel, c)
	}, nil
}

// prepare checks the lists, allocates the momentum at the first update and
// returns the update's coefficients, counting the step.
func (o *SGD) prepare(params, grads [][]float32, gradScale float32) (runtime.SGDCoeffs, error) {
	if err := checkLists(params, grads); err != nil {
		return runtime.SGDCoeffs{}, err
	}
	if o.Momentum != 0 && o.vel == nil {
		vel, err := o.zeros(params)
		if err != nil {
			return runtime.SGDCoeffs{}, err
		}
		o.vel = vel
	}
	c := runtime.SGDCoeffs{LR: float32(o.LR), Momentum: float32(o.Momentum), WeightDecay: float32(o.WeightDecay),
		GradScale: gradScale, First: o.step == 0}
	o.step++
	return c, nil
}

// State implements Optimizer.
func (o *SGD) State() *OptimizerState {
	s := &OptimizerState{Name: o.Name(), Step: o.step, Slots: map[string][][]float32{}}
	if o.vel != nil {
		s.Slots["momentum"] = o.save(o.vel)
	}
	return s
}

// SetState implements Optimizer.
func (o *SGD) SetState(s *OptimizerState) error {
	if s.Name != o.Name() {
		return fmt.Errorf("optimizer state is for %q, not sgd", s.Name)
	}
	vel, err := o.load(s.Slots["momentum"])
	if err != nil {
		return err
	}
	o.step, o.vel = s.Step, vel
	return nil
}

// Adam is DP-Adam (Kingma & Ba) on the private gradient; with Decoupled it
// is AdamW (Loshchilov & Hutter), whose weight decay shrinks θ directly
// instead of entering the gradient.
type Adam struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Decoupled                          bool
	step                               int64
	m, v                               *slot
	onDevice
}

// NewAdam returns Adam with PyTorch's defaults (β = 0.9, 0.999; ε = 1e-8).
func NewAdam(lr, weightDecay float64, decoupled bool) *Adam {
	return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: weightDecay, Decoupled: decoupled}
}

// Name implements Optimizer.
func (o *Adam) Name() string {
	if o.Decoupled {
		return "adamw"
	}
	return "adam"
}

// SetLR implements Optimizer. AdamW's decay, η·λ, follows the rate, as
// PyTorch's does under a scheduler.
func (o *Adam) SetLR(lr float64) { o.LR = lr }

// Step implements Optimizer.
func (o *Adam) Step(params, grads [][]float32) error { return o.stepScaled(params, grads, 1) }

// stepScaled implements scaledOptimizer. The update is
// the device's AdamUpdate (kernels.AdamUpdate on the CPU, SSE2 on amd64), PyTorch's formulation in float32:
//
//	d ← s·g (+ λ·θ for Adam; AdamW instead shrinks θ ← θ·(1 − η·λ))
//	m ← β₁·m + (1 − β₁)·d;  v ← β₂·v + (1 − β₂)·d²
//	θ ← θ − η/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)
func (o *Adam) stepScaled(params, grads [][]float32, gradScale float32) error {
	upd, err := o.begin(params, grads, gradScale)
	if err != nil {
		return err
	}
	spans(o.device().Workers(), params, upd)
	return nil
}

// begin implements scaledOptimizer.
func (o *Adam) begin(params, grads [][]float32, gradScale float32) (func(k, lo, hi int), error) {
	c, err := o.prepare(params, grads, gradScale)
	if err != nil {
		return nil, err
	}
	ops := o.device()
	return func(k, lo, hi int) {
		ops.AdamUpdate(params[k][lo:hi], grads[k][lo:hi], o.m.views[k][lo:hi], o.v.views[k][lo:hi], c)
	}, nil
}

// beginBlock implements scaledOptimizer.
func (o *Adam) beginBlock(params, grads [][]float32, pAll, gAll []float32, gradScale float32) (func(lo, hi int), error) {
	c, err := o.prepare(params, grads, gradScale)
	if err == nil {
		err = errors.Join(checkBlock(params, pAll, gAll, o.m), checkBlock(params, pAll, gAll, o.v))
	}
	if err != nil {
		return nil, err
	}
	ops := o.device()
	return func(lo, hi int) {
		ops.AdamUpdate(pAll[lo:hi], gAll[lo:hi], o.m.all[lo:hi], o.v.all[lo:hi], c)
	}, nil
}

// prepare checks the lists, allocates m and v at the first update and
// returns the update's coefficients, counting the step.
func (o *Adam) prepare(params, grads [][]float32, gradScale float32) (runtime.AdamCoeffs, error) {
	if err := checkLists(params, grads); err != nil {
		return runtime.AdamCoeffs{}, err
	}
	if o.m == nil {
		m, err := o.zeros(params)
		if err != nil {
			return runtime.AdamCoeffs{}, err
		}
		v, err := o.zeros(params)
		if err != nil {
			return runtime.AdamCoeffs{}, err
		}
		o.m, o.v = m, v
	}
	o.step++
	b1, b2 := o.Beta1, o.Beta2
	bc1 := 1 - math.Pow(b1, float64(o.step))
	bc2 := 1 - math.Pow(b2, float64(o.step))
	lr, wd := float32(o.LR), float32(o.WeightDecay)
	fb1, fb2 := float32(b1), float32(b2)
	c := runtime.AdamCoeffs{
		GradScale: gradScale, Decay: 1,
		Beta1: fb1, OneMinusBeta1: 1 - fb1,
		Beta2: fb2, OneMinusBeta2: 1 - fb2,
		StepSize: float32(o.LR / bc1),
		SqrtBC2:  float32(math.Sqrt(bc2)),
		Eps:      float32(o.Eps),
	}
	if o.Decoupled {
		c.Decay = 1 - float32(lr*wd)
	} else {
		c.L2 = wd
	}
	return c, nil
}

// State implements Optimizer.
func (o *Adam) State() *OptimizerState {
	s := &OptimizerState{Name: o.Name(), Step: o.step, Slots: map[string][][]float32{}}
	if o.m != nil {
		s.Slots["m"], s.Slots["v"] = o.save(o.m), o.save(o.v)
	}
	return s
}

// SetState implements Optimizer.
func (o *Adam) SetState(s *OptimizerState) error {
	if s.Name != o.Name() {
		return fmt.Errorf("optimizer state is for %q, not %s", s.Name, o.Name())
	}
	m, err := o.load(s.Slots["m"])
	if err != nil {
		return err
	}
	v, err := o.load(s.Slots["v"])
	if err != nil {
		return err
	}
	o.step, o.m, o.v = s.Step, m, v
	return nil
}

// NewOptimizer builds "sgd", "adam" or "adamw".
func NewOptimizer(name string, lr, momentum, weightDecay float64) (Optimizer, error) {
	if !(lr > 0) {
		return nil, fmt.Errorf("learning rate %v must be positive", lr)
	}
	switch name {
	case "sgd":
		return &SGD{LR: lr, Momentum: momentum, WeightDecay: weightDecay}, nil
	case "adam":
		return NewAdam(lr, weightDecay, false), nil
	case "adamw":
		return NewAdam(lr, weightDecay, true), nil
	}
	return nil, fmt.Errorf("unknown optimizer %q (want sgd, adam or adamw)", name)
}

func checkLists(params, grads [][]float32) error {
	if len(params) != len(grads) {
		return fmt.Errorf("optimizer: %d parameter tensors but %d gradients", len(params), len(grads))
	}
	for k := range params {
		if len(params[k]) != len(grads[k]) {
			return fmt.Errorf("optimizer: tensor %d has %d elements but its gradient %d", k, len(params[k]), len(grads[k]))
		}
	}
	return nil
}

// spanGrain is the smallest piece of a parameter list worth a goroutine.
const spanGrain = 1 << 15

// spans calls fn(k, lo, hi) over pieces xs[k][lo:hi] that together cover
// every element of xs once, spread over up to workers goroutines (the
// device's Workers()): the optimizer update is
// a memory-bound pass over every parameter (10⁸ on a VGG), which one core
// cannot saturate. Pieces are independent, so the result does not depend
// on the number of cores.
func spans(workers int, xs [][]float32, fn func(k, lo, hi int)) {
	total := 0
	for _, x := range xs {
		total += len(x)
	}
	workers = min(workers, max(1, total/spanGrain))
	if workers <= 1 {
		for k, x := range xs {
			fn(k, 0, len(x))
		}
		return
	}
	per := (total + workers - 1) / workers
	var wg par.Group
	for w := 0; w < workers; w++ {
		// Worker w covers the flat range [w·per, (w+1)·per).
		start, end := w*per, min((w+1)*per, total)
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := 0
			for k, x := range xs {
				lo, hi := max(start-off, 0), min(end-off, len(x))
				if lo < hi {
					fn(k, lo, hi)
				}
				off += len(x)
				if off >= end {
					return
				}
			}
		}()
	}
	wg.Wait()
}
