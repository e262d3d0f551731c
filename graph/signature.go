package graph

import (
	"strings"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TorchInputKind is the metadata key with which PyTorch's dynamo exporter
// (torch.export's, the default of torch.onnx.export from PyTorch 2.9) marks
// each value of the exported program's signature, on the value's
// value_info or graph input: USER_INPUT, PARAMETER, BUFFER (BatchNorm's
// running statistics), CONSTANT_TENSOR, ...
const TorchInputKind = "pkg.torch.export.graph_signature.InputSpec.kind"

// markExportConstants sets ExportConstant on the float initializers of a
// model that carries torch.export's signature and says they are no
// parameters: those it marks as anything but PARAMETER, and unmarked ones
// of one element that no Conv, ConvTranspose or Gemm reads as its weight
// or bias. The exporter's optimizer lifts every Constant node into an
// initializer (GELU's 0.5 and √2, attention's scale), which would
// otherwise be trained as parameters and block the folds and fusions that
// read them as constants; but it also folds BatchNorm into convolutions
// under the weights' names as new, unmarked initializers (the bias of a
// one-channel convolution one element), so those stay parameters. (An
// unmarked one whose uses all end in a comparison, a mask's fill values,
// is no parameter in any model: Value.NoGradient.) A model
// without the signature is unchanged: every float initializer is a
// parameter. It reads the nodes' inputs (g's consumers linked).
func markExportConstants(g *Graph, gp *onnxpb.GraphProto) {
	kinds := map[string]string{}
	read := func(name string, md []*onnxpb.StringStringEntryProto) {
		for _, e := range md {
			if e.GetKey() == TorchInputKind {
				kinds[name] = e.GetValue()
			}
		}
	}
	for _, vi := range gp.GetInput() {
		read(vi.GetName(), vi.GetMetadataProps())
	}
	for _, vi := range gp.GetValueInfo() {
		read(vi.GetName(), vi.GetMetadataProps())
	}
	for _, tp := range gp.GetInitializer() {
		read(tp.GetName(), tp.GetMetadataProps())
	}
	if len(kinds) == 0 {
		return
	}
	g.ExportSignature = true
	for _, v := range g.Initializers {
		v.ExportKind = kinds[v.Name]
		if !v.DType.IsFloat() || v.Const == nil {
			continue
		}
		if k, ok := kinds[v.Name]; ok {
			v.ExportConstant = k != "PARAMETER"
		} else {
			v.ExportConstant = v.Const.Len() == 1 && !layerOperand(v)
		}
	}
}

// layerOperand reports whether a Conv, ConvTranspose or Gemm reads v as its
// weight or bias.
func layerOperand(v *Value) bool {
	for _, n := range v.Consumers {
		switch n.OpType {
		case "Conv", "ConvTranspose", "Gemm":
			for _, in := range n.Inputs[1:] {
				if in == v {
					return true
				}
			}
		}
	}
	return false
}

// TorchNameScopes is the metadata key with which PyTorch's dynamo exporter
// records, on each node, the module scopes its operation was traced in:
// a Python list, "[”, 'features', 'features.1', 'features.1.0.attn',
// 'linear']", the model, then each module by its path, then the
// operation.
const TorchNameScopes = "pkg.torch.onnx.name_scopes"

// Scope returns the path of the PyTorch module whose forward computed n
// ("features.1.0.attn"), as the dynamo exporter records it
// (TorchNameScopes); "" where n carries no record, or one naming no
// module (the model's own forward).
func (n *Node) Scope() string {
	if n.proto == nil {
		return ""
	}
	for _, e := range n.proto.GetMetadataProps() {
		if e.GetKey() != TorchNameScopes {
			continue
		}
		s := strings.TrimSpace(e.GetValue())
		if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
			return ""
		}
		var scopes []string
		for _, f := range strings.Split(s[1:len(s)-1], ",") {
			f = strings.TrimSpace(f)
			if len(f) >= 2 && (f[0] == '\'' || f[0] == '"') && f[len(f)-1] == f[0] {
				f = f[1 : len(f)-1]
			}
			scopes = append(scopes, f)
		}
		// The last is the operation's own name; the module is the last
		// non-empty scope before it.
		for i := len(scopes) - 2; i >= 0; i-- {
			if scopes[i] != "" {
				return scopes[i]
			}
		}
		return ""
	}
	return ""
}
