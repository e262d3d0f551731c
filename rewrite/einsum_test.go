package rewrite

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

func equation(eq string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String("equation"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(eq)}
}

// TestEinsum: the batch is followed through Einsum, and a weight read by
// one is a grouped linear layer, or frozen with the reason.
func TestEinsum(t *testing.T) {
	for _, tc := range []struct {
		name, eq string
		w        []int64 // weight shape; nil: x·x (both operands the data)
		out      []any   // output shape
		// want: the weight's layer (T, D, p, groups), or a substring of
		// the frozen reason or of a problem.
		t, d, p, groups int64
		frozen, problem string
		// general: no grouped linear layer; the weight is trained through
		// the general Einsum rule (instantiated from the equation).
		general bool
	}{
		{name: "token linear", eq: "btd,ed->bte", w: []int64{4, 6}, out: []any{"N", 5, 4}, t: 5, d: 6, p: 4, groups: 1},
		{name: "per head", eq: "bthd,hde->bthe", w: []int64{2, 3, 4}, out: []any{"N", 5, 2, 4}, t: 5, d: 3, p: 4, groups: 2},
		{name: "weight first", eq: "ke,bthe->bthk", w: []int64{4, 3}, out: []any{"N", 5, 2, 4}, t: 10, d: 3, p: 4, groups: 1},
		{name: "batch moved", eq: "bthd,hde->tbhe", w: []int64{2, 3, 4}, out: []any{"N", 5, 2, 4}, t: 5, d: 3, p: 4, groups: 2},
		{name: "data label summed", eq: "bthd,hde->bhe", w: []int64{2, 3, 4}, out: []any{"N", 2, 4}, general: true},
		{name: "weight label summed", eq: "bthd,hdf->bthd", w: []int64{2, 3, 7}, out: []any{"N", 5, 2, 3}, general: true},
		{name: "attention", eq: "bthd,bshd->bhts", out: []any{"N", 2, 5, 5}},
		{name: "sum over the batch", eq: "bthd,bshd->hts", out: []any{2, 5, 5}, problem: "sums over the batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newMB().input("x", "N", 5, 2, 3).output("y", tc.out...)
			b.opset = 12
			ins := []string{"x", "x"}
			if tc.w != nil {
				b.init("w", tc.w)
				ins = []string{"x", "w"}
				if strings.HasPrefix(tc.eq, "ke,") {
					ins = []string{"w", "x"}
				}
			}
			if tc.eq == "btd,ed->bte" {
				b.ints("flat", 0, 5, 6).node("Reshape", "r", []string{"x", "flat"}, []string{"xr"})
				ins[0] = "xr"
			}
			if strings.HasSuffix(tc.eq, "->tbhe") { // back to batch first
				b.node("Einsum", "e", ins, []string{"e"}, equation(tc.eq))
				b.node("Transpose", "tr", []string{"e"}, []string{"y"}, attrInts("perm", 1, 0, 2, 3))
			} else {
				b.node("Einsum", "e", ins, []string{"y"}, equation(tc.eq))
			}
			p, err := Analyze(b.build(t), PlanOptions{InputShape: []int64{5, 2, 3}, Batch: 4})
			if err != nil {
				t.Fatal(err)
			}
			if tc.problem != "" {
				if len(p.Problems) == 0 || !strings.Contains(strings.Join(p.Problems, "; "), tc.problem) {
					t.Errorf("problems %v, want one with %q", p.Problems, tc.problem)
				}
				return
			}
			if len(p.Problems) > 0 || len(p.Warnings) > 0 {
				t.Fatalf("problems %v, warnings %v", p.Problems, p.Warnings)
			}
			if tc.w == nil {
				return
			}
			prm := p.Param("w")
			if tc.frozen != "" {
				if prm.Trainable() || !strings.Contains(prm.Reason, tc.frozen) {
					t.Errorf("w: kind %s (%s), want frozen with %q", prm.Kind, prm.Reason, tc.frozen)
				}
				return
			}
			if tc.general {
				if prm.Kind != KindElementwise || len(prm.Uses) != 1 {
					t.Errorf("w: kind %s (%s), %d uses; want one use through the general Einsum rule", prm.Kind, prm.Reason, len(prm.Uses))
				}
				return
			}
			if prm.Kind != KindLinear || len(prm.Uses) != 1 {
				t.Fatalf("w: kind %s (%s), %d uses; want one linear use", prm.Kind, prm.Reason, len(prm.Uses))
			}
			l := prm.Uses[0].Layer
			if l.T != tc.t || l.D != tc.d || l.P != tc.p || l.Groups != tc.groups {
				t.Errorf("layer T=%d D=%d p=%d groups=%d, want %d %d %d %d", l.T, l.D, l.P, l.Groups, tc.t, tc.d, tc.p, tc.groups)
			}
		})
	}
}
