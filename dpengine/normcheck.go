package dpengine

import (
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// NormCheck is what CheckNorms compared: the per-sample gradient norms of
// Samples samples, every trainable parameter's and their totals, and the
// largest difference it found (Worst, for parameter Param, "" for the
// total, and sample Sample), as CheckNorms measures it; WorstOwn is the
// largest difference relative to a parameter's own squared norm, among
// those NormTolerance.Share holds to it.
type NormCheck struct {
	Samples  int     `json:"samples"`
	Params   int     `json:"params"`
	Worst    float64 `json:"worst_difference"`
	Param    string  `json:"worst_param,omitempty"`
	Sample   int     `json:"worst_sample"`
	WorstOwn float64 `json:"worst_own_difference"`
}

// NormTolerance is how far CheckNorms lets the engine's squared norms
// differ from the direct pass's: Total, relative to the sample's squared
// total (the clip bound holds on the total); and, for a parameter whose
// squared norm is at least Share of that total, Own relative to the
// parameter's own. The second catches an engine that computes a small
// layer's norm wrongly — EfficientViT's convolutions over windows, whose
// norm was a window's instead of its sample's, are 10⁻⁴ of the total
// with random weights, so their error stays under Total, but is 93 % of
// their own — while a parameter whose norm is rounding's size, where a
// ghost norm's terms cancel (a GroupNorm of one value a group), is below
// Share.
type NormTolerance struct {
	Total, Own, Share float64
}

// NormMismatchError says that the engine's per-sample gradient norm of a
// parameter is not the norm of the sample's own gradient: the engine would
// clip this model wrongly, and a run on it would not have its guarantee.
type NormMismatchError struct {
	Param          string
	Sample         int
	Engine, Direct float64 // the engine's norm, the sample's own gradient's
	// Relative is |Engine² − Direct²| over the sample's total squared norm.
	Relative float64
	// Own is |Engine² − Direct²| over Direct², where that is what failed
	// (NormTolerance.Own); 0 otherwise.
	Own float64
}

func (e *NormMismatchError) Error() string {
	what := fmt.Sprintf("parameter %q", e.Param)
	if e.Param == "" {
		what = "all parameters together"
	}
	by := fmt.Sprintf("%.2g of the sample's squared norm", e.Relative)
	if e.Own > 0 {
		by = fmt.Sprintf("%.2g of the parameter's own, %.2g of the sample's", e.Own, e.Relative)
	}
	return fmt.Sprintf("dpengine: norm check: %s, sample %d: per-sample gradient norm %.6g, but the sample's own gradient has norm %.6g (their squares differ by %s): the engine would clip this model's samples wrongly",
		what, e.Sample, e.Engine, e.Direct, by)
}

// CheckNorms holds the engine to the definition of a per-sample gradient
// on the physical batch x, y (n ≤ PhysicalBatch samples): it runs the
// batch through the engine's own machinery (ClippedSum: its rules, its
// mode's ghost norms or instantiations, its device) and, for each sample
// alone, a plain backward pass of a plan of g on the CPU — no per-sample
// rule, no kernel of the engine's device — and compares, per parameter
// and in total (the norm the engine clips with), the engine's norm with
// the norm of that gradient: the difference of their squares relative to
// the sample's total squared norm (the clip bound holds on the total), and
// for a parameter of a large enough share relative to its own (tol). A
// difference above either bound is a *NormMismatchError. With augmentation
// multiplicity each sample of x is its views, and its own gradient is the
// mean of theirs: one plain backward pass over them, each weighed
// 1/views. g must be the graph the engine was built from, its
// initializers the engine's parameters (before any step). Nothing of the
// engine's state that a step carries over changes: ClippedSum draws no
// noise and updates nothing.
func (e *Engine) CheckNorms(g *graph.Graph, x []float32, y []int64, tol NormTolerance) (*NormCheck, error) {
	if e.cfg.Mode == NonDP {
		return nil, fmt.Errorf("dpengine: norm check: a non-private engine has no per-sample norms")
	}
	n := len(y)
	_, totals, err := e.ClippedSum(x, y)
	if err != nil {
		return nil, err
	}
	norms := e.ParamNorms()
	names := e.ParamNames()
	// The batch of the direct plan: one sample — its views, the model's
	// rows each with the loss weight 1/views, where the engine reads
	// several (augmentation multiplicity): a sample's gradient is by
	// definition the mean of its views' — padded where the model fixes
	// its batch.
	v := e.views
	sample := e.sample
	if v > 1 {
		sample = e.sample[1:]
	}
	b := v
	if d := g.Inputs[0].Shape; len(d) > 0 && d[0].Size > 0 {
		if int(d[0].Size) < v {
			return nil, fmt.Errorf("dpengine: norm check: the model fixes its batch at %d, fewer than a sample's %d views", d[0].Size, v)
		}
		b = int(d[0].Size)
	}
	ref, err := runtime.CompileForBatch(g, b, sample, &runtime.Options{Trainable: names})
	if err != nil {
		return nil, fmt.Errorf("dpengine: norm check: the direct plan: %w", err)
	}
	// The engine's loss, label smoothing and positive weights included.
	if err := ref.SetLabelSmoothing(e.cfg.LabelSmoothing); err != nil {
		return nil, fmt.Errorf("dpengine: norm check: %w", err)
	}
	if err := ref.SetMultiLabel(e.cfg.MultiLabel); err != nil {
		return nil, fmt.Errorf("dpengine: norm check: %w", err)
	}
	if err := ref.SetPosWeight(e.cfg.PosWeight); err != nil {
		return nil, fmt.Errorf("dpengine: norm check: %w", err)
	}
	if err := ref.SetUncertainTargets(e.cfg.UncertainTargets); err != nil {
		return nil, fmt.Errorf("dpengine: norm check: %w", err)
	}
	xin := make([]float32, b*e.sampleLen/v)
	labels := make([]int64, b)
	losses := make([]float32, b)
	weights := make([]float32, b)
	for r := range v {
		weights[r] = float32(1 / float64(v))
	}
	res := &NormCheck{Samples: n, Params: len(names)}
	direct := make([]float64, len(names))
	for i := 0; i < n; i++ {
		copy(xin, x[i*e.sampleLen:(i+1)*e.sampleLen])
		for r := range v {
			labels[r] = y[i]
		}
		if err := ref.SetInput(0, xin); err != nil {
			return nil, err
		}
		if err := ref.Forward(); err != nil {
			return nil, fmt.Errorf("dpengine: norm check: %w", err)
		}
		if err := ref.Loss(labels, losses); err != nil {
			return nil, fmt.Errorf("dpengine: norm check: %w", err)
		}
		if err := ref.Backward(weights, nil); err != nil {
			return nil, fmt.Errorf("dpengine: norm check: %w", err)
		}
		var total float64
		for k, name := range names {
			var s float64
			for _, v := range ref.Grad(name) {
				s += float64(v) * float64(v)
			}
			direct[k] = math.Sqrt(s)
			total += s
		}
		total = math.Sqrt(total)
		// Squared norms, as the guarantee adds them, each difference
		// relative to the sample's total: the clip bound holds on the
		// total, and a ghost norm whose terms cancel (a GroupNorm of one
		// value a group makes the true gradient vanish) is exact only to
		// float32 rounding of the terms, which its square root magnifies;
		// and, for a parameter of Share of the total or more, relative to
		// its own, where a small layer computed wrong shows.
		check := func(param string, got, want float64) error {
			diff, tt := math.Abs(got*got-want*want), math.Max(total*total, math.SmallestNonzeroFloat64)
			d := diff / tt
			if math.IsNaN(got) || math.IsNaN(want) {
				d = math.Inf(1)
			}
			if d > res.Worst {
				res.Worst, res.Param, res.Sample = d, param, i
			}
			if d > tol.Total {
				return &NormMismatchError{Param: param, Sample: i, Engine: got, Direct: want, Relative: d}
			}
			if want*want >= tol.Share*tt {
				own := diff / (want * want)
				res.WorstOwn = max(res.WorstOwn, own)
				if own > tol.Own {
					return &NormMismatchError{Param: param, Sample: i, Engine: got, Direct: want, Relative: d, Own: own}
				}
			}
			return nil
		}
		for k, name := range names {
			if err := check(name, norms[name][i], direct[k]); err != nil {
				return res, err
			}
		}
		if err := check("", totals[i], total); err != nil {
			return res, err
		}
	}
	return res, nil
}
