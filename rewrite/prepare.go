package rewrite

import (
	"fmt"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
)

// Options configures Prepare.
type Options struct {
	PlanOptions
	// BN says how BatchNormalization is rewritten (Mode "" is
	// BNGroupNorm).
	BN BNOptions
	// NumClasses, when positive, replaces the classifier head (ReplaceHead)
	// with a fresh one of that many classes, drawn with HeadSeed.
	NumClasses int64
	HeadSeed   uint64
	// LoRA, when its Rank is positive, adds low-rank adapters (AddLoRA)
	// after the head is replaced, and the plan trains only them, the
	// classifier heads and what Train selects (Plan.Adapters).
	LoRA LoRAOptions
	// Loaded lists what was done to g before Prepare (ReleaseBatch's
	// repairs of a fixed batch axis), so that the plan lists every change.
	Loaded []Change `json:"-"`
}

// Prepare rewrites g in place for DP training and plans it: Cleanup,
// RewriteBatchNorm (only where the model has BatchNormalization),
// ReplaceHead (when NumClasses > 0), RemoveDead, then Analyze. The passes
// work on g itself, which keeps its dynamic batch axis, so ExportGraph
// and ToONNX export the rewritten model; the analysis runs on a clone.
// The returned plan lists every change.
func Prepare(g *graph.Graph, opts Options) (*Plan, error) {
	if opts.NumClasses < 0 {
		return nil, fmt.Errorf("rewrite: number of classes must be positive, got %d", opts.NumClasses)
	}
	if opts.BN.Mode == "" {
		opts.BN.Mode = BNGroupNorm
	}
	if opts.BN.Mode != BNGroupNorm && opts.BN.Mode != BNFreeze {
		return nil, fmt.Errorf("rewrite: unknown BatchNorm mode %q (want groupnorm or freeze)", opts.BN.Mode)
	}
	if opts.BN.Groups < 0 {
		return nil, fmt.Errorf("rewrite: group count must be positive, got %d", opts.BN.Groups)
	}
	if _, err := inputOf(g); err != nil {
		return nil, err
	}
	if opts.Batch <= 0 {
		return nil, fmt.Errorf("rewrite: batch must be positive, got %d", opts.Batch)
	}
	form := ExportForm(g)
	changes := append([]Change(nil), opts.Loaded...)
	ch, err := Cleanup(g)
	changes = append(changes, ch...)
	if err != nil {
		return nil, err
	}
	// The passes that need static shapes run where g has the operator
	// they rewrite (the shapes cost an inference on a clone).
	shaped := func(op string, pass func(shapes map[string]graph.Shape) ([]Change, error)) error {
		has := false
		for _, n := range g.Nodes {
			has = has || n.OpType == op
		}
		if !has {
			return nil
		}
		shapes, err := StaticShapes(g, opts.InputShape, analysisBatch(g, opts.Batch))
		if err != nil {
			return err
		}
		ch, err := pass(shapes)
		changes = append(changes, ch...)
		return err
	}
	if err := shaped("BatchNormalization", func(s map[string]graph.Shape) ([]Change, error) { return RewriteBatchNorm(g, opts.BN, s) }); err != nil {
		return nil, err
	}
	// Decomposed GroupNorms (a model dpfinetune wrote, PyTorch's
	// nn.GroupNorm) normalize with InstanceNormalization or ReduceMean.
	op := "ReduceMean"
	for _, n := range g.Nodes {
		if n.OpType == "InstanceNormalization" {
			op = n.OpType
		}
	}
	if err := shaped(op, func(s map[string]graph.Shape) ([]Change, error) { return FuseGroupNorm(g, s) }); err != nil {
		return nil, err
	}
	if err := shaped("ReduceMean", func(s map[string]graph.Shape) ([]Change, error) { return FuseLayerNorm(g, s) }); err != nil {
		return nil, err
	}
	if err := shaped("ReduceMean", func(s map[string]graph.Shape) ([]Change, error) { return FuseStandardization(g, s) }); err != nil {
		return nil, err
	}
	if opts.NumClasses > 0 {
		ch, err := ReplaceHead(g, opts.NumClasses, opts.HeadSeed)
		changes = append(changes, ch...)
		if err != nil {
			return nil, err
		}
	}
	changes = append(changes, RemoveDead(g)...)
	var adapters []Adapter
	if opts.LoRA.Rank > 0 {
		heads := headParams(g)
		ad, ch, err := AddLoRA(g, opts.LoRA, heads)
		changes = append(changes, ch...)
		if err != nil {
			return nil, err
		}
		if len(ad) == 0 {
			var why []string
			for _, c := range ch {
				why = append(why, c.Target+": "+c.Reason)
			}
			if len(why) > 3 {
				why = append(why[:3], fmt.Sprintf("and %d more", len(why)-3))
			}
			msg := ""
			if len(why) > 0 {
				msg = "; not adapted: " + strings.Join(why, "; ")
			}
			return nil, fmt.Errorf("rewrite: --lora: the model has no layer to adapt (a Gemm, MatMul or Conv of one group reading its weight directly or through a transpose, other than the classifier head)%s", msg)
		}
		adapters = ad
		opts.Frozen = loraTraining(g, ad, heads, opts.Train)
		opts.Train = nil
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("rewrite: the rewritten graph is invalid: %w", err)
	}
	p, err := Analyze(g, opts.PlanOptions)
	if err != nil {
		return nil, err
	}
	p.Changes = changes
	p.Adapters = adapters
	p.ExportForm = form
	return p, nil
}
