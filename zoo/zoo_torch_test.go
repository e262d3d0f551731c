package zoo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// The tests in this file compare the zoo with PyTorch through
// testdata/torch_ref.py. They need /usr/bin/python3 with torch 1.13,
// torchvision 0.14, onnx and numpy (Debian python3-torch,
// python3-torchvision, python3-onnx) and are skipped without them and in
// -short mode. The torch exports are cached in $TMPDIR by the hash of the
// script and the export list; DPFINETUNE_ZOO_FULL=1 adds the remaining
// torchvision models to the export comparison.

const python = "/usr/bin/python3"

var (
	torchOnce sync.Once
	torchErr  error
)

func needTorch(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("PyTorch references are slow; skipped in -short")
	}
	if err := torchAvailable(); err != nil {
		t.Skipf("no %s with torch, torchvision, onnx and numpy: %v", python, err)
	}
}

// refModel names a zoo model's reference module in torch_ref.py.
type refModel struct {
	Ref    string         `json:"ref"`
	Kwargs map[string]any `json:"kwargs,omitempty"`
}

// references maps every zoo model to the PyTorch module it is built after.
func references() map[string]refModel {
	r := map[string]refModel{
		"resnet18-cifar": {"tv:resnet18", map[string]any{"num_classes": 10}},
		"vgg11-cifar":    {"tv:vgg11", map[string]any{"num_classes": 10}},
		"vit-tiny-cifar": {"tv_vit", map[string]any{"image_size": 32, "patch_size": 4, "num_layers": 4, "num_heads": 3,
			"hidden_dim": 192, "mlp_dim": 768, "num_classes": 10}},
		"cifar_mobilenet_v2": {"kl_mobilenet_v2", nil},
		"cifar_mobilenet":    {"kl_mobilenet", nil},
		"cnn-fmnist":         {"tbcnn", nil},
		"beit_base_patch16_224": {"timm_beit", map[string]any{"embed_dim": 768, "depth": 12, "num_heads": 12,
			"init_values": 0.1}},
		"beit_large_patch16_224": {"timm_beit", map[string]any{"embed_dim": 1024, "depth": 24, "num_heads": 16,
			"init_values": 1e-5}},
	}
	for _, n := range []string{"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "wide_resnet50_2",
		"resnext50_32x4d", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
		"densenet121", "mobilenet_v2", "alexnet", "squeezenet1_0", "squeezenet1_1", "vit_b_16"} {
		r[n] = refModel{Ref: "tv:" + n}
	}
	for _, n := range []string{"18", "34", "50", "101", "152"} {
		r["cifar_resnet"+n] = refModel{Ref: "kl_resnet" + n}
	}
	for _, n := range []string{"11", "13", "16", "19"} {
		r["cifar_vgg"+n] = refModel{Ref: "kl_vgg" + n}
	}
	for size, dh := range map[string][2]int{"tiny": {192, 3}, "small": {384, 6}, "base": {768, 12}} {
		kw := map[string]any{"embed_dim": dh[0], "num_heads": dh[1], "depth": 12}
		r["vit_"+size+"_patch16_224"] = refModel{"timm_vit", kw}
		r["deit_"+size+"_patch16_224"] = refModel{"timm_vit", kw}
	}
	for _, c := range []struct {
		name        string
		dims, heads [2]int
		depth, mlp  int
	}{
		{"crossvit_tiny_240", [2]int{96, 192}, [2]int{3, 3}, 4, 4},
		{"crossvit_small_240", [2]int{192, 384}, [2]int{6, 6}, 4, 4},
		{"crossvit_base_240", [2]int{384, 768}, [2]int{12, 12}, 4, 4},
		{"crossvit_9_240", [2]int{128, 256}, [2]int{4, 4}, 3, 3},
		{"crossvit_15_240", [2]int{192, 384}, [2]int{6, 6}, 5, 3},
		{"crossvit_18_240", [2]int{224, 448}, [2]int{7, 7}, 6, 3},
	} {
		d := []int{1, c.depth, 0}
		r[c.name] = refModel{"timm_crossvit", map[string]any{"embed_dim": c.dims, "num_heads": c.heads,
			"depth": [][]int{d, d, d}, "mlp_ratio": []int{c.mlp, c.mlp, 1}}}
	}
	return r
}

// exportSpec is one torch.onnx.export of a reference module, compared with
// the zoo model built with opts for the same input.
type exportSpec struct {
	Zoo    string         `json:"zoo"`
	Ref    string         `json:"ref"`
	Kwargs map[string]any `json:"kwargs,omitempty"`
	Input  []int64        `json:"input"`
	File   string         `json:"file"`
	Params bool           `json:"params"`
	Train  bool           `json:"train,omitempty"`
	opts   Options
}

func exportSpecs() []exportSpec {
	refs := references()
	var specs []exportSpec
	add := func(zoo string, params, train bool, opts Options) {
		r := refs[zoo]
		info, _ := Lookup(zoo)
		file := zoo
		if train {
			file += "_train"
		}
		if !params {
			file += "_noparams"
		}
		specs = append(specs, exportSpec{Zoo: zoo, Ref: r.Ref, Kwargs: r.Kwargs, Input: info.DefaultInput,
			File: file + ".onnx", Params: params, Train: train, opts: opts})
	}
	// With parameters: BatchNorm folded into Conv by torch in eval mode, or
	// kept in training mode.
	add("resnet18", true, false, Options{})
	add("resnet18", true, true, Options{BatchNormTraining: true})
	add("mobilenet_v2", true, false, Options{})
	add("densenet121", true, false, Options{})
	add("vit-tiny-cifar", true, false, Options{})
	// Without parameters (cheap for big models): torch still folds
	// BatchNorm into Conv (so vggN_bn exports as vggN does), and transposes
	// Linear weights on tokens with Transpose nodes, which the comparison
	// skips.
	for _, n := range []string{"resnet50", "resnext50_32x4d", "vgg11", "alexnet", "squeezenet1_0",
		"squeezenet1_1", "vit_b_16"} {
		add(n, false, false, Options{})
	}
	if os.Getenv("DPFINETUNE_ZOO_FULL") == "1" {
		for _, n := range []string{"resnet34", "resnet101", "resnet152", "wide_resnet50_2", "vgg11_bn", "vgg13",
			"vgg16", "vgg19"} {
			add(n, false, false, Options{})
		}
	}
	return specs
}

// numericSpec is a zoo model whose weights are loaded into the reference
// module; both run on one batch.
type numericSpec struct {
	Name   string         `json:"name"`
	Ref    string         `json:"ref"`
	Kwargs map[string]any `json:"kwargs,omitempty"`
	Input  []int64        `json:"input"`
	ONNX   string         `json:"onnx"`
	Folded string         `json:"folded,omitempty"`
	// the zoo model: a registered name, or an ad-hoc spec
	zoo  string
	spec *spec
	opts Options
}

// tinySpec is an unregistered model built by one of the zoo's builders at
// a small size, to compare with a timm reference cheaply.
func tinySpec(name string, input []int64, build func(b *builder, x tensor, k int64) tensor) *spec {
	return &spec{Info: Info{Name: name, DefaultInput: input, DefaultClasses: 10}, build: build}
}

// tinyAdaptive is Conv(3→4, k3) AdaptiveAvgPool2d((6, 6)) Flatten Linear,
// TinyAdaptive in torch_ref.py.
func tinyAdaptive(b *builder, x tensor, k int64) tensor {
	x = b.conv(x, "conv", convSpec{out: 4, k: 3, bias: true})
	x = b.adaptiveAvgPool(x, 6, 6)
	return b.gemm(b.flatten(x), "fc", linearSpec{out: k})
}

func numericSpecs() []numericSpec {
	refs := references()
	tv := func(name string, input []int64, folded bool) numericSpec {
		r := refs[name]
		kw := map[string]any{"num_classes": 10}
		for k, v := range r.Kwargs {
			kw[k] = v
		}
		s := numericSpec{Name: name, Ref: r.Ref, Kwargs: kw, Input: input, zoo: name,
			opts: Options{NumClasses: 10, InputShape: input, Seed: 1, BatchNorm: true}}
		if folded {
			s.Folded = "folded"
		}
		return s
	}
	specs := []numericSpec{
		tv("resnet18", []int64{3, 32, 32}, true),
		tv("resnext50_32x4d", []int64{3, 32, 32}, false),
		tv("mobilenet_v2", []int64{3, 32, 32}, true),
		tv("densenet121", []int64{3, 32, 32}, true),
		tv("squeezenet1_1", []int64{3, 32, 32}, false),
		tv("vit-tiny-cifar", []int64{3, 32, 32}, false),
		tv("cnn-fmnist", []int64{1, 28, 28}, false),
		tv("cifar_resnet18", []int64{3, 32, 32}, true),
		tv("cifar_vgg11", []int64{3, 32, 32}, true),
		tv("cifar_mobilenet_v2", []int64{3, 32, 32}, false),
		tv("cifar_mobilenet", []int64{3, 32, 32}, false),
		tv("deit_tiny_patch16_224", []int64{3, 32, 32}, false),
		tv("crossvit_tiny_240", []int64{3, 240, 240}, false),
	}
	for i := range specs {
		if strings.HasPrefix(specs[i].Ref, "timm_") {
			specs[i].Kwargs["img_size"] = specs[i].Input[1]
		}
	}
	tiny := []struct {
		spec *spec
		ref  string
		kw   map[string]any
	}{
		// Adaptive average pooling that torch cannot export: 8×8 → 6×6
		// (MatMuls with averaging matrices) and 1×1 → 6×6 (Expand).
		{tinySpec("tiny_adaptive_matmul", []int64{3, 10, 10}, tinyAdaptive), "tiny_adaptive", map[string]any{}},
		{tinySpec("tiny_adaptive_expand", []int64{3, 3, 3}, tinyAdaptive), "tiny_adaptive", map[string]any{}},
		{tinySpec("tiny_vit", []int64{3, 64, 64}, func(b *builder, x tensor, k int64) tensor {
			return timmViT(b, x, k, vitCfg{16, 2, 3, 48, 96})
		}), "timm_vit", map[string]any{"embed_dim": 48, "depth": 2, "num_heads": 3, "mlp_ratio": 2}},
		{tinySpec("tiny_beit", []int64{3, 64, 64}, func(b *builder, x tensor, k int64) tensor {
			return beit(b, x, k, vitCfg{16, 2, 3, 48, 96}, 0.1)
		}), "timm_beit", map[string]any{"embed_dim": 48, "depth": 2, "num_heads": 3, "mlp_ratio": 2, "init_values": 0.1}},
		{tinySpec("tiny_crossvit", []int64{3, 48, 48}, func(b *builder, x tensor, k int64) tensor {
			return crossViT(b, x, k, crossCfg{"tiny", [2]int64{24, 48}, [2]int64{2, 2}, 2, 2})
		}), "timm_crossvit", map[string]any{"embed_dim": []int{24, 48}, "num_heads": []int{2, 2},
			"depth": [][]int{{1, 2, 0}, {1, 2, 0}, {1, 2, 0}}, "mlp_ratio": []int{2, 2, 1}}},
	}
	for _, c := range tiny {
		kw := map[string]any{"num_classes": 10, "img_size": c.spec.DefaultInput[1], "patch_size": 16}
		switch c.ref {
		case "timm_crossvit":
			delete(kw, "patch_size")
		case "tiny_adaptive":
			kw = map[string]any{"num_classes": 10}
		}
		for k, v := range c.kw {
			kw[k] = v
		}
		specs = append(specs, numericSpec{Name: c.spec.Name, Ref: c.ref, Kwargs: kw, Input: c.spec.DefaultInput,
			spec: c.spec, opts: Options{Seed: 1, BatchNorm: true}})
	}
	return specs
}

// torchResult is what torch_ref.py writes.
type torchResult struct {
	Versions   map[string]string             `json:"versions"`
	Timing     map[string]float64            `json:"timing"`
	StateDicts map[string]map[string][]int64 `json:"state_dicts"`
	Numeric    map[string]numericResult      `json:"numeric"`
}

type numericResult struct {
	Missing     []string `json:"missing"`
	Unexpected  []string `json:"unexpected"`
	Scale       float64  `json:"scale"`
	MaxAbsDiff  float64  `json:"max_abs_diff"`
	Shape       []int64  `json:"shape"`
	FoldedScale float64  `json:"folded_scale"`
	FoldedDiff  float64  `json:"folded_max_abs_diff"`
	Seconds     float64  `json:"seconds"`
}

var (
	torchRunOnce sync.Once
	torchRun     struct {
		res      torchResult
		exports  string // directory of the exports
		numSpecs []numericSpec
		err      error
	}
)

// TestMain starts torch_ref.py in the background when the tests that need
// it will run, so that Python works while the other tests build models.
func TestMain(m *testing.M) {
	flag.Parse()
	ctx, cancel := context.WithCancel(context.Background())
	torchCtx = ctx
	run := flag.Lookup("test.run").Value.String()
	if !testing.Short() && (run == "" || strings.Contains(run, "Torch")) && torchAvailable() == nil {
		go torchRunOnce.Do(prepareTorchRef)
	}
	code := m.Run()
	cancel()
	os.Exit(code)
}

// torchCtx is canceled when the tests are over: a background Python run
// that no test waited for is killed.
var torchCtx = context.Background()

func torchAvailable() error {
	torchOnce.Do(func() {
		torchErr = exec.Command(python, "-c", "import torch, torchvision, onnx, numpy").Run()
	})
	return torchErr
}

// runTorchRef returns the result of torch_ref.py, running it if the
// background run has not.
func runTorchRef(t *testing.T) (torchResult, string, []numericSpec) {
	t.Helper()
	needTorch(t)
	torchRunOnce.Do(prepareTorchRef)
	if torchRun.err != nil {
		t.Fatal(torchRun.err)
	}
	return torchRun.res, torchRun.exports, torchRun.numSpecs
}

// prepareTorchRef builds the zoo models the numeric comparison needs and
// runs torch_ref.py once for every test in this file.
func prepareTorchRef() {
	r := &torchRun
	r.err = func() error {
		script, err := filepath.Abs(filepath.Join("testdata", "torch_ref.py"))
		if err != nil {
			return err
		}
		src, err := os.ReadFile(script)
		if err != nil {
			return err
		}
		work, err := os.MkdirTemp("", "dpfinetune-zoo-test-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		job := map[string]any{}
		sds := map[string]refModel{}
		for name, ref := range references() {
			sds[name] = ref
		}
		job["state_dicts"] = sds

		// Exports are cached across runs.
		specs := exportSpecs()
		key, _ := json.Marshal(specs)
		sum := sha256.Sum256(append(src, key...))
		r.exports = filepath.Join(os.TempDir(), "dpfinetune-zoo-ref-"+hex.EncodeToString(sum[:6]))
		if _, err := os.Stat(filepath.Join(r.exports, "done")); err != nil {
			if err := os.MkdirAll(r.exports, 0o755); err != nil {
				return err
			}
			job["exports"] = map[string]any{"dir": r.exports, "models": specs}
		}

		r.numSpecs = numericSpecs()
		for i := range r.numSpecs {
			s := &r.numSpecs[i]
			sp := s.spec
			if sp == nil {
				if sp, err = lookup(s.zoo); err != nil {
					return err
				}
			}
			write := func(opts Options, file string) (string, error) {
				p, _, err := buildSpec(sp, opts, dataRandom)
				if err != nil {
					return "", err
				}
				path := filepath.Join(work, file)
				return path, onnx.NewModel(p).Save(path, nil)
			}
			if s.ONNX, err = write(s.opts, s.Name+".onnx"); err != nil {
				return err
			}
			if s.Folded != "" {
				o := s.opts
				o.BatchNorm = false
				if s.Folded, err = write(o, s.Name+"_folded.onnx"); err != nil {
					return err
				}
			}
		}
		job["numeric"] = r.numSpecs
		jb, _ := json.Marshal(job)
		jobPath, outPath := filepath.Join(work, "job.json"), filepath.Join(work, "out.json")
		if err := os.WriteFile(jobPath, jb, 0o644); err != nil {
			return err
		}
		cmd := exec.CommandContext(torchCtx, python, script, jobPath, outPath)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("torch_ref.py: %v\n%s", err, out)
		}
		if job["exports"] != nil {
			os.WriteFile(filepath.Join(r.exports, "done"), nil, 0o644)
		}
		raw, err := os.ReadFile(outPath)
		if err != nil {
			return err
		}
		return json.Unmarshal(raw, &r.res)
	}()
}

// TestTorchStateDict compares every model's initializers, built with
// BatchNorm kept, with the state_dict of its reference module: the same
// names and shapes (token Linear weights are stored transposed, as
// "<name>.T"), hence the same parameter count.
func TestTorchStateDict(t *testing.T) {
	res, _, _ := runTorchRef(t)
	t.Logf("torch %s, torchvision %s; python timing %v", res.Versions["torch"], res.Versions["torchvision"], res.Timing)
	for _, name := range Names() {
		want, ok := res.StateDicts[name]
		if !ok {
			t.Errorf("%s: no reference state_dict", name)
			continue
		}
		p, _, err := build(name, Options{BatchNorm: true}, dataNone)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]int64{}
		for _, tp := range p.GetGraph().GetInitializer() {
			n, dims := tp.GetName(), slices.Clone(tp.GetDims())
			if strings.HasSuffix(n, ".T") {
				n = strings.TrimSuffix(n, ".T")
				slices.Reverse(dims)
			}
			got[n] = dims
		}
		var diffs []string
		for n, d := range want {
			if g, ok := got[n]; !ok {
				diffs = append(diffs, fmt.Sprintf("missing %s %v", n, d))
			} else if !slices.Equal(g, d) {
				diffs = append(diffs, fmt.Sprintf("%s: %v, want %v", n, g, d))
			}
		}
		for n, d := range got {
			if _, ok := want[n]; !ok {
				diffs = append(diffs, fmt.Sprintf("extra %s %v", n, d))
			}
		}
		sort.Strings(diffs)
		if len(diffs) > 0 {
			if len(diffs) > 10 {
				diffs = append(diffs[:10], fmt.Sprintf("... %d more", len(diffs)-10))
			}
			t.Errorf("%s: initializers differ from the reference state_dict:\n  %s", name, strings.Join(diffs, "\n  "))
		}
	}
}

// opSequence returns the compute nodes of g after shape inference: op type
// and first output shape, leaving out Identity and the Transposes of
// parameters that an export without parameters adds.
func opSequence(g *graph.Graph) []string {
	var seq []string
	for _, n := range g.Nodes {
		if n.OpType == "Identity" {
			continue
		}
		if in := n.Input(0); n.OpType == "Transpose" && in != nil && in.Producer == nil && in.Name != InputName {
			continue
		}
		seq = append(seq, n.OpType+" "+n.Outputs[0].Shape.String())
	}
	return seq
}

func paramShapes(g *graph.Graph) []string {
	var s []string
	for _, v := range g.Initializers {
		if v.IsParam() {
			s = append(s, v.Shape.String())
		}
	}
	sort.Strings(s)
	return s
}

// TestTorchExportOps compares the zoo's graphs with torch.onnx.export of
// the torchvision modules: after shape inference for a batch of 2, the same
// operators in the same order with the same output shapes, and (for exports
// with parameters) the same initializer shapes.
func TestTorchExportOps(t *testing.T) {
	_, dir, _ := runTorchRef(t)
	for _, s := range exportSpecs() {
		t.Run(strings.TrimSuffix(s.File, ".onnx"), func(t *testing.T) {
			m, err := onnx.Load(filepath.Join(dir, s.File))
			if err != nil {
				t.Fatal(err)
			}
			tg, err := graph.FromONNX(m)
			if err != nil {
				t.Fatal(err)
			}
			tg.UntieIdentityParams()
			in := append([]int64{2}, s.Input...)
			if err := tg.InferShapes(map[string][]int64{"input": in}); err != nil {
				t.Fatal(err)
			}
			opts := s.opts
			opts.InputShape = s.Input
			p, _, err := build(s.Zoo, opts, dataZero)
			if err != nil {
				t.Fatal(err)
			}
			zg, err := graph.FromONNX(onnx.NewModel(p))
			if err != nil {
				t.Fatal(err)
			}
			if err := zg.InferShapes(map[string][]int64{InputName: in}); err != nil {
				t.Fatal(err)
			}
			want, got := opSequence(tg), opSequence(zg)
			if !slices.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				lo := max(0, i-3)
				t.Errorf("%d nodes, torch has %d; first difference at node %d:\n zoo:   %v\n torch: %v",
					len(got), len(want), i, got[lo:min(len(got), i+3)], want[lo:min(len(want), i+3)])
			}
			if s.Params {
				if zs, ts := paramShapes(zg), paramShapes(tg); !slices.Equal(zs, ts) {
					t.Errorf("initializer shapes differ:\n zoo:   %v\n torch: %v", zs, ts)
				}
			}
		})
	}
}

// TestTorchNumeric loads zoo weights (perturbed, so that constant inits
// such as ViT's zero head are not trivial) into the reference modules and
// checks that the ONNX graph computes what the module computes; for
// BatchNorm models also that the folded export equals the BatchNorm graph.
func TestTorchNumeric(t *testing.T) {
	res, _, specs := runTorchRef(t)
	for _, s := range specs {
		r, ok := res.Numeric[s.Name]
		if !ok {
			t.Errorf("%s: no result", s.Name)
			continue
		}
		if len(r.Missing) > 0 || len(r.Unexpected) > 0 {
			t.Errorf("%s: loading into the reference: missing %v, unexpected %v", s.Name, r.Missing, r.Unexpected)
		}
		if !slices.Equal(r.Shape, []int64{2, 10}) {
			t.Errorf("%s: logits shape %v", s.Name, r.Shape)
		}
		if tol := 2e-4*r.Scale + 1e-6; r.MaxAbsDiff > tol || r.Scale == 0 {
			t.Errorf("%s: ONNX logits differ from the reference by %g (logits up to %g)", s.Name, r.MaxAbsDiff, r.Scale)
		}
		if s.Folded != "" {
			if tol := 2e-4*r.FoldedScale + 1e-6; r.FoldedDiff > tol || r.FoldedScale == 0 {
				t.Errorf("%s: BatchNorm-folded logits differ by %g (logits up to %g)", s.Name, r.FoldedDiff, r.FoldedScale)
			}
		}
		t.Logf("%-22s max |Δ| %.2g (logits up to %.3g), folded %.2g; %.1fs", s.Name, r.MaxAbsDiff, r.Scale, r.FoldedDiff, r.Seconds)
	}
}
