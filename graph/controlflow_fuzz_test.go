package graph

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/internal/hostile"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// controlFlowSeeds are the control-flow models of the tests: tensor_split's
// Loop over a sequence (of a constant and of a graph-input x), a scan Loop,
// the sequence operators, and Ifs on a shape and on a constant; and the
// slice assignments' export, whose ScatterND grids the loader reads.
func controlFlowSeeds() []*onnxpb.ModelProto {
	xs := i64([]int64{2, 6}, 0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15)
	shapeCond := []*onnxpb.NodeProto{
		fnode("shape", "Shape", []string{"x"}, []string{"sh"}),
		fnode("dim", "Gather", []string{"sh", "ax1"}, []string{"d"}),
		fnode("eq", "Equal", []string{"d", "k3"}, []string{"cond"}),
	}
	seeds := []*onnxpb.ModelProto{
		splitLoopModel(2, xs), splitLoopModel(2, nil), splitLoopModel(0, nil),
		ifModel(shapeCond...), ifModel(cfConst("cond", &Tensor{DType: Bool, B: []bool{false}})),
	}
	// The slice assignments' index grids (read back at load too).
	if b, err := os.ReadFile(filepath.Join("..", "testdata", "exports", "slice_assign.onnx")); err == nil {
		m := &onnxpb.ModelProto{}
		if proto.Unmarshal(b, m) == nil {
			seeds = append(seeds, m)
		}
	}
	return seeds
}

// FuzzControlFlow mutates the control-flow models (and the slice
// assignments of testdata/exports/slice_assign.onnx), their main graph and
// the subgraph of their first Loop or If alike (hostile.Mutate: shapes,
// attributes, opsets, dtypes, node order, dangling and rewired inputs,
// removed nodes, other operators), and loads them: the unrolling and
// inlining and the slice assignments' reading at load, then validation and shape inference, return errors,
// never panic.
func FuzzControlFlow(f *testing.F) {
	seeds := controlFlowSeeds()
	for i := range seeds {
		f.Add(uint8(i), []byte{}, []byte{})
		for k := byte(0); k < 12; k++ {
			f.Add(uint8(i), []byte{k, 1, k + 2}, []byte{k, 2, k*3 + 1})
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, outer, inner []byte) {
		m := proto.Clone(seeds[int(which)%len(seeds)]).(*onnxpb.ModelProto)
		hostile.Mutate(m, outer)
		for _, n := range m.Graph.Node {
			if a := n.GetAttribute(); len(a) > 0 && a[0].GetG() != nil {
				hostile.Mutate(&onnxpb.ModelProto{Graph: a[0].G, OpsetImport: m.OpsetImport}, inner)
				break
			}
		}
		data, err := proto.Marshal(m)
		if err != nil {
			return
		}
		lm, err := onnx.LoadBytes(data, "")
		if err != nil {
			return
		}
		g, err := FromONNX(lm)
		if err != nil {
			return
		}
		if g.Validate() != nil {
			return
		}
		shapes := map[string][]int64{}
		for _, in := range g.Inputs {
			dims := make([]int64, len(in.Shape))
			for i, d := range in.Shape {
				dims[i] = max(d.Size, 2)
			}
			shapes[in.Name] = dims
		}
		g.InferShapes(shapes)
	})
}
