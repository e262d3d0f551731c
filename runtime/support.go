package runtime

import (
	"fmt"
	"sort"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
)

// OpsetRange is the span of opset versions of the default ONNX domain whose
// semantics an operator's kernel implements: attributes and inputs that move
// between versions (Clip's min and max, Slice's starts, the reductions' axes)
// are read as each version writes them. Versions outside the range are
// refused by CheckOps rather than run with another version's meaning.
type OpsetRange struct{ Since, Until int64 }

// opsets gives the OpsetRange of every operator in opTable (a test checks
// that the two tables have the same keys). Since is the first version whose
// semantics the builder follows (legacy broadcasting and is_test/consumed_
// inputs attributes before 6–7 are not), Until the newest version checked:
// 18, the newest opset exporters write that this project reads.
var opsets = map[string]OpsetRange{
	// Binary arithmetic and Gemm before 7 carry a broadcast attribute:
	// numpy's rule when B lines up with A's last axes, which the IR checks
	// (graph's legacyBroadcast refuses any other axis, naming the node).
	"Add": {6, 18}, "Sub": {6, 18}, "Mul": {6, 18}, "Div": {6, 18}, "Pow": {6, 18},
	"Relu": {6, 18}, "Sigmoid": {6, 18}, "Tanh": {6, 18}, "Exp": {6, 18}, "Log": {6, 18},
	"Sqrt": {6, 18}, "Neg": {6, 18}, "Abs": {6, 18}, "Reciprocal": {6, 18}, "Erf": {9, 18},
	"Clip":     {6, 18},
	"Identity": {1, 18}, "Reshape": {5, 18}, "Flatten": {1, 18}, "Squeeze": {1, 18}, "Unsqueeze": {1, 18},
	"Dropout": {1, 18}, "Cast": {6, 18},
	"Transpose": {1, 18}, "Concat": {4, 18}, "Slice": {1, 18}, "Gather": {1, 18},
	"Pad": {2, 18}, "Expand": {8, 18}, "Where": {9, 18},
	// ScatterND: reduction attribute add/mul (16), max/min (18). Einsum: 12 on.
	"ScatterND": {11, 18}, "Einsum": {12, 18},
	"ReduceMean": {1, 18}, "ReduceSum": {1, 18},
	"Softmax": {1, 18}, "LogSoftmax": {1, 18},
	"Conv": {1, 18}, "Gemm": {6, 18}, "MatMul": {1, 18},
	"MaxPool": {1, 18}, "AveragePool": {1, 18}, "GlobalAveragePool": {1, 18},
	"BatchNormalization": {6, 18}, "LayerNormalization": {17, 18},
	"InstanceNormalization": {6, 18}, "GroupNormalization": {18, 18},
	"LeakyRelu": {6, 18}, "Elu": {6, 18}, "HardSigmoid": {6, 18}, "HardSwish": {14, 18}, "Softplus": {1, 18},
	// Gelu entered the standard at opset 20, past the newest opset checked:
	// models carry it only when written by hand; exported GELUs are the Erf
	// or Tanh chains, which run fused.
	"Gelu":  {20, 20},
	"Split": {1, 18}, "Tile": {6, 18}, "GlobalMaxPool": {1, 18},
	// PRelu: opset 6 and earlier also take a per-channel slope (C) against
	// (N, C, …); 7 on, one-way numpy broadcasting. Sum/Mean/Max/Min: equal
	// shapes before 8, numpy broadcasting from 8 (a superset).
	"PRelu": {6, 18}, "Selu": {6, 18}, "Celu": {12, 18}, "Sign": {9, 18}, "Shrink": {9, 18},
	"Softsign": {1, 18}, "ThresholdedRelu": {10, 18}, "Mish": {18, 18},
	"Sum": {6, 18}, "Mean": {6, 18}, "Max": {6, 18}, "Min": {6, 18},
	"ConvTranspose": {1, 18}, "LRN": {1, 18},
	"Floor": {6, 18}, "Ceil": {6, 18}, "Round": {11, 18}, "Sin": {7, 18}, "Cos": {7, 18},
	// The other reductions: axes an attribute until 17, an input at 18
	// (graph.Node.ReduceAxes reads both).
	"ReduceMax": {1, 18}, "ReduceMin": {1, 18}, "ReduceProd": {1, 18}, "ReduceL1": {1, 18}, "ReduceL2": {1, 18},
	"ReduceSumSquare": {1, 18}, "ReduceLogSum": {1, 18}, "ReduceLogSumExp": {1, 18},
	// Resize: roi, scales and sizes inputs from 11; axes, antialias and
	// keep_aspect_ratio_policy at 18; half_pixel_symmetric at 19, whose
	// Resize is the same operator otherwise (graph.ResizeSpec reads each
	// version). Upsample was deprecated at 10 in favour of Resize.
	"Resize": {10, 19}, "Upsample": {7, 9},
}

// Opsets returns the OpsetRange of an operator the runtime has a kernel
// for; ok is false for any other.
func Opsets(op string) (r OpsetRange, ok bool) {
	r, ok = opsets[op]
	return r, ok
}

// UnsupportedNode is one node CheckOps refuses.
type UnsupportedNode struct {
	Node   string `json:"node"` // the node's name, or its first output's when unnamed
	Op     string `json:"op"`   // operator type, with its domain when not ai.onnx
	Opset  int64  `json:"opset"`
	Reason string `json:"reason"`
}

// UnsupportedError lists every node of a graph the runtime cannot run.
type UnsupportedError struct {
	Nodes []UnsupportedNode
}

func (e *UnsupportedError) Error() string {
	var b strings.Builder
	ops := map[string]bool{}
	for _, n := range e.Nodes {
		ops[n.Op] = true
	}
	names := make([]string, 0, len(ops))
	for op := range ops {
		names = append(names, op)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "%d node(s) use operators the runtime does not support (%s):", len(e.Nodes), strings.Join(names, ", "))
	for _, n := range e.Nodes {
		fmt.Fprintf(&b, "\n  %s %q (opset %d): %s", n.Op, n.Node, n.Opset, n.Reason)
	}
	return b.String()
}

// CheckOps returns an *UnsupportedError listing every node of g that no
// plan can run, or nil. It looks only at operator types, domains and
// opsets, so it runs on a freshly loaded graph before shape inference or
// any other work: a node of another domain, an operator neither the
// runtime nor the IR's constant folding knows, or an opset outside the
// kernel's OpsetRange. Operators the IR only folds (Shape, Equal, ...)
// pass: they are shape arithmetic on constants, and Compile names any
// that survive folding. Attribute values and dtypes a kernel refuses are
// found by Compile, which names the node.
func CheckOps(g *graph.Graph) error {
	var bad []UnsupportedNode
	for _, n := range g.Nodes {
		u := UnsupportedNode{Node: nodeName(n), Op: n.OpType, Opset: n.Opset}
		switch r, ok := opsets[n.OpType]; {
		case n.Domain != "":
			u.Op = n.Domain + "." + n.OpType
			u.Reason = fmt.Sprintf("operator domain %q is not supported (only ai.onnx)", n.Domain)
		case ok && n.Opset < r.Since:
			u.Reason = fmt.Sprintf("opset %d is older than the kernel's range %d–%d", n.Opset, r.Since, r.Until)
		case ok && n.Opset > r.Until:
			u.Reason = fmt.Sprintf("opset %d is newer than the kernel's range %d–%d", n.Opset, r.Since, r.Until)
		case ok:
			continue
		case graph.Folds(n.OpType):
			continue
		case graph.SupportedOps(n.OpType):
			u.Reason = "no kernel (shapes are inferred, but nothing runs it)"
		default:
			u.Reason = "not supported"
		}
		bad = append(bad, u)
	}
	if bad == nil {
		return nil
	}
	return &UnsupportedError{Nodes: bad}
}

func nodeName(n *graph.Node) string {
	if n.Name != "" {
		return n.Name
	}
	if len(n.Outputs) > 0 && n.Outputs[0] != nil {
		return n.Outputs[0].Name
	}
	return ""
}
