package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// newestOpset is the newest opset of the default domain the runtime reads
// (runtime/support.go's opsets table, 27: ONNX 1.22).
const newestOpset = 27

// reductionsAxesMoved are the reductions whose axes moved from an
// attribute to an input at opset 18: a node of an older model that sets
// the attribute means something else (or nothing) at 18.
var reductionsAxesMoved = map[string]bool{
	"ReduceMean": true, "ReduceMax": true, "ReduceMin": true, "ReduceProd": true, "ReduceL1": true,
	"ReduceL2": true, "ReduceSumSquare": true, "ReduceLogSum": true, "ReduceLogSumExp": true,
}

// bumpable reports whether a model written at its opset means the same at
// newestOpset: from 13 on, the only operators of the runtime's table whose
// meaning changes by 27 are the reductions above (18) and
// GroupNormalization (21, per-channel scale); every other version of 14–27
// adds types, attributes with the old behaviour as default
// (AveragePool's dilations, Resize's antialias and axes, ScatterND's
// reductions) or values (Pad's wrap mode).
func bumpable(m *onnxpb.ModelProto) (int64, bool) {
	var v int64 = -1
	for _, op := range m.GetOpsetImport() {
		if op.GetDomain() == "" || op.GetDomain() == "ai.onnx" {
			v = op.GetVersion()
		}
	}
	if v < 13 {
		return v, false
	}
	for _, n := range m.GetGraph().GetNode() {
		if n.GetOpType() == "GroupNormalization" && v < 21 {
			return v, false
		}
		if v < 18 && reductionsAxesMoved[n.GetOpType()] {
			for _, a := range n.GetAttribute() {
				if a.GetName() == "axes" {
					return v, false
				}
			}
		}
	}
	return v, true
}

// TestONNXConformanceNewerOpsets runs every case of TestONNXConformance
// that means the same at the newest opset again with the model's import
// of the default domain raised to it: ONNX 1.12's cases are written at
// opsets up to 17, while PyTorch's dynamo exporter writes 18 by default
// and up to 23 when asked, and onnx's version converter raises older
// models. Each case must give ONNX's expected outputs at 27 as it does at
// its own opset (a case refused or differing at its own opset is skipped).
func TestONNXConformanceNewerOpsets(t *testing.T) {
	man := readManifest(t)
	ran := 0
	for _, c := range man.Cases {
		name := filepath.Base(c)
		if _, ok := conformanceRefused[name]; ok {
			continue
		}
		if _, ok := conformanceDiffers[name]; ok {
			continue
		}
		if _, ok := conformanceOrderDependent[name]; ok {
			continue
		}
		dir := filepath.Join(conformanceDir, c)
		m, err := onnx.Load(filepath.Join(dir, "model.onnx"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, ok := bumpable(m.Proto); !ok {
			continue
		}
		for _, op := range m.Proto.GetOpsetImport() {
			if op.GetDomain() == "" || op.GetDomain() == "ai.onnx" {
				op.Version = proto.Int64(newestOpset)
			}
		}
		tmp := t.TempDir()
		b, err := proto.Marshal(m.Proto)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "model.onnx"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		pbs, _ := filepath.Glob(filepath.Join(dir, "*.pb"))
		arange, _ := filepath.Glob(filepath.Join(dir, "input_arange"))
		for _, p := range append(pbs, arange...) {
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, filepath.Base(p)), raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := runConformanceCase(tmp); err != nil {
			t.Errorf("%s at opset %d: %v", name, newestOpset, err)
		}
		ran++
	}
	// ONNX 1.12's cases at opsets 13–17 less the moved reduction axes: 226
	// when written.
	if ran < 200 {
		t.Errorf("only %d cases ran at opset %d; the manifest lists %d", ran, newestOpset, len(man.Cases))
	}
	t.Logf("%d of %d cases ran at opset %d", ran, len(man.Cases), newestOpset)
}

// TestNewerOpsetRefusals: a form one opset gives and another takes away is
// refused at the opset that does not have it, naming the node, and an
// opset past the newest the runtime reads is refused by CheckOps.
func TestNewerOpsetRefusals(t *testing.T) {
	cases := []struct {
		name  string
		opset int64
		build func(b *modelBuilder)
		want  string
	}{
		{"groupnorm opset 21 per-group scale", 21, func(b *modelBuilder) {
			b.param("x", 2, 6, 3)
			b.param("s", 3)
			b.param("bb", 3)
			b.node("GroupNormalization", []string{"x", "s", "bb"}, "y", aInt("num_groups", 3))
		}, "from opset 21 (the model imports 21) it holds one per channel, 6"},
		{"pad wrap before opset 19", 18, func(b *modelBuilder) {
			b.param("x", 2, 3)
			b.ints("pads", []int64{0, 1, 0, 1}, 4)
			b.node("Pad", []string{"x", "pads"}, "y", aStr("mode", "wrap"))
		}, `pad mode "wrap" came with opset 19; the model imports opset 18`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(1, c.opset)
			c.build(b)
			g := b.graph(t, "y")
			if err := CheckOps(g); err != nil {
				t.Fatalf("CheckOps: %v", err)
			}
			_, err := Compile(g, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"y"`) {
				t.Errorf("error %v, want one naming node \"y\" and containing %q", err, c.want)
			}
		})
	}
	b := newBuilder(1, newestOpset+1)
	b.param("x", 2, 3)
	b.node("Relu", []string{"x"}, "y")
	err := CheckOps(b.graph(t, "y"))
	want := fmt.Sprintf("opset %d is newer than the kernel's range 6–%d", newestOpset+1, newestOpset)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckOps at opset %d: %v, want %q", newestOpset+1, err, want)
	}
	for op, r := range opsets {
		if op != "Upsample" && r.Until != newestOpset {
			t.Errorf("%s reads opsets %d–%d; every operator but Upsample should read up to %d", op, r.Since, r.Until, newestOpset)
		}
	}
}

// TestCastLike: CastLike (opset 15), which PyTorch's dynamo exporter writes
// wherever a constant takes the input's type, passes CheckOps, becomes
// the Cast it is once the target's type is known (folded where its input
// is a constant), and runs.
func TestCastLike(t *testing.T) {
	b := newBuilder(3, 18)
	b.param("w", 3, 1)
	b.ints("four", []int64{4}, 1)
	b.node("CastLike", []string{"w", "x"}, "wc")
	b.node("CastLike", []string{"four", "x"}, "fourf")
	b.node("Sqrt", []string{"fourf"}, "two")
	b.node("Mul", []string{"x", "wc"}, "xw")
	b.node("Div", []string{"xw", "two"}, "y")
	gp := &onnxpb.GraphProto{Name: proto.String("castlike"), Node: b.nodes, Initializer: b.inits,
		Input:  []*onnxpb.ValueInfoProto{floatInput("x", 2, 3, 5)},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("y")}}}
	m := onnx.NewModel(&onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: gp,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(18)}}})
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckOps(g); err != nil {
		t.Fatal(err)
	}
	if err := g.InferShapes(nil); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, n := range g.Nodes {
		ops = append(ops, n.OpType)
	}
	if strings.Join(ops, ",") != "Cast,Mul,Div" {
		t.Errorf("nodes after inference %v, want Cast,Mul,Div (the constant's CastLike and its Sqrt folded)", ops)
	}
	p, err := Compile(g, &Options{ForwardOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 30)
	for i := range x {
		x[i] = float32(i) - 7
	}
	if err := p.SetInput(0, x); err != nil {
		t.Fatal(err)
	}
	if err := p.Forward(); err != nil {
		t.Fatal(err)
	}
	y, _ := p.Output(0)
	w := g.Values["w"].Const.F32
	for i, v := range x {
		if want := v * w[(i/5)%3] / 2; y[i] != want {
			t.Fatalf("y[%d] = %v, want %v", i, y[i], want)
		}
	}
}

func floatInput(name string, dims ...int64) *onnxpb.ValueInfoProto {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name),
		Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: sh}}}}
}
