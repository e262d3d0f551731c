package main

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/internal/orttest"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestFixedBatchExports: models exported without dynamic_axes
// (testdata/exports, made by testdata/gen/make_exports.py) train: the
// loader makes their batch axis dynamic, repairing the Reshape targets and
// the class token that held the batch, the header says so, the norm check
// passes, and the tuned export has a dynamic batch axis that onnxruntime
// runs at 3 samples. A model whose samples interact (the batch mean) is
// refused with the reason and how to re-export it (also where only values
// show it), and still predicts at its fixed batch.
func TestFixedBatchExports(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "exports")
	for _, c := range []struct {
		name        string
		fixed, size int64
		repairs     int
	}{
		{"vit_b1", 1, 32, 12},
		{"shufflenet_b2", 2, 64, 6},
		{"swin_t_b1", 1, 32, 4},
		// BatchNorm kept (before a convolution), its statistics behind
		// Identity nodes: the check against the export unties them first.
		{"bnfirst_b1", 1, 8, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			model := filepath.Join(dir, c.name+".onnx")
			out := filepath.Join(t.TempDir(), "tuned.onnx")
			stdout, e, code := run(t, "train", "--model", model, "--data", fmnist+":limit=8", "--test-data", "none", "--num-classes", "10",
				"--epsilon", "8", "--batch-size", "4", "--epochs", "1", "--seed", "1", "--quiet", "--out", out)
			header := regexp.MustCompile(`model: +exported with a fixed batch of ` + itoa(c.fixed) + `: its batch axis is made dynamic`)
			if code != 0 || !header.MatchString(stdout) || !strings.Contains(stdout, "norms:     checked") {
				t.Fatalf("exit %d: %s%s", code, stdout, e)
			}
			exportMatchesORT(t, out, []int64{3, c.size, c.size})
			// plan lists the repairs.
			stdout, e, code = run(t, "plan", "--model", model, "--input-shape", "3,"+itoa(c.size)+","+itoa(c.size), "--batch", "4")
			if code != 0 || strings.Count(stdout, "\n  batch     ") != c.repairs {
				t.Errorf("plan: exit %d, %d repairs listed, want %d: %s%s", code, strings.Count(stdout, "\n  batch     "), c.repairs, stdout, e)
			}
		})
	}
	t.Run("inspect", func(t *testing.T) {
		stdout, e, code := run(t, "inspect", "--model", filepath.Join(dir, "shufflenet_b2.onnx"))
		if code != 0 || !strings.Contains(stdout, "the export fixed the batch at 2 (no dynamic_axes)") {
			t.Errorf("exit %d: %s%s", code, stdout, e)
		}
		stdout, e, code = run(t, "inspect", "--model", filepath.Join(dir, "aux_heads.onnx"), "--json")
		if code != 0 || strings.Contains(stdout, "fixed_batch") || strings.Contains(stdout, "half_precision") || strings.Contains(stdout, "pixel_input") {
			t.Errorf("a dynamic float32 batch: exit %d: %s%s", code, stdout, e)
		}
		for model, want := range map[string]string{
			"half_cnn.onnx":   "in float16: the other commands run and train it in float32; train writes it back in float16",
			"pixels_cnn.onnx": "uint8 pixels the model casts to float",
		} {
			if stdout, e, code := run(t, "inspect", "--model", filepath.Join(dir, model)); code != 0 || !strings.Contains(stdout, want) {
				t.Errorf("%s: exit %d: %s%s", model, code, stdout, e)
			}
		}
	})
	t.Run("samples interact", func(t *testing.T) {
		model := filepath.Join(dir, "mixer_b1.onnx")
		_, e, code := run(t, "plan", "--model", model, "--input-shape", "3,8,8", "--batch", "4")
		if code != 1 || !strings.Contains(e, "exported with a fixed batch of 1") || !strings.Contains(e, "reduces over the batch axis") ||
			!strings.Contains(e, `re-export it with dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}`) {
			t.Errorf("plan: exit %d: %s", code, e)
		}
		// Here the batch is lost in a Slice (x + x[:1]): only the outputs
		// at two batch sizes show that the samples interact.
		_, e, code = run(t, "plan", "--model", filepath.Join(dir, "first_b1.onnx"), "--input-shape", "3,8,8", "--batch", "4")
		if code != 1 || !strings.Contains(e, `at a batch of 2 its output "logits" differs from the export's on the same samples`) {
			t.Errorf("plan: exit %d: %s", code, e)
		}
		x, y := filepath.Join(t.TempDir(), "x.npy"), filepath.Join(t.TempDir(), "y.npy")
		data := make([]float32, 3*3*8*8)
		for i := range data {
			data[i] = float32(math.Sin(float64(i)))
		}
		if err := npy.WriteFile(x, npy.NewFloat32(data, 3, 3, 8, 8)); err != nil {
			t.Fatal(err)
		}
		if stdout, e, code := run(t, "predict", "--model", model, "--input", x, "--out", y); code != 0 || strings.Contains(stdout, "made dynamic") {
			t.Errorf("predict at the fixed batch: exit %d: %s%s", code, stdout, e)
		}
	})
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestTrainAuxOutputs: a model with an auxiliary head as a second output
// (testdata/exports/aux_heads.onnx; Inception's and GoogLeNet's
// training-mode exports) trains on its first output: the parameters that
// reach only the second are frozen and reported as such (they get no
// gradient from the loss), the rest train with the norm check passing, and
// the export keeps both outputs.
func TestTrainAuxOutputs(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "exports", "aux_heads.onnx")
	stdout, e, code := run(t, "plan", "--model", model, "--input-shape", "3,8,8", "--batch", "4")
	reason := regexp.MustCompile(`(?m)^  aux\.(0|2)\.(weight|bias) +reaches only outputs after the first \(aux\), which the loss does not read$`)
	if code != 0 || len(reason.FindAllString(stdout, -1)) != 4 || !strings.Contains(stdout, "frozen in 4 tensors") {
		t.Fatalf("plan: exit %d: %s%s", code, stdout, e)
	}
	out := filepath.Join(t.TempDir(), "tuned.onnx")
	stdout, e, code = run(t, "train", "--model", model, "--data", fmnist+":limit=8", "--test-data", "none",
		"--epsilon", "8", "--batch-size", "4", "--epochs", "1", "--seed", "1", "--quiet", "--out", out)
	if code != 0 || !strings.Contains(stdout, "for all 4 parameters") {
		t.Fatalf("train: exit %d: %s%s", code, stdout, e)
	}
	exportMatchesORT(t, out, []int64{3, 8, 8})
	lm, err := loadGraph(out)
	if err != nil || len(lm.g.Outputs) != 2 {
		t.Errorf("the export's outputs: %v, %v", err, lm)
	}
}

// TestHalfPrecisionExport: a model exported in float16 (testdata/exports/
// half_cnn.onnx: weights, input, output and a Constant in float16) runs in
// float32: predict gives, bit for bit, what the same model in float32 with
// its weights rounded through float16 gives (half_cnn_ref.onnx), and says
// so; train runs with the norm check and writes the model back in float16
// — weights, input, output and Constant; onnxruntime runs it on float16
// input within float16's rounding of ours — or, with --out-dtype float32,
// in float32.
func TestHalfPrecisionExport(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "exports")
	tmp := t.TempDir()
	x := filepath.Join(tmp, "x.npy")
	data := make([]float32, 3*3*8*8)
	for i := range data {
		data[i] = float32(math.Sin(float64(i) * 0.7))
	}
	if err := npy.WriteFile(x, npy.NewFloat32(data, 3, 3, 8, 8)); err != nil {
		t.Fatal(err)
	}
	var outs [2]*npy.Array
	for i, name := range []string{"half_cnn", "half_cnn_ref"} {
		y := filepath.Join(tmp, name+".npy")
		stdout, e, code := run(t, "predict", "--model", filepath.Join(dir, name+".onnx"), "--input", x, "--out", y)
		if code != 0 || (i == 0) != strings.Contains(stdout, "exported in float16: runs and trains in float32 (its weights widened exactly), written back in float16") {
			t.Fatalf("predict %s: exit %d: %s%s", name, code, stdout, e)
		}
		a, err := npy.ReadFile(y)
		if err != nil {
			t.Fatal(err)
		}
		outs[i] = a
	}
	if len(outs[0].F32) != 30 || !slices.Equal(outs[0].F32, outs[1].F32) {
		t.Errorf("float16 model %v, float32 model with its weights %v", outs[0].F32, outs[1].F32)
	}
	if _, e, code := run(t, "train", "--model", filepath.Join(dir, "half_cnn.onnx"), "--data", fmnist+":limit=8", "--epsilon", "8",
		"--out-dtype", "float64", "--out", filepath.Join(tmp, "no.onnx")); code == 0 || !strings.Contains(e, `--out-dtype "float64": want model or float32`) {
		t.Errorf("--out-dtype float64: exit %d: %s", code, e)
	}
	// half_mixed.onnx: a BatchNorm (a training-mode export: trained as
	// GroupNorm, written as its decomposition, whose constants are then
	// float16 too) and a LayerNorm that Casts keep in float32, which stays
	// so, its weights and the Casts with it.
	for _, c := range []struct {
		model, flag string
		want        graph.DType
		params      int
	}{{"half_cnn", "model", graph.Float16, 4}, {"half_cnn", "float32", graph.Float32, 4}, {"half_mixed", "model", graph.Float16, 8}} {
		out := filepath.Join(tmp, c.model+"_"+c.flag+".onnx")
		stdout, e, code := run(t, "train", "--model", filepath.Join(dir, c.model+".onnx"), "--data", fmnist+":limit=8", "--test-data", "none",
			"--epsilon", "8", "--batch-size", "4", "--epochs", "1", "--seed", "1", "--quiet", "--out-dtype", c.flag, "--out", out)
		if code != 0 || !strings.Contains(stdout, fmt.Sprintf("for all %d parameters", c.params)) || !strings.Contains(stdout, "written back in float16") != (c.flag == "float32") {
			t.Fatalf("train %s --out-dtype %s: exit %d: %s%s", c.model, c.flag, code, stdout, e)
		}
		m, err := onnx.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		gp := m.Proto.GetGraph()
		types := []int32{gp.GetInput()[0].GetType().GetTensorType().GetElemType(), gp.GetOutput()[0].GetType().GetTensorType().GetElemType()}
		var casts []int64
		for _, tp := range gp.GetInitializer() {
			switch {
			case tp.GetDataType() == int32(graph.Int64):
			case strings.HasPrefix(tp.GetName(), "norm."):
				if tp.GetDataType() != int32(graph.Float32) {
					t.Errorf("%s: the float32 LayerNorm's %s written as %d", c.model, tp.GetName(), tp.GetDataType())
				}
			default:
				types = append(types, tp.GetDataType())
			}
		}
		for _, n := range gp.GetNode() {
			for _, a := range n.GetAttribute() {
				if a.GetT() != nil && a.GetT().GetDataType() != int32(graph.Int64) {
					types = append(types, a.GetT().GetDataType())
				}
				if n.GetOpType() == "Cast" && a.GetName() == "to" {
					casts = append(casts, a.GetI())
				}
			}
		}
		for _, d := range types {
			if d != int32(c.want) {
				t.Errorf("%s --out-dtype %s: types %v, want all %v", c.model, c.flag, types, c.want)
				break
			}
		}
		if c.model == "half_mixed" && !slices.Equal(casts, []int64{int64(graph.Float32), int64(graph.Float16)}) {
			t.Errorf("%s: Casts to %v, want float32 then float16", c.model, casts)
		}
		if c.want == graph.Float32 {
			exportMatchesORT(t, out, []int64{3, 8, 8})
			continue
		}
		// In float16: onnxruntime on the input rounded to float16, ours
		// on the same values, within float16's rounding of the
		// activations.
		lm, err := loadGraph(out)
		if err != nil || len(lm.half) != 1 {
			t.Fatalf("the tuned model: %v, %v", err, lm)
		}
		plan, err := runtime.CompileForBatch(lm.g, 3, []int64{3, 8, 8}, &runtime.Options{ForwardOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		in, shape := plan.Input(0)
		for i := range in {
			in[i] = graph.HalfToFloat32(graph.Float32ToHalf(float32(math.Sin(float64(i) * 0.37))))
		}
		if err := plan.Forward(); err != nil {
			t.Fatal(err)
		}
		ours, _ := plan.Output(0)
		sh := []int64{int64(shape[0]), int64(shape[1]), int64(shape[2]), int64(shape[3])}
		res := orttest.Run(t, out, map[string]orttest.Tensor{lm.g.Inputs[0].Name: {Shape: sh, Data: in, Half: true}})
		if rel := numcheck.RelErr(ours, res[lm.g.Outputs[0].Name].Data, 0); rel > 5e-3 {
			t.Errorf("%s: onnxruntime vs ours on the float16 export: %.3g of the outputs' scale", c.model, rel)
		}
	}
}

// TestPixelInputExport: a model exported with its preprocessing, taking
// uint8 pixels it casts to float itself (testdata/exports/pixels_cnn.onnx),
// predicts from uint8 and from float32 pixels what the same model taking
// float32 pixels (pixels_cnn_ref.onnx) predicts, bit for bit, and norms
// takes either alike; train feeds
// it the pixel values (--norm pixels by default, recorded), says so, and
// writes it with its uint8 input.
func TestPixelInputExport(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "exports")
	tmp := t.TempDir()
	const n = 3 * 3 * 8 * 8
	u8, f32 := make([]uint8, n), make([]float32, n)
	for i := range u8 {
		u8[i] = uint8(i * 37 % 256)
		f32[i] = float32(u8[i])
	}
	xu, xf := filepath.Join(tmp, "xu.npy"), filepath.Join(tmp, "xf.npy")
	if err := npy.WriteFile(xu, &npy.Array{DType: npy.Uint8, Shape: []int{3, 3, 8, 8}, U8: u8}); err != nil {
		t.Fatal(err)
	}
	if err := npy.WriteFile(xf, npy.NewFloat32(f32, 3, 3, 8, 8)); err != nil {
		t.Fatal(err)
	}
	var outs []*npy.Array
	for _, c := range []struct{ model, x string }{{"pixels_cnn", xu}, {"pixels_cnn", xf}, {"pixels_cnn_ref", xf}} {
		y := filepath.Join(tmp, "y.npy")
		stdout, e, code := run(t, "predict", "--model", filepath.Join(dir, c.model+".onnx"), "--input", c.x, "--out", y)
		if code != 0 || (c.model == "pixels_cnn") != strings.Contains(stdout, "takes uint8 pixels") {
			t.Fatalf("predict %s on %s: exit %d: %s%s", c.model, c.x, code, stdout, e)
		}
		a, err := npy.ReadFile(y)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, a)
	}
	if len(outs[0].F32) != 30 || !slices.Equal(outs[0].F32, outs[2].F32) || !slices.Equal(outs[1].F32, outs[2].F32) {
		t.Errorf("uint8 pixels %v, float32 pixels %v, the float32 model %v", outs[0].F32, outs[1].F32, outs[2].F32)
	}
	// norms takes the uint8 pixels too, and gives the float32 pixels' norms.
	labels := filepath.Join(tmp, "y.npy")
	if err := npy.WriteFile(labels, npy.NewInt64([]int64{1, 4, 7}, 3)); err != nil {
		t.Fatal(err)
	}
	var norms [2]string
	for i, x := range []string{xu, xf} {
		stdout, e, code := run(t, "norms", "--model", filepath.Join(dir, "pixels_cnn.onnx"), "--input", x, "--labels", labels, "--json")
		if code != 0 {
			t.Fatalf("norms on %s: exit %d: %s%s", x, code, stdout, e)
		}
		norms[i] = stdout
	}
	if norms[0] != norms[1] {
		t.Errorf("norms of uint8 pixels:\n%s\nof float32 pixels:\n%s", norms[0], norms[1])
	}
	out := filepath.Join(tmp, "tuned.onnx")
	stdout, e, code := run(t, "train", "--model", filepath.Join(dir, "pixels_cnn.onnx"), "--data", fmnist+":limit=8", "--test-data", "none",
		"--epsilon", "8", "--batch-size", "4", "--epochs", "1", "--seed", "1", "--quiet", "--out", out)
	if code != 0 || !strings.Contains(stdout, "for all 4 parameters") || !strings.Contains(stdout, "model:     takes uint8 pixels") {
		t.Fatalf("train: exit %d: %s%s", code, stdout, e)
	}
	lm, err := loadGraph(out)
	if err != nil {
		t.Fatal(err)
	}
	if lm.g.Inputs[0].Declared != graph.Uint8 || recorded(lm.m, "norm", "") != "0/0.003921569" {
		t.Errorf("the tuned model's input declared %v, its norm %q", lm.g.Inputs[0].Declared, recorded(lm.m, "norm", ""))
	}
}

// TestVideoClips: a video classifier (Conv3d over (C, T, H, W) clips)
// predicts PyTorch's logits and gives PyTorch's per-sample gradient norms
// in every mode; both exports train from an npy dataset of clips —
// channels last, with augmentation, BatchNorm3d made GroupNorm — with the
// norm check passing, evaluate from it, and run in onnxruntime.
// matchesPyTorch holds model to its PyTorch reference ref (an npz of x,
// y, logits and norms, testdata/gen/make_exports.py): predict gives the
// logits and norms, in every mode, each sample's gradient norm.
func matchesPyTorch(t *testing.T, model, ref string) {
	t.Helper()
	r, err := npy.ReadNPZ(ref)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	x, y, logits := filepath.Join(tmp, "x.npy"), filepath.Join(tmp, "y.npy"), filepath.Join(tmp, "logits.npy")
	if err := npy.WriteFile(x, r["x"]); err != nil {
		t.Fatal(err)
	}
	if err := npy.WriteFile(y, r["y"]); err != nil {
		t.Fatal(err)
	}
	if _, e, code := run(t, "predict", "--model", model, "--input", x, "--out", logits); code != 0 {
		t.Fatalf("predict: exit %d: %s", code, e)
	}
	got, err := npy.ReadFile(logits)
	if err != nil {
		t.Fatal(err)
	}
	if rel := numcheck.RelErr(got.F32, r["logits"].F32, 0); rel > 1e-5 {
		t.Errorf("%s: logits %.3g of their scale from PyTorch's", model, rel)
	}
	for _, mode := range []string{"bk", "mixed", "ghost", "instantiate"} {
		stdout, e, code := run(t, "norms", "--model", model, "--input", x, "--labels", y, "--mode", mode, "--json")
		if code != 0 {
			t.Fatalf("%s: norms --mode %s: exit %d: %s", model, mode, code, e)
		}
		var rep normsReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Total) != len(r["norms"].F64) {
			t.Fatalf("%s: %s: %d norms", model, mode, len(rep.Total))
		}
		for i, n := range rep.Total {
			if want := r["norms"].F64[i]; math.Abs(n-want) > 1e-5*want {
				t.Errorf("%s: %s: sample %d: norm %v, PyTorch's %v", model, mode, i, n, want)
			}
		}
	}
}

func TestVideoClips(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "exports")
	matchesPyTorch(t, filepath.Join(dir, "clip3d.onnx"), filepath.Join(dir, "clip3d_ref.npz"))
	tmp := t.TempDir()

	// 12 clips (T, H, W, C) = (4, 16, 16, 3), channels last, and 4 test clips.
	clip := func(n int, seed float64) *npy.Array {
		v := make([]float32, n*4*16*16*3)
		for i := range v {
			v[i] = float32(math.Sin(float64(i)*0.013 + seed))
		}
		return npy.NewFloat32(v, n, 4, 16, 16, 3)
	}
	labels := func(n int) *npy.Array {
		l := make([]int64, n)
		for i := range l {
			l[i] = int64(i % 5)
		}
		return npy.NewInt64(l, n)
	}
	data := filepath.Join(tmp, "clips.npz")
	if err := npy.WriteNPZ(data, map[string]*npy.Array{"x_train": clip(12, 0), "y_train": labels(12), "x_test": clip(4, 1), "y_test": labels(4)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ model, want string }{{"clip3d", "for all 10 parameters"}, {"clip3d_train", "for all 14 parameters"}} {
		out := filepath.Join(tmp, c.model+"_tuned.onnx")
		stdout, e, code := run(t, "train", "--model", filepath.Join(dir, c.model+".onnx"), "--data", "npy:"+data, "--augment", "crop=2,flip",
			"--epsilon", "8", "--batch-size", "6", "--epochs", "1", "--seed", "1", "--quiet", "--out", out)
		if code != 0 || !strings.Contains(stdout, c.want) || !strings.Contains(stdout, "npy:"+data+":split=test (4 examples") {
			t.Fatalf("train %s: exit %d: %s%s", c.model, code, stdout, e)
		}
		stdout, e, code = run(t, "eval", "--model", out, "--data", "npy:"+data, "--json")
		if code != 0 || !strings.Contains(stdout, `"samples": 4`) {
			t.Fatalf("eval %s: exit %d: %s%s", c.model, code, stdout, e)
		}
		exportMatchesORT(t, out, []int64{3, 4, 16, 16})
	}
}

// TestVideoTransformers: torchvision's MViT (reduced), whose TorchScript
// export holds Loops over sequences (tensor_split) and Ifs on a
// dimension's size (squeeze), unrolled and inlined at load, a position
// embedding of two tables added, q, k and v unbound by a Split, and (v2)
// relative positions written by a ScatterND: PyTorch's logits and
// per-sample norms in every mode, and a private run from clips whose
// tuned export runs in onnxruntime.
func TestVideoTransformers(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "exports")
	tmp := t.TempDir()
	data := filepath.Join(tmp, "clips.npz")
	v := make([]float32, 8*3*4*32*32)
	for i := range v {
		v[i] = float32(math.Sin(float64(i) * 0.011))
	}
	if err := npy.WriteNPZ(data, map[string]*npy.Array{"x": npy.NewFloat32(v, 8, 3, 4, 32, 32), "y": npy.NewInt64([]int64{0, 1, 2, 3, 4, 0, 1, 2}, 8)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		loops      int
		assigns    int
	}{
		{"mvit_v1", "for all 72 parameters", 9, 0},
		{"mvit_v2", "for all 81 parameters", 10, 12},
	} {
		model := filepath.Join(dir, c.name+".onnx")
		stdout, e, code := run(t, "inspect", "--model", model, "--json")
		var rep inspectReport
		if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || rep.UnrolledLoops != c.loops || rep.InlinedIfs != 1 || rep.SliceAssignments != c.assigns || len(rep.Unsupported) != 0 {
			t.Fatalf("inspect %s: exit %d: %+v %s", c.name, code, rep, e)
		}
		matchesPyTorch(t, model, filepath.Join(dir, c.name+"_ref.npz"))
		out := filepath.Join(tmp, c.name+"_tuned.onnx")
		stdout, e, code = run(t, "train", "--model", model, "--data", "npy:"+data, "--num-classes", "5",
			"--epsilon", "8", "--batch-size", "4", "--epochs", "1", "--seed", "1", "--quiet", "--out", out)
		if code != 0 || !strings.Contains(stdout, c.want) || !strings.Contains(stdout, fmt.Sprintf("at load: %d Loop(s)", c.loops)) {
			t.Fatalf("train %s: exit %d: %s%s", c.name, code, stdout, e)
		}
		exportMatchesORT(t, out, []int64{3, 4, 32, 32})
	}
}

// TestSliceAssignments: slice assignments in place, which the TorchScript
// exporter writes as ScatterNDs over index grids computed from the shape
// (testdata/exports/slice_assign.onnx: h[:, :, 1:, 1:] with a parameter,
// h[:, :2], h[:, :, 2:4], and h[:, :, :, ::2], whose step keeps its
// ScatterND): the three runs are read as Slices and Concats, and the
// model gives PyTorch's logits and per-sample norms in every mode, trains
// every parameter and runs in onnxruntime.
func TestSliceAssignments(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "exports")
	model := filepath.Join(dir, "slice_assign.onnx")
	stdout, e, code := run(t, "inspect", "--model", model, "--json")
	var rep inspectReport
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || rep.SliceAssignments != 3 || rep.Operators["ScatterND"] != 1 {
		t.Fatalf("inspect: exit %d: %+v %s", code, rep, e)
	}
	matchesPyTorch(t, model, filepath.Join(dir, "slice_assign_ref.npz"))
	tmp := t.TempDir()
	data := filepath.Join(tmp, "x.npz")
	v := make([]float32, 40*3*6*6)
	for i := range v {
		v[i] = float32(math.Sin(float64(i) * 0.37))
	}
	y := make([]int64, 40)
	for i := range y {
		y[i] = int64(i % 5)
	}
	if err := npy.WriteNPZ(data, map[string]*npy.Array{"x": npy.NewFloat32(v, 40, 3, 6, 6), "y": npy.NewInt64(y, 40)}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "tuned.onnx")
	stdout, e, code = run(t, "train", "--model", model, "--data", "npy:"+data, "--epsilon", "8", "--batch-size", "16",
		"--epochs", "1", "--seed", "1", "--quiet", "--out", out)
	if code != 0 || !strings.Contains(stdout, "for all 5 parameters") || !strings.Contains(stdout, "3 slice assignment(s)") {
		t.Fatalf("train: exit %d: %s%s", code, stdout, e)
	}
	exportMatchesORT(t, out, []int64{3, 6, 6})
}

// TestWeightStandardization: a convolution whose weight is standardized
// by a BatchNormalization in training mode before it (timm's StdConv2d;
// testdata/exports/ws_conv.onnx) normalizes no sample: plan writes it as
// its computation instead of refusing the model and trains the weight
// through it (instantiate‡), and the model gives PyTorch's logits and
// per-sample norms, the standardized weight's included, in every mode,
// trains and runs in onnxruntime. The plan names the weight, which the
// exporter folded with its reshape into an initializer of its own, by its
// module, and reads it as weight standardization (its norms in closed
// form: rewrite.Standardized).
func TestWeightStandardization(t *testing.T) {
	trainsAsExported(t, "ws_conv", "3,8,8", 8, 1, 6, "normalizes parameters, not samples", "285 trainable in 6 tensors",
		"0 frozen in 0 tensors", "instantiate‡", "conv.weight (onnx::BatchNormalization_42)", "1 of them standardized weights")
	if stdout, _, _ := run(t, "plan", "--model", filepath.Join("..", "..", "testdata", "exports", "ws_conv.onnx")); strings.Contains(stdout, "training mode") {
		t.Errorf("plan calls the export a training-mode one: %s", stdout)
	}
}

// TestTransformedParameters: parameters computed before they meet the
// batch — NFNet's scaled weight standardization (weight and gain), Swin
// V2's position-bias MLP and clipped, exponentiated logit scale
// (transforms.onnx), a position embedding interpolated to the input's
// grid (pos_interp.onnx) — are all trained: PyTorch's logits and
// per-sample norms in every mode, a private run (its norm check holds
// each parameter to its own gradient, over two epochs of changing
// parameters), and the tuned model in onnxruntime. The standardized
// convolution's decision is ghost (T = 9): its norms take the ghost form
// in ghost, mixed and bk.
func TestTransformedParameters(t *testing.T) {
	trainsAsExported(t, "transforms", "3,3,3", 16, 2, 13, "647 trainable in 13 tensors", "0 frozen in 0 tensors",
		"ghost‡", "Mul←Exp←Clip", "2 of them standardized weights")
	trainsAsExported(t, "pos_interp", "3,8,8", 8, 1, 5, "181 trainable in 5 tensors", "Add←Resize")
}

// trainsAsExported checks testdata/exports/name.onnx: its plan says each
// of plan's phrases, it gives the logits and per-sample norms in every
// mode of name_ref.npz (PyTorch's), a private run on limit Fashion-MNIST
// images of the given shape for epochs trains all of its params
// parameters, and onnxruntime runs the tuned model as we do.
func trainsAsExported(t *testing.T, name, shape string, limit, epochs, params int, plan ...string) {
	t.Helper()
	dir := filepath.Join("..", "..", "testdata", "exports")
	model := filepath.Join(dir, name+".onnx")
	stdout, e, code := run(t, "plan", "--model", model)
	for _, want := range plan {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Fatalf("plan: exit %d, want %q: %s%s", code, want, stdout, e)
		}
	}
	matchesPyTorch(t, model, filepath.Join(dir, name+"_ref.npz"))
	out := filepath.Join(t.TempDir(), "tuned.onnx")
	stdout, e, code = run(t, "train", "--model", model, "--data", fmt.Sprintf("%s:limit=%d", fmnist, limit), "--test-data", "none",
		"--input-shape", shape, "--num-classes", "10", "--epsilon", "8", "--batch-size", "4", "--epochs", strconv.Itoa(epochs),
		"--seed", "1", "--quiet", "--out", out)
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("for all %d parameters", params)) {
		t.Fatalf("train: exit %d: %s%s", code, stdout, e)
	}
	var sample []int64
	for _, f := range strings.Split(shape, ",") {
		d, _ := strconv.ParseInt(f, 10, 64)
		sample = append(sample, d)
	}
	exportMatchesORT(t, out, sample)
}
