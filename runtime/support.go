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
// 27, the newest opset ONNX has released (1.22). PyTorch's exporters write
// 7–20 (TorchScript) and 18–23 (dynamo, the default from PyTorch 2.9: 18
// unless asked). Of these operators, versions 19–27 change only their
// types (bfloat16, float8, int4, float4) but for five: AveragePool-19 adds
// dilations (the kernels take them at every version), Pad-19 the wrap mode,
// Resize-19 half_pixel_symmetric (graph.ResizeSpec), Cast-19/24 saturate
// and round_mode (which apply to float8 targets only, refused as a dtype)
// and GroupNormalization-21 a per-channel scale and bias where 18 took one
// per group (buildGroupNorm reads each version's).
var opsets = map[string]OpsetRange{
	// Binary arithmetic and Gemm before 7 carry a broadcast attribute:
	// numpy's rule when B lines up with A's last axes, which the IR checks
	// (graph's legacyBroadcast refuses any other axis, naming the node).
	"Add": {6, 27}, "Sub": {6, 27}, "Mul": {6, 27}, "Div": {6, 27}, "Pow": {6, 27},
	"Relu": {6, 27}, "Sigmoid": {6, 27}, "Tanh": {6, 27}, "Exp": {6, 27}, "Log": {6, 27},
	"Sqrt": {6, 27}, "Neg": {6, 27}, "Abs": {6, 27}, "Reciprocal": {6, 27}, "Erf": {9, 27},
	"Clip":     {6, 27},
	"Identity": {1, 27}, "Reshape": {5, 27}, "Flatten": {1, 27}, "Squeeze": {1, 27}, "Unsqueeze": {1, 27},
	"Dropout": {1, 27}, "Cast": {6, 27},
	"Transpose": {1, 27}, "Concat": {4, 27}, "Slice": {1, 27}, "Gather": {1, 27},
	"Pad": {2, 27}, "Expand": {8, 27}, "Where": {9, 27},
	// ScatterND: reduction attribute add/mul (16), max/min (18). Einsum: 12 on.
	"ScatterND": {11, 27}, "Einsum": {12, 27},
	"ReduceMean": {1, 27}, "ReduceSum": {1, 27},
	"Softmax": {1, 27}, "LogSoftmax": {1, 27},
	"Conv": {1, 27}, "Gemm": {6, 27}, "MatMul": {1, 27},
	"MaxPool": {1, 27}, "AveragePool": {1, 27}, "GlobalAveragePool": {1, 27},
	"BatchNormalization": {6, 27}, "LayerNormalization": {17, 27},
	"InstanceNormalization": {6, 27}, "GroupNormalization": {18, 27},
	"LeakyRelu": {6, 27}, "Elu": {6, 27}, "HardSigmoid": {6, 27}, "HardSwish": {14, 27}, "Softplus": {1, 27},
	// Gelu entered the standard at opset 20: PyTorch's exporters write the
	// Erf or Tanh chain below it (run fused) and Gelu itself from 20.
	"Gelu":  {20, 27},
	"Split": {1, 27}, "Tile": {6, 27}, "GlobalMaxPool": {1, 27},
	// PRelu: opset 6 and earlier also take a per-channel slope (C) against
	// (N, C, …); 7 on, one-way numpy broadcasting. Sum/Mean/Max/Min: equal
	// shapes before 8, numpy broadcasting from 8 (a superset).
	"PRelu": {6, 27}, "Selu": {6, 27}, "Celu": {12, 27}, "Sign": {9, 27}, "Shrink": {9, 27},
	"Softsign": {1, 27}, "ThresholdedRelu": {10, 27}, "Mish": {18, 27},
	"Sum": {6, 27}, "Mean": {6, 27}, "Max": {6, 27}, "Min": {6, 27},
	"ConvTranspose": {1, 27}, "LRN": {1, 27},
	"Floor": {6, 27}, "Ceil": {6, 27}, "Round": {11, 27}, "Sin": {7, 27}, "Cos": {7, 27},
	// The other reductions: axes an attribute until 17, an input at 18
	// (graph.Node.ReduceAxes reads both).
	"ReduceMax": {1, 27}, "ReduceMin": {1, 27}, "ReduceProd": {1, 27}, "ReduceL1": {1, 27}, "ReduceL2": {1, 27},
	"ReduceSumSquare": {1, 27}, "ReduceLogSum": {1, 27}, "ReduceLogSumExp": {1, 27},
	// Resize: roi, scales and sizes inputs from 11; axes, antialias and
	// keep_aspect_ratio_policy at 18; half_pixel_symmetric at 19, whose
	// Resize is the same operator otherwise (graph.ResizeSpec reads each
	// version). Upsample was deprecated at 10 in favour of Resize.
	"Resize": {10, 27}, "Upsample": {7, 9},
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
