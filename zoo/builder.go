package zoo

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// The ONNX versions every zoo model is written with: what torch 1.13's
// exporter targets at opset 14, with IR version 8.
const (
	Opset     = 14
	IRVersion = 8
)

// InputName and OutputName name the graph's single input (N, C, H, W) and
// output (N, classes); BatchParam is the symbolic name of their batch axis.
const (
	InputName  = "input"
	OutputName = "logits"
	BatchParam = "batch"
)

// bnEps and bnMomentum are PyTorch's BatchNorm2d defaults; ONNX momentum is
// 1 - PyTorch momentum.
const (
	bnEps      = 1e-5
	bnMomentum = 0.9
)

// tensor is a value of the graph under construction with its static shape;
// the batch axis (dimension 0 of activations) is -1.
type tensor struct {
	name  string
	shape []int64
}

// hw returns H, W of an (N, C, H, W) activation.
func (t tensor) hw() (int64, int64) { return t.shape[2], t.shape[3] }

// channels returns C of an (N, C, ...) activation.
func (t tensor) channels() int64 { return t.shape[1] }

// dist is a parameter's initial distribution; every value is multiplied by
// scale (1 when zero) after it is drawn.
type dist struct {
	kind     distKind
	a, b     float64 // uniform: [a, b); normal: mean a, std b
	lo, hi   float64 // truncation bounds of truncNormal (absolute)
	constant float64
	scale    float64
}

type distKind int

const (
	distConst distKind = iota
	distUniform
	distNormal
	distTruncNormal
)

func constant(v float64) dist        { return dist{kind: distConst, constant: v} }
func uniform(bound float64) dist     { return dist{kind: distUniform, a: -bound, b: bound} }
func normal(std float64) dist        { return dist{kind: distNormal, b: std} }
func zeros() dist                    { return constant(0) }
func ones() dist                     { return constant(1) }
func (d dist) scaled(s float64) dist { d.scale = d.effScale() * s; return d }

// effScale is the factor applied to every drawn value.
func (d dist) effScale() float64 {
	if d.scale == 0 {
		return 1
	}
	return d.scale
}

func truncNormal(std, lo, hi float64) dist {
	return dist{kind: distTruncNormal, b: std, lo: lo, hi: hi}
}

// timmTrunc is timm's trunc_normal_(std): N(0, std²) truncated to the
// absolute interval [-2, 2].
func timmTrunc(std float64) dist { return truncNormal(std, -2, 2) }

// PyTorch's default initialization of nn.Conv2d and nn.Linear weights is
// kaiming_uniform_(a=√5), which is U(-1/√fan_in, 1/√fan_in); their biases
// are U(-1/√fan_in, 1/√fan_in) too.
func torchDefault(fanIn int64) dist { return uniform(1 / math.Sqrt(float64(fanIn))) }

// kaimingNormalFanOut is kaiming_normal_(mode="fan_out", nonlinearity="relu").
func kaimingNormalFanOut(fanOut int64) dist { return normal(math.Sqrt(2 / float64(fanOut))) }

// kaimingNormalFanIn is kaiming_normal_() with its defaults (fan_in, a=0).
func kaimingNormalFanIn(fanIn int64) dist { return normal(math.Sqrt(2 / float64(fanIn))) }

// kaimingUniformReLU is kaiming_uniform_() with its defaults (fan_in, a=0).
func kaimingUniformReLU(fanIn int64) dist { return uniform(math.Sqrt(6 / float64(fanIn))) }

// xavierUniform is xavier_uniform_().
func xavierUniform(fanIn, fanOut int64) dist {
	return uniform(math.Sqrt(6 / float64(fanIn+fanOut)))
}

// paramKind says how PyTorch counts an initializer.
type paramKind int

const (
	kindParam  paramKind = iota // nn.Parameter: trainable
	kindBuffer                  // registered buffer (BatchNorm running statistics)
)

// pendingInit is an initializer whose data is drawn when the model is
// finished.
type pendingInit struct {
	proto *onnxpb.TensorProto
	n     int
	d     dist
	// transpose draws the tensor as (rows, cols) = (dims[1], dims[0]) and
	// stores it transposed: a Linear weight (out, in) kept as MatMul's
	// (in, out) operand, so that the values are those of the PyTorch layout.
	transpose bool
}

// builder assembles an ONNX graph.
type builder struct {
	opts  Options
	model string

	nodes     []*onnxpb.NodeProto
	inits     []*pendingInit
	producers map[string]*onnxpb.NodeProto
	nodeNames map[string]int
	initNames map[string]bool
	scope     []string

	params, buffers int64
	data            dataMode
	// sawBN records that the model has BatchNorm layers (folded or not).
	sawBN bool
}

// dataMode says what the initializers of a build hold.
type dataMode int

const (
	dataRandom dataMode = iota // seeded random initialization
	dataZero                   // zero bytes (tests of the graph structure)
	dataNone                   // no data: only counts are wanted
)

func newBuilder(model string, opts Options, data dataMode) *builder {
	return &builder{
		opts: opts, model: model, data: data,
		producers: map[string]*onnxpb.NodeProto{}, nodeNames: map[string]int{}, initNames: map[string]bool{},
	}
}

// push enters a module scope (e.g. "layer1", "0"); pop leaves it.
func (b *builder) push(parts ...string) { b.scope = append(b.scope, parts...) }
func (b *builder) pop(n int)            { b.scope = b.scope[:len(b.scope)-n] }

// in runs f inside the scope parts.
func (b *builder) in(f func(), parts ...string) {
	b.push(parts...)
	f()
	b.pop(len(parts))
}

// paramName returns the PyTorch state_dict name of local in the current
// scope.
func (b *builder) paramName(local string) string {
	if len(b.scope) == 0 {
		return local
	}
	return strings.Join(b.scope, ".") + "." + local
}

// param adds a float32 initializer with PyTorch's name for the current
// scope, drawn from d.
func (b *builder) param(local string, shape []int64, d dist, kind paramKind) tensor {
	return b.paramT(local, shape, d, kind, false)
}

// paramT is param with an option to store the tensor transposed (see
// pendingInit.transpose); its name then ends in ".T".
func (b *builder) paramT(local string, shape []int64, d dist, kind paramKind, transpose bool) tensor {
	name := b.paramName(local)
	if transpose {
		name += ".T"
	}
	if b.initNames[name] {
		panic(fmt.Sprintf("zoo: initializer %q defined twice", name))
	}
	b.initNames[name] = true
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if kind == kindParam {
		b.params += n
	} else {
		b.buffers += n
	}
	dt := int32(onnxpb.TensorProto_FLOAT)
	nm := name
	p := &onnxpb.TensorProto{Name: &nm, DataType: &dt, Dims: append([]int64(nil), shape...)}
	b.inits = append(b.inits, &pendingInit{proto: p, n: int(n), d: d, transpose: transpose})
	return tensor{name: name, shape: append([]int64(nil), shape...)}
}

// intInit adds an int64 initializer (an index buffer, never a parameter).
func (b *builder) intInit(local string, shape []int64, vals []int64) tensor {
	name := b.paramName(local)
	if b.initNames[name] {
		panic(fmt.Sprintf("zoo: initializer %q defined twice", name))
	}
	b.initNames[name] = true
	dt := int32(onnxpb.TensorProto_INT64)
	nm := name
	p := &onnxpb.TensorProto{Name: &nm, DataType: &dt, Dims: append([]int64(nil), shape...)}
	if b.data != dataNone {
		raw := make([]byte, 8*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
		}
		p.RawData = raw
	}
	b.inits = append(b.inits, &pendingInit{proto: p, n: -1})
	return tensor{name: name, shape: append([]int64(nil), shape...)}
}

// nodeName returns a unique torch-style node name, "/scope/parts/Op".
func (b *builder) nodeName(op string) string {
	base := "/" + strings.Join(append(append([]string(nil), b.scope...), op), "/")
	k := b.nodeNames[base]
	b.nodeNames[base] = k + 1
	if k == 0 {
		return base
	}
	return fmt.Sprintf("%s_%d", base, k)
}

// node appends a node and returns the names of its nOut outputs.
func (b *builder) node(op string, inputs []string, nOut int, attrs ...*onnxpb.AttributeProto) []string {
	name := b.nodeName(op)
	outs := make([]string, nOut)
	for i := range outs {
		outs[i] = fmt.Sprintf("%s_output_%d", name, i)
	}
	opType, nm := op, name
	n := &onnxpb.NodeProto{Name: &nm, OpType: &opType, Input: inputs, Output: outs, Attribute: attrs}
	b.nodes = append(b.nodes, n)
	for _, o := range outs {
		b.producers[o] = n
	}
	return outs
}

// op1 appends a single-output node producing a tensor of the given shape.
func (b *builder) op1(op string, shape []int64, inputs []string, attrs ...*onnxpb.AttributeProto) tensor {
	return tensor{name: b.node(op, inputs, 1, attrs...)[0], shape: shape}
}

func attrInt(name string, v int64) *onnxpb.AttributeProto {
	t := onnxpb.AttributeProto_INT
	return &onnxpb.AttributeProto{Name: &name, Type: &t, I: &v}
}

func attrInts(name string, v ...int64) *onnxpb.AttributeProto {
	t := onnxpb.AttributeProto_INTS
	return &onnxpb.AttributeProto{Name: &name, Type: &t, Ints: append([]int64{}, v...)}
}

func attrFloat(name string, v float32) *onnxpb.AttributeProto {
	t := onnxpb.AttributeProto_FLOAT
	return &onnxpb.AttributeProto{Name: &name, Type: &t, F: &v}
}

func attrString(name, v string) *onnxpb.AttributeProto {
	t := onnxpb.AttributeProto_STRING
	return &onnxpb.AttributeProto{Name: &name, Type: &t, S: []byte(v)}
}

func attrTensor(name string, v *onnxpb.TensorProto) *onnxpb.AttributeProto {
	t := onnxpb.AttributeProto_TENSOR
	return &onnxpb.AttributeProto{Name: &name, Type: &t, T: v}
}

// constInts emits a Constant node holding an int64 tensor (a scalar when
// dims is empty).
func (b *builder) constInts(dims []int64, vals ...int64) tensor {
	dt := int32(onnxpb.TensorProto_INT64)
	raw := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
	}
	t := &onnxpb.TensorProto{DataType: &dt, Dims: append([]int64{}, dims...), RawData: raw}
	return b.op1("Constant", append([]int64{}, dims...), nil, attrTensor("value", t))
}

// constVec emits a Constant 1-D int64 tensor.
func (b *builder) constVec(vals ...int64) tensor {
	return b.constInts([]int64{int64(len(vals))}, vals...)
}

// constFloats emits a Constant float32 tensor (a scalar when dims is empty).
func (b *builder) constFloats(dims []int64, vals ...float32) tensor {
	dt := int32(onnxpb.TensorProto_FLOAT)
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	t := &onnxpb.TensorProto{DataType: &dt, Dims: append([]int64{}, dims...), RawData: raw}
	return b.op1("Constant", append([]int64{}, dims...), nil, attrTensor("value", t))
}

// scalar emits a Constant float32 scalar.
func (b *builder) scalar(v float32) tensor { return b.constFloats(nil, v) }

// finish names the output, draws the initializers and returns the model.
func (b *builder) finish(in, out tensor, doc string) *onnxpb.ModelProto {
	// The last node's output becomes the graph output "logits".
	if p := b.producers[out.name]; p != nil {
		for i, o := range p.Output {
			if o == out.name {
				p.Output[i] = OutputName
			}
		}
		for _, n := range b.nodes {
			for i, x := range n.Input {
				if x == out.name {
					n.Input[i] = OutputName
				}
			}
		}
	}
	switch b.data {
	case dataRandom:
		b.draw()
	case dataZero:
		for _, p := range b.inits {
			if p.n >= 0 {
				p.proto.RawData = make([]byte, 4*p.n)
			}
		}
	}
	inits := make([]*onnxpb.TensorProto, len(b.inits))
	for i, p := range b.inits {
		inits[i] = p.proto
	}
	graphName, prod, prodVer, domain := b.model, "dpfinetune-zoo", "1", ""
	ir := int64(IRVersion)
	opset := int64(Opset)
	g := &onnxpb.GraphProto{
		Name:        &graphName,
		Node:        b.nodes,
		Initializer: inits,
		Input:       []*onnxpb.ValueInfoProto{valueInfo(InputName, in.shape)},
		Output:      []*onnxpb.ValueInfoProto{valueInfo(OutputName, out.shape)},
	}
	if doc != "" {
		g.DocString = &doc
	}
	m := &onnxpb.ModelProto{
		IrVersion:       &ir,
		OpsetImport:     []*onnxpb.OperatorSetIdProto{{Domain: &domain, Version: &opset}},
		ProducerName:    &prod,
		ProducerVersion: &prodVer,
		Graph:           g,
	}
	meta := [][2]string{
		{"zoo.model", b.model},
		{"zoo.seed", fmt.Sprint(b.opts.Seed)},
	}
	if b.sawBN {
		meta = append(meta, [2]string{"zoo.batchnorm", b.opts.bnMode()})
	}
	for _, kv := range meta {
		k, v := kv[0], kv[1]
		m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{Key: &k, Value: &v})
	}
	return m
}

// valueInfo describes a float32 tensor whose dimension 0 (-1) is the
// symbolic batch axis.
func valueInfo(name string, shape []int64) *onnxpb.ValueInfoProto {
	var dims []*onnxpb.TensorShapeProto_Dimension
	for _, d := range shape {
		if d < 0 {
			dims = append(dims, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: BatchParam}})
		} else {
			dims = append(dims, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
		}
	}
	et := int32(onnxpb.TensorProto_FLOAT)
	nm := name
	return &onnxpb.ValueInfoProto{Name: &nm, Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: &et, Shape: &onnxpb.TensorShapeProto{Dim: dims}},
	}}}
}

// chunkSize is the number of elements drawn from one random stream: large
// tensors are drawn in parallel, chunk by chunk, and the result does not
// depend on the number of threads.
const chunkSize = 1 << 20

// draw fills every float initializer from its distribution, in parallel.
// Each chunk of each tensor has its own random stream, derived from the
// seed, the initializer's name and the chunk index, so the values do not
// depend on the order in which the model is built, on GOMAXPROCS, or on
// the other parameters: the BatchNorm-folded and the BatchNorm variants of
// a model share their convolution weights up to the folding scale.
func (b *builder) draw() {
	type job struct {
		p          *pendingInit
		start, end int
	}
	var jobs []job
	for _, p := range b.inits {
		if p.n < 0 {
			continue
		}
		p.proto.RawData = make([]byte, 4*p.n)
		for s := 0; s < p.n; s += chunkSize {
			jobs = append(jobs, job{p, s, min(p.n, s+chunkSize)})
		}
	}
	workers := runtime.GOMAXPROCS(0)
	ch := make(chan job)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				fillChunk(b.opts.Seed, j.p, j.start, j.end)
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
}

// fillChunk draws elements [start, end) of p (in PyTorch's layout) and
// stores them.
func fillChunk(seed int64, p *pendingInit, start, end int) {
	h := fnv.New64a()
	h.Write([]byte(p.proto.GetName()))
	r := rand.New(rand.NewPCG(splitmix(uint64(seed)), splitmix(h.Sum64()^uint64(start/chunkSize)*0x9e3779b97f4a7c15)))
	d := p.d
	scale := d.effScale()
	raw := p.proto.RawData
	var rows, cols int
	if p.transpose {
		// PyTorch layout (out, in) = (dims[1], dims[0]); element k of it
		// goes to (k%in, k/in) of the stored (in, out) tensor.
		rows, cols = int(p.proto.Dims[1]), int(p.proto.Dims[0])
	}
	for k := start; k < end; k++ {
		var v float64
		switch d.kind {
		case distConst:
			v = d.constant
		case distUniform:
			v = d.a + (d.b-d.a)*r.Float64()
		case distNormal:
			v = d.a + d.b*r.NormFloat64()
		case distTruncNormal:
			for {
				v = d.a + d.b*r.NormFloat64()
				if v >= d.lo && v <= d.hi {
					break
				}
			}
		}
		v *= scale
		idx := k
		if p.transpose {
			i, j := k/cols, k%cols
			idx = j*rows + i
		}
		binary.LittleEndian.PutUint32(raw[4*idx:], math.Float32bits(float32(v)))
	}
}

// splitmix is the SplitMix64 finalizer: it spreads a seed over 64 bits.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
