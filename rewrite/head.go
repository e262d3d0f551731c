package rewrite

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/dpfinetune/dpfinetune/graph"
)

// head is one classifier layer feeding the graph output.
type head struct {
	node   *graph.Node  // Gemm, MatMul or a pointwise Conv
	weight *graph.Value // initializer
	bias   *graph.Value // initializer or nil
	add    *graph.Node  // the Add reading a MatMul head's output and its bias
	in     int64        // fan-in
	out    int64        // classes
	wAxis  int          // axis of the weight holding the classes
}

// headTransparent lists operators that may sit between the classifier
// layer(s) and the graph output: they combine or normalize logits without
// parameters of their own (CrossViT averages two heads with
// Unsqueeze, Concat and ReduceMean; a softmax may end the graph). For each,
// the inputs that carry logits.
var headTransparent = map[string]func(n *graph.Node) []*graph.Value{
	"Identity": first, "Dropout": first, "Flatten": first, "Softmax": first, "LogSoftmax": first,
	"Sigmoid": first, "Cast": first, "Squeeze": first, "Unsqueeze": first,
	"ReduceMean": first, "ReduceSum": first, "ReduceMax": first,
	"Add": all, "Sub": all, "Mul": all, "Div": all, "Sum": all, "Mean": all, "Max": all, "Concat": all,
	// What follows a convolutional head, channel by channel: SqueezeNet's
	// Relu and average pool, S3D's pool over time and space.
	"Relu": first, "GlobalAveragePool": first, "AveragePool": first, "GlobalMaxPool": first, "MaxPool": first,
}

func first(n *graph.Node) []*graph.Value { return n.Inputs[:1] }
func all(n *graph.Node) []*graph.Value   { return n.Inputs }

// findHeads walks back from the graph's only output to the Gemm or
// MatMul(+Add) layers that produce the logits.
func findHeads(g *graph.Graph) ([]*head, error) {
	if len(g.Outputs) != 1 {
		return nil, fmt.Errorf("the model has %d outputs; head replacement needs exactly one", len(g.Outputs))
	}
	var heads []*head
	seen := map[*graph.Value]bool{}
	var visit func(v *graph.Value) error
	visit = func(v *graph.Value) error {
		if v == nil || seen[v] {
			return nil
		}
		seen[v] = true
		p := v.Producer
		if p == nil {
			if v.Const != nil {
				return nil
			}
			return fmt.Errorf("the output depends on input %q through no Gemm/MatMul layer", v.Name)
		}
		if h := asHead(p); h != nil {
			// A convolution whose positions reach the output (a map of
			// logits per pixel) is no classifier head.
			if h.node.OpType == "Conv" && len(g.Outputs[0].Shape) != 2 {
				return fmt.Errorf("the output %v is computed by %s position by position; no classifier head found", g.Outputs[0].Shape, p)
			}
			heads = append(heads, h)
			return nil
		}
		if p.OpType == "Constant" {
			return nil
		}
		ins, ok := headTransparent[p.OpType]
		if !ok || p.Domain != "" {
			return fmt.Errorf("the output is computed by %s after the last Gemm/MatMul layer; no classifier head found", p)
		}
		for _, in := range ins(p) {
			if err := visit(in); err != nil {
				return err
			}
		}
		return nil
	}
	if err := visit(g.Outputs[0]); err != nil {
		return nil, err
	}
	if len(heads) == 0 {
		return nil, fmt.Errorf("no Gemm or MatMul layer feeds the output %q", g.Outputs[0].Name)
	}
	for _, h := range heads[1:] {
		if h.out != heads[0].out {
			return nil, fmt.Errorf("heads %s and %s have %d and %d outputs", nodeLabel(heads[0].node), nodeLabel(h.node), heads[0].out, h.out)
		}
	}
	return heads, nil
}

func isInit(v *graph.Value) bool { return v != nil && v.Initializer && v.Const != nil && v.IsParam() }

// asHead recognizes Gemm(x, W[, b]), MatMul(x, W), Add(MatMul(x, W), b)
// and a pointwise Conv(x, W[, b]) (a kernel of ones, one group: a linear
// layer applied at every position, SqueezeNet's and S3D's classifiers)
// with initializer W and b.
func asHead(n *graph.Node) *head {
	switch n.OpType {
	case "Conv":
		w := n.Input(1)
		if !isInit(w) || len(w.Shape) < 3 || n.IntOr("group", 1) != 1 {
			return nil
		}
		for _, d := range w.Shape[2:] {
			if d.Size != 1 {
				return nil
			}
		}
		h := &head{node: n, weight: w, wAxis: 0, in: w.Shape[1].Size, out: w.Shape[0].Size}
		if b := n.Input(2); isInit(b) {
			h.bias = b
		}
		return h
	case "Gemm":
		w := n.Input(1)
		if !isInit(w) || len(w.Shape) != 2 || n.IntOr("transA", 0) != 0 {
			return nil
		}
		h := &head{node: n, weight: w, wAxis: 1, in: w.Shape[0].Size, out: w.Shape[1].Size}
		if n.IntOr("transB", 0) != 0 {
			h.wAxis, h.in, h.out = 0, w.Shape[1].Size, w.Shape[0].Size
		}
		if b := n.Input(2); isInit(b) {
			h.bias = b
		}
		return h
	case "MatMul":
		w := n.Input(1)
		if !isInit(w) || len(w.Shape) != 2 {
			return nil
		}
		return &head{node: n, weight: w, wAxis: 1, in: w.Shape[0].Size, out: w.Shape[1].Size}
	case "Add":
		for i := 0; i < 2; i++ {
			mm, b := n.Inputs[i], n.Inputs[1-i]
			if mm == nil || mm.Producer == nil || mm.Producer.OpType != "MatMul" || !isInit(b) || len(mm.Consumers) != 1 {
				continue
			}
			if h := asHead(mm.Producer); h != nil && b.Const.Len() == int(h.out) {
				h.bias, h.add = b, n
				return h
			}
		}
	}
	return nil
}

// ReplaceHead gives the classifier a new number of classes: every Gemm,
// MatMul(+Add) or pointwise Conv layer that produces the logits (several when heads are
// averaged, as in CrossViT) gets a fresh weight and bias with k outputs,
// drawn like PyTorch's nn.Linear and nn.Conv defaults, U(-1/√fan_in,
// 1/√fan_in), from a generator seeded with seed. The tensors keep their
// names. The graph output's declared class dimension becomes k.
func ReplaceHead(g *graph.Graph, k int64, seed uint64) ([]Change, error) {
	if k <= 0 {
		return nil, fmt.Errorf("rewrite: number of classes must be positive, got %d", k)
	}
	relink(g)
	heads, err := findHeads(g)
	if err != nil {
		// A head that cannot be replaced (a convolutional head, a Linear
		// exported as MatMul and Add) is fine when it already has the
		// classes asked for: the user named the model's own count.
		if outputsHaveClasses(g, k) {
			return []Change{{Pass: "head", Target: g.Outputs[0].Name,
				Action: fmt.Sprintf("kept: the model already has %d classes", k),
				Reason: fmt.Sprintf("--num-classes %d; its head cannot be replaced by a fresh one (%v)", k, err)}}, nil
		}
		return nil, fmt.Errorf("rewrite: head replacement: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6470_6669_6e65)) // "dpfine"
	var changes []Change
	for _, h := range heads {
		if len(h.weight.Consumers) != 1 || (h.bias != nil && len(h.bias.Consumers) != 1) {
			return nil, fmt.Errorf("rewrite: head %s: its weight or bias is shared with other nodes", nodeLabel(h.node))
		}
		bound := 1 / math.Sqrt(float64(h.in))
		draw := func(n int) []float64 {
			out := make([]float64, n)
			for i := range out {
				out[i] = (2*rng.Float64() - 1) * bound
			}
			return out
		}
		ws := append([]int64{}, h.weight.Const.Shape...)
		old := fmt.Sprint(ws)
		ws[h.wAxis] = k
		setInitializer(h.weight, floatTensor(h.weight.DType, ws, draw(int(h.in*k))))
		action := fmt.Sprintf("weight %s %s → %v", h.weight.Name, old, ws)
		if h.bias != nil {
			bs := append([]int64{}, h.bias.Const.Shape...)
			oldB := fmt.Sprint(bs)
			if len(bs) == 0 {
				bs = []int64{k}
			} else {
				bs[len(bs)-1] = k
			}
			setInitializer(h.bias, floatTensor(h.bias.DType, bs, draw(int(k))))
			action += fmt.Sprintf(", bias %s %s → %v", h.bias.Name, oldB, bs)
		}
		changes = append(changes, Change{Pass: "head", Target: nodeLabel(h.node),
			Action: fmt.Sprintf("replaced the %d-class head by a fresh %d-class one: %s", h.out, k, action),
			Reason: fmt.Sprintf("--num-classes %d; initialised U(±1/√%d) (nn.Linear default), seed %d", k, h.in, seed)})
	}
	out := g.Outputs[0]
	if len(out.Shape) > 0 {
		out.Shape = append(graph.Shape{}, out.Shape...)
		out.Shape[len(out.Shape)-1] = graph.Dim{Size: k}
	}
	return changes, g.Validate()
}

// outputsHaveClasses reports whether every graph output is (batch, k)
// logits with k known.
func outputsHaveClasses(g *graph.Graph, k int64) bool {
	if len(g.Outputs) == 0 {
		return false
	}
	for _, o := range g.Outputs {
		if o == nil || len(o.Shape) != 2 || o.Shape[1].Size != k {
			return false
		}
	}
	return true
}
