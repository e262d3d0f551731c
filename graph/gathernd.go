package graph

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// GatherND is what PyTorch's dynamo exporter writes for advanced indexing,
// tensor[index] (onnxscript's aten_index: GatherND of the tensor by the
// index unsqueezed on a last axis): Swin's and BEiT's relative position
// biases read from their tables by a constant index buffer. The IR infers
// it and folds it over constants, and turns the form indexing makes, one
// leading axis indexed by constant indices (batch_dims 0, the indices'
// last axis 1), into the Gather it is, which the runtime runs and the DP
// planner follows to a weight. Any other GatherND left after inference is
// refused by name when the plan is compiled.
func init() {
	rules["GatherND"] = rule{infer: inferGatherND, eval: evalGatherND}
	arity["GatherND"] = arityRange{2, 2}
}

func inferGatherND(g *Graph, n *Node) error {
	x, idx := n.Input(0), n.Input(1)
	if x == nil || idx == nil {
		return errors.New("GatherND needs data and indices")
	}
	if err := needRank(x); err != nil {
		return err
	}
	if err := needRank(idx); err != nil {
		return err
	}
	b, k, err := gatherNDDims(n, x.Shape, idx.Shape)
	if err != nil {
		return err
	}
	out := append(Shape{}, idx.Shape[:len(idx.Shape)-1]...)
	out = append(out, x.Shape[b+k:]...)
	setOut(n, 0, x.DType, out)
	return nil
}

// gatherNDDims checks GatherND's shapes and returns its batch_dims b and
// the indices' last dimension k (the data axes each index tuple fixes).
func gatherNDDims(n *Node, data, idx Shape) (b, k int, err error) {
	bd := n.IntOr("batch_dims", 0)
	q, r := len(idx), len(data)
	if q < 1 || r < 1 {
		return 0, 0, fmt.Errorf("data %v and indices %v must have rank ≥ 1", data, idx)
	}
	if bd < 0 || bd >= int64(min(q, r)) {
		return 0, 0, fmt.Errorf("batch_dims %d out of range for data %v and indices %v", bd, data, idx)
	}
	b = int(bd)
	kk := idx[q-1].Size
	if kk < 1 || int(kk) > r-b {
		return 0, 0, fmt.Errorf("the indices' last dimension %v must be known and within 1..%d (data %v, batch_dims %d)", idx[q-1], r-b, data, b)
	}
	for i := 0; i < b; i++ {
		if data[i].Size >= 0 && idx[i].Size >= 0 && data[i].Size != idx[i].Size {
			return 0, 0, fmt.Errorf("batch dimension %d differs: data %v, indices %v", i, data, idx)
		}
	}
	return b, int(kk), nil
}

func evalGatherND(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	x, ind := in[0], in[1]
	b, k, err := gatherNDDims(n, StaticShape(x.Shape...), StaticShape(ind.Shape...))
	if err != nil {
		return nil, err
	}
	indices, err := ind.Ints()
	if err != nil {
		return nil, err
	}
	batches := numel(x.Shape[:b])
	inner := numel(x.Shape[b+k:])
	block := numel(x.Shape[b:]) // one batch entry of the data
	tuples := numel(ind.Shape[b : len(ind.Shape)-1])
	out := append(append([]int64{}, ind.Shape[:len(ind.Shape)-1]...), x.Shape[b+k:]...)
	idx := make([]int, 0, numel(out))
	for bi := 0; bi < batches; bi++ {
		for t := 0; t < tuples; t++ {
			off := 0
			for j := 0; j < k; j++ {
				d := x.Shape[b+j]
				i := indices[(bi*tuples+t)*k+j]
				if i < 0 {
					i += d
				}
				if i < 0 || i >= d {
					return nil, fmt.Errorf("index %d out of range for axis %d of size %d", indices[(bi*tuples+t)*k+j], b+j, d)
				}
				off = off*int(d) + int(i)
			}
			for e := 0; e < inner; e++ {
				idx = append(idx, bi*block+off*inner+e)
			}
		}
	}
	return []*Tensor{x.take(out, idx)}, nil
}

// gatherNDAsGather turns a GatherND of one leading axis by constant indices
// (batch_dims 0, the indices' last dimension 1) into Gather(data,
// indices without their last axis, axis 0), the same selection: the
// indices become a constant of the graph's own.
func gatherNDAsGather(g *Graph, n *Node) {
	if n.OpType != "GatherND" || n.Domain != "" || len(n.Inputs) != 2 || n.Inputs[0] == nil || n.Inputs[1] == nil || n.IntOr("batch_dims", 0) != 0 {
		return
	}
	ind := n.Inputs[1].Const
	if ind == nil || len(ind.Shape) < 1 || ind.Shape[len(ind.Shape)-1] != 1 {
		return
	}
	vals, err := ind.Ints()
	if err != nil {
		return
	}
	name := n.Inputs[1].Name + "/gather"
	for i := 1; g.Values[name] != nil; i++ {
		name = n.Inputs[1].Name + "/gather_" + strconv.Itoa(i)
	}
	shape := append([]int64{}, ind.Shape[:len(ind.Shape)-1]...)
	v := &Value{Name: name, DType: Int64, Shape: StaticShape(shape...), Const: &Tensor{DType: Int64, Shape: shape, I64: vals}}
	g.Values[name] = v
	n.OpType = "Gather"
	n.Attrs = []*onnxpb.AttributeProto{{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)}}
	n.Inputs = []*Value{n.Inputs[0], v}
}
