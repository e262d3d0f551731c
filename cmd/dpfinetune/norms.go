package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

func init() {
	register(&command{
		name:    "norms",
		summary: "per-sample gradient norms (total and per parameter) and each layer's ghost/instantiate decision",
		run:     runNorms,
	})
}

type normsReport struct {
	Model     string               `json:"model"`
	Mode      dpengine.Mode        `json:"mode"`
	Samples   int                  `json:"samples"`
	Total     []float64            `json:"total"`
	PerParam  map[string][]float64 `json:"per_param"`
	Decisions []layerDecision      `json:"decisions"`
	Frozen    map[string]string    `json:"frozen,omitempty"`
	// Modules maps the parameters the exporter renamed to their PyTorch
	// names (rewrite.Param.Module).
	Modules map[string]string `json:"modules,omitempty"`
}

// label names a parameter as the plan does: its PyTorch name, with the
// stored one beside it when the exporter renamed it.
func (r *normsReport) label(name string) string {
	if m := r.Modules[name]; m != "" {
		return m + " (" + name + ")"
	}
	return name
}

type layerDecision struct {
	Param    string           `json:"param"`
	Node     string           `json:"node"`
	Op       string           `json:"op"`
	T        int64            `json:"T"`
	D        int64            `json:"D"`
	P        int64            `json:"p"`
	Decision rewrite.Decision `json:"decision"`
}

func runNorms(args []string, stdout io.Writer) error {
	fs := newFlagSet("norms", "--model M.onnx --input x.npy --labels y.npy [--mode bk|mixed|ghost|instantiate] [--batch N] [--json]")
	model := fs.String("model", "", "ONNX model file (required)")
	input := fs.String("input", "", ".npy float32 inputs (N,C,H,W) (required)")
	labels := fs.String("labels", "", ".npy int64 labels (N,), or multi-hot label sets (N, K) of 0s and 1s for a multi-label model (its loss the sigmoids' binary cross-entropy; -1 a label ignored, as uncertain=ignore leaves it out) (required)")
	mode := fs.String("mode", "bk", "how norms are computed: bk or mixed (layerwise decision), ghost (ghost norm everywhere), instantiate (per-sample gradients)")
	batch := fs.Int("batch", 32, "physical batch: samples per forward/backward pass")
	posWeight := fs.String("pos-weight", "", "with multi-hot labels: each label's positive weight of the loss (PyTorch's BCEWithLogitsLoss pos_weight), one a label or NAME=W pairs by label index")
	asJSON := fs.Bool("json", false, "print JSON")
	rf := addRewriteFlags(fs, "freeze")
	devFlag := addDeviceFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dev, err := devFlag.open()
	if err != nil {
		return err
	}
	if *model == "" || *input == "" || *labels == "" {
		return usagef("--model, --input and --labels are required")
	}
	m, err := dpengine.ParseMode(*mode)
	if err != nil || m == dpengine.NonDP {
		return usagef("--mode must be bk, mixed, ghost or instantiate, got %q", *mode)
	}
	if *batch <= 0 {
		return usagef("--batch must be positive, got %d", *batch)
	}
	lm, err := loadGraph(*model)
	if err != nil {
		return err
	}
	if err := lm.dynamicBatch(); err != nil {
		return err
	}
	g := lm.g
	x, err := npy.ReadFile(*input)
	if err != nil {
		return err
	}
	lm.pixelsAsFloat(x)
	if x.DType != npy.Float32 || len(x.Shape) < 2 {
		return fmt.Errorf("%s: want float32 inputs of shape (N, C, H, W), got %s %v", *input, x.DType, x.Shape)
	}
	y, err := npy.ReadFile(*labels)
	if err != nil {
		return err
	}
	ys := y.I64
	if y.DType == npy.Int32 {
		ys = make([]int64, len(y.I32))
		for i, v := range y.I32 {
			ys[i] = int64(v)
		}
	} else if y.DType != npy.Int64 {
		return fmt.Errorf("%s: want int64 labels, got %s", *labels, y.DType)
	}
	// Multi-hot label sets, (N, K): each row's set (internal/labelset), the
	// multi-label head.
	multi := len(y.Shape) == 2 && y.Shape[1] > 1
	if multi {
		k := y.Shape[1]
		if k > runtime.MaxLabels {
			return fmt.Errorf("%s: %d labels, at most %d", *labels, k, runtime.MaxLabels)
		}
		sets := make([]int64, y.Shape[0])
		var on, ignored []int
		for i := range sets {
			on, ignored = on[:0], ignored[:0]
			for j, v := range ys[i*k : (i+1)*k] {
				switch v {
				case 0:
				case 1:
					on = append(on, j)
				case -1: // uncertain, ignored: no term in the sample's loss
					ignored = append(ignored, j)
				default:
					return fmt.Errorf("%s: sample %d has %d for label %d: want multi-hot labels of 0s and 1s (-1: ignored)", *labels, i, v, j)
				}
			}
			if sets[i], err = labelset.OfIgnoring(k, on, ignored); err != nil {
				return fmt.Errorf("%s: sample %d: %v", *labels, i, err)
			}
		}
		ys = sets
	}
	var pw []float64
	if *posWeight != "" {
		if !multi {
			return usageError{"--pos-weight weighs multi-hot labels' positive terms; " + *labels + " holds one label a sample"}
		}
		if pw, err = dptrain.ParsePosWeight(*posWeight, nil, y.Shape[1]); err != nil {
			return usageError{err.Error()}
		}
	}
	n := x.Shape[0]
	if len(ys) != n {
		return fmt.Errorf("%s has %d labels for %d inputs in %s", *labels, len(ys), n, *input)
	}
	dims := make([]int64, len(x.Shape)-1)
	for i, d := range x.Shape[1:] {
		dims[i] = int64(d)
	}
	pb := min(*batch, n)
	opts, err := rf.options(dims, int64(pb))
	if err != nil {
		return err
	}
	rp, err := rewrite.Prepare(g, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", *model, err)
	}
	// A clip norm that never binds: the norms are what we want.
	eng, err := dpengine.New(g, rp, dpengine.Config{Device: dev, Mode: m, Clipping: dpengine.Clipping{Fn: dpengine.Abadi, R: math.MaxFloat64},
		ExpectedBatch: float64(n), PhysicalBatch: pb, MultiLabel: multi, PosWeight: pw})
	if err != nil {
		return fmt.Errorf("%s: %w", *model, err)
	}
	rep := normsReport{Model: *model, Mode: m, Samples: n, PerParam: map[string][]float64{}, Frozen: map[string]string{}}
	sl := len(x.F32) / n
	for off := 0; off < n; off += pb {
		end := min(off+pb, n)
		_, tot, err := eng.ClippedSum(x.F32[off*sl:end*sl], ys[off:end])
		if err != nil {
			return fmt.Errorf("samples %d to %d: %w", off, end-1, err)
		}
		rep.Total = append(rep.Total, tot...)
		for name, v := range eng.ParamNorms() {
			rep.PerParam[name] = append(rep.PerParam[name], v...)
		}
	}
	dec := eng.Decisions()
	for _, l := range rp.Layers {
		d, ok := dec[l.Param+"@"+l.Node]
		if !ok {
			continue
		}
		rep.Decisions = append(rep.Decisions, layerDecision{Param: l.Param, Node: l.Node, Op: l.Op, T: l.T, D: l.D, P: l.P, Decision: d})
	}
	for _, p := range rp.Params {
		if p.Kind == rewrite.KindFrozen {
			rep.Frozen[p.Name] = p.Reason
		}
		if p.Module != "" {
			if rep.Modules == nil {
				rep.Modules = map[string]string{}
			}
			rep.Modules[p.Name] = p.Module
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printNorms(stdout, &rep)
	return nil
}

func printNorms(w io.Writer, r *normsReport) {
	fmt.Fprintf(w, "model: %s   mode: %s   samples: %d\n\n", r.Model, r.Mode, r.Samples)
	fmt.Fprintln(w, "per-sample gradient norm of the per-sample softmax cross-entropy (all trainable parameters):")
	for i, v := range r.Total {
		fmt.Fprintf(w, "  sample %-4d %.6g\n", i, v)
	}
	names := make([]string, 0, len(r.PerParam))
	for k := range r.PerParam {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "\nper parameter (mean / max over samples):")
	for _, k := range names {
		var mean, mx float64
		for _, v := range r.PerParam[k] {
			mean += v
			mx = math.Max(mx, v)
		}
		mean /= float64(len(r.PerParam[k]))
		fmt.Fprintf(w, "  %-50s %11.5g %11.5g\n", trunc(r.label(k), 50), mean, mx)
	}
	fmt.Fprintln(w, "\nlinear layers:")
	for _, d := range r.Decisions {
		fmt.Fprintf(w, "  %-40s %-7s T=%-6d D=%-6d p=%-6d %s\n", trunc(r.label(d.Param), 40), d.Op, d.T, d.D, d.P, d.Decision)
	}
	for k, why := range r.Frozen {
		fmt.Fprintf(w, "frozen: %s (%s)\n", r.label(k), why)
	}
}
