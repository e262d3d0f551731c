// Package orttest runs ONNX models in onnxruntime for interop tests.
//
// onnxruntime comes from the npm package onnxruntime-node@1.30.0, which
// ships libonnxruntime.so.1 and its Node binding; scripts/ort/install.sh
// installs it (once, into a cache directory) and scripts/ort/run.js runs a
// model. Tests call Run, which skips the test when Node, npm or the package
// cannot be had.
package orttest

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
)

var (
	once    sync.Once
	modDir  string
	initErr error
)

// repoRoot finds the repository root from this source file.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func setup() {
	if _, err := exec.LookPath("node"); err != nil {
		initErr = fmt.Errorf("node not found")
		return
	}
	out, err := exec.Command("bash", filepath.Join(repoRoot(), "scripts", "ort", "install.sh")).Output()
	if err != nil {
		initErr = fmt.Errorf("installing onnxruntime-node: %v", err)
		return
	}
	modDir = strings.TrimSpace(string(out))
}

// Tensor is a float32 tensor.
type Tensor struct {
	Shape []int64
	Data  []float32
	// Half feeds an input as float16 (Data rounded to it), for a model
	// written in half precision.
	Half bool
}

// Run runs model in onnxruntime with the given float32 inputs and returns
// its outputs by name. It skips t if onnxruntime is unavailable, unless
// DPFINETUNE_REQUIRE_ORT=1, when that is a failure.
func Run(t testing.TB, model string, inputs map[string]Tensor) map[string]Tensor {
	t.Helper()
	once.Do(setup)
	if initErr != nil {
		if os.Getenv("DPFINETUNE_REQUIRE_ORT") == "1" {
			t.Fatalf("onnxruntime unavailable: %v", initErr)
		}
		t.Skipf("onnxruntime unavailable: %v", initErr)
	}
	dir := t.TempDir()
	spec := map[string]map[string]any{"inputs": {}}
	for name, in := range inputs {
		file := fmt.Sprintf("in%d.f32", len(spec["inputs"]))
		b := make([]byte, 4*len(in.Data))
		for i, v := range in.Data {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		dtype := "float32"
		if in.Half {
			b, dtype = b[:2*len(in.Data)], "float16"
			for i, v := range in.Data {
				binary.LittleEndian.PutUint16(b[2*i:], graph.Float32ToHalf(v))
			}
		}
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
			t.Fatal(err)
		}
		spec["inputs"][name] = map[string]any{"shape": in.Shape, "file": file, "dtype": dtype}
	}
	sb, _ := json.Marshal(spec)
	specPath, outPath := filepath.Join(dir, "spec.json"), filepath.Join(dir, "out.json")
	if err := os.WriteFile(specPath, sb, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join(repoRoot(), "scripts", "ort", "run.js"), model, specPath, outPath)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("onnxruntime on %s: %v\n%s", model, err, out)
	}
	raw, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Outputs map[string]struct {
			Shape []int64
			Data  string
		}
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	outs := map[string]Tensor{}
	for name, o := range res.Outputs {
		b, err := base64.StdEncoding.DecodeString(o.Data)
		if err != nil {
			t.Fatal(err)
		}
		d := make([]float32, len(b)/4)
		for i := range d {
			d[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		outs[name] = Tensor{Shape: o.Shape, Data: d}
	}
	return outs
}
