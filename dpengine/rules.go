package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// Per-sample rules, one per consumer operator (DESIGN.md §3). A parameter
// meets the batch at a consumer node; what the engine computes there
// depends only on the consumer's operator and on which of its inputs the
// parameter is. Each operator's rule lives in its own file (rule_conv.go,
// rule_matmul.go, …) and registers itself here, so that supporting a new
// consumer is one new file and its test.
//
// There are two kinds of rules, as there are two kinds of parameter uses
// (rewrite.KindLinear and rewrite.KindElementwise):
//
//   - A linearRule handles a weight whose per-sample gradient is g_iᵀa_i
//     (a_i the unfolded input, g_i the output gradient): it computes the
//     ghost norm or instantiates the gradient for every sample, and, for
//     book-keeping, keeps a_i and g_i to form Σ_i C_i g_iᵀa_i later.
//   - An elementwiseRule gives sample i's gradient with respect to one
//     operand of the consumer (a bias, a scale, a concatenated token),
//     from the sample's output gradient; the engine then maps it back to
//     the parameter (through the parameter's path, if any).

// linearRule is the per-sample rule of an operator reading a parameter as
// the weight of a linear map.
type linearRule struct {
	// perSample adds each real sample's squared gradient norm of the use
	// to us.p.normSq, or its gradient to us.p.ps where the parameter keeps
	// per-sample gradients, as us.linear.decision says; in book-keeping
	// mode without per-sample gradients it records in us.linear what
	// weightedSum needs.
	perSample func(e *Engine, ev *runtime.HookEvent, us *useState) error
	// weightedSum adds Σ_i c_i g_i to accum (or writes it there, if
	// overwrite) from what perSample recorded; see
	// linearState.weightedSum.
	weightedSum func(ls *linearState, c []float32, B int, accum []float32, overwrite bool, scratch *[]float32, ws []float32) error
}

// sampleGrad is what an elementwise rule gets for sample i: the consumer
// input k that reads the parameter (op, and its per-sample shape opShape),
// the sample's output gradient gi of shape gShape (the rule may overwrite
// it), and out, the operand-shaped result.
type sampleGrad struct {
	ops     runtime.DPOps
	lay     runtime.LayoutOps // the device's fills and copies
	dev     runtime.Device    // where scratch is allocated (gatherOn, growOn)
	k, i, B int
	gi      []float32
	gShape  []int
	op      *runtime.View
	opShape []int
	out     []float32
}

// elementwiseRule is the per-sample rule of an operator reading a
// parameter (or a value derived from parameters only) elementwise.
type elementwiseRule struct {
	// operandGrad writes sample s.i's gradient with respect to input s.k
	// to s.out; sc is the calling worker's scratch.
	operandGrad func(ev *runtime.HookEvent, s sampleGrad, sc *opScratch) error
	// batch, if set, is a faster path for the whole physical batch of
	// group g; it reports false, doing nothing, when it does not apply.
	batch func(e *Engine, ev *runtime.HookEvent, g *useGroup) bool
}

var (
	linearRules      = map[string]*linearRule{}
	elementwiseRules = map[string]*elementwiseRule{}
)

// registerLinear registers the linear rule of the consumer operators ops.
// It runs from the rule files' init functions: registering an operator
// twice is a programming error.
func registerLinear(r *linearRule, ops ...string) {
	for _, op := range ops {
		if linearRules[op] != nil {
			panic("dpengine: two linear per-sample rules for " + op)
		}
		linearRules[op] = r
	}
}

// registerElementwise registers the elementwise rule of the consumer
// operators ops (see registerLinear).
func registerElementwise(r *elementwiseRule, ops ...string) {
	for _, op := range ops {
		if elementwiseRules[op] != nil {
			panic("dpengine: two elementwise per-sample rules for " + op)
		}
		elementwiseRules[op] = r
	}
}

// LinearRuleOps lists, sorted, the consumer operators with a registered
// per-sample rule for a weight.
func LinearRuleOps() []string { return sortedKeys(linearRules) }

// ElementwiseRuleOps lists, sorted, the consumer operators with a
// registered per-sample rule for an elementwise operand.
func ElementwiseRuleOps() []string { return sortedKeys(elementwiseRules) }

// linearRuleFor returns the linear rule of op, or an error naming it.
func linearRuleFor(op string) (*linearRule, error) {
	if r := linearRules[op]; r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("no per-sample rule for %s weights (rules exist for %v)", op, LinearRuleOps())
}

// elementwiseRuleFor returns the elementwise rule of op, or an error naming
// it.
func elementwiseRuleFor(op string) (*elementwiseRule, error) {
	if r := elementwiseRules[op]; r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("no per-sample rule for a parameter operand of %s (rules exist for %v)", op, ElementwiseRuleOps())
}
