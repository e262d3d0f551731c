package dpengine

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

// fuzzMaxMemory is the memory ceiling of one fuzz input's compiled plan,
// and fuzzMaxAlloc the most the whole pipeline may allocate for one input
// (a fixture's step at batch 2 allocates a few MiB).
const (
	fuzzMaxMemory = 64 << 20
	fuzzMaxAlloc  = 1 << 30
)

// fuzzFixtures loads every model under testdata/models, sorted by name.
func fuzzFixtures(f *testing.F) []*onnxpb.ModelProto {
	paths, _ := filepath.Glob("../testdata/models/*.onnx")
	sort.Strings(paths)
	if len(paths) == 0 {
		f.Fatal("no fixtures under testdata/models")
	}
	var out []*onnxpb.ModelProto
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		m := &onnxpb.ModelProto{}
		if err := proto.Unmarshal(b, m); err != nil {
			f.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// interesting are the values mutations write into dims and attributes:
// the edges of what a file can say.
var interesting = []int64{0, 1, -1, 2, 3, 7, -2, 64, 1000, 1 << 16, 1 << 20, 1 << 31, 1<<31 - 1, 1 << 40, 1 << 62, math.MaxInt64, math.MinInt64}

var opsets = []int64{1, 6, 7, 9, 11, 12, 13, 14, 15, 17, 18, 21, 99}

var dtypes = []int32{0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 16, 17, 1000}

var opTypes = []string{"Relu", "Add", "MatMul", "Gemm", "Conv", "Reshape", "Transpose", "Gather", "Concat", "Slice", "Expand",
	"ConstantOfShape", "Range", "Tile", "Softmax", "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "LayerNormalization",
	"BatchNormalization", "Shape", "Unsqueeze", "Squeeze", "Pad", "Where", "Cast", "ReduceMean", "Split", "Identity", "Erf", "Div"}

// mutate applies a program of 3-byte mutations (kind, target, value) to
// m: shapes, attributes, opsets, dtypes, node order, dangling names, op
// types, truncated data. At most 8 mutations are applied.
func mutate(m *onnxpb.ModelProto, prog []byte) {
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

// runPipeline takes a model through everything a training run does to
// it: load, shape inference, rewrite, compile for a batch of 2 under
// fuzzMaxMemory, one DP step, and export. Errors are fine; a panic fails.
func runPipeline(t *testing.T, data []byte, mode Mode) {
	m, err := onnx.LoadBytes(data, "")
	if err != nil {
		return
	}
	g, err := graph.FromONNX(m)
	if err != nil || g.Validate() != nil || len(g.Inputs) != 1 {
		return
	}
	in := g.Inputs[0]
	if len(in.Shape) < 2 {
		return
	}
	sample := make([]int64, len(in.Shape)-1)
	per := int64(1)
	for i, d := range in.Shape[1:] {
		if d.Size <= 0 || d.Size > 1<<12 {
			return
		}
		sample[i] = d.Size
		per *= d.Size
		if per > 1<<16 {
			return
		}
	}
	const batch = 2
	c := g.Clone()
	if err := c.InferShapes(map[string][]int64{in.Name: append([]int64{batch}, sample...)}); err != nil {
		return
	}
	if len(c.Outputs) == 0 || len(c.Outputs[0].Shape) != 2 {
		return
	}
	classes := c.Outputs[0].Shape[1].Size
	if classes <= 0 {
		return
	}
	rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: sample, Batch: batch}})
	if err != nil {
		return
	}
	eng, err := New(g, rp, Config{Mode: mode, Clipping: Clipping{Fn: Abadi, R: 1}, NoiseMultiplier: 1, ExpectedBatch: batch,
		PhysicalBatch: batch, Source: NewSeededSource(1), Optimizer: &SGD{LR: 0.1}, MaxMemory: fuzzMaxMemory})
	if err != nil {
		return
	}
	fill := func(idx []int, x []float32, y []int64) error {
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		for i, j := range idx {
			y[i] = int64(j) % classes
		}
		return nil
	}
	if _, err := eng.Step([]int{0, 1}, fill); err != nil {
		return
	}
	if out, err := g.ToONNX(); err == nil {
		if b, err := out.Bytes(); err == nil {
			if _, err := onnx.LoadBytes(b, ""); err != nil {
				t.Errorf("the exported model does not load again: %v", err)
			}
		}
	}
}

// FuzzPipeline mutates the fixture models (shapes, attributes, opsets,
// dtypes, node order, dangling names, operators, truncated data) and runs
// each through load, shape inference, rewrite, compile, a DP step and
// export: no input may panic or allocate more than fuzzMaxAlloc.
func FuzzPipeline(f *testing.F) {
	fixtures := fuzzFixtures(f)
	for i := range fixtures {
		f.Add(uint8(i), uint8(0), []byte{})
		// One seed per mutation kind on each fixture.
		for k := byte(0); k < 12; k++ {
			f.Add(uint8(i), k, []byte{k, byte(i * 7), byte(k*5 + 1)})
		}
	}
	modes := []Mode{BK, Mixed, Ghost, Instantiate}
	f.Fuzz(func(t *testing.T, which, mode uint8, prog []byte) {
		m := proto.Clone(fixtures[int(which)%len(fixtures)]).(*onnxpb.ModelProto)
		mutate(m, prog)
		data, err := proto.Marshal(m)
		if err != nil {
			return
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		runPipeline(t, data, modes[int(mode)%len(modes)])
		runtime.ReadMemStats(&after)
		if d := after.TotalAlloc - before.TotalAlloc; d > fuzzMaxAlloc {
			t.Errorf("one input allocated %d MiB, over %d MiB", d>>20, fuzzMaxAlloc>>20)
		}
	})
}

// FuzzCheckpoint reads arbitrary bytes as a checkpoint: an error, or a
// checkpoint whose tensors match its names and sizes; never a panic, and
// nothing allocated beyond what the input holds (sizes are checked against
// the length first).
func FuzzCheckpoint(f *testing.F) {
	dir := f.TempDir()
	for i, v := range []float32{1, -3.5} {
		path := filepath.Join(dir, fmt.Sprint(i))
		c := sampleCheckpointF(v)
		if i == 1 {
			c.Optimizer = nil
		}
		if err := WriteCheckpoint(path, c); err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(checkpointMagic + "\xff\xff\xff\xff\xff\xff\xff\x7f"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := readCheckpoint(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if len(c.Params) != len(c.ParamNames) {
			t.Fatalf("%d tensors for %d names", len(c.Params), len(c.ParamNames))
		}
		if c.Optimizer != nil {
			for name, slot := range c.Optimizer.Slots {
				if len(slot) != len(c.Params) {
					t.Fatalf("slot %s: %d tensors for %d parameters", name, len(slot), len(c.Params))
				}
			}
		}
	})
}
