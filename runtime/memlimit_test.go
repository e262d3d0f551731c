package runtime

import (
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/hostile"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// TestPlanMemoryLimit: a plan over the memory limit is refused before its
// kernels or arena are allocated, naming what it needs and the limit.
func TestPlanMemoryLimit(t *testing.T) {
	var bomb hostile.Model
	for _, m := range hostile.Models() {
		if m.Name == "plan" {
			bomb = m
		}
	}
	g, err := graph.FromONNX(onnx.NewModel(bomb.Proto))
	if err != nil {
		t.Fatal(err)
	}
	// 256 GiB for one value: over any test machine's available memory, and
	// over an explicit limit.
	for _, lim := range []int64{0, 1 << 30} {
		_, err := CompileForBatch(g, 2, nil, &Options{ForwardOnly: true, MaxMemory: lim})
		if err == nil || !strings.Contains(err.Error(), `output "e"`) || !strings.Contains(err.Error(), "256 GiB") {
			t.Errorf("limit %d: err = %v, want one naming output \"e\" and its 256 GiB", lim, err)
		}
	}
	// The whole arena is checked too: the cnn fixture's training plan for
	// a batch of 8 does not fit 256 KiB, though each of its values does.
	fx, _ := loadFixture(t, "cnn")
	_, err = CompileForBatch(fx, 8, nil, &Options{MaxMemory: 256 << 10})
	if err == nil || !strings.Contains(err.Error(), "buffer plan needs") || !strings.Contains(err.Error(), "memory limit of 256 KiB") {
		t.Errorf("cnn under 256 KiB: err = %v", err)
	}
	if _, err := CompileForBatch(fx, 8, nil, &Options{MaxMemory: 1 << 30}); err != nil {
		t.Errorf("cnn under 1 GiB: %v", err)
	}
}
