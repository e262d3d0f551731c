package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/dynamotest"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/internal/orttest"
	"github.com/dpfinetune/dpfinetune/internal/testhook"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/runtime"
)

const fmnist = "idx:../../testdata/fmnist-small"

// trainArgs are a small, fast, seeded run of the fixture CNN.
func trainArgs(out string, extra ...string) []string {
	args := []string{"train", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist + ":limit=512",
		"--epsilon", "3", "--epochs", "2", "--batch-size", "64", "--physical-batch", "32", "--lr", "0.002",
		"--seed", "5", "--quiet", "--out", out}
	return append(args, extra...)
}

func readInits(t *testing.T, path string) map[string][]byte {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, tp := range m.Proto.GetGraph().GetInitializer() {
		b, err := m.TensorBytes(tp)
		if err != nil {
			t.Fatal(err)
		}
		out[tp.GetName()] = append([]byte(nil), b...)
	}
	return out
}

func metadata(t *testing.T, path string) map[string]string {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	md := map[string]string{}
	for _, kv := range m.Proto.GetMetadataProps() {
		md[kv.GetKey()] = kv.GetValue()
	}
	return md
}

// TestTrainInterruptResume: SIGINT in the middle of training saves a
// checkpoint and stops; --resume then finishes with exactly the weights and
// ε of an uninterrupted run with the same seed — also under a learning-rate
// schedule (whose position is the run's step) exporting the parameters'
// average (which the checkpoint carries with its update count), where the
// export is the average and not the last weights.
func TestTrainInterruptResume(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"plain", nil},
		{"schedule-ema", []string{"--lr-schedule", "cosine", "--warmup-steps", "3", "--min-lr", "2e-4", "--ema", "0.9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			full := filepath.Join(dir, "full.onnx")
			if _, e, code := run(t, trainArgs(full, tc.extra...)...); code != 0 {
				t.Fatalf("uninterrupted run: exit %d: %s", code, e)
			}

			part := filepath.Join(dir, "part.onnx")
			afterStep = func(step int64) {
				if step == 11 { // mid second epoch (8 steps per epoch)
					syscall.Kill(os.Getpid(), syscall.SIGINT)
					// The signal reaches the loop through a goroutine; on a loaded
					// machine the remaining steps could finish before it runs.
					time.Sleep(time.Second)
				}
			}
			_, e, code := run(t, trainArgs(part, tc.extra...)...)
			afterStep = nil
			if code != 1 || !strings.Contains(e, "interrupted; checkpoint saved") || !strings.Contains(e, "--resume") {
				t.Fatalf("interrupted run: exit %d: %s", code, e)
			}
			if _, err := os.Stat(part); err == nil {
				t.Fatal("an interrupted run wrote the final model")
			}
			if tc.extra != nil {
				c, err := dpengine.ReadCheckpoint(part + ".ckpt")
				if err != nil {
					t.Fatal(err)
				}
				if c.Average == nil || c.AverageSteps != c.Step {
					t.Fatalf("the interrupted run's checkpoint: average %v after %d updates, %d steps; want one a step", c.Average != nil, c.AverageSteps, c.Step)
				}
			}
			if _, e, code := run(t, trainArgs(part, append(tc.extra, "--resume")...)...); code != 0 {
				t.Fatalf("resumed run: exit %d: %s", code, e)
			}
			a, b := readInits(t, full), readInits(t, part)
			for name, w := range a {
				if !bytes.Equal(w, b[name]) {
					t.Errorf("parameter %q differs between the uninterrupted and the resumed run", name)
				}
			}
			ma, mb := metadata(t, full), metadata(t, part)
			if ma["dpfinetune.epsilon"] != mb["dpfinetune.epsilon"] || ma["dpfinetune.epsilon"] == "" {
				t.Errorf("ε %q vs %q", ma["dpfinetune.epsilon"], mb["dpfinetune.epsilon"])
			}
			if eps, _ := parseF(ma["dpfinetune.epsilon"]); eps > 3 || eps < 2.9 {
				t.Errorf("spent ε = %v for target 3", eps)
			}
			if tc.extra == nil {
				return
			}
			if ma["dpfinetune.ema_decay"] != "0.9" {
				t.Errorf("metadata ema_decay %q, want 0.9", ma["dpfinetune.ema_decay"])
			}
			// The export is the average: the checkpoint's last parameters
			// are the last weights, which it is not.
			c, err := dpengine.ReadCheckpoint(part + ".ckpt")
			if err != nil {
				t.Fatal(err)
			}
			same := 0
			for k, name := range c.ParamNames {
				if raw := f32bytes(c.Params[k]); bytes.Equal(raw, b[name]) {
					same++
				}
				if !bytes.Equal(f32bytes(c.Average[k]), b[name]) {
					t.Errorf("the export's %s is not the checkpoint's average", name)
				}
			}
			if same == len(c.ParamNames) {
				t.Error("the export holds the last weights, not their average")
			}
		})
	}
}

// f32bytes returns the little-endian bytes of xs, as an initializer holds them.
func f32bytes(xs []float32) []byte {
	out := make([]byte, 4*len(xs))
	for i, v := range xs {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}

func parseF(s string) (float64, error) {
	var v float64
	err := json.Unmarshal([]byte(s), &v)
	return v, err
}

// TestTrainReportAndExport: the report records the settings, σ and ε per
// epoch; the export keeps the dynamic batch axis, carries the privacy
// metadata, and runs in onnxruntime with the logits of our runtime.
func TestTrainReportAndExport(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		model, sample string
		extra         []string
		opset         int64 // the fixture's import of the default domain raised to it, when not 0
		marks         bool  // torch.export's signature marks added (running statistics BUFFER, the rest PARAMETER)
	}{
		{"cnn", "1,28,28", nil, 0, false},
		// BatchNorm → GroupNorm rewrite, new 10-class head on a 3-channel model fed gray images.
		{"resnet_train", "3,32,32", []string{"--num-classes", "10"}, 0, false},
		{"vit", "3,32,32", nil, 0, false},
		// The opsets PyTorch's dynamo exporter writes when asked (23), on
		// fixtures that mean the same there (no reduction axes attribute):
		// the rewrite's GroupNorm decomposition and the written model hold
		// at the model's own opset.
		{"resnet_train", "3,32,32", []string{"--num-classes", "10"}, 23, false},
		{"vit17", "3,32,32", nil, 23, false},
		// As the dynamo exporter marks a model whose BatchNorms it keeps:
		// both rewrites read the marked running statistics.
		{"resnet_train", "3,32,32", []string{"--num-classes", "10"}, 18, true},
		{"resnet_train", "3,32,32", []string{"--num-classes", "10", "--bn", "freeze"}, 18, true},
	} {
		name := c.model
		if c.opset != 0 {
			name = fmt.Sprintf("%s_opset%d", c.model, c.opset)
		}
		if c.marks {
			name += "_marked"
			if len(c.extra) > 3 {
				name += "_" + c.extra[3] // the --bn mode
			}
		}
		t.Run(name, func(t *testing.T) {
			model := "../../testdata/models/" + c.model + ".onnx"
			if c.opset != 0 {
				model = withOpset(t, model, filepath.Join(dir, name+"-in.onnx"), c.opset, c.marks)
			}
			out := filepath.Join(dir, name+".onnx")
			rep := filepath.Join(dir, name+".json")
			args := []string{"train", "--model", model, "--data", fmnist + ":limit=128",
				"--test-data", fmnist + ":test:limit=64", "--epsilon", "2", "--epochs", "1", "--batch-size", "32", "--quiet",
				"--out", out, "--report", rep}
			if _, e, code := run(t, append(args, c.extra...)...); code != 0 {
				t.Fatalf("exit %d: %s", code, e)
			}
			var r runReport
			b, _ := os.ReadFile(rep)
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if r.Settings.Sigma <= 0 || len(r.Epochs) != 1 || r.Epochs[0].Test == nil || r.Privacy == nil || r.Privacy.Epsilon > 2 {
				t.Errorf("report %+v", r)
			}
			md := metadata(t, out)
			if md["dpfinetune.accountant"] != "rdp" || md["dpfinetune.delta"] == "" {
				t.Errorf("metadata %v", md)
			}
			if c.opset != 0 {
				m, err := onnx.Load(out)
				if err != nil {
					t.Fatal(err)
				}
				for _, op := range m.Proto.GetOpsetImport() {
					if op.GetDomain() == "" && op.GetVersion() != c.opset {
						t.Errorf("the export imports opset %d, the model %d", op.GetVersion(), c.opset)
					}
				}
			}
			// Our runtime and onnxruntime on the exported model.
			sample, _ := parseDims(c.sample)
			exportMatchesORT(t, out, sample)
		})
	}
}

// TestTrainAugmentMultiplicity: train with each sample fed as three
// augmented views, on the CNN and on a ViT (a class token expanded over a
// sample's views), passes the norm check and records the multiplicity in
// the report and the model's metadata; the exported model is the model
// (one view a row: the input is (N, C, H, W)) and runs in onnxruntime as
// in our runtime; the physical batch defaults to 64 views; and plan
// estimates the views' memory.
func TestTrainAugmentMultiplicity(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ model, sample string }{{"cnn", "1,28,28"}, {"vit", "3,32,32"}} {
		t.Run(c.model, func(t *testing.T) {
			out := filepath.Join(dir, c.model+".onnx")
			rep := filepath.Join(dir, c.model+".json")
			o, e, code := run(t, "train", "--model", "../../testdata/models/"+c.model+".onnx", "--data", fmnist+":limit=96",
				"--test-data", fmnist+":test:limit=32", "--epsilon", "4", "--epochs", "1", "--batch-size", "32", "--seed", "2",
				"--augment", "crop=2,flip", "--augment-multiplicity", "3", "--out", out, "--report", rep, "--quiet")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, e)
			}
			if !strings.Contains(o, "3 augmented views of each sample (crop=2,flip)") || !strings.Contains(o, "norms:     checked") {
				t.Errorf("train's plan does not say the views and the norm check:\n%s", o)
			}
			var r runReport
			b, _ := os.ReadFile(rep)
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if r.Settings.AugmentMultiplicity != 3 || r.Settings.PhysicalBatch != 10 || r.NormCheck == nil || r.Privacy == nil || r.Privacy.Epsilon > 4 {
				t.Errorf("report: multiplicity %d, physical batch %d, norm check %+v, privacy %+v", r.Settings.AugmentMultiplicity, r.Settings.PhysicalBatch, r.NormCheck, r.Privacy)
			}
			if md := metadata(t, out); md["dpfinetune.augment_multiplicity"] != "3" {
				t.Errorf("metadata %v", md)
			}
			m, err := onnx.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			if dims := m.Proto.GetGraph().GetInput()[0].GetType().GetTensorType().GetShape().GetDim(); len(dims) != 4 {
				t.Errorf("the exported model's input has %d axes, want the model's 4", len(dims))
			}
			sample, _ := parseDims(c.sample)
			exportMatchesORT(t, out, sample)
		})
	}
	// plan: the views' activations, a sample's positions three times
	// (the bound of every activation kept counts the views' input and the
	// model's input it is reshaped to: three 28×28 images more).
	planOf := func(views string) planReport {
		o, e, code := run(t, "plan", "--model", "../../testdata/models/cnn.onnx", "--batch", "8", "--augment-multiplicity", views, "--json")
		if code != 0 {
			t.Fatalf("plan: exit %d: %s", code, e)
		}
		var p planReport
		if err := json.Unmarshal([]byte(o), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	one, three := planOf("1"), planOf("3")
	if three.Multiplicity != 3 || one.Multiplicity != 0 || three.ActivationsPerSample != 3*one.ActivationsPerSample+3*28*28 {
		t.Errorf("plan: multiplicity %d/%d, activations a sample %d, one view's %d", one.Multiplicity, three.Multiplicity, three.ActivationsPerSample, one.ActivationsPerSample)
	}
	for i, l := range three.Layers {
		if l.T != 3*one.Layers[i].T {
			t.Errorf("plan: layer %s has T = %d for three views, %d for one", l.Node, l.T, one.Layers[i].T)
		}
	}
}

// withOpset writes src to dst with its import of the default domain set to
// opset, and returns dst. With marks, each initializer is marked as
// torch.export marks the values of its signature: BUFFER for BatchNorm's
// running statistics, PARAMETER for the rest.
func withOpset(t *testing.T, src, dst string, opset int64, marks bool) string {
	t.Helper()
	m, err := onnx.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range m.Proto.GetOpsetImport() {
		if op.GetDomain() == "" || op.GetDomain() == "ai.onnx" {
			op.Version = proto.Int64(opset)
		}
	}
	if marks {
		gp := m.Proto.GetGraph()
		for _, tp := range gp.GetInitializer() {
			kind := "PARAMETER"
			if strings.Contains(tp.GetName(), "running_") {
				kind = "BUFFER"
			}
			gp.ValueInfo = append(gp.ValueInfo, &onnxpb.ValueInfoProto{Name: proto.String(tp.GetName()),
				MetadataProps: []*onnxpb.StringStringEntryProto{{Key: proto.String(graph.TorchInputKind), Value: proto.String(kind)}}})
		}
	}
	if err := m.Save(dst, nil); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestTrainBadInput: every bad input is a clear error naming what is wrong.
func TestTrainBadInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "o.onnx")
	junk := filepath.Join(dir, "junk.onnx")
	os.WriteFile(junk, []byte("not a model at all"), 0o644)
	trunc := filepath.Join(dir, "trunc.onnx")
	b, _ := os.ReadFile("../../testdata/models/cnn.onnx")
	os.WriteFile(trunc, b[:len(b)/3], 0o644)
	// A truncated copy of the shipped IDX data.
	idx := filepath.Join(dir, "idx")
	os.MkdirAll(idx, 0o755)
	for _, f := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"} {
		b, _ := os.ReadFile(filepath.Join("../../testdata/fmnist-small", f))
		if f == "train-images-idx3-ubyte.gz" {
			b = b[:len(b)/2]
		}
		os.WriteFile(filepath.Join(idx, f), b, 0o644)
	}
	base := func(model, data string, extra ...string) []string {
		return append([]string{"train", "--model", model, "--data", data, "--epsilon", "3", "--quiet", "--out", out}, extra...)
	}
	cnn := "../../testdata/models/cnn.onnx"
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"non-ONNX model", base(junk, fmnist), 1, "not an ONNX model"},
		{"truncated model", base(trunc, fmnist), 1, "trunc.onnx"},
		{"missing model", base(filepath.Join(dir, "none.onnx"), fmnist), 1, "none.onnx"},
		{"input shape mismatch", base(cnn, fmnist, "--input-shape", "3,32,32"), 1, "fixed at 1"},
		{"unknown data spec", base(cnn, "mnist:/tmp"), 1, "unknown scheme"},
		{"missing data files", base(cnn, "idx:"+filepath.Join(dir, "nothing")), 1, "nothing"},
		{"truncated data", base(cnn, "idx:"+idx), 1, "train-images-idx3-ubyte.gz"},
		{"labels over classes", base(cnn, fmnist+":classes=5"), 1, "label"},
		{"classes over logits", base(cnn, fmnist+":classes=20"), 1, "--num-classes 20"},
		{"no epsilon", []string{"train", "--model", cnn, "--data", fmnist, "--out", out}, 2, "or fix σ with --noise-multiplier"},
		{"epsilon and sigma", base(cnn, fmnist, "--noise-multiplier", "1"), 2, "--epsilon and --noise-multiplier: give one"},
		{"negative sigma", []string{"train", "--model", cnn, "--data", fmnist, "--out", out, "--noise-multiplier", "-1"}, 2, "--noise-multiplier must be positive"},
		{"bad mode", base(cnn, fmnist, "--mode", "fast"), 2, "unknown clipping mode"},
		{"bad delta", base(cnn, fmnist, "--delta", "2"), 2, "delta"},
		{"impossible epsilon", base(cnn, fmnist, "--epsilon", "1e-9", "--epochs", "50", "--batch-size", "4000"), 1, "calibrating"},
		{"nan training", base(cnn, fmnist+":limit=256", "--lr", "1e30", "--clip", "1e30", "--epochs", "3", "--batch-size", "64", "--seed", "1"), 1, "NaN"},
		{"resume without checkpoint", base(cnn, fmnist, "--resume", "--checkpoint", filepath.Join(dir, "no.ckpt")), 1, "no.ckpt"},
		{"views without augmentation", base(cnn, fmnist, "--augment-multiplicity", "4"), 2, "needs --augment"},
		{"no views", base(cnn, fmnist, "--augment", "flip", "--augment-multiplicity", "0"), 2, "--augment-multiplicity must be between 1 and"},
		{"too many views", base(cnn, fmnist, "--augment", "flip", "--augment-multiplicity", "100000"), 2, "--augment-multiplicity must be between 1 and"},
		{"unknown schedule", base(cnn, fmnist, "--lr-schedule", "step"), 2, "unknown --lr-schedule"},
		{"negative warm-up", base(cnn, fmnist, "--warmup-steps", "-3"), 2, "--warmup-steps -3 must not be negative"},
		{"floor without decay", base(cnn, fmnist, "--min-lr", "1e-4"), 2, "needs --lr-schedule cosine or linear"},
		{"floor over the peak", base(cnn, fmnist, "--lr-schedule", "cosine", "--min-lr", "0.1"), 2, "--min-lr 0.1 must be in [0, --lr 0.001)"},
		{"warm-up over the run", base(cnn, fmnist+":limit=256", "--lr-schedule", "linear", "--warmup-steps", "4", "--batch-size", "64"), 1, "--warmup-steps 4 leaves no step of the run's 4"},
		{"EMA decay 1", base(cnn, fmnist, "--ema", "1"), 2, "--ema must be in [0, 1)"},
		{"label smoothing 1", base(cnn, fmnist, "--label-smoothing", "1"), 2, "--label-smoothing must be in [0, 1)"},
		{"clip quantile 1", base(cnn, fmnist, "--clip-quantile", "1"), 1, "--clip-quantile 1 must be in (0, 1)"},
		{"adaptive per layer", base(cnn, fmnist, "--clip-quantile", "0.5", "--per-layer"), 1, "adaptive clipping: --per-layer"},
		{"checkpoint every 0 steps", base(cnn, fmnist, "--checkpoint-every", "0"), 2, "--checkpoint-every 0: want a positive number"},
		{"checkpoint every soon", base(cnn, fmnist, "--checkpoint-every", "soon"), 2, `--checkpoint-every "soon"`},
		{"checkpoint every -5m", base(cnn, fmnist, "--checkpoint-every", "-5m"), 2, `--checkpoint-every "-5m"`},
		{"negative EMA decay", base(cnn, fmnist, "--ema", "-0.5"), 2, "--ema must be in [0, 1)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, e, code := run(t, c.args...)
			if code != c.code || !strings.Contains(e, c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, e, c.code, c.want)
			}
		})
	}
}

// TestEvalCLI: eval reports the accuracy and a confusion matrix that sums
// to the number of examples, using the normalisation recorded by train;
// its rows are named by the data's classes and end in their accuracy.
func TestEvalCLI(t *testing.T) {
	out, e, code := run(t, "eval", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist+":limit=100", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	var r evalResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, row := range r.Confusion {
		for _, c := range row {
			total += c
		}
	}
	if r.Samples != 100 || total != 100 || r.Accuracy < 0 || r.Accuracy > 1 || !(r.Loss > 0) {
		t.Errorf("eval %+v", r)
	}
	// A folder's class names label the matrix's rows, each row ending in
	// the class's accuracy; JSON carries them too.
	folder := "folder:" + photoFolder(t) + ":train"
	fitted := filepath.Join(t.TempDir(), "fitted.onnx") // so that the diagonal is not all zeros
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", folder, "--test-data", "none", "--non-private",
		"--epochs", "20", "--batch-size", "4", "--lr", "0.01", "--seed", "1", "--quiet", "--out", fitted); code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	text, e, code := run(t, "eval", "--model", fitted, "--data", folder)
	if code != 0 {
		t.Fatalf("eval on a folder: exit %d: %s", code, e)
	}
	rows := regexp.MustCompile(`(?m)^ +([01]) ([ab]):((?: +\d+){10}) +(\d+\.\d) %$`).FindAllStringSubmatch(text, -1)
	if len(rows) != 2 || rows[0][2] != "a" || rows[1][2] != "b" {
		t.Fatalf("confusion rows %q in:\n%s", rows, text)
	}
	diagonal := 0
	for i, row := range rows {
		counts := strings.Fields(row[3])
		n, _ := strconv.Atoi(counts[i])
		diagonal += n
		if want := fmt.Sprintf("%.1f", 100*float64(n)/4); row[4] != want {
			t.Errorf("class %s: accuracy %s %%, want %s (%d of its 4)", row[2], row[4], want, n)
		}
	}
	if diagonal == 0 {
		t.Errorf("no image of the training folder classified right after 20 epochs:\n%s", text)
	}
	out, _, _ = run(t, "eval", "--model", fitted, "--data", folder, "--json")
	if err := json.Unmarshal([]byte(out), &r); err != nil || strings.Join(r.Classes, ",") != "a,b" {
		t.Errorf("JSON classes %q (%v)", r.Classes, err)
	}
	// The figures beyond accuracy (dptrain.TestEvalMetrics holds them to
	// scikit-learn's): on ten classes top-5 and the AUC of each class
	// against the rest, on two the AUC of class 1 and the sensitivity and
	// specificity, in the text and the JSON.
	text, _, _ = run(t, "eval", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist+":limit=100")
	for _, want := range []string{"95 % interval", "balanced: ", "macro F1: ", "top-5: ", "AUC: ", "each class against the rest", "ECE: ", "per class:"} {
		if !strings.Contains(text, want) {
			t.Errorf("eval on ten classes does not say %q:\n%s", want, text)
		}
	}
	var full dptrain.EvalResult
	out, _, _ = run(t, "eval", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist+":limit=100", "--json")
	if err := json.Unmarshal([]byte(out), &full); err != nil || full.Top5 == nil || full.AUC == nil || len(full.PerClass) != 10 ||
		full.AccuracyCI[0] > full.Accuracy || full.AccuracyCI[1] < full.Accuracy || *full.Top5 < full.Accuracy {
		t.Errorf("eval --json on ten classes: %+v (%v)", full, err)
	}
	for c, m := range full.PerClass { // each class against the rest, its interval around it
		if m.AUC == nil || m.AUCCI == nil || !(m.AUCCI[0] <= *m.AUC && *m.AUC <= m.AUCCI[1]) {
			t.Errorf("eval --json on ten classes: class %d's AUC %v, interval %v", c, m.AUC, m.AUCCI)
		}
	}
	binary := filepath.Join(t.TempDir(), "binary.onnx")
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", folder, "--test-data", "none", "--non-private", "--num-classes", "2",
		"--epochs", "20", "--batch-size", "4", "--lr", "0.01", "--seed", "1", "--quiet", "--out", binary); code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	text, _, _ = run(t, "eval", "--model", binary, "--data", folder)
	for _, want := range []string{"ROC of class 1 b's probability; 95 % CI ", "DeLong's", "sensitivity: ", "(class 1 b's recall), specificity: ", "(class 0 a's)"} {
		if !strings.Contains(text, want) {
			t.Errorf("eval on two classes does not say %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "top-5") {
		t.Errorf("top-5 of two classes:\n%s", text)
	}
	// An operating point: class 1 decided above --threshold. At a
	// threshold near 0 every image is decided class 1 (sensitivity 1,
	// specificity 0), near 1 none; the AUC stays.
	var atHalf, low, high dptrain.EvalResult
	for _, c := range []struct {
		threshold string
		r         *dptrain.EvalResult
	}{{"", &atHalf}, {"1e-9", &low}, {"0.999999999", &high}} {
		args := []string{"eval", "--model", binary, "--data", folder, "--json"}
		if c.threshold != "" {
			args = append(args, "--threshold", c.threshold)
		}
		out, e, code := run(t, args...)
		if err := json.Unmarshal([]byte(out), c.r); code != 0 || err != nil {
			t.Fatalf("eval --threshold %q: exit %d (%v): %s", c.threshold, code, err, e)
		}
	}
	if *low.AUC != *atHalf.AUC || low.PerClass[1].Recall != 1 || low.PerClass[0].Recall != 0 || high.PerClass[1].Recall != 0 || high.PerClass[0].Recall != 1 ||
		len(low.Thresholds) != 1 || atHalf.Thresholds != nil {
		t.Errorf("eval --threshold: near 0 %+v, near 1 %+v, none %+v", low, high, atHalf)
	}
	// An operating point chosen on the data (Youden's index) and the ROC
	// curve: deciding at the point's threshold gives its sensitivity and
	// specificity; the curve's trapezoids sum to the AUC.
	roc := filepath.Join(t.TempDir(), "roc.csv")
	o, e, code := run(t, "eval", "--model", binary, "--data", folder, "--operating-point", "youden", "--roc", roc, "--json")
	var yo dptrain.EvalResult
	if err := json.Unmarshal([]byte(o), &yo); code != 0 || err != nil || len(yo.OperatingPoints) != 1 || yo.OperatingPoints[0].Label != 1 {
		t.Fatalf("eval --operating-point youden: exit %d (%v): %s%s", code, err, o, e)
	}
	p := yo.OperatingPoints[0]
	o, e, code = run(t, "eval", "--model", binary, "--data", folder, "--threshold", strconv.FormatFloat(p.Threshold, 'g', -1, 64), "--json")
	var atP dptrain.EvalResult
	if err := json.Unmarshal([]byte(o), &atP); code != 0 || err != nil || atP.PerClass[1].Recall != p.Sensitivity || atP.PerClass[0].Recall != p.Specificity || p.Sensitivity+p.Specificity < 1 {
		t.Errorf("eval at the Youden point %+v: exit %d (%v): %+v %s", p, code, err, atP.PerClass, e)
	}
	rows, err := readCSVFile(roc)
	if err != nil || len(rows) < 3 || strings.Join(rows[0], ",") != "label,name,threshold,fpr,tpr,tp,fp,tn,fn" || rows[1][2] != "1" || rows[len(rows)-1][2] != "0" {
		t.Fatalf("--roc wrote %v (%v)", rows, err)
	}
	var area float64
	for i := 2; i < len(rows); i++ {
		f0, _ := strconv.ParseFloat(rows[i-1][3], 64)
		t0, _ := strconv.ParseFloat(rows[i-1][4], 64)
		f1, _ := strconv.ParseFloat(rows[i][3], 64)
		t1, _ := strconv.ParseFloat(rows[i][4], 64)
		area += (f1 - f0) * (t0 + t1) / 2
	}
	if math.Abs(area-*yo.AUC) > 1e-9 {
		t.Errorf("--roc: the curve's area %v, the AUC %v", area, *yo.AUC)
	}
	// eval --plot: a two-class model's ROC curve and reliability diagram,
	// side by side; ten classes' reliability diagram alone.
	for _, c := range []struct {
		model, data string
		width       int
	}{{binary, folder, 1400}, {"../../testdata/models/cnn.onnx", fmnist + ":limit=100", 700}} {
		png := filepath.Join(t.TempDir(), "eval.png")
		if o, e, code := run(t, "eval", "--model", c.model, "--data", c.data, "--plot", png); code != 0 || !strings.Contains(o, "drawn: "+png) {
			t.Fatalf("eval --plot: exit %d: %s%s", code, o, e)
		}
		if w, h := pngSize(t, png); w != c.width || h != 650 {
			t.Errorf("eval --plot of %s: %d×%d pixels, want %d×650", c.model, w, h, c.width)
		}
	}
	if text, _, _ := run(t, "eval", "--model", binary, "--data", folder, "--threshold", "0.25"); !strings.Contains(text, "decided:  class 1 where its probability exceeds 0.25") {
		t.Errorf("eval --threshold 0.25 does not say it:\n%s", text)
	}
	// predict decides the same way: every image class 1 near 0, class 0
	// near 1.
	photos := strings.TrimSuffix(strings.TrimPrefix(folder, "folder:"), ":train")
	for _, c := range []struct{ threshold, want string }{{"1e-9", "b"}, {"0.999999999", "a"}} {
		out, e, code := run(t, "predict", "--model", binary, "--images", photos, "--threshold", c.threshold, "--json")
		var pr struct {
			Predictions []imagePrediction `json:"predictions"`
		}
		if err := json.Unmarshal([]byte(out), &pr); code != 0 || err != nil || len(pr.Predictions) == 0 {
			t.Fatalf("predict --threshold %s: exit %d (%v): %s", c.threshold, code, err, e)
		}
		for _, p := range pr.Predictions {
			if p.Decided != c.want {
				t.Errorf("predict --threshold %s: %s decided %q, want %q", c.threshold, p.File, p.Decided, c.want)
			}
		}
	}
	for _, c := range []struct{ model, data, threshold, want string }{
		{binary, folder, "2", "one threshold in (0, 1)"},
		{binary, folder, "b=0.3", "one threshold in (0, 1)"},
		{"../../testdata/models/cnn.onnx", fmnist + ":limit=50", "0.3", "this model has 10 classes"},
	} {
		if _, e, code := run(t, "eval", "--model", c.model, "--data", c.data, "--threshold", c.threshold); code != 2 || !strings.Contains(e, c.want) {
			t.Errorf("eval --threshold %s: exit %d: %s", c.threshold, code, e)
		}
	}
	if _, e, code := run(t, "eval", "--model", "../../testdata/models/cnn.onnx", "--data", "cifar10:/nonexistent"); code != 1 || !strings.Contains(e, "nonexistent") {
		t.Errorf("missing data: exit %d, %q", code, e)
	}
	_ = npy.Float32
}

// TestMaxMemory: --max-memory picks the largest physical batch whose
// estimated peak fits the cap less its headroom (dptrain.Usable), the
// estimate counting the compiled plan's activations (the report's plan
// carries them), and a cap below one sample is a clear error.
func TestMaxMemory(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		bad  bool
	}{{"8GiB", 8 << 30, false}, {"512 MiB", 512 << 20, false}, {"2GB", 2e9, false}, {"1000", 1000, false}, {"lots", 0, true}, {"-1GiB", 0, true}} {
		got, err := parseBytes(c.in)
		if (err != nil) != c.bad || (!c.bad && got != c.want) {
			t.Errorf("parseBytes(%q) = %d, %v", c.in, got, err)
		}
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "m.onnx")
	rep := filepath.Join(dir, "r.json")
	args := []string{"train", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist + ":limit=256", "--epsilon", "3",
		"--batch-size", "128", "--quiet", "--test-data", "none", "--out", out, "--report", rep}
	if _, e, code := run(t, append(args, "--max-memory", "4MiB")...); code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	var r runReport
	b, _ := os.ReadFile(rep)
	json.Unmarshal(b, &r)
	P := r.Settings.PhysicalBatch
	if P < 1 || P > 128 {
		t.Fatalf("physical batch %d", P)
	}
	if _, ok := r.Plan.Compiled["bk"]; !ok {
		t.Fatalf("the report's plan has no compiled activations for bk: %v", r.Plan.Compiled)
	}
	fits := func(b int) bool {
		for _, m := range r.Plan.MemoryAt(int64(b)) {
			if m.Mode == "bk" {
				return m.Total <= dptrain.Usable(4<<20)
			}
		}
		return false
	}
	if !fits(P) || (P < 128 && fits(P+1)) {
		t.Errorf("physical batch %d is not the largest that fits 4 MiB", P)
	}
	if _, e, code := run(t, append(args, "--max-memory", "1KiB")...); code != 1 || !strings.Contains(e, "even a physical batch of 1") {
		t.Errorf("tiny cap: exit %d, %q", code, e)
	}
}

// exportMatchesORT loads the exported model out, checks that it kept a
// dynamic batch axis, and holds our runtime's outputs on a batch of three
// samples (shape sample) to onnxruntime's within 1e-4 of their scale.
func exportMatchesORT(t *testing.T, out string, sample []int64) {
	t.Helper()
	m, err := onnx.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	if d := g.Inputs[0].Shape[0]; d.Size >= 0 {
		t.Errorf("export lost the dynamic batch axis: %v", g.Inputs[0].Shape)
	}
	const n = 3
	plan, err := runtime.CompileForBatch(g, n, sample, &runtime.Options{ForwardOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	x, shape := plan.Input(0)
	for i := range x {
		x[i] = float32(math.Sin(float64(i) * 0.37))
	}
	if err := plan.Forward(); err != nil {
		t.Fatal(err)
	}
	ours, _ := plan.Output(0)
	sh := make([]int64, len(shape))
	for i, d := range shape {
		sh[i] = int64(d)
	}
	res := orttest.Run(t, out, map[string]orttest.Tensor{g.Inputs[0].Name: {Shape: sh, Data: x}})
	if rel := numcheck.RelErr(ours, res[g.Outputs[0].Name].Data, 0); rel > 1e-4 {
		t.Errorf("onnxruntime vs ours on the export: max diff %.3g of the outputs' scale", rel)
	}
}

// TestTrainNormCheck: a private run checks the engine's per-sample norms
// before its first step and says so; where they are wrong (a test-only
// hook takes a convolution's windows for samples, as the engine once did
// on windowconv) train refuses the model, names the parameter and writes
// nothing; --norm-check=false trains anyway and says the norms are not
// checked; a non-private run has none to check.
func TestTrainNormCheck(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join("..", "..", "testdata", "models", "windowconv.onnx")
	args := func(out string, extra ...string) []string {
		return append([]string{"train", "--model", model, "--data", fmnist + ":limit=32", "--num-classes", "10", "--epsilon", "8",
			"--batch-size", "8", "--epochs", "1", "--seed", "1", "--quiet", "--out", filepath.Join(dir, out)}, extra...)
	}
	out, e, code := run(t, args("ok.onnx")...)
	if code != 0 || !regexp.MustCompile(`norms: +checked: the per-sample gradient norms of 3 synthetic samples are each one's own gradient's, for all 20 parameters \(largest difference [0-9.e+-]+ of a squared total, [0-9.e+-]+ of a parameter's own\)`).MatchString(out) {
		t.Fatalf("exit %d: %s%s", code, out, e)
	}

	testhook.ConvWindowsAsSamples = true
	defer func() { testhook.ConvWindowsAsSamples = false }()
	out, e, code = run(t, args("broken.onnx")...)
	if code == 0 || !strings.Contains(e, "norm check: parameter") || !strings.Contains(e, "the engine would clip this model's samples wrongly") {
		t.Errorf("with windows taken for samples: exit %d: %s%s", code, out, e)
	}
	if _, err := os.Stat(filepath.Join(dir, "broken.onnx")); !os.IsNotExist(err) {
		t.Errorf("a refused run wrote its model: %v", err)
	}
	out, e, code = run(t, args("unchecked.onnx", "--norm-check=false")...)
	if code != 0 || !strings.Contains(out, "norms:     NOT checked (--norm-check=false)") {
		t.Errorf("--norm-check=false: exit %d: %s%s", code, out, e)
	}
	out, e, code = run(t, append(args("nondp.onnx", "--non-private"), "--epsilon", "0")...)
	if code != 0 || strings.Contains(out, "norms:") {
		t.Errorf("--non-private: exit %d: %s%s", code, out, e)
	}
}

// TestTrainDynamoExport: timm's EfficientViT-M0 as PyTorch's dynamo
// exporter writes it (testdata/dynamo; convolutions over windows folded
// into the batch) trains in every clipping mode with the norm check
// passing, and the norm check refuses it where windows are taken for
// samples (testhook.ConvWindowsAsSamples, the bug the fifth GPU loan found
// on this model).
func TestTrainDynamoExport(t *testing.T) {
	model := dynamotest.File(t, "efficientvit_m0.nodata.onnx.gz")
	dir := t.TempDir()
	args := func(out string, extra ...string) []string {
		return append([]string{"train", "--model", model, "--data", fmnist + ":limit=8", "--test-data", "none", "--num-classes", "10",
			"--epsilon", "8", "--batch-size", "4", "--epochs", "1", "--seed", "1", "--quiet", "--out", filepath.Join(dir, out)}, extra...)
	}
	checked := regexp.MustCompile(`norms: +checked: the per-sample gradient norms of 3 synthetic samples are each one's own gradient's, for all 248 parameters`)
	for _, mode := range []string{"bk", "mixed", "ghost", "instantiate"} {
		out, e, code := run(t, args(mode+".onnx", "--mode", mode)...)
		if code != 0 || !checked.MatchString(out) {
			t.Errorf("--mode %s: exit %d: %s%s", mode, code, out, e)
		}
	}
	testhook.ConvWindowsAsSamples = true
	defer func() { testhook.ConvWindowsAsSamples = false }()
	out, e, code := run(t, args("broken.onnx")...)
	if code == 0 || !strings.Contains(e, "norm check: parameter") || !strings.Contains(e, "of the parameter's own") {
		t.Errorf("with windows taken for samples: exit %d: %s%s", code, out, e)
	}
}

// TestTrainSwinHead: torchvision's Swin-T as PyTorch's dynamo exporter
// writes it flattens its pooled features by as_strided (one axis, then a
// Gather by indices computed from the batch size) before its head; train
// follows the samples through it, so nothing is frozen, the norm check
// passes for every parameter (the fresh head's included), and the export
// runs in onnxruntime at another batch size than the one trained with.
func TestTrainSwinHead(t *testing.T) {
	model := dynamotest.File(t, "swin_t.nodata.onnx.gz")
	out := filepath.Join(t.TempDir(), "swin.onnx")
	stdout, e, code := run(t, "train", "--model", model, "--data", fmnist+":limit=8", "--test-data", "none", "--num-classes", "10",
		"--epsilon", "8", "--batch-size", "4", "--epochs", "1", "--seed", "1", "--quiet", "--out", out)
	if code != 0 || !strings.Contains(stdout, "in 149 tensors, 0 frozen") ||
		!strings.Contains(stdout, "each one's own gradient's, for all 149 parameters") {
		t.Fatalf("exit %d: %s%s", code, stdout, e)
	}
	exportMatchesORT(t, out, []int64{3, 224, 224})
}

// TestParseCheckpointEvery: --checkpoint-every takes a number of steps or a
// duration.
func TestParseCheckpointEvery(t *testing.T) {
	for _, c := range []struct {
		in    string
		steps int
		every time.Duration
	}{{"", 0, 0}, {"500", 500, 0}, {"15m", 0, 15 * time.Minute}, {"1h30m", 0, 90 * time.Minute}, {"45s", 0, 45 * time.Second}} {
		s, d, err := parseCheckpointEvery(c.in)
		if err != nil || s != c.steps || d != c.every {
			t.Errorf("%q: %d steps, %v, %v; want %d, %v", c.in, s, d, err, c.steps, c.every)
		}
	}
}
