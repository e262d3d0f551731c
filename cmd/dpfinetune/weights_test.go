package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/dynamotest"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

// weightsTorch exports the test's torchvision models (argv: export DIR)
// and checks state dicts against them (argv: check JOB.json): it is run
// by /usr/bin/python3 with docs/ on its path (docs/load_state_dict.py).
const weightsTorch = `
import json, sys
import numpy as np, torch, torchvision
from torchvision.models.resnet import ResNet, BasicBlock
from load_state_dict import load_tuned, read

def build(name, classes=4):
    torch.manual_seed(0)
    if name == "resnet":
        m = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=classes)
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.data.uniform_(0.5, 1.5)
                mod.bias.data.uniform_(-0.2, 0.2)
                mod.momentum = 0.0  # the training-mode export's forward leaves the statistics as they are
        return m
    return torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                hidden_dim=32, mlp_dim=64, num_classes=classes)

def export(d):
    x = torch.randn(2, 3, 32, 32)
    kw = dict(opset_version=14, input_names=["input"], output_names=["logits"],
              dynamic_axes={"input": {0: "b"}, "logits": {0: "b"}})
    r = build("resnet")
    torch.onnx.export(r, x, d + "/resnet_train.onnx", training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, **kw)
    moved = build("resnet")
    for mod in moved.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.momentum = 0.1  # PyTorch's default: the export's forward moves the statistics
    torch.onnx.export(moved, x, d + "/resnet_train_moved.onnx", training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, **kw)
    torch.onnx.export(build("resnet").eval(), x, d + "/resnet_eval.onnx", **kw)
    torch.onnx.export(build("vit").eval(), x, d + "/vit_eval.onnx", **kw)
    rng = np.random.default_rng(0)
    np.save(d + "/data/x.npy", rng.standard_normal((24, 3, 32, 32)).astype(np.float32))
    np.save(d + "/data/y.npy", (np.arange(24) % 4).astype(np.int64))
    np.save(d + "/data/x_test.npy", rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
    np.save(d + "/data/y_test.npy", (np.arange(16) % 4).astype(np.int64))
    np.save(d + "/x.npy", rng.standard_normal((5, 3, 32, 32)).astype(np.float32))

def check(job):
    out = []
    for c in job:
        m = build(c["model"])
        if c["kind"] == "same":
            # An export's own weights: each tensor the module's, bit for bit.
            sd, record = read(c["file"])
            ref = m.state_dict()
            bad = [k for k, t in sd.items() if k not in ref or tuple(ref[k].shape) != tuple(t.shape) or not torch.equal(ref[k].float(), t)]
            missing = sorted(set(ref) - set(sd))
            out.append({"file": c["file"], "bad": bad, "missing": missing, "record": record})
            continue
        # A tuned model's weights loaded into the module: its logits those
        # dpfinetune predicts with the ONNX model.
        record = load_tuned(m, c["file"])
        m.eval()
        with torch.no_grad():
            got = m(torch.from_numpy(np.load(c["x"]))).double().numpy()
        t = record.get("calibration", {}).get("temperature")
        if t:
            got = got / t[0]
        want = np.load(c["y"]).astype(np.float64)
        out.append({"file": c["file"], "max_err": float(np.abs(got - want).max()), "scale": float(np.abs(want).max()),
                    "record": record, "modules": {n: type(mod).__name__ for n, mod in m.named_modules()}})
    print(json.dumps(out))

if sys.argv[1] == "export":
    export(sys.argv[2])
else:
    check(json.load(open(sys.argv[2])))
`

// TestWeightsLoadIntoTorchModule: `weights` writes what PyTorch's own
// module loads. An export's weights are the module's state dict bit for
// bit (a training-form ResNet, BatchNorm buffers included; an eval-form
// ViT whose Linear weights the exporter folded transposed, and
// nn.MultiheadAttention's in_proj_weight). A tuned model's weights —
// BatchNorm trained as GroupNorm, a new 10-class head and a calibrated
// temperature; LoRA's adapters merged; the BatchNorms a --bn freeze run or
// the exporter (an eval-form export) folded into the convolutions, given
// back from the training-form export (--like) — loaded by
// docs/load_state_dict.py give the module the logits `predict` computes
// with the tuned ONNX model; so does train --state-dict's file. A folded
// export or a --bn freeze run without --like, --like with nothing folded
// or another module, and train --state-dict of a folded export (before
// its first step) are refused with their reasons.
func TestWeightsLoadIntoTorchModule(t *testing.T) {
	if testing.Short() {
		t.Skip("exports torchvision models; skipped in -short")
	}
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, torchvision, onnx, numpy").Run(); err != nil {
		t.Skip("no /usr/bin/python3 with torch, torchvision, onnx and numpy")
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	python := func(args ...string) []byte {
		t.Helper()
		return pythonWithDocs(t, weightsTorch, args...)
	}
	python("export", dir)
	p := func(name string) string { return filepath.Join(dir, name) }
	mustRun := func(args ...string) string {
		t.Helper()
		out, e, code := run(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", strings.Join(args[:1], " "), code, e)
		}
		return out
	}
	data := "npy:" + p("data")

	// The exports' own weights.
	mustRun("weights", "--model", p("resnet_train.onnx"), "--out", p("resnet0.pt"))
	mustRun("weights", "--model", p("vit_eval.onnx"), "--out", p("vit0.safetensors"))
	// Tuned: GroupNorm for BatchNorm and a new head; a ViT, then calibrated.
	train := func(model, out string, extra ...string) {
		t.Helper()
		mustRun(append([]string{"train", "--model", model, "--data", data, "--epsilon", "8", "--epochs", "1", "--batch-size", "8",
			"--num-classes", "10", "--lr", "0.01", "--quiet", "--out", out}, extra...)...)
	}
	train(p("resnet_train.onnx"), p("resnet_tuned.onnx"))
	train(p("vit_eval.onnx"), p("vit_tuned.onnx"))
	mustRun("calibrate", "--model", p("vit_tuned.onnx"), "--data", data, "--out", p("vit_cal.onnx"))
	written := weightsJSON(t, "--model", p("resnet_tuned.onnx"), "--out", p("resnet1.pt"))
	if gns := written.Record.GroupNorms; len(gns) != 12 || gns[0] != (rewrite.GroupNormModule{Module: "bn1", Groups: 16, Channels: 64, Epsilon: 1e-5}) {
		t.Errorf("resnet tuned: GroupNorm modules %+v, want the 12 BatchNorms, bn1 first as GroupNorm(16, 64, eps=1e-5)", gns)
	}
	if written.Record.Metadata["epsilon"] == "" || !strings.HasPrefix(written.Record.Metadata["batchnorm"], "groupnorm") {
		t.Errorf("resnet tuned: the record's metadata lacks the run's ε or its BatchNorm rewrite: %v", written.Record.Metadata)
	}
	mustRun("weights", "--model", p("vit_cal.onnx"), "--out", p("vit1.safetensors"))
	// --bn freeze: the BatchNorms folded into the convolutions, given back.
	train(p("resnet_train.onnx"), p("resnet_frozen.onnx"), "--bn", "freeze")
	mustRun("weights", "--model", p("resnet_frozen.onnx"), "--like", p("resnet_train.onnx"), "--out", p("resnet2.pt"))
	// An eval-form export, its BatchNorms folded by the exporter, trained:
	// the training-form export gives them back.
	train(p("resnet_eval.onnx"), p("resnet_eval_tuned.onnx"))
	mustRun("weights", "--model", p("resnet_eval_tuned.onnx"), "--like", p("resnet_train.onnx"), "--out", p("resnet3.safetensors"))
	// train --state-dict: the same, in one command; a --bn freeze run's
	// BatchNorms given back from its own --model.
	train(p("resnet_train.onnx"), p("resnet_frozen2.onnx"), "--bn", "freeze", "--state-dict", p("resnet4.safetensors"))
	// LoRA: the adapters merged into the weights they adapt at export.
	train(p("vit_eval.onnx"), p("vit_lora.onnx"), "--lora", "4")
	mustRun("weights", "--model", p("vit_lora.onnx"), "--out", p("vit2.pt"))
	for _, m := range []string{"resnet_tuned", "vit_cal", "resnet_frozen", "resnet_eval_tuned", "vit_lora", "resnet_frozen2"} {
		mustRun("predict", "--model", p(m+".onnx"), "--input", p("x.npy"), "--out", p(m+"_y.npy"))
	}

	type checkJob struct {
		Model string `json:"model"`
		Kind  string `json:"kind"`
		File  string `json:"file"`
		X     string `json:"x,omitempty"`
		Y     string `json:"y,omitempty"`
	}
	jobs := []checkJob{
		{"resnet", "same", p("resnet0.pt"), "", ""},
		{"vit", "same", p("vit0.safetensors"), "", ""},
		{"resnet", "tuned", p("resnet1.pt"), p("x.npy"), p("resnet_tuned_y.npy")},
		{"vit", "tuned", p("vit1.safetensors"), p("x.npy"), p("vit_cal_y.npy")},
		{"resnet", "tuned", p("resnet2.pt"), p("x.npy"), p("resnet_frozen_y.npy")},
		{"resnet", "tuned", p("resnet3.safetensors"), p("x.npy"), p("resnet_eval_tuned_y.npy")},
		{"vit", "tuned", p("vit2.pt"), p("x.npy"), p("vit_lora_y.npy")},
		{"resnet", "tuned", p("resnet4.safetensors"), p("x.npy"), p("resnet_frozen2_y.npy")},
	}
	b, _ := json.Marshal(jobs)
	if err := os.WriteFile(p("job.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var res []struct {
		File    string            `json:"file"`
		Bad     []string          `json:"bad"`
		Missing []string          `json:"missing"`
		MaxErr  float64           `json:"max_err"`
		Scale   float64           `json:"scale"`
		Record  WeightsRecord     `json:"record"`
		Modules map[string]string `json:"modules"`
	}
	out := python("check", p("job.json"))
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for i, r := range res {
		name := filepath.Base(r.File)
		switch jobs[i].Kind {
		case "same":
			if len(r.Bad) > 0 {
				t.Errorf("%s: tensors not the module's: %v", name, r.Bad)
			}
			for _, k := range r.Missing {
				if !strings.HasSuffix(k, "num_batches_tracked") {
					t.Errorf("%s: the module's %s is not in the file", name, k)
				}
			}
		case "tuned":
			t.Logf("%s: the module's logits within %.3g of predict's (logits up to %.3g)", name, r.MaxErr, r.Scale)
			if !(r.MaxErr <= 1e-4*max(1, r.Scale)) {
				t.Errorf("%s: the module's logits differ from predict's by %.3g (logits up to %.3g)", name, r.MaxErr, r.Scale)
			}
		}
	}
	if got := res[1].Record.Transposed; len(got) != 6 || !strings.HasSuffix(got[0], "self_attention.in_proj_weight") {
		t.Errorf("vit export: transposed %v, want its 2 in_proj_weights and 4 MLP weights", got)
	}
	if res[2].Modules["bn1"] != "GroupNorm" || res[2].Modules["layer1.0.bn2"] != "GroupNorm" {
		t.Errorf("resnet tuned: the loader left bn1 a %s and layer1.0.bn2 a %s, want GroupNorms", res[2].Modules["bn1"], res[2].Modules["layer1.0.bn2"])
	}
	if temp := res[3].Record.Calibration["temperature"]; len(temp) != 1 || !(temp[0] > 0) {
		t.Errorf("vit calibrated: the record's temperature is %v", temp)
	}
	for _, i := range []int{4, 5, 7} { // the BatchNorms unfolded: resnet2, resnet3, resnet4
		r := res[i]
		if len(r.Record.GroupNorms) != 0 || r.Modules["bn1"] != "BatchNorm2d" || r.Record.BatchNormsFrom != "resnet_train.onnx" {
			t.Errorf("%s: GroupNorms %v, bn1 a %s, BatchNorms from %q; want the module's own BatchNorms back", filepath.Base(r.File), r.Record.GroupNorms, r.Modules["bn1"], r.Record.BatchNormsFrom)
		}
	}

	// Refusals, each with its reason.
	refused := func(want string, args ...string) {
		t.Helper()
		_, e, code := run(t, args...)
		if code == 0 || !strings.Contains(e, want) {
			t.Errorf("%s: exit %d, stderr %q; want a refusal containing %q", strings.Join(args, " "), code, e, want)
		}
	}
	refused("folded its BatchNorms", "weights", "--model", p("resnet_eval.onnx"), "--out", p("x.pt"))
	refused("or give a training-form export", "weights", "--model", p("resnet_eval_tuned.onnx"), "--out", p("x.pt"))
	refused("moved by the training-mode export's own forward pass", "weights", "--model", p("resnet_eval_tuned.onnx"), "--like", p("resnet_train_moved.onnx"), "--out", p("x.pt"))
	// plan and train --bn freeze warn of an export whose statistics moved.
	for _, c := range []struct {
		model string
		warn  bool
	}{{"resnet_train_moved.onnx", true}, {"resnet_train.onnx", false}} {
		out := mustRun("plan", "--model", p(c.model), "--bn", "freeze")
		if got := strings.Contains(out, "running statistics were moved"); got != c.warn {
			t.Errorf("plan --bn freeze %s: warned %v, want %v:\n%s", c.model, got, c.warn, out)
		}
	}
	refused("--like ORIGINAL.onnx", "weights", "--model", p("resnet_frozen.onnx"), "--out", p("x.pt"))
	refused("no BatchNorm folded", "weights", "--model", p("resnet_tuned.onnx"), "--like", p("resnet_train.onnx"), "--out", p("x.pt"))
	refused("froze 12 BatchNorms, and --like", "weights", "--model", p("resnet_frozen.onnx"), "--like", p("vit_eval.onnx"), "--out", p("x.pt"))
	refused("want a .pt", "weights", "--model", p("resnet_train.onnx"), "--out", p("x.bin"))
	// train --state-dict refuses before any step what it could not write.
	for _, c := range []struct{ model, out, want string }{
		{p("resnet_eval.onnx"), p("x.pt"), "folded its BatchNorms"},
		{p("resnet_train.onnx"), p("x.bin"), "--state-dict"},
	} {
		refused(c.want, "train", "--model", c.model, "--data", data, "--epsilon", "8", "--epochs", "1", "--batch-size", "8",
			"--num-classes", "10", "--quiet", "--out", p("never.onnx"), "--state-dict", c.out)
		if _, err := os.Stat(p("never.onnx")); err == nil {
			t.Errorf("train --state-dict %s refused, but trained and wrote a model", c.out)
		}
	}
	refused("--out is required", "weights", "--model", p("resnet_train.onnx"))
}

// weightsWritten is what `weights --json` prints.
type weightsWritten struct {
	Keys   []string      `json:"keys"`
	Record WeightsRecord `json:"record"`
}

// weightsJSON runs `weights --json` with args and returns what it
// printed; a failure ends t.
func weightsJSON(t *testing.T, args ...string) weightsWritten {
	t.Helper()
	out, e, code := run(t, append([]string{"weights", "--json"}, args...)...)
	var w weightsWritten
	if err := json.Unmarshal([]byte(out), &w); code != 0 || err != nil {
		t.Fatalf("weights %s: exit %d (%v): %s", strings.Join(args, " "), code, err, e)
	}
	return w
}

// pythonWithDocs runs script with /usr/bin/python3, docs/ on its path
// (docs/load_state_dict.py), and returns its standard output; a failure
// ends t with the script's standard error.
func pythonWithDocs(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	docs, err := filepath.Abs("../../docs")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", append([]string{"-c", script}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+docs)
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("python %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

// TestWeightsDynamoExport: PyTorch's default (dynamo) exporter keeps the
// state-dict names of what its signature marks, and its optimizer folds a
// Linear's transpose into an initializer of its own ("val_34"): on Swin-T's
// export, the attention's qkv weight is named by the bias its product adds
// and PatchMerging's bias-free reduction by the Linear whose forward reads
// it, both transposed back to (out, in) with the values of the
// initializers' transposes; the relative position biases the optimizer
// computed from their tables have no name, and are refused until
// --allow-unnamed lists them.
func TestWeightsDynamoExport(t *testing.T) {
	model := dynamotest.File(t, "swin_t.nodata.onnx.gz")
	dir := t.TempDir()
	_, e, code := run(t, "weights", "--model", model, "--out", filepath.Join(dir, "w.pt"))
	if code == 0 || !strings.Contains(e, "no state-dict name") || !strings.Contains(e, "optimize=False") {
		t.Fatalf("weights without --allow-unnamed: exit %d, %q; want the unnamed position biases refused", code, e)
	}
	w := weightsJSON(t, "--model", model, "--out", filepath.Join(dir, "w.safetensors"), "--allow-unnamed")
	for _, k := range []string{"features.1.0.attn.qkv.weight", "features.2.reduction.weight", "features.1.0.mlp.0.weight", "head.weight"} {
		if !slices.Contains(w.Keys, k) {
			t.Errorf("no %s among the keys", k)
		}
	}
	for _, k := range []string{"features.1.0.attn.qkv.weight", "features.2.reduction.weight"} {
		if !slices.Contains(w.Record.Transposed, k) {
			t.Errorf("%s not transposed back", k)
		}
	}
	if len(w.Record.Unnamed) != 12 {
		t.Errorf("%d unnamed tensors, want Swin-T's 12 blocks' position biases: %+v", len(w.Record.Unnamed), w.Record.Unnamed)
	}
	for _, u := range w.Record.Unnamed {
		if len(u.Shape) != 4 && len(u.Shape) != 2 || !strings.Contains(u.Reason, "attn") {
			t.Errorf("unnamed %s %v (%s): want a position bias read in an attention", u.Source, u.Shape, u.Reason)
		}
	}
	// The values: the file's tensors against the initializers, read back.
	st, err := os.ReadFile(filepath.Join(dir, "w.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	got := readSafetensors(t, st)
	lm, err := loadGraph(model)
	if err != nil {
		t.Fatal(err)
	}
	// The model as train writes it (ExportGraph, ToONNX) reads back with
	// the same keys: the signature's marks are written with it.
	eg, err := rewrite.ExportGraph(lm.g)
	if err != nil {
		t.Fatal(err)
	}
	om, err := eg.ToONNX()
	if err != nil {
		t.Fatal(err)
	}
	// calibrated too: its temperature, unmarked by the signature, is the
	// record's, not a tensor.
	if err := dptrain.ApplyTemperature(om.Proto, 1.5); err != nil {
		t.Fatal(err)
	}
	written := filepath.Join(dir, "written.onnx")
	if err := om.Save(written, nil); err != nil {
		t.Fatal(err)
	}
	w2 := weightsJSON(t, "--model", written, "--out", filepath.Join(dir, "w2.pt"), "--allow-unnamed")
	if !slices.Equal(w2.Keys, w.Keys) {
		t.Errorf("the written model's keys differ from the export's: %d against %d", len(w2.Keys), len(w.Keys))
	}
	if temp := w2.Record.Calibration["temperature"]; len(temp) != 1 || temp[0] != 1.5 || len(w2.Record.Unnamed) != len(w.Record.Unnamed) {
		t.Errorf("the calibrated model's record: temperature %v, %d unnamed (want 1.5, %d)", temp, len(w2.Record.Unnamed), len(w.Record.Unnamed))
	}
	for _, c := range []struct{ key, src string }{{"features.1.0.attn.qkv.weight", "val_34"}, {"features.2.reduction.weight", "val_781"}} {
		v := lm.g.Values[c.src]
		if v == nil || v.Const == nil || len(v.Const.Shape) != 2 {
			t.Fatalf("the export has no rank-2 initializer %s", c.src)
		}
		rows, cols := int(v.Const.Shape[0]), int(v.Const.Shape[1])
		tn := got[c.key]
		if len(tn.shape) != 2 || tn.shape[0] != int64(cols) || tn.shape[1] != int64(rows) {
			t.Errorf("%s: shape %v, want (%d, %d)", c.key, tn.shape, cols, rows)
			continue
		}
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				if tn.data[j*rows+i] != v.Const.F32[i*cols+j] {
					t.Fatalf("%s[%d, %d] = %g, want %s[%d, %d] = %g", c.key, j, i, tn.data[j*rows+i], c.src, i, j, v.Const.F32[i*cols+j])
				}
			}
		}
	}
}

type stTensor struct {
	shape []int64
	data  []float32
}

// readSafetensors reads a safetensors file of float32 tensors.
func readSafetensors(t *testing.T, b []byte) map[string]stTensor {
	t.Helper()
	if len(b) < 8 {
		t.Fatal("safetensors: short file")
	}
	n := binary.LittleEndian.Uint64(b)
	var h map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	data := b[8+n:]
	out := map[string]stTensor{}
	for k, raw := range h {
		if k == "__metadata__" {
			continue
		}
		var e struct {
			DType   string   `json:"dtype"`
			Shape   []int64  `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.DType != "F32" {
			t.Fatalf("safetensors: %s: %v %s", k, err, raw)
		}
		vals := make([]float32, (e.Offsets[1]-e.Offsets[0])/4)
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[e.Offsets[0]+4*int64(i):]))
		}
		out[k] = stTensor{e.Shape, vals}
	}
	return out
}
