package zoo

import (
	"fmt"
	"math"
	"strings"
)

// buildError aborts a build (a panic recovered by Build) with a message
// that names the layer.
type buildError struct{ msg string }

func (b *builder) failf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if where := strings.Join(b.scope, "."); where != "" {
		msg = strings.TrimSuffix(msg, ";") + " (at " + where + ")"
	}
	panic(buildError{strings.TrimSuffix(msg, ";")})
}

// windowOut is PyTorch's output size of a convolution or pooling window
// (dilation 1), or an error when the window does not fit.
func (b *builder) windowOut(what string, in, k, s, p int64, ceil bool) int64 {
	num := in + 2*p - k
	if num < 0 {
		b.failf("%s: %d×%d window (padding %d) does not fit a %d-pixel feature map, the input is too small;", what, k, k, p, in)
	}
	if !ceil {
		return num/s + 1
	}
	out := (num+s-1)/s + 1
	if (out-1)*s >= in+p {
		out--
	}
	return out
}

// convSpec is one nn.Conv2d (square kernel, symmetric padding, dilation 1).
type convSpec struct {
	out, k, stride, pad, groups int64
	bias                        bool
	// weight and biasInit default to PyTorch's nn.Conv2d init.
	weight, biasInit *dist
}

func (c convSpec) withDefaults(cin int64) convSpec {
	if c.stride == 0 {
		c.stride = 1
	}
	if c.groups == 0 {
		c.groups = 1
	}
	fanIn := cin / c.groups * c.k * c.k
	if c.weight == nil {
		d := torchDefault(fanIn)
		c.weight = &d
	}
	if c.biasInit == nil {
		d := torchDefault(fanIn)
		c.biasInit = &d
	}
	return c
}

// conv emits Conv in scope name (weight "name.weight", bias "name.bias").
func (b *builder) conv(x tensor, name string, c convSpec) tensor {
	cin := x.channels()
	c = c.withDefaults(cin)
	var out tensor
	b.in(func() {
		if cin%c.groups != 0 || c.out%c.groups != 0 {
			b.failf("conv: %d input / %d output channels do not split into %d groups", cin, c.out, c.groups)
		}
		w := b.param("weight", []int64{c.out, cin / c.groups, c.k, c.k}, *c.weight, kindParam)
		ins := []string{x.name, w.name}
		if c.bias {
			ins = append(ins, b.param("bias", []int64{c.out}, *c.biasInit, kindParam).name)
		}
		out = b.convNode(x, ins, c)
	}, name)
	return out
}

func (b *builder) convNode(x tensor, ins []string, c convSpec) tensor {
	h, w := x.hw()
	oh := b.windowOut("conv", h, c.k, c.stride, c.pad, false)
	ow := b.windowOut("conv", w, c.k, c.stride, c.pad, false)
	return b.op1("Conv", []int64{-1, c.out, oh, ow}, ins,
		attrInts("dilations", 1, 1), attrInt("group", c.groups), attrInts("kernel_shape", c.k, c.k),
		attrInts("pads", c.pad, c.pad, c.pad, c.pad), attrInts("strides", c.stride, c.stride))
}

// convBN is nn.Conv2d followed by nn.BatchNorm2d (PyTorch's default init
// of the BatchNorm: weight 1, bias 0, running mean 0, running variance 1).
//
// By default the BatchNorm is folded into the convolution, as torch's
// eval-mode export does: the weight is scaled by γ/√(var+ε) = 1/√(1+ε) and
// the convolution gets a bias (β - mean·γ/√(var+ε), i.e. its own bias
// scaled, or zero), named after the convolution. With Options.BatchNorm the
// BatchNormalization node is kept with its parameters named after bnName.
func (b *builder) convBN(x tensor, convName, bnName string, c convSpec) tensor {
	b.sawBN = true
	if b.opts.keepBN() {
		y := b.conv(x, convName, c)
		return b.batchNorm(y, bnName)
	}
	cin := x.channels()
	c = c.withDefaults(cin)
	s := 1 / math.Sqrt(1+bnEps)
	var out tensor
	b.in(func() {
		if cin%c.groups != 0 || c.out%c.groups != 0 {
			b.failf("conv: %d input / %d output channels do not split into %d groups", cin, c.out, c.groups)
		}
		w := b.param("weight", []int64{c.out, cin / c.groups, c.k, c.k}, c.weight.scaled(s), kindParam)
		bd := zeros()
		if c.bias {
			bd = c.biasInit.scaled(s)
		}
		bias := b.param("bias", []int64{c.out}, bd, kindParam)
		out = b.convNode(x, []string{x.name, w.name, bias.name}, c)
	}, convName)
	return out
}

// batchNorm emits a BatchNormalization node with PyTorch's default state:
// in eval form (running statistics, one output) unless
// Options.BatchNormTraining asks for the form torch exports in
// TrainingMode.TRAINING (batch statistics, training_mode=1, three outputs of
// which the running-statistics updates are not graph outputs).
func (b *builder) batchNorm(x tensor, name string) tensor {
	b.sawBN = true
	c := x.channels()
	var out tensor
	b.in(func() {
		w := b.param("weight", []int64{c}, ones(), kindParam)
		bias := b.param("bias", []int64{c}, zeros(), kindParam)
		mean := b.param("running_mean", []int64{c}, zeros(), kindBuffer)
		v := b.param("running_var", []int64{c}, ones(), kindBuffer)
		ins := []string{x.name, w.name, bias.name, mean.name, v.name}
		if b.opts.BatchNormTraining {
			outs := b.node("BatchNormalization", ins, 3,
				attrFloat("epsilon", bnEps), attrFloat("momentum", bnMomentum), attrInt("training_mode", 1))
			out = tensor{outs[0], x.shape}
			return
		}
		out = b.op1("BatchNormalization", x.shape, ins,
			attrFloat("epsilon", bnEps), attrFloat("momentum", bnMomentum), attrInt("training_mode", 0))
	}, name)
	return out
}

func (b *builder) relu(x tensor) tensor { return b.op1("Relu", x.shape, []string{x.name}) }
func (b *builder) tanh(x tensor) tensor { return b.op1("Tanh", x.shape, []string{x.name}) }

// relu6 is nn.ReLU6, exported as Clip with Constant bounds.
func (b *builder) relu6(x tensor) tensor {
	lo, hi := b.scalar(0), b.scalar(6)
	return b.op1("Clip", x.shape, []string{x.name, lo.name, hi.name})
}

func (b *builder) add(x, y tensor) tensor {
	return b.op1("Add", broadcast(x.shape, y.shape), []string{x.name, y.name})
}
func (b *builder) mul(x, y tensor) tensor {
	return b.op1("Mul", broadcast(x.shape, y.shape), []string{x.name, y.name})
}

// broadcast returns the numpy broadcast of two shapes (the batch axis -1
// broadcasts like a size other than 1).
func broadcast(x, y []int64) []int64 {
	if len(y) > len(x) {
		x, y = y, x
	}
	out := append([]int64(nil), x...)
	off := len(x) - len(y)
	for i, d := range y {
		if out[off+i] == 1 {
			out[off+i] = d
		}
	}
	return out
}

// maxPool is nn.MaxPool2d(k, s, p, ceil_mode).
func (b *builder) maxPool(x tensor, k, s, p int64, ceil bool) tensor {
	h, w := x.hw()
	oh := b.windowOut("max pool", h, k, s, p, ceil)
	ow := b.windowOut("max pool", w, k, s, p, ceil)
	cm := int64(0)
	if ceil {
		cm = 1
	}
	return b.op1("MaxPool", []int64{-1, x.channels(), oh, ow}, []string{x.name},
		attrInt("ceil_mode", cm), attrInts("kernel_shape", k, k), attrInts("pads", p, p, p, p), attrInts("strides", s, s))
}

// avgPool is nn.AvgPool2d(k, s) / F.avg_pool2d: torch 1.13 exports it at
// opset ≥ 11 as an explicit Pad (here all zero) and an AveragePool.
func (b *builder) avgPool(x tensor, k, s int64) tensor {
	h, w := x.hw()
	oh := b.windowOut("average pool", h, k, s, 0, false)
	ow := b.windowOut("average pool", w, k, s, 0, false)
	pads := b.constVec(0, 0, 0, 0, 0, 0, 0, 0)
	p := b.op1("Pad", x.shape, []string{x.name, pads.name}, attrString("mode", "constant"))
	return b.op1("AveragePool", []int64{-1, x.channels(), oh, ow}, []string{p.name},
		attrInt("ceil_mode", 0), attrInts("kernel_shape", k, k), attrInts("pads", 0, 0, 0, 0), attrInts("strides", s, s))
}

// adaptiveAvgPool is nn.AdaptiveAvgPool2d((oh, ow)). torch exports output
// 1×1 as GlobalAveragePool and an output that divides the input as
// AveragePool; it cannot export the other cases, which are written here as
// an Expand (a 1×1 input, as VGG's 7×7 pool on CIFAR-size inputs) or as
// MatMuls with constant pooling matrices (the exact adaptive windows
// [⌊i·in/out⌋, ⌈(i+1)·in/out⌉)).
func (b *builder) adaptiveAvgPool(x tensor, oh, ow int64) tensor {
	h, w := x.hw()
	c := x.channels()
	switch {
	case oh == 1 && ow == 1:
		return b.op1("GlobalAveragePool", []int64{-1, c, 1, 1}, []string{x.name})
	case h%oh == 0 && w%ow == 0:
		kh, kw := h/oh, w/ow
		return b.op1("AveragePool", []int64{-1, c, oh, ow}, []string{x.name},
			attrInts("kernel_shape", kh, kw), attrInts("strides", kh, kw))
	case h == 1 && w == 1:
		shape := b.constVec(1, 1, oh, ow)
		return b.op1("Expand", []int64{-1, c, oh, ow}, []string{x.name, shape.name})
	}
	// Rows: P_h (oh, h) @ x; columns: x @ P_wᵀ (w, ow).
	ph := b.constFloats([]int64{oh, h}, adaptiveMatrix(h, oh, false)...)
	y := b.op1("MatMul", []int64{-1, c, oh, w}, []string{ph.name, x.name})
	pw := b.constFloats([]int64{w, ow}, adaptiveMatrix(w, ow, true)...)
	return b.op1("MatMul", []int64{-1, c, oh, ow}, []string{y.name, pw.name})
}

// adaptiveMatrix returns the (out, in) averaging matrix of adaptive
// average pooling along one axis, or its transpose (in, out).
func adaptiveMatrix(in, out int64, transpose bool) []float32 {
	m := make([]float32, in*out)
	for i := int64(0); i < out; i++ {
		start := i * in / out
		end := ((i+1)*in + out - 1) / out
		for j := start; j < end; j++ {
			v := float32(1 / float64(end-start))
			if transpose {
				m[j*out+i] = v
			} else {
				m[i*in+j] = v
			}
		}
	}
	return m
}

// flatten is torch.flatten(x, 1).
func (b *builder) flatten(x tensor) tensor {
	n := int64(1)
	for _, d := range x.shape[1:] {
		n *= d
	}
	return b.op1("Flatten", []int64{-1, n}, []string{x.name}, attrInt("axis", 1))
}

// linearSpec is one nn.Linear; nil inits are PyTorch's defaults.
type linearSpec struct {
	out              int64
	noBias           bool
	weight, biasInit *dist
}

func (l linearSpec) withDefaults(in int64) linearSpec {
	if l.weight == nil {
		d := torchDefault(in)
		l.weight = &d
	}
	if l.biasInit == nil {
		d := torchDefault(in)
		l.biasInit = &d
	}
	return l
}

// gemm is nn.Linear on a 2-D input: Gemm(transB=1) with the (out, in)
// weight.
func (b *builder) gemm(x tensor, name string, l linearSpec) tensor {
	in := x.shape[1]
	l = l.withDefaults(in)
	var out tensor
	b.in(func() {
		w := b.param("weight", []int64{l.out, in}, *l.weight, kindParam)
		ins := []string{x.name, w.name}
		if !l.noBias {
			ins = append(ins, b.param("bias", []int64{l.out}, *l.biasInit, kindParam).name)
		}
		out = b.op1("Gemm", []int64{-1, l.out}, ins, attrFloat("alpha", 1), attrFloat("beta", 1), attrInt("transB", 1))
	}, name)
	return out
}

// linear is nn.Linear on tokens (…, in): torch exports it as MatMul with
// the transposed weight (an initializer of shape (in, out), named
// "<name>.weight.T") and an Add of the bias.
func (b *builder) linear(x tensor, name string, l linearSpec) tensor {
	in := x.shape[len(x.shape)-1]
	l = l.withDefaults(in)
	var out tensor
	b.in(func() {
		w := b.paramT("weight", []int64{in, l.out}, *l.weight, kindParam, true)
		shape := append(append([]int64(nil), x.shape[:len(x.shape)-1]...), l.out)
		out = b.op1("MatMul", shape, []string{x.name, w.name})
		if !l.noBias {
			bias := b.param("bias", []int64{l.out}, *l.biasInit, kindParam)
			out = b.op1("Add", shape, []string{bias.name, out.name})
		}
	}, name)
	return out
}

// layerNorm is nn.LayerNorm over the last axis, decomposed as torch exports
// it at opset 14 (which has no LayerNormalization).
func (b *builder) layerNorm(x tensor, name string, eps float32) tensor {
	d := x.shape[len(x.shape)-1]
	var out tensor
	b.in(func() {
		red := append(append([]int64(nil), x.shape[:len(x.shape)-1]...), 1)
		mean := b.op1("ReduceMean", red, []string{x.name}, attrInts("axes", -1))
		xc := b.op1("Sub", x.shape, []string{x.name, mean.name})
		two := b.scalar(2)
		sq := b.op1("Pow", x.shape, []string{xc.name, two.name})
		v := b.op1("ReduceMean", red, []string{sq.name}, attrInts("axes", -1))
		e := b.scalar(eps)
		ve := b.op1("Add", red, []string{v.name, e.name})
		sd := b.op1("Sqrt", red, []string{ve.name})
		n := b.op1("Div", x.shape, []string{xc.name, sd.name})
		w := b.param("weight", []int64{d}, ones(), kindParam)
		bias := b.param("bias", []int64{d}, zeros(), kindParam)
		m := b.op1("Mul", x.shape, []string{n.name, w.name})
		out = b.op1("Add", x.shape, []string{m.name, bias.name})
	}, name)
	return out
}

// gelu is nn.GELU() (exact), exported as x·(1 + erf(x/√2))·0.5.
func (b *builder) gelu(x tensor) tensor {
	r2 := b.scalar(float32(math.Sqrt2))
	d := b.op1("Div", x.shape, []string{x.name, r2.name})
	e := b.op1("Erf", x.shape, []string{d.name})
	one := b.scalar(1)
	a := b.op1("Add", x.shape, []string{e.name, one.name})
	m := b.op1("Mul", x.shape, []string{x.name, a.name})
	half := b.scalar(0.5)
	return b.op1("Mul", x.shape, []string{m.name, half.name})
}

// reshape emits Reshape to target (0 copies the input dimension, -1 is
// inferred); shape is the resulting static shape.
func (b *builder) reshape(x tensor, shape []int64, target ...int64) tensor {
	t := b.constVec(target...)
	return b.op1("Reshape", shape, []string{x.name, t.name}, attrInt("allowzero", 0))
}

func (b *builder) transpose(x tensor, perm ...int64) tensor {
	shape := make([]int64, len(perm))
	for i, p := range perm {
		shape[i] = x.shape[p]
	}
	return b.op1("Transpose", shape, []string{x.name}, attrInts("perm", perm...))
}

// sliceAxis is x[..., start:end, ...] on one axis.
func (b *builder) sliceAxis(x tensor, axis, start, end int64) tensor {
	shape := append([]int64(nil), x.shape...)
	ax := axis
	if ax < 0 {
		ax += int64(len(shape))
	}
	e := end
	if e > shape[ax] {
		e = shape[ax]
	}
	shape[ax] = e - start
	s, en, a := b.constVec(start), b.constVec(end), b.constVec(axis)
	return b.op1("Slice", shape, []string{x.name, s.name, en.name, a.name})
}

// gatherIndex is x.select(axis, i): Gather with a scalar index.
func (b *builder) gatherIndex(x tensor, axis, i int64) tensor {
	idx := b.constInts(nil, i)
	shape := append(append([]int64(nil), x.shape[:axis]...), x.shape[axis+1:]...)
	return b.op1("Gather", shape, []string{x.name, idx.name}, attrInt("axis", axis))
}

func (b *builder) concat(axis int64, xs ...tensor) tensor {
	shape := append([]int64(nil), xs[0].shape...)
	shape[axis] = 0
	names := make([]string, len(xs))
	for i, x := range xs {
		shape[axis] += x.shape[axis]
		names[i] = x.name
	}
	return b.op1("Concat", shape, names, attrInt("axis", axis))
}

// expandBatch is param.expand(B, -1, …): an Expand of a (1, …) tensor to
// the batch size of like, with the target shape computed from Shape(like)
// so that the graph is valid for any batch.
func (b *builder) expandBatch(p tensor, like tensor) tensor {
	sh := b.op1("Shape", []int64{int64(len(like.shape))}, []string{like.name})
	s, e, a := b.constVec(0), b.constVec(1), b.constVec(0)
	batch := b.op1("Slice", []int64{1}, []string{sh.name, s.name, e.name, a.name})
	rest := make([]int64, len(p.shape)-1)
	for i := range rest {
		rest[i] = 1
	}
	r := b.constVec(rest...)
	target := b.op1("Concat", []int64{int64(len(p.shape))}, []string{batch.name, r.name}, attrInt("axis", 0))
	shape := append([]int64{-1}, p.shape[1:]...)
	return b.op1("Expand", shape, []string{p.name, target.name})
}

func (b *builder) softmax(x tensor) tensor {
	return b.op1("Softmax", x.shape, []string{x.name}, attrInt("axis", -1))
}

func (b *builder) matmul(x, y tensor) tensor {
	shape := append(append([]int64(nil), x.shape[:len(x.shape)-1]...), y.shape[len(y.shape)-1])
	return b.op1("MatMul", shape, []string{x.name, y.name})
}
