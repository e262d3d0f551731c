// Command clipsum writes the engine's noise-free clipped gradient sum
// Σ_i min(1, R/‖g_i‖) g_i of one batch, per parameter, for bench/peers.sh
// to compare with the DP libraries' (bench/peer_step.py --check):
//
//	go run ./bench/cmd/clipsum -model M.onnx -input x.npy -labels y.npy -out ours.npz [-mode bk] [-clip 1]
//
// The model is rewritten and planned as `dpfinetune norms` does it (default
// rewrite options, BatchNorm frozen), and the whole batch runs as one
// physical batch through dpengine.Engine.ClippedSum, the engine's output
// before noise. Each array of the .npz is named after the parameter's
// PyTorch name (rewrite.Param.Module where the exporter renamed it) and has
// the parameter's stored shape. Frozen parameters (-freeze: those a library
// cannot train, so that both sides clip the same parameters) are listed on
// stderr and left out.
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

func main() {
	model := flag.String("model", "", "ONNX model file")
	input := flag.String("input", "", ".npy float32 inputs (N, C, H, W)")
	labels := flag.String("labels", "", ".npy int64 labels (N,)")
	out := flag.String("out", "", "output .npz")
	mode := flag.String("mode", "bk", "clipping mode: bk, mixed, ghost or instantiate")
	clip := flag.Float64("clip", 1, "clip norm R")
	freeze := flag.String("freeze", "", "freeze the parameters whose name (or a reading node's name) matches this regular expression, as dpfinetune --freeze does")
	flag.Parse()
	if *model == "" || *input == "" || *labels == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "clipsum: -model, -input, -labels and -out are required")
		os.Exit(2)
	}
	if err := run(*model, *input, *labels, *out, *mode, *clip, *freeze); err != nil {
		fmt.Fprintln(os.Stderr, "clipsum:", err)
		os.Exit(1)
	}
}

func run(model, input, labels, out, mode string, clip float64, freeze string) error {
	m, err := dpengine.ParseMode(mode)
	if err != nil || m == dpengine.NonDP {
		return fmt.Errorf("-mode must be bk, mixed, ghost or instantiate, got %q", mode)
	}
	om, err := onnx.Load(model)
	if err != nil {
		return err
	}
	g, err := graph.FromONNX(om)
	if err != nil {
		return fmt.Errorf("%s: %w", model, err)
	}
	if err := runtime.CheckOps(g); err != nil {
		return fmt.Errorf("%s: %w", model, err)
	}
	x, err := npy.ReadFile(input)
	if err != nil {
		return err
	}
	if x.DType != npy.Float32 || len(x.Shape) < 2 {
		return fmt.Errorf("%s: want float32 inputs of shape (N, C, H, W), got %s %v", input, x.DType, x.Shape)
	}
	y, err := npy.ReadFile(labels)
	if err != nil {
		return err
	}
	if y.DType != npy.Int64 || len(y.I64) != x.Shape[0] {
		return fmt.Errorf("%s: want %d int64 labels, got %s %v", labels, x.Shape[0], y.DType, y.Shape)
	}
	n := x.Shape[0]
	dims := make([]int64, len(x.Shape)-1)
	for i, d := range x.Shape[1:] {
		dims[i] = int64(d)
	}
	opts := rewrite.Options{
		PlanOptions: rewrite.PlanOptions{InputShape: dims, Batch: int64(n), Priority: rewrite.PriorityMemory, Shared: rewrite.SharedInstantiate},
		BN:          rewrite.BNOptions{Mode: rewrite.BNFreeze, Groups: rewrite.DefaultGroups, Rule: rewrite.GroupsDivisor},
	}
	if freeze != "" {
		if opts.Freeze, err = regexp.Compile(freeze); err != nil {
			return fmt.Errorf("-freeze: %w", err)
		}
	}
	rp, err := rewrite.Prepare(g, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", model, err)
	}
	eng, err := dpengine.New(g, rp, dpengine.Config{Mode: m, Clipping: dpengine.Clipping{Fn: dpengine.Abadi, R: clip},
		ExpectedBatch: float64(n), PhysicalBatch: n})
	if err != nil {
		return fmt.Errorf("%s: %w", model, err)
	}
	sums, _, err := eng.ClippedSum(x.F32, y.I64)
	if err != nil {
		return fmt.Errorf("%s: %w", model, err)
	}
	arrays := map[string]*npy.Array{}
	var frozen []string
	for _, p := range rp.Params {
		name := p.Name
		if p.Module != "" {
			name = p.Module
		}
		s, ok := sums[p.Name]
		if !p.Trainable() || !ok {
			frozen = append(frozen, name)
			continue
		}
		shape := make([]int, len(p.Shape))
		for i, d := range p.Shape {
			shape[i] = int(d)
		}
		arrays[name] = npy.NewFloat32(s, shape...)
	}
	sort.Strings(frozen)
	for _, f := range frozen {
		fmt.Fprintln(os.Stderr, "clipsum: frozen:", f)
	}
	return npy.WriteNPZ(out, arrays)
}
