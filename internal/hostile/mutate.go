package hostile

import (
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// interesting are the values mutations write into dims and attributes:
// the edges of what a file can say.
var interesting = []int64{0, 1, -1, 2, 3, 7, -2, 64, 1000, 1 << 16, 1 << 20, 1 << 31, 1<<31 - 1, 1 << 40, 1 << 62, math.MaxInt64, math.MinInt64}

var opsets = []int64{1, 6, 7, 9, 11, 12, 13, 14, 15, 17, 18, 21, 99}

var dtypes = []int32{0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 16, 17, 1000}

var opTypes = []string{"Relu", "Add", "MatMul", "Gemm", "Conv", "Reshape", "Transpose", "Gather", "Concat", "Slice", "Expand",
	"ConstantOfShape", "Range", "Tile", "Softmax", "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "LayerNormalization",
	"BatchNormalization", "Shape", "Unsqueeze", "Squeeze", "Pad", "Where", "Cast", "ReduceMean", "Split", "Identity", "Erf", "Div"}

// Mutate applies a program of 3-byte mutations (kind, target, value) to
// m: shapes, attributes, opsets, dtypes, node order, dangling names, op
// types, truncated data. At most 8 mutations are applied. The fuzz targets
// and the command tests share it, so a fuzz input's meaning is fixed:
// changing it changes what the corpora under testdata/fuzz hold.
func Mutate(m *onnxpb.ModelProto, prog []byte) {
	g := m.GetGraph()
	for k := 0; k+3 <= len(prog) && k < 24; k += 3 {
		kind, a, b := prog[k], int(prog[k+1]), int(prog[k+2])
		val := interesting[b%len(interesting)]
		nodes, inits := g.GetNode(), g.GetInitializer()
		switch kind % 12 {
		case 0: // an initializer's dimension
			if len(inits) > 0 {
				t := inits[a%len(inits)]
				if len(t.Dims) > 0 {
					t.Dims[b%len(t.Dims)] = val
				}
			}
		case 1: // an INT attribute
			if len(nodes) > 0 {
				n := nodes[a%len(nodes)]
				for _, at := range n.Attribute {
					if at.GetType() == onnxpb.AttributeProto_INT {
						at.I = proto.Int64(val)
						break
					}
				}
			}
		case 2: // an element of an INTS attribute
			if len(nodes) > 0 {
				n := nodes[a%len(nodes)]
				for _, at := range n.Attribute {
					if at.GetType() == onnxpb.AttributeProto_INTS && len(at.Ints) > 0 {
						at.Ints[b%len(at.Ints)] = interesting[(a+b)%len(interesting)]
						break
					}
				}
			}
		case 3: // the opset
			if len(m.OpsetImport) > 0 {
				m.OpsetImport[0].Version = proto.Int64(opsets[b%len(opsets)])
			}
		case 4: // an initializer's dtype
			if len(inits) > 0 {
				inits[a%len(inits)].DataType = proto.Int32(dtypes[b%len(dtypes)])
			}
		case 5: // node order
			if len(nodes) > 1 {
				i, j := a%len(nodes), b%len(nodes)
				nodes[i], nodes[j] = nodes[j], nodes[i]
			}
		case 6: // a dangling or rewired input
			if len(nodes) > 0 {
				n := nodes[a%len(nodes)]
				if len(n.Input) > 0 {
					if b%2 == 0 {
						n.Input[b%len(n.Input)] = "dangling"
					} else {
						o := nodes[b%len(nodes)]
						if len(o.Output) > 0 {
							n.Input[b%len(n.Input)] = o.Output[0]
						}
					}
				}
			}
		case 7: // a node removed
			if len(nodes) > 1 {
				i := a % len(nodes)
				g.Node = append(nodes[:i:i], nodes[i+1:]...)
			}
		case 8: // a graph input's dimension
			if len(g.Input) > 0 {
				if sh := g.Input[0].GetType().GetTensorType().GetShape(); sh != nil && len(sh.Dim) > 0 {
					sh.Dim[a%len(sh.Dim)].Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: val}
				}
			}
		case 9: // truncated data
			if len(inits) > 0 {
				t := inits[a%len(inits)]
				if n := len(t.RawData); n > 0 {
					t.RawData = t.RawData[:b%n]
				}
			}
		case 10: // another operator
			if len(nodes) > 0 {
				nodes[a%len(nodes)].OpType = proto.String(opTypes[b%len(opTypes)])
			}
		case 11: // an output name produced twice, or the graph output renamed
			if len(nodes) > 1 && b%2 == 0 {
				i, j := a%len(nodes), b%len(nodes)
				if len(nodes[i].Output) > 0 && len(nodes[j].Output) > 0 {
					nodes[i].Output[0] = nodes[j].Output[0]
				}
			} else if len(g.Output) > 0 {
				g.Output[0].Name = proto.String("dangling")
			}
		}
	}
}
