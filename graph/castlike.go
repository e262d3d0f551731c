package graph

import (
	"errors"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// castLikeAsCast turns a CastLike (opset 15) whose target's element type is
// known into the Cast it is: PyTorch's dynamo exporter (onnxscript's
// torchlib) writes CastLike wherever a constant or a shape takes the
// input's type (attention's scale, GroupNorm's affine), and every pass
// that looks through a Cast (layout-only paths to a weight, the batch
// axis) then looks through it too. The second input, which only lends
// its type, is dropped; saturate and round_mode carry over, Cast having
// them from the same opsets.
func castLikeAsCast(n *Node) {
	if n.OpType != "CastLike" || n.Domain != "" || len(n.Inputs) != 2 || n.Inputs[1] == nil || n.Inputs[1].DType == Undefined {
		return
	}
	attrs := []*onnxpb.AttributeProto{{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(n.Inputs[1].DType))}}
	for _, a := range n.Attrs {
		if a.GetName() == "saturate" || a.GetName() == "round_mode" {
			attrs = append(attrs, a)
		}
	}
	n.OpType, n.Attrs, n.Inputs = "Cast", attrs, n.Inputs[:1]
}

// evalCastLike makes CastLike an operator the IR folds, so that
// runtime.CheckOps lets it through before inference; inference itself
// never folds one: it turns a CastLike whose target type is known into
// Cast (castLikeAsCast, which folds as Cast does) and refuses one whose
// type is not (inferCastLike).
func evalCastLike(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	return nil, errors.New("CastLike's target type is unknown")
}
