package dpengine

import (
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

// An optimizer state slot (a momentum, Adam's m or v) is one device
// buffer per parameter tensor, and their views, which the update
// operations take.

// zeros allocates a slot of the shapes of xs on the device, zeroed.
func (d *onDevice) zeros(xs [][]float32) ([][]float32, []runtime.Buffer, error) {
	views, bufs := make([][]float32, len(xs)), make([]runtime.Buffer, len(xs))
	for i, x := range xs {
		b, err := d.memory().Alloc(len(x))
		if err != nil {
			return nil, nil, fmt.Errorf("optimizer: allocating state of %d elements on %s: %w", len(x), d.memory().Name(), err)
		}
		views[i], bufs[i] = b.Floats(), b
	}
	return views, bufs, nil
}

// load returns a slot on the device holding a copy of xs (nil for nil).
func (d *onDevice) load(xs [][]float32) ([][]float32, []runtime.Buffer, error) {
	if xs == nil {
		return nil, nil, nil
	}
	views, bufs, err := d.zeros(xs)
	if err != nil {
		return nil, nil, err
	}
	for i, x := range xs {
		if err := d.memory().CopyIn(bufs[i], 0, x); err != nil {
			return nil, nil, fmt.Errorf("optimizer: loading state: %w", err)
		}
	}
	return views, bufs, nil
}

// save returns a host copy of a slot (host read: a CopyOut of every
// buffer). A CopyOut of the optimizer's own buffers fails only on a
// broken device, which State, having no error to return, reports by
// panicking.
func (d *onDevice) save(bufs []runtime.Buffer) [][]float32 {
	if bufs == nil {
		return nil
	}
	out := make([][]float32, len(bufs))
	for i, b := range bufs {
		out[i] = make([]float32, b.Len())
		if err := d.memory().CopyOut(out[i], b, 0); err != nil {
			panic(fmt.Sprintf("optimizer: saving state from %s: %v", d.memory().Name(), err))
		}
	}
	return out
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
	vel                       [][]float32 // device views of velBuf
	velBuf                    []runtime.Buffer
	onDevice
}

// Name implements Optimizer.
func (o *SGD) Name() string { return "sgd" }

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
	if err := checkLists(params, grads); err != nil {
		return nil, err
	}
	if o.Momentum != 0 && o.vel == nil {
		vel, bufs, err := o.zeros(params)
		if err != nil {
			return nil, err
		}
		o.vel, o.velBuf = vel, bufs
	}
	c := runtime.SGDCoeffs{LR: float32(o.LR), Momentum: float32(o.Momentum), WeightDecay: float32(o.WeightDecay),
		GradScale: gradScale, First: o.step == 0}
	o.step++
	ops := o.device()
	return func(k, lo, hi int) {
		var vel []float32
		if o.vel != nil {
			vel = o.vel[k][lo:hi]
		}
		ops.SGDUpdate(params[k][lo:hi], grads[k][lo:hi], vel, c)
	}, nil
}

// State implements Optimizer.
func (o *SGD) State() *OptimizerState {
	s := &OptimizerState{Name: o.Name(), Step: o.step, Slots: map[string][][]float32{}}
	if o.vel != nil {
		s.Slots["momentum"] = o.save(o.velBuf)
	}
	return s
}

// SetState implements Optimizer.
func (o *SGD) SetState(s *OptimizerState) error {
	if s.Name != o.Name() {
		return fmt.Errorf("optimizer state is for %q, not sgd", s.Name)
	}
	vel, bufs, err := o.load(s.Slots["momentum"])
	if err != nil {
		return err
	}
	o.step, o.vel, o.velBuf = s.Step, vel, bufs
	return nil
}

// Adam is DP-Adam (Kingma & Ba) on the private gradient; with Decoupled it
// is AdamW (Loshchilov & Hutter), whose weight decay shrinks θ directly
// instead of entering the gradient.
type Adam struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Decoupled                          bool
	step                               int64
	m, v                               [][]float32 // device views of mBuf, vBuf
	mBuf, vBuf                         []runtime.Buffer
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
	if err := checkLists(params, grads); err != nil {
		return nil, err
	}
	if o.m == nil {
		m, mBuf, err := o.zeros(params)
		if err != nil {
			return nil, err
		}
		v, vBuf, err := o.zeros(params)
		if err != nil {
			return nil, err
		}
		o.m, o.v, o.mBuf, o.vBuf = m, v, mBuf, vBuf
	}
	o.step++
	b1, b2 := o.Beta1, o.Beta2
	bc1 := 1 - math.Pow(b1, float64(o.step))
	bc2 := 1 - math.Pow(b2, float64(o.step))
	lr, wd := float32(o.LR), float32(o.WeightDecay)
	fb1, fb2 := float32(b1), float32(b2)
	ops := o.device()
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
	return func(k, lo, hi int) {
		ops.AdamUpdate(params[k][lo:hi], grads[k][lo:hi], o.m[k][lo:hi], o.v[k][lo:hi], c)
	}, nil
}

// State implements Optimizer.
func (o *Adam) State() *OptimizerState {
	s := &OptimizerState{Name: o.Name(), Step: o.step, Slots: map[string][][]float32{}}
	if o.m != nil {
		s.Slots["m"], s.Slots["v"] = o.save(o.mBuf), o.save(o.vBuf)
	}
	return s
}

// SetState implements Optimizer.
func (o *Adam) SetState(s *OptimizerState) error {
	if s.Name != o.Name() {
		return fmt.Errorf("optimizer state is for %q, not %s", s.Name, o.Name())
	}
	m, mBuf, err := o.load(s.Slots["m"])
	if err != nil {
		return err
	}
	v, vBuf, err := o.load(s.Slots["v"])
	if err != nil {
		return err
	}
	o.step, o.m, o.v, o.mBuf, o.vBuf = s.Step, m, v, mBuf, vBuf
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
