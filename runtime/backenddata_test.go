package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestONNXBackendData runs onnx/onnx's pytorch-converted and
// pytorch-operator backend cases (old PyTorch exports, opsets 6–9: PReLU's
// per-channel slopes, ConvTranspose, broadcast attributes, ...), which
// Debian's python3-onnx does not ship, from a checkout of onnx/onnx:
//
//	DPFINETUNE_ONNX_BACKEND_DATA=/path/to/onnx/onnx/backend/test/data go test ./runtime -run TestONNXBackendData -v
//
// Every case that runs must match ONNX's expected outputs; the refused
// ones are logged with the reason (float64 and int64 inputs).
func TestONNXBackendData(t *testing.T) {
	root := os.Getenv("DPFINETUNE_ONNX_BACKEND_DATA")
	if root == "" {
		t.Skip("set DPFINETUNE_ONNX_BACKEND_DATA to onnx/onnx's onnx/backend/test/data")
	}
	var dirs []string
	for _, kind := range []string{"pytorch-converted", "pytorch-operator"} {
		d, _ := filepath.Glob(filepath.Join(root, kind, "test_*"))
		dirs = append(dirs, d...)
	}
	if len(dirs) == 0 {
		t.Fatalf("no cases under %s/pytorch-{converted,operator}", root)
	}
	pass, refused := 0, 0
	for _, d := range dirs {
		name := filepath.Base(d)
		err := runBackendDataCase(t, d)
		var mismatch *conformanceMismatch
		switch {
		case err == nil:
			pass++
		case errors.As(err, &mismatch):
			t.Errorf("%s: %v", name, err)
		default:
			refused++
			t.Logf("refused %s: %s", name, strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	t.Logf("%d cases: %d pass, %d refused", len(dirs), pass, refused)
}

// runBackendDataCase lays a case out as runConformanceCase reads it: the
// model without the graph inputs that old exports list for their
// initializers, and test_data_set_0's tensors beside it.
func runBackendDataCase(t *testing.T, dir string) error {
	m, err := onnx.Load(filepath.Join(dir, "model.onnx"))
	if err != nil {
		return err
	}
	gp := m.Proto.GetGraph()
	inits := map[string]bool{}
	for _, in := range gp.GetInitializer() {
		inits[in.GetName()] = true
	}
	var keep []*onnxpb.ValueInfoProto
	for _, in := range gp.GetInput() {
		if !inits[in.GetName()] {
			keep = append(keep, in)
		}
	}
	gp.Input = keep
	b, err := proto.Marshal(m.Proto)
	if err != nil {
		return err
	}
	tmp := t.TempDir()
	if err := os.WriteFile(filepath.Join(tmp, "model.onnx"), b, 0o644); err != nil {
		return err
	}
	pbs, _ := filepath.Glob(filepath.Join(dir, "test_data_set_0", "*.pb"))
	for _, p := range pbs {
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tmp, filepath.Base(p)), raw, 0o644); err != nil {
			return err
		}
	}
	return runConformanceCase(tmp)
}
