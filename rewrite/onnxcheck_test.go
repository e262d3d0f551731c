package rewrite

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// checkScript checks every model named on the command line with the ONNX
// checker (full_check runs ONNX's own shape inference too) and evaluates
// those listed in EVAL with the fixture generator's numpy reference
// evaluator on the given golden input, printing the logits as JSON.
const checkScript = `
import json, sys
import numpy as np
import onnx
sys.path.insert(0, sys.argv[1])
import onnx_ref
out = {}
args = json.loads(sys.argv[2])
for path, golden in args.items():
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    if golden:
        x = np.load(golden)["input"]
        out[path] = onnx_ref.run(m, {"input": x})["logits"].astype(float).tolist()
print(json.dumps(out))
`

// TestRewrittenModelsAreValidONNX exports every fixture after Prepare
// (BatchNorm → GroupNorm, a 5-class head) and resnet_train after
// --bn freeze, and checks them with python3-onnx; the two resnet_train
// rewrites are also evaluated by testdata/gen/onnx_ref.py: freeze must
// give PyTorch's eval-mode logits, GroupNorm what the Go reference
// evaluator computes. Skips where python3-onnx is absent.
func TestRewrittenModelsAreValidONNX(t *testing.T) {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import onnx, numpy").Run(); err != nil {
		t.Skip("no /usr/bin/python3 with onnx and numpy")
	}
	dir := t.TempDir()
	args := map[string]string{}
	golden, _ := filepath.Abs("../testdata/golden/resnet_train.npz")
	var gnWant *tens
	save := func(name, tag string, opts Options, eval bool) string {
		g := loadFixture(t, name)
		if _, err := Prepare(g, opts); err != nil {
			t.Fatal(err)
		}
		g = exported(t, g)
		m, err := g.ToONNX()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+"-"+tag+".onnx")
		if err := m.Save(path, nil); err != nil {
			t.Fatal(err)
		}
		args[path] = ""
		if eval {
			args[path] = golden
			if opts.BN.Mode == BNGroupNorm {
				gnWant = evalFixture(t, g, name, nil)
			}
		}
		return path
	}
	for _, name := range fixtureNames(t) {
		save(name, "head5", Options{PlanOptions: PlanOptions{InputShape: fixtureSample(name), Batch: 2}, NumClasses: 5, BN: BNOptions{Mode: BNGroupNorm}}, false)
	}
	gnPath := save("resnet_train", "groupnorm", Options{PlanOptions: PlanOptions{InputShape: []int64{3, 32, 32}, Batch: 2}, BN: BNOptions{Mode: BNGroupNorm}}, true)
	frPath := save("resnet_train", "freeze", Options{PlanOptions: PlanOptions{InputShape: []int64{3, 32, 32}, Batch: 2}, BN: BNOptions{Mode: BNFreeze}}, true)

	js, _ := json.Marshal(args)
	gen, _ := filepath.Abs("../testdata/gen")
	cmd := exec.Command(py, "-c", checkScript, gen, string(js))
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("onnx checker: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var logits map[string][][]float64
	if err := json.Unmarshal(out, &logits); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	flat := func(v [][]float64) *tens {
		x := newTens(len(v), len(v[0]))
		for i, r := range v {
			copy(x.d[i*len(r):], r)
		}
		return x
	}
	gold := readNPZ(t, golden)
	t.Logf("evaluated %d models; freeze diff %g; gn diff %g", len(logits), flat(logits[frPath]).maxAbsDiff(gold["logits_eval"]), flat(logits[gnPath]).maxAbsDiff(gnWant))
	if d := flat(logits[frPath]).maxAbsDiff(gold["logits_eval"]); d > 1e-4 {
		t.Errorf("onnx_ref on the frozen model vs PyTorch eval-mode logits: %g", d)
	}
	if d := flat(logits[gnPath]).maxAbsDiff(gnWant); d > 1e-4*max(1, gnWant.maxAbs()) {
		t.Errorf("onnx_ref on the GroupNorm model vs the Go evaluator: %g", d)
	}
}
