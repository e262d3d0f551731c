package rewrite

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
)

// LoRAOptions configures AddLoRA: low-rank adapters (Hu et al. 2022,
// LoRA; privately, Yu et al. 2022) beside a model's linear layers.
type LoRAOptions struct {
	// Rank is the adapters' rank r; 0 adds none.
	Rank int64
	// Alpha scales an adapter's product by Alpha/Rank, as PEFT's
	// lora_alpha does; 0 is Rank (a scale of 1).
	Alpha float64
	// Target, when set, selects the layers to adapt by the name of their
	// weight, its PyTorch name or module, or the reading node's name (as
	// PlanOptions.Train selects); nil adapts every eligible layer but the
	// classifier head.
	Target *regexp.Regexp
	// Seed draws the A factors' initialisation.
	Seed uint64
}

// Scale is the factor an adapter's product is multiplied by, Alpha/Rank.
func (o LoRAOptions) Scale() float64 {
	if o.Alpha == 0 {
		return 1
	}
	return o.Alpha / float64(o.Rank)
}

// Adapter is one low-rank adapter AddLoRA added: the layer reading the
// weight Base computes, beside its own output, Scale·(x·A)·B (for a
// convolution, a convolution by A of the base's kernel and strides into
// Rank channels, then a pointwise one by B), and the two are summed. The
// base weight is frozen; ExportGraph merges Scale·A·B into it.
type Adapter struct {
	Base  string  `json:"base"`
	Node  string  `json:"node"`
	A     string  `json:"a"`
	B     string  `json:"b"`
	Rank  int64   `json:"rank"`
	Scale float64 `json:"scale"`
}

// LoRA suffixes name the factors after the layer's module, as PEFT's
// state dict does ("layer1.0.conv1.lora_A"); ExportGraph finds the
// adapters to merge by them and by their structure.
const (
	loraASuffix = ".lora_A"
	loraBSuffix = ".lora_B"
)

// AddLoRA adds a low-rank adapter beside every linear layer opts selects
// (opts.Target, or all of them): a Gemm (transA = 0) or MatMul reading a
// 2-D weight as its second input, or a Conv of one group, whose weight is
// an initializer no other node reads. A is drawn as PyTorch's
// kaiming_uniform_(a=√5) draws a layer of A's fan-in, U(−1/√fan_in,
// 1/√fan_in); B is zero, so the model computes what it did. The layers
// in skip (the classifier heads, which a LoRA run trains in full) are
// left alone, and so is every layer whose weight is not read directly
// (a weight computed or transposed first), shared, or grouped: each is
// reported. The returned adapters name the factors; the changes say
// what was adapted and what not, and why.
func AddLoRA(g *graph.Graph, opts LoRAOptions, skip map[*graph.Value]bool) ([]Adapter, []Change, error) {
	if opts.Rank <= 0 {
		return nil, nil, fmt.Errorf("rewrite: LoRA rank must be positive, got %d", opts.Rank)
	}
	if opts.Alpha < 0 || math.IsNaN(opts.Alpha) || math.IsInf(opts.Alpha, 0) {
		return nil, nil, fmt.Errorf("rewrite: LoRA alpha must be positive, got %g", opts.Alpha)
	}
	relink(g)
	rng := rand.New(rand.NewPCG(opts.Seed, 0x6c6f_7261)) // "lora"
	nm := newNamer(g)
	batched := g.InputDerived()
	var adapters []Adapter
	var changes []Change
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Domain != "" || (n.OpType != "Gemm" && n.OpType != "MatMul" && n.OpType != "Conv") {
			continue
		}
		w := n.Input(1)
		if w == nil {
			continue
		}
		// A Linear exported without constant folding reads its weight
		// through a Transpose: the adapter is the transposed weight's and
		// merges into the weight transposed.
		transposed := false
		if p := transposedParam(w); p != nil && n.OpType != "Conv" {
			w, transposed = p, true
		}
		// Not a weight: an activation (attention's keys), a constant (a
		// Constant node, an initializer that is no parameter).
		switch {
		case skip[w], batched[w], w.Initializer && !w.IsParam(), w.Producer != nil && w.Producer.OpType == "Constant":
			continue
		}
		label := w.Name
		if m := ModuleName(w); m != "" {
			label = m
		}
		if opts.Target != nil && !selected(opts.Target, w) {
			continue
		}
		if why := loraIneligible(n, w); why != "" {
			changes = append(changes, Change{Pass: "lora", Target: label, Action: "not adapted", Reason: why})
			continue
		}
		ad, err := addAdapter(g, nm, rng, n, w, transposed, label, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("rewrite: LoRA on %s: %w", nodeLabel(n), err)
		}
		adapters = append(adapters, ad)
		a, b := g.Values[ad.A], g.Values[ad.B]
		changes = append(changes, Change{Pass: "lora", Target: label,
			Action: fmt.Sprintf("adapter of rank %d: %s %v and %s %v (%d scalars for the weight's %d), scale %g", ad.Rank, ad.A, a.Const.Shape, ad.B, b.Const.Shape, a.Const.Len()+b.Const.Len(), w.Const.Len(), ad.Scale),
			Reason: "the weight frozen; the adapter's product merged into it at export"})
	}
	relink(g)
	if opts.Target != nil && len(adapters) == 0 {
		return nil, changes, fmt.Errorf("rewrite: --lora-target %s adapts no layer (a Gemm, MatMul or Conv of one group reading its weight directly)", opts.Target)
	}
	return adapters, changes, nil
}

// transposedParam returns the 2-D initializer w transposes, where w is a
// Transpose (its default or explicit perm [1, 0]) of one that nothing
// else reads, and nil otherwise.
func transposedParam(w *graph.Value) *graph.Value {
	t := w.Producer
	if t == nil || t.OpType != "Transpose" || t.Domain != "" || len(w.Consumers) != 1 {
		return nil
	}
	p := t.Input(0)
	if !isInit(p) || len(p.Const.Shape) != 2 || len(p.Consumers) != 1 {
		return nil
	}
	if perm, err := t.Ints("perm", nil); err != nil || perm != nil && (len(perm) != 2 || perm[0] != 1 || perm[1] != 0) {
		return nil
	}
	return p
}

// loraIneligible says why the layer n reading w gets no adapter, "" when
// it can have one.
func loraIneligible(n *graph.Node, w *graph.Value) string {
	switch {
	case w.Producer != nil:
		return fmt.Sprintf("its weight is computed (by %s) before the layer reads it: only an initializer read directly or through a transpose is adapted", w.Producer.OpType)
	case !w.IsParam() || w.Const == nil:
		return "its weight is not a parameter"
	case len(w.Consumers) != 1:
		return fmt.Sprintf("its weight is read by %d nodes", len(w.Consumers))
	case n.Input(0) == nil || n.Input(0).Const != nil || n.Input(0).Initializer:
		return "its data input is a constant"
	}
	switch n.OpType {
	case "Gemm":
		if n.IntOr("transA", 0) != 0 || len(w.Const.Shape) != 2 {
			return "a Gemm with transA or a weight that is not a matrix"
		}
	case "MatMul":
		if len(w.Const.Shape) != 2 {
			return fmt.Sprintf("a MatMul weight of shape %v (a matrix is adapted)", w.Const.Shape)
		}
	case "Conv":
		if n.IntOr("group", 1) != 1 {
			return fmt.Sprintf("a convolution of %d groups", n.IntOr("group", 1))
		}
		if len(w.Const.Shape) < 3 {
			return fmt.Sprintf("a convolution weight of shape %v", w.Const.Shape)
		}
	}
	return ""
}

// addAdapter puts the adapter of the layer n, of weight w, after n: n's
// output becomes a value of its own, and an Add of it and the adapter's
// product takes n's output value (its readers unchanged).
func addAdapter(g *graph.Graph, nm *namer, rng *rand.Rand, n *graph.Node, w *graph.Value, transposed bool, label string, opts LoRAOptions) (Adapter, error) {
	r, ws := opts.Rank, w.Const.Shape
	if transposed {
		ws = []int64{ws[1], ws[0]}
	}
	scale := opts.Scale()
	base := strings.TrimSuffix(label, ".weight")
	x := n.Input(0)
	var aShape, bShape []int64
	var fanIn int64
	branchScale := scale
	switch n.OpType {
	case "Conv":
		// A: Rank filters of the base's kernel; B: a pointwise convolution
		// from them to the base's output channels.
		aShape = append([]int64{r}, ws[1:]...)
		bShape = []int64{ws[0], r}
		for range ws[2:] {
			bShape = append(bShape, 1)
		}
		fanIn = prod(ws[1:])
	default:
		in, out := ws[0], ws[1]
		if n.OpType == "Gemm" && n.IntOr("transB", 0) != 0 {
			in, out = out, in
		}
		aShape, bShape, fanIn = []int64{in, r}, []int64{r, out}, in
		if n.OpType == "Gemm" {
			alpha, err := n.Float("alpha")
			if err != nil {
				return Adapter{}, err
			}
			branchScale *= float64(alpha)
		}
	}
	bound := 1 / math.Sqrt(float64(fanIn))
	av := make([]float64, prod(aShape))
	for i := range av {
		av[i] = (2*rng.Float64() - 1) * bound
	}
	aVal := addInitializer(g, nm.value(base+loraASuffix), floatTensor(w.DType, aShape, av))
	bVal := addInitializer(g, nm.value(base+loraBSuffix), floatTensor(w.DType, bShape, make([]float64, prod(bShape))))

	y := n.Outputs[0]
	y0 := &graph.Value{Name: nm.value(y.Name + "/base"), DType: y.DType}
	if y.Shape != nil {
		y0.Shape = append(graph.Shape{}, y.Shape...)
	}
	g.Values[y0.Name] = y0
	n.Outputs[0], y0.Producer = y0, n

	b := newBuilder(g, nm, nodeLabel(n)+"/lora")
	var u, v *graph.Value
	if n.OpType == "Conv" {
		u = b.op("Conv", n.Attrs, x, aVal)
		v = b.op("Conv", nil, u, bVal)
	} else {
		u = b.op("MatMul", nil, x, aVal)
		v = b.op("MatMul", nil, u, bVal)
	}
	if branchScale != 1 {
		c := b.constant(floatTensor(w.DType, nil, []float64{branchScale}))
		v = b.op("Mul", nil, v, c)
	}
	b.opInto(y, "Add", nil, y0, v)
	g.ReplaceNode(n, append([]*graph.Node{n}, b.nodes...))
	return Adapter{Base: w.Name, Node: nodeLabel(n), A: aVal.Name, B: bVal.Name, Rank: r, Scale: scale}, nil
}

// loraBranch is one adapter as the graph holds it, found from its Add.
type loraBranch struct {
	add, base *graph.Node
	// weight is the adapted initializer: the base's weight, or what the
	// Transpose it reads transposes (transposed).
	weight, a, b *graph.Value
	transposed   bool
	// scale multiplies A·B in the base weight's own terms (a Gemm's alpha
	// divided out).
	scale float64
	nodes []*graph.Node // the adapter's nodes, the Add last
}

// findLoRA returns the adapters of g: Add(base(x, W…), [Mul(] op(op(x,
// A), B) [, c)]) with op the base's (MatMul for a Gemm), A and B
// initializers named as AddLoRA names them.
func findLoRA(g *graph.Graph) ([]loraBranch, error) {
	relink(g) // the consumer counts below are g's as it stands
	var out []loraBranch
	for _, add := range g.Nodes {
		if add.OpType != "Add" || add.Domain != "" || len(add.Inputs) != 2 {
			continue
		}
		for side := 0; side < 2; side++ {
			br, ok, err := loraAt(g, add, side)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, br)
				break
			}
		}
	}
	return out, nil
}

func loraAt(g *graph.Graph, add *graph.Node, side int) (loraBranch, bool, error) {
	br := loraBranch{add: add, scale: 1}
	base, v := add.Inputs[side].Producer, add.Inputs[1-side]
	if base == nil || v == nil || v.Producer == nil || len(v.Consumers) != 1 || len(add.Inputs[side].Consumers) != 1 {
		return br, false, nil
	}
	if m := v.Producer; m.OpType == "Mul" && len(m.Inputs) == 2 && m.Inputs[1] != nil && m.Inputs[1].Producer != nil && m.Inputs[1].Producer.OpType == "Constant" {
		t, err := m.Inputs[1].Producer.TensorAttr(g, "value")
		if err != nil || t.Len() != 1 {
			return br, false, nil
		}
		f, err := floats(t)
		if err != nil {
			return br, false, nil
		}
		br.scale = f[0]
		br.nodes = append(br.nodes, m.Inputs[1].Producer, m)
		v = m.Inputs[0]
		if v == nil || v.Producer == nil || len(v.Consumers) != 1 {
			return br, false, nil
		}
	}
	op := "MatMul"
	if base.OpType == "Conv" {
		op = "Conv"
	}
	pb := v.Producer
	if pb.OpType != op || len(pb.Inputs) < 2 || pb.Inputs[0] == nil || pb.Inputs[0].Producer == nil || len(pb.Inputs[0].Consumers) != 1 {
		return br, false, nil
	}
	pa := pb.Inputs[0].Producer
	a, b := pa.Input(1), pb.Input(1)
	if pa.OpType != op || !isInit(a) || !isInit(b) || !strings.Contains(b.Name, loraBSuffix) || !strings.Contains(a.Name, loraASuffix) || (base.OpType != "Gemm" && base.OpType != "MatMul" && base.OpType != "Conv") {
		return br, false, nil
	}
	w := base.Input(1)
	if p := transposedParam(w); p != nil && base.OpType != "Conv" {
		w, br.transposed = p, true
	}
	if pa.Input(0) != base.Input(0) || !isInit(w) {
		return br, false, nil
	}
	if base.OpType == "Gemm" {
		alpha, err := base.Float("alpha")
		if err != nil {
			return br, false, err
		}
		br.scale /= float64(alpha)
	}
	br.base, br.weight, br.a, br.b = base, w, a, b
	br.nodes = append([]*graph.Node{pa, pb}, append(br.nodes, add)...)
	return br, true, nil
}

// mergeLoRA folds every adapter of g into its base weight, scale·A·B in
// the weight's orientation (for a convolution, B∘A: the pointwise B
// applied to A's filters), gives the base node the Add's output and
// removes the adapter: g computes what it did, as the model it was
// exported as. The base weights get new tensors: a clone's initializers
// are its source's.
func mergeLoRA(g *graph.Graph) error {
	brs, err := findLoRA(g)
	if err != nil || len(brs) == 0 {
		return err
	}
	drop := map[*graph.Node]bool{}
	for _, br := range brs {
		w := br.weight
		merged, err := mergedWeight(br, w.Const)
		if err != nil {
			return fmt.Errorf("merging the LoRA adapter of %s: %w", nodeLabel(br.base), err)
		}
		setInitializer(w, merged)
		y := br.add.Outputs[0]
		br.base.Outputs[0], y.Producer = y, br.base
		for _, n := range br.nodes {
			drop[n] = true
		}
	}
	kept := g.Nodes[:0]
	for _, n := range g.Nodes {
		if !drop[n] {
			kept = append(kept, n)
		}
	}
	g.Nodes = kept
	RemoveDead(g)
	return nil
}

// mergedWeight is w + scale·A·B in w's layout.
func mergedWeight(br loraBranch, w *graph.Tensor) (*graph.Tensor, error) {
	wv, err := floats(w)
	if err != nil {
		return nil, err
	}
	av, err := floats(br.a.Const)
	if err != nil {
		return nil, err
	}
	bv, err := floats(br.b.Const)
	if err != nil {
		return nil, err
	}
	as, bs := br.a.Const.Shape, br.b.Const.Shape
	switch br.base.OpType {
	case "Conv":
		// W[o, k] += s·Σ_j B[o, j]·A[j, k], k over A's filter (in·taps).
		r, out := as[0], w.Shape[0]
		per := int64(len(av)) / r
		if bs[0] != out || bs[1] != r || int64(len(wv)) != out*per {
			return nil, fmt.Errorf("factors %v and %v do not fit the weight %v", as, bs, w.Shape)
		}
		for o := int64(0); o < out; o++ {
			for j := int64(0); j < r; j++ {
				c := br.scale * bv[o*r+j]
				if c == 0 {
					continue
				}
				for k := int64(0); k < per; k++ {
					wv[o*per+k] += c * av[j*per+k]
				}
			}
		}
	default:
		in, r, out := as[0], as[1], bs[1]
		// W is stored as the layer reads it unless a Gemm's transB or
		// a Transpose (not both) turns it.
		trans := (br.base.OpType == "Gemm" && br.base.IntOr("transB", 0) != 0) != br.transposed
		if bs[0] != r || int64(len(wv)) != in*out {
			return nil, fmt.Errorf("factors %v and %v do not fit the weight %v", as, bs, w.Shape)
		}
		for i := int64(0); i < in; i++ {
			for j := int64(0); j < r; j++ {
				c := br.scale * av[i*r+j]
				if c == 0 {
					continue
				}
				for o := int64(0); o < out; o++ {
					if trans {
						wv[o*in+i] += c * bv[j*out+o]
					} else {
						wv[i*out+o] += c * bv[j*out+o]
					}
				}
			}
		}
	}
	return floatTensor(w.DType, w.Shape, wv), nil
}

// loraTraining is what a LoRA run trains: the adapters, the classifier
// heads' parameters and what train selects; every other parameter is
// frozen, the adapted weights with the adapter named.
func loraTraining(g *graph.Graph, adapters []Adapter, heads map[*graph.Value]bool, train *regexp.Regexp) map[string]string {
	frozen := map[string]string{}
	keep := map[string]bool{}
	for _, ad := range adapters {
		keep[ad.A], keep[ad.B] = true, true
		frozen[ad.Base] = fmt.Sprintf("adapted by LoRA (%s, %s of rank %d), which export merges into it", ad.A, ad.B, ad.Rank)
	}
	for v := range heads {
		keep[v.Name] = true
	}
	rest := "--lora: neither an adapter nor the classifier head"
	if train != nil {
		rest += " nor selected by --train " + train.String()
	} else {
		rest += " (--train REGEX trains more in full)"
	}
	for _, v := range g.Initializers {
		if !v.IsParam() || keep[v.Name] || frozen[v.Name] != "" {
			continue
		}
		if train != nil && selected(train, v) {
			continue
		}
		frozen[v.Name] = rest
	}
	return frozen
}

// headParams returns the classifier heads' weights and biases (findHeads),
// nil where the model has none that ReplaceHead would recognise.
func headParams(g *graph.Graph) map[*graph.Value]bool {
	heads, err := findHeads(g)
	if err != nil {
		return nil
	}
	out := map[*graph.Value]bool{}
	for _, h := range heads {
		out[h.weight] = true
		if h.bias != nil {
			out[h.bias] = true
		}
	}
	return out
}
