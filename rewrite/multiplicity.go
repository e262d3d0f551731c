package rewrite

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
)

// MaxMultiplicity bounds PlanOptions.Multiplicity: De et al. (2022) report
// gains up to 16 views a sample and none past 32; more only multiplies the
// step's cost.
const MaxMultiplicity = 256

// checkMultiplicity refuses a multiplicity outside [0, MaxMultiplicity].
func checkMultiplicity(k int64) error {
	if k < 0 || k > MaxMultiplicity {
		return fmt.Errorf("rewrite: augmentation multiplicity %d must be between 1 and %d", k, MaxMultiplicity)
	}
	return nil
}

// multiply makes c, a clone of the graph being planned or compiled, read
// k augmented views of each sample (augmentation multiplicity, De et al.
// 2022, "Unlocking high-accuracy differentially private image
// classification through scale", §3): its input becomes (B, k, sample…),
// reshaped to the model's (B·k, sample…) before the model's first node,
// so that the batch analysis sees every activation with a sample's k
// views as consecutive rows (layout axis 0, 1×B×k) and the per-sample
// rules take a sample's gradient as the sum over its rows, as they do for
// windows folded into the batch. The output stays (B·k, classes): the
// loss is each view's, and the engine weighs each row by 1/k, so that a
// sample's gradient is the mean of its views' gradients, clipped as one.
// k ≤ 1 leaves c unchanged. The graph the user exports never holds the
// reshape: Prepare and ExportGraph work on g, this only on clones.
func multiply(c *graph.Graph, sample []int64, k int64) error {
	if k <= 1 {
		return nil
	}
	in, err := inputOf(c)
	if err != nil {
		return err
	}
	if len(in.Shape) == 0 {
		return fmt.Errorf("rewrite: augmentation multiplicity: input %q has no batch axis", in.Name)
	}
	nm := newNamer(c)
	// The views are what the caller feeds: the input's declared type (a
	// uint8 pixel input's) moves to them.
	views := &graph.Value{Name: nm.value(in.Name + "_views"), DType: in.DType, Declared: in.Declared}
	in.Declared = graph.Undefined
	dims := []graph.Dim{in.Shape[0], {Size: k}}
	for _, d := range sample {
		dims = append(dims, graph.Dim{Size: d})
	}
	views.Shape = graph.Shape(dims)
	c.Values[views.Name] = views
	b := newBuilder(c, nm, "augment_multiplicity")
	target := append([]int64{-1}, sample...)
	shape := b.constant(int64Tensor([]int64{int64(len(target))}, target...))
	b.opInto(in, "Reshape", nil, views, shape)
	c.Nodes = append(b.nodes, c.Nodes...)
	c.Inputs[0] = views
	relink(c)
	return nil
}
