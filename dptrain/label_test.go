package dptrain

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

// TestLabelNormCheck: the norm check's worst parameter and a mismatch's
// parameter are named as plan names them.
func TestLabelNormCheck(t *testing.T) {
	rp := &rewrite.Plan{Params: []*rewrite.Param{{Name: "val_34", Scope: "features.1.0.attn"}, {Name: "onnx::Conv_7", Module: "conv1.weight"}}}
	nc := &dpengine.NormCheck{Param: "val_34"}
	err := fmt.Errorf("wrapped: %w", &dpengine.NormMismatchError{Param: "onnx::Conv_7"})
	labelNormCheck(rp, nc, err)
	var mm *dpengine.NormMismatchError
	if !errors.As(err, &mm) {
		t.Fatal(err)
	}
	if nc.Param != "val_34 (in features.1.0.attn)" || mm.Param != "conv1.weight (onnx::Conv_7)" {
		t.Errorf("labels %q, %q", nc.Param, mm.Param)
	}
	labelNormCheck(rp, &dpengine.NormCheck{}, &dpengine.NormMismatchError{}) // the total: no name
}
