package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/internal/orttest"
)

// breadthCI is the subset of testdata/gen/breadth.py's models that runs on
// every test run (when PyTorch is present): a transformer at opset 17 with
// native LayerNormalization, a BatchNorm CNN with Dropout and HardSwish, a
// ConvNeXt (LayerNorm over channels, layer scale), GoogLeNet (Concat of
// four branches, MaxPool with ceil_mode) and a Swin transformer
// (relative-position bias, shifted windows: biases on window-batched
// tokens, whose per-sample norms were once wrong). DPFINETUNE_BREADTH=1 runs all
// of them; DPFINETUNE_BREADTH=a,b runs those; DPFINETUNE_BREADTH_OPSETS=11,13
// exports them at those opsets instead of 14 and 17. docs/BREADTH.md has
// the last full run's results. breadthAll's last four are torchvision's
// video classifiers, whose samples are (3, T, H, W) clips.
var breadthCI = []string{"vit", "mobilenet_v3_small", "convnext", "googlenet", "swin_t"}

var breadthAll = []string{"resnet18", "wide_resnet", "resnext", "densenet", "mobilenet_v2", "mobilenet_v3_small",
	"mobilenet_v3_large", "efficientnet", "regnet", "shufflenet_v2", "mnasnet", "googlenet", "inception_v3",
	"squeezenet", "alexnet", "vgg", "vgg_bn", "convnext", "swin_t", "swin_v2", "efficientnet_v2", "vit", "maxvit",
	"r3d_18", "mc3_18", "r2plus1d_18", "s3d"}

// breadthEntry is a model's entry in breadth.py's manifest.
type breadthEntry struct {
	// Size is an image's side, or a clip's height.
	Size int `json:"size"`
	// Shape is a sample's shape: [3, S, S] for an image, [3, T, H, W]
	// for a video model's clip.
	Shape   []int             `json:"shape"`
	HasBN   bool              `json:"has_bn"`
	Reduced string            `json:"reduced"`
	Errors  map[string]string `json:"errors"`
	// Buffers are the model's floating-point buffers, which an export
	// stores as initializers and PyTorch does not train.
	Buffers []string `json:"buffers"`
}

// breadthExports runs breadth.py for models into a cache directory keyed by
// the script and the list, or skips t without PyTorch.
func breadthExports(t *testing.T, models []string, opsets []int) (string, map[string]breadthEntry) {
	t.Helper()
	if testing.Short() {
		t.Skip("torchvision breadth exports are slow; skipped in -short")
	}
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, torchvision, onnx").Run(); err != nil {
		t.Skip("no /usr/bin/python3 with torch, torchvision and onnx")
	}
	gen := "../../testdata/gen"
	h := sha256.New()
	for _, f := range []string{"breadth.py", "make_dropout.py", "make_fixtures.py"} {
		b, err := os.ReadFile(filepath.Join(gen, f))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	h.Write([]byte(strings.Join(models, ",")))
	var ops []string
	for _, o := range opsets {
		ops = append(ops, strconv.Itoa(o))
	}
	if !slices.Equal(opsets, []int{14, 17}) {
		h.Write([]byte(" opsets " + strings.Join(ops, ",")))
	}
	dir := filepath.Join(os.TempDir(), "dpfinetune-breadth-"+hex.EncodeToString(h.Sum(nil)[:6]))
	if _, err := os.Stat(filepath.Join(dir, "done")); err != nil {
		cmd := exec.Command(py, filepath.Join(gen, "breadth.py"), "--out", dir, "--models", strings.Join(models, ","),
			"--opsets", strings.Join(ops, ","))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("breadth.py: %v\n%s", err, out)
		}
		if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	man := map[string]breadthEntry{}
	if err := json.Unmarshal(raw, &man); err != nil {
		t.Fatal(err)
	}
	return dir, man
}

// TestTorchvisionBreadth exports reduced torchvision classifiers
// (testdata/gen/breadth.py) at opsets 14 and 17 (or
// DPFINETUNE_BREADTH_OPSETS), in eval form and in
// TrainingMode.TRAINING form without constant folding, and checks each:
//
//   - predict against PyTorch's logits (max |Δ| ≤ 1e-4·max(1, max|want|));
//   - norms --mode bk against PyTorch's brute-force per-sample gradient
//     norms for models without BatchNorm (rel ≤ 1e-3, and no parameter
//     frozen), and against norms --mode instantiate for models with it;
//   - two epochs of DP training on 16 Fashion-MNIST images, or for a
//     video model on 16 random clips of its input's shape
//     (breadthTrainData) (exit 0);
//   - the trained export in onnxruntime against predict on it;
//   - for the training form at the last opset (BatchNormalization and Dropout
//     kept, weights through Transpose), norms --mode bk --device cuda on
//     the guarded CUDA emulation against --device cpu (normsMatchCUDA),
//     skipped where the emulation cannot run; and training with each
//     sample fed as two augmented views (trainViews), the norm check
//     passing.
func TestTorchvisionBreadth(t *testing.T) {
	models := breadthCI
	switch v := os.Getenv("DPFINETUNE_BREADTH"); v {
	case "":
	case "1":
		models = breadthAll
	default:
		models = strings.Split(v, ",")
	}
	opsets := []int{14, 17}
	if v := os.Getenv("DPFINETUNE_BREADTH_OPSETS"); v != "" {
		opsets = nil
		for _, f := range strings.Split(v, ",") {
			o, err := strconv.Atoi(f)
			if err != nil || o < 7 {
				t.Fatalf("DPFINETUNE_BREADTH_OPSETS=%s: %q is no opset", v, f)
			}
			opsets = append(opsets, o)
		}
	}
	dir, man := breadthExports(t, models, opsets)
	var weightsJobs []weightsJob
	for _, name := range models {
		e, ok := man[name]
		if !ok {
			t.Fatalf("%s: not exported", name)
		}
		ref, err := npy.ReadNPZ(filepath.Join(dir, name+".npz"))
		if err != nil {
			t.Fatal(err)
		}
		tmp := t.TempDir()
		data := breadthTrainData(t, e, tmp)
		x, y := filepath.Join(tmp, "x.npy"), filepath.Join(tmp, "y.npy")
		if err := npy.WriteFile(x, ref["input"]); err != nil {
			t.Fatal(err)
		}
		if err := npy.WriteFile(y, ref["labels"]); err != nil {
			t.Fatal(err)
		}
		for _, form := range []string{"eval", "train"} {
			for _, opset := range opsets {
				key := fmt.Sprintf("%s_op%d", form, opset)
				t.Run(name+"/"+key, func(t *testing.T) {
					if msg, bad := e.Errors[key]; bad {
						t.Skipf("PyTorch cannot export it: %s", msg)
					}
					model := filepath.Join(dir, fmt.Sprintf("%s_%s.onnx", name, key))
					breadthCheck(t, model, form, x, y, data, ref, e, tmp)
					if job, ok := breadthWeights(t, model, form, e.HasBN, tmp); ok {
						weightsJobs = append(weightsJobs, job)
					}
					if form == "train" && opset == opsets[len(opsets)-1] {
						// 5. The CUDA backend, on its guarded emulation.
						t.Run("cuda", func(t *testing.T) {
							useEmulatedCUDA(t)
							normsMatchCUDA(t, model, x, y, []string{"bk"})
						})

						// 6. Augmentation multiplicity: each sample's two
						// views folded into the batch through the whole
						// model, the norm check over them passing.
						t.Run("views", func(t *testing.T) {
							trainViews(t, model, data, filepath.Join(tmp, "views.onnx"))
						})
					}
				})
			}
		}
	}
	// 7. The state dicts `weights` wrote, against the modules' own (one
	// Python run for all of them).
	checkBreadthWeights(t, weightsJobs)
}

// weightsJob is a state dict `weights` wrote from a breadth export, and
// the module's own state dict breadth.py saved beside the export.
type weightsJob struct {
	Name    string   `json:"name"`
	File    string   `json:"file"`
	Ref     string   `json:"ref"`
	Unnamed []string `json:"unnamed"`
	// Unfolded says the file's BatchNorms were unfolded from the
	// exporter's folded convolutions (--like): W'/s, to float32's rounding.
	Unfolded bool `json:"unfolded,omitempty"`
}

// breadthWeights runs `weights` on a breadth export: a training-form
// export's state dict must name every tensor; an eval-form export's of a
// model with BatchNorm is refused (folded), then written with its
// BatchNorms given back from the training-form export (--like); any other
// is written with its unnamed tensors listed. It returns the job to
// check, if one was written.
func breadthWeights(t *testing.T, model, form string, hasBN bool, tmp string) (weightsJob, bool) {
	t.Helper()
	out := filepath.Join(tmp, strings.TrimSuffix(filepath.Base(model), ".onnx")+"_w.pt")
	args := []string{"weights", "--model", model, "--out", out, "--json"}
	if form == "eval" {
		args = append(args, "--allow-unnamed")
	}
	stdout, stderr, code := run(t, args...)
	unfolded := false
	if form == "eval" && hasBN {
		if code == 0 || !strings.Contains(stderr, "folded its BatchNorms") {
			t.Errorf("weights of a folded export: exit %d, %q; want it refused as folded", code, stderr)
		}
		// Given back from the training-form export of the same module.
		train := strings.Replace(model, "_eval_", "_train_", 1)
		if _, err := os.Stat(train); err != nil {
			return weightsJob{}, false
		}
		stdout, stderr, code = run(t, append(args, "--like", train)...)
		unfolded = true
	}
	if code != 0 {
		t.Errorf("weights: exit %d: %s", code, stderr)
		return weightsJob{}, false
	}
	var w struct {
		Record WeightsRecord `json:"record"`
	}
	if err := json.Unmarshal([]byte(stdout), &w); err != nil {
		t.Fatalf("weights --json: %v", err)
	}
	job := weightsJob{Name: filepath.Base(model), File: out, Ref: strings.TrimSuffix(model, ".onnx") + "_sd.pt", Unfolded: unfolded}
	for _, u := range w.Record.Unnamed {
		job.Unnamed = append(job.Unnamed, u.Source)
	}
	return job, true
}

// breadthWeightsCheck compares each job's file with its reference state
// dict: the keys, their shapes and their values bit for bit (to float32's
// rounding where unfolded), and which of
// the module's floating-point tensors the file lacks; it prints a JSON
// list of findings.
const breadthWeightsCheck = `
import json, sys
import torch
from load_state_dict import read
out = []
for job in json.load(open(sys.argv[1])):
    sd, _ = read(job["file"])
    ref = torch.load(job["ref"])
    def same(r, t):
        if job.get("unfolded"):  # W'/s and β from the folded bias: float32's rounding
            return torch.allclose(r.float(), t, rtol=1e-4, atol=1e-5 * max(1.0, float(r.abs().max())))
        return torch.equal(r.float(), t)
    bad = [k for k, t in sd.items() if k not in ref or tuple(ref[k].shape) != tuple(t.shape) or not same(ref[k], t)]
    missing = [k for k in ref if k not in sd and ref[k].is_floating_point()]
    out.append({"name": job["name"], "tensors": len(sd), "bad": bad, "missing": missing})
print(json.dumps(out))
`

// checkBreadthWeights runs breadthWeightsCheck over jobs. A tensor not the
// module's is an error; so is a module's floating-point tensor missing
// from a file `weights` wrote without listing a tensor it could not name
// (an eval-form export's values folded from parameters: Swin's relative
// position biases gathered from their tables).
func checkBreadthWeights(t *testing.T, jobs []weightsJob) {
	t.Helper()
	if len(jobs) == 0 {
		return
	}
	dir := t.TempDir()
	jobFile := filepath.Join(dir, "jobs.json")
	b, _ := json.Marshal(jobs)
	if err := os.WriteFile(jobFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	raw := pythonWithDocs(t, breadthWeightsCheck, jobFile)
	var res []struct {
		Name    string   `json:"name"`
		Tensors int      `json:"tensors"`
		Bad     []string `json:"bad"`
		Missing []string `json:"missing"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("weights check: %v: %s", err, raw)
	}
	for i, r := range res {
		if len(r.Bad) > 0 {
			t.Errorf("weights %s: tensors not the module's: %v", r.Name, r.Bad)
		}
		if len(jobs[i].Unnamed) == 0 && len(r.Missing) > 0 {
			t.Errorf("weights %s: the module's %v not written, and no tensor said unnamed", r.Name, r.Missing)
		}
		t.Logf("weights %s: %d tensors the module's; unnamed %v; the module's floating-point tensors not written: %v", r.Name, r.Tensors, jobs[i].Unnamed, r.Missing)
	}
}

// breadthTrainData is the --data the training checks use: 16
// Fashion-MNIST images for an image model; for a model whose samples are
// clips (entry.Shape [3, T, H, W]), 16 clips of that shape written to
// tmp/clips.npz (x_train float32 of seeded normal values, y_train of the
// 10 classes in turn), fed to the model as they are.
func breadthTrainData(t *testing.T, entry breadthEntry, tmp string) string {
	t.Helper()
	if len(entry.Shape) != 4 {
		return fmnist + ":limit=16"
	}
	const n = 16
	shape := append([]int{n}, entry.Shape...)
	size := 1
	for _, d := range shape {
		size *= d
	}
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, size)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]int64, n)
	for i := range y {
		y[i] = int64(i % 10)
	}
	p := filepath.Join(tmp, "clips.npz")
	if err := npy.WriteNPZ(p, map[string]*npy.Array{"x_train": npy.NewFloat32(x, shape...), "y_train": npy.NewInt64(y, n)}); err != nil {
		t.Fatal(err)
	}
	return "npy:" + p
}

// trainViews trains model on data (breadthTrainData) for a step or two
// with each sample fed as two flipped views (--augment-multiplicity 2;
// a clip's frames flipped along their last two axes); the norm check, on
// by default, holds the engine's per-sample norms over the views to each
// sample's own gradient.
func trainViews(t *testing.T, model, data, out string) {
	t.Helper()
	stdout, stderr, code := run(t, "train", "--model", model, "--data", data, "--test-data", "none",
		"--epsilon", "8", "--epochs", "1", "--batch-size", "8", "--physical-batch", "4", "--num-classes", "10",
		"--augment", "flip", "--augment-multiplicity", "2", "--seed", "1", "--quiet", "--out", out)
	if code != 0 || !strings.Contains(stdout, "norms:     checked") {
		t.Fatalf("train with two views a sample: exit %d: %s%s", code, stdout, stderr)
	}
}

// breadthCheck runs checks 1 to 4 of TestTorchvisionBreadth on one
// export: predict on x against ref's logits, norms on x and y, two epochs
// of DP training on data (breadthTrainData), and the trained export in
// onnxruntime.
func breadthCheck(t *testing.T, model, form, x, y, data string, ref map[string]*npy.Array, entry breadthEntry, tmp string) {
	hasBN := entry.HasBN
	// 1. Logits.
	out := filepath.Join(tmp, "logits.npy")
	if _, stderr, code := run(t, "predict", "--model", model, "--input", x, "--out", out); code != 0 {
		t.Fatalf("predict: exit %d: %s", code, stderr)
	}
	got, err := npy.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Against PyTorch in float64, to 1e-4·max(1, max|want|) or, where
	// PyTorch's own float32 result is further off (BatchNorm over a batch of
	// 4 at 1×1 spatial size), four times that.
	want64 := ref["logits_"+form+"64"].F64
	want := make([]float32, len(want64))
	for i, v := range want64 {
		want[i] = float32(v)
	}
	torchErr, _ := maxDiff(ref["logits_"+form].F32, want)
	d, m := maxDiff(got.F32, want)
	if tol := math.Max(1e-4*math.Max(1, m), 4*torchErr); d > tol {
		t.Errorf("predict: max |Δ| = %.3g > %.3g (max |want| = %.3g; PyTorch float32 is off by %.3g)", d, tol, m, torchErr)
	}

	// 2. Per-sample gradient norms.
	norms := func(mode string) normsReport {
		stdout, stderr, code := run(t, "norms", "--model", model, "--input", x, "--labels", y, "--mode", mode, "--json")
		if code != 0 {
			t.Fatalf("norms --mode %s: exit %d: %s", mode, code, stderr)
		}
		var r normsReport
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	bk := norms("bk")
	var wantNorms []float64
	what := "PyTorch brute force"
	if hasBN {
		wantNorms, what = norms("instantiate").Total, "instantiate mode"
	} else {
		// Only buffers may be frozen: PyTorch's brute force trains every
		// parameter.
		for name, why := range bk.Frozen {
			if !slices.Contains(entry.Buffers, name) {
				t.Errorf("norms froze parameter %s: %s", name, why)
			}
		}
		for _, v := range ref["norms"].F64 {
			wantNorms = append(wantNorms, v)
		}
	}
	if len(bk.Total) != len(wantNorms) {
		t.Fatalf("norms: %d samples, want %d", len(bk.Total), len(wantNorms))
	}
	for i, w := range wantNorms {
		if r := math.Abs(bk.Total[i]-w) / w; !(r <= 1e-3) {
			t.Errorf("norms: sample %d: bk %.6g, %s %.6g (rel %.2g)", i, bk.Total[i], what, w, r)
		}
	}

	// 3. DP training steps, 4. the export in onnxruntime.
	trained := filepath.Join(tmp, "trained.onnx")
	if _, stderr, code := run(t, "train", "--model", model, "--data", data, "--test-data", "none",
		"--epsilon", "8", "--epochs", "2", "--batch-size", "8", "--physical-batch", "4", "--num-classes", "10",
		"--seed", "1", "--quiet", "--out", trained); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	ours := filepath.Join(tmp, "trained.npy")
	if _, stderr, code := run(t, "predict", "--model", trained, "--input", x, "--out", ours); code != 0 {
		t.Fatalf("predict on the trained model: exit %d: %s", code, stderr)
	}
	o, err := npy.ReadFile(ours)
	if err != nil {
		t.Fatal(err)
	}
	in := ref["input"]
	sh := make([]int64, len(in.Shape))
	for i, d := range in.Shape {
		sh[i] = int64(d)
	}
	res := orttest.Run(t, trained, map[string]orttest.Tensor{"input": {Shape: sh, Data: in.F32}})
	outs := make([]string, 0, len(res))
	for k := range res {
		outs = append(outs, k)
	}
	sort.Strings(outs)
	theirs, ok := res["logits"]
	if !ok {
		t.Fatalf("onnxruntime outputs %v, no logits", outs)
	}
	if d, m := maxDiff(theirs.Data, o.F32); d > 1e-4*math.Max(1, m) {
		t.Errorf("trained model: onnxruntime vs predict max |Δ| = %.3g, max = %.3g", d, m)
	}
}

func maxDiff(got, want []float32) (d, m float64) {
	if len(got) != len(want) {
		return math.Inf(1), 0
	}
	for i, w := range want {
		m = math.Max(m, math.Abs(float64(w)))
		if e := math.Abs(float64(got[i]) - float64(w)); e > d || math.IsNaN(e) {
			d = e
			if math.IsNaN(e) {
				d = math.Inf(1)
			}
		}
	}
	return d, m
}
