package dpengine

import (
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/rewrite"
)

// TestRuleRegistry: every consumer the planner trains through has its rule
// registered, and a consumer without one is named in the error.
func TestRuleRegistry(t *testing.T) {
	for _, tc := range []struct {
		kind string
		ops  []string
		have []string
	}{
		{"linear", []string{"Conv", "Gemm", "MatMul"}, LinearRuleOps()},
		{"elementwise", []string{"Add", "Sub", "Mul", "Div", "Conv", "Gemm", "Concat"}, ElementwiseRuleOps()},
	} {
		for _, op := range tc.ops {
			if !slices.Contains(tc.have, op) {
				t.Errorf("no %s rule for %s (have %v)", tc.kind, op, tc.have)
			}
		}
		if !slices.IsSorted(tc.have) {
			t.Errorf("%s rule list %v is not sorted", tc.kind, tc.have)
		}
	}
	if _, err := linearRuleFor("NoSuchOp"); err == nil || !strings.Contains(err.Error(), "NoSuchOp") {
		t.Errorf("linearRuleFor(NoSuchOp) = %v, want an error naming the operator", err)
	}
	if _, err := elementwiseRuleFor("NoSuchOp"); err == nil || !strings.Contains(err.Error(), "NoSuchOp") {
		t.Errorf("elementwiseRuleFor(NoSuchOp) = %v, want an error naming the operator", err)
	}
}

// TestEveryPlannedConsumerHasARule: every operator the planner lets a
// parameter be trained through has a per-sample rule here (the planner's
// consumer rules and the engine's per-sample rules are registered in
// pairs). BatchNormalization's consumer rule only refuses.
func TestEveryPlannedConsumerHasARule(t *testing.T) {
	lin, elem := LinearRuleOps(), ElementwiseRuleOps()
	for _, op := range rewrite.ConsumerOps() {
		if op == "BatchNormalization" {
			continue
		}
		if !slices.Contains(lin, op) && !slices.Contains(elem, op) {
			t.Errorf("the planner trains parameters read by %s, which has no per-sample rule", op)
		}
	}
}
