package rewrite

import (
	"path"
	"regexp"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
)

// exporterName matches the names torch.onnx gives to initializers it
// created itself (folded BatchNorm, de-duplicated or transposed weights):
// "onnx::Conv_497", "onnx::MatMul_1021", or a bare number from older
// exporters. Such a name says nothing about the module the user wrote.
var exporterName = regexp.MustCompile(`^(onnx::[A-Za-z]+_\d+|\d+)$`)

// ExporterNamed reports whether name was made up by the exporter rather
// than taken from the PyTorch module's state dict.
func ExporterNamed(name string) bool { return exporterName.MatchString(name) }

// ModuleName derives the PyTorch name of an exporter-named initializer v
// from the node that reads it: torch.onnx names nodes by module scope
// ("/layer1/layer1.0/conv1/Conv"), so the weight of that Conv is
// "layer1.0.conv1.weight". It returns "" when v keeps its own name, or no
// reader carries a scope, or the input position has no conventional name.
func ModuleName(v *graph.Value) string {
	if v == nil || !ExporterNamed(v.Name) {
		return ""
	}
	for _, n := range v.Consumers {
		u, n := reader(v, n)
		if m := standardizedName(u, n); m != "" {
			return m
		}
		mod := scopePath(n.Name)
		if mod == "" {
			continue
		}
		for i, in := range n.Inputs {
			if in == u {
				if s := paramSuffix(n.OpType, i); s != "" {
					return mod + "." + s
				}
			}
		}
	}
	return ""
}

// standardizedName names the weight that n, a node of a
// BatchNormalization of parameters written out as its computation
// (bnOnParams: "<node>/params/…"), reads as its data u: weight
// standardization's, which the exporter folded with its reshape into an
// initializer of its own ("onnx::BatchNormalization_42", timm's
// conv.weight.reshape(1, C, −1)), is the module's weight. "" for any
// other reader.
func standardizedName(u *graph.Value, n *graph.Node) string {
	i := strings.LastIndex(n.Name, "/params/")
	// γ, β and the statistics reach it through Reshapes (perChannel), the
	// data through the rows' Flatten or the statistics' own nodes.
	if i < 0 || len(n.Inputs) == 0 || n.Inputs[0] != u || n.OpType == "Reshape" || !strings.HasPrefix(path.Base(n.Name[:i]), "BatchNormalization") {
		return ""
	}
	if mod := scopePath(n.Name[:i]); mod != "" {
		return mod + ".weight"
	}
	return ""
}

// ScopeOf returns, for an initializer the dynamo exporter's optimizer
// made (unmarked by its signature, a name no state dict has: "val_34",
// "unsqueeze"), the path of the PyTorch module whose operation reads it,
// from the node's record (graph.Node.Scope): its state-dict name is
// unknown (a transposed qkv weight is read by the attention's own
// forward, not by the qkv Linear), but the module says where it lives.
// "" for any other initializer, or where no reader carries a record.
func ScopeOf(v *graph.Value) string {
	if v == nil || !v.Initializer || v.ExportKind != "" || strings.Contains(v.Name, ".") {
		return ""
	}
	for _, n := range v.Consumers {
		_, r := reader(v, n)
		if s := r.Scope(); s != "" {
			return s
		}
	}
	return ""
}

// reader follows consumer n of v through Identity and Cast chains
// (de-duplicated weights) to the node that reads the parameter, and
// returns that node and the value it reads.
func reader(v *graph.Value, n *graph.Node) (*graph.Value, *graph.Node) {
	for (n.OpType == "Identity" || n.OpType == "Cast") && len(n.Outputs) == 1 && n.Outputs[0] != nil && len(n.Outputs[0].Consumers) == 1 {
		v, n = n.Outputs[0], n.Outputs[0].Consumers[0]
	}
	return v, n
}

// scopePath turns a node name "/layer1/layer1.0/conv1/Conv" into the
// module path "layer1.0.conv1". torch.onnx writes one scope per module;
// a scope is qualified by the scope before it when it is that module's
// child through a container ("layer1.0" under "layer1", "block.0.0" under
// "block.0"), and is an attribute name otherwise. The last segment is the
// operator.
func scopePath(node string) string {
	if !strings.HasPrefix(node, "/") {
		return ""
	}
	segs := strings.Split(strings.TrimPrefix(node, "/"), "/")
	if len(segs) < 2 {
		return ""
	}
	path, last := "", ""
	for _, s := range segs[:len(segs)-1] {
		switch {
		case s == "":
			return ""
		case path == "":
			path = s
		case strings.HasPrefix(s, last+"."):
			path += s[len(last):]
		default:
			path += "." + s
		}
		last = s
	}
	return path
}

// paramSuffix is the state-dict name of input i of an operator that holds
// a parameter there ("weight", "bias", …), or "".
func paramSuffix(op string, i int) string {
	switch op {
	case "Conv", "ConvTranspose", "Gemm", "LayerNormalization", "GroupNormalization", "InstanceNormalization", "BatchNormalization":
		switch i {
		case 1:
			return "weight"
		case 2:
			return "bias"
		case 3:
			if op == "BatchNormalization" {
				return "running_mean"
			}
		case 4:
			if op == "BatchNormalization" {
				return "running_var"
			}
		}
	case "MatMul", "Mul", "PRelu", "Einsum":
		return "weight"
	case "Add":
		return "bias"
	}
	return ""
}

// ExportForm says how the model was exported, as far as the graph shows:
// "training" when it keeps BatchNormalization nodes (TrainingMode.TRAINING
// with do_constant_folding=False), "eval (BatchNorm folded)" when it has
// none and its convolutions carry weights the exporter created (an
// eval-mode export folds each BatchNorm into the Conv before it, so --bn
// finds nothing to replace; the dynamo exporter's optimizer does the same
// under the weight's own name, which its signature then does not mark),
// and "" when neither applies.
func ExportForm(g *graph.Graph) string {
	bn, folded := 0, 0
	batched := g.InputDerived()
	for _, n := range g.Nodes {
		switch {
		case n.OpType == "BatchNormalization" && n.Domain == "" && batched[n.Input(0)]:
			// (one over parameters alone is weight standardization,
			// in either form)
			bn++
		case n.OpType == "Conv" && len(n.Inputs) > 1 && n.Inputs[1] != nil && ExporterNamed(n.Inputs[1].Name):
			folded++
		case n.OpType == "Conv" && len(n.Inputs) > 1 && n.Inputs[1] != nil && g.ExportSignature && n.Inputs[1].Initializer && n.Inputs[1].ExportKind == "":
			// The dynamo exporter's optimizer folds a BatchNorm into the
			// convolution under the weight's name, as a new value without
			// the signature's mark.
			folded++
		}
	}
	switch {
	case bn > 0:
		return ExportTraining
	case folded > 0:
		return ExportEvalFolded
	}
	return ""
}

// The export forms ExportForm tells apart.
const (
	ExportTraining   = "training"
	ExportEvalFolded = "eval (BatchNorm folded)"
)
