// Command stepbench times one non-DP training step of an ONNX model on the
// runtime, the graph fused as train fuses it (GroupNorm and LayerNorm
// decompositions as one node each): forward, per-sample softmax cross-entropy, backward of
// Σ_i loss_i, and an Adam (lr 1e-3) update of every trainable parameter.
//
//	go run ./bench/cmd/stepbench -model cnn-fmnist.onnx -batch 256 [-steps 20 -warmup 3]
//
// It prints one JSON line {model, batch, threads, step_ms_median,
// step_ms_min, maxrss_mb, train_peak_mb, arena_mb, params_mb}: maxrss_mb is
// the whole process's peak resident set (getrusage), train_peak_mb the peak
// resident set of the training loop alone (Linux VmHWM, reset through
// /proc/self/clear_refs after loading and compiling; 0 where that is not
// available). bench/torch_step.py reports the same two numbers for PyTorch.
// With -cpuprofile it writes a pprof CPU profile of the timed steps.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/dpfinetune/dpfinetune/dpengine"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

func main() {
	model := flag.String("model", "", "ONNX model file")
	name := flag.String("name", "", "name to report (default: the file name without .onnx)")
	batch := flag.Int("batch", 32, "batch size")
	steps := flag.Int("steps", 20, "timed steps")
	warmup := flag.Int("warmup", 3, "untimed steps first")
	classes := flag.Int("classes", 10, "number of classes (labels are drawn below it)")
	cpuprof := flag.String("cpuprofile", "", "write a CPU profile of the timed steps")
	flag.Parse()
	if *model == "" {
		fmt.Fprintln(os.Stderr, "stepbench: -model is required")
		os.Exit(2)
	}
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(*model), ".onnx")
	}
	if err := run(*name, *model, *batch, *steps, *warmup, *classes, *cpuprof); err != nil {
		fmt.Fprintln(os.Stderr, "stepbench:", err)
		os.Exit(1)
	}
}

func run(name, path string, batch, steps, warmup, classes int, cpuprof string) error {
	m, err := onnx.Load(path)
	if err != nil {
		return err
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		return err
	}
	// The graph decoded every initializer into its own float32 storage;
	// drop the protobuf's copy of the bytes (the benchmark never exports).
	for _, t := range m.Proto.GetGraph().GetInitializer() {
		t.RawData = nil
	}
	if _, err := rewrite.Cleanup(g); err != nil {
		return err
	}
	// The load-time fusions train runs (rewrite.Prepare; not its BatchNorm
	// rewrite, which a non-DP step has no need of): a decomposed
	// GroupNorm or LayerNorm (the form dpfinetune writes a model in, and
	// PyTorch's exports before the opsets with those nodes) trains as
	// one node, so the step timed is the one a run takes.
	var sample []int64
	for _, d := range g.Inputs[0].Shape[1:] {
		if d.Size <= 0 {
			return fmt.Errorf("input %s: dimension %v is not fixed", g.Inputs[0].Name, d)
		}
		sample = append(sample, d.Size)
	}
	shapes, err := rewrite.StaticShapes(g, sample, int64(batch))
	if err != nil {
		return err
	}
	if _, err := rewrite.FuseGroupNorm(g, shapes); err != nil {
		return err
	}
	// The GroupNorm fusion left every other value's shape as it was.
	if _, err := rewrite.FuseLayerNorm(g, shapes); err != nil {
		return err
	}
	g.UntieIdentityParams()
	p, err := runtime.CompileForBatch(g, batch, nil, nil)
	if err != nil {
		return err
	}
	x, shape := p.Input(0)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	_ = shape
	labels := make([]int64, batch)
	for i := range labels {
		labels[i] = int64(r.IntN(classes))
	}
	losses := make([]float32, batch)
	names := p.Params()
	params, grads := make([][]float32, len(names)), make([][]float32, len(names))
	var nParam int
	for i, n := range names {
		params[i], _ = p.Param(n)
		grads[i] = p.Grad(n)
		nParam += len(params[i])
	}
	// The engine's Adam (PyTorch's update: beta 0.9/0.999, eps 1e-8): one
	// fused SSE2 pass per parameter, split over the cores.
	opt := dpengine.NewAdam(1e-3, 0, false)

	m, g = nil, nil
	goruntime.GC()
	debug.FreeOSMemory()
	resetPeak := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil

	step := func() error {
		if err := p.Forward(); err != nil {
			return err
		}
		if err := p.Loss(labels, losses); err != nil {
			return err
		}
		if err := p.Backward(nil, nil); err != nil {
			return err
		}
		if err := opt.Step(params, grads); err != nil {
			return err
		}
		return nil
	}
	for i := 0; i < warmup; i++ {
		if err := step(); err != nil {
			return err
		}
	}
	if cpuprof != "" {
		f, err := os.Create(cpuprof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ts := make([]float64, steps)
	for i := range ts {
		t0 := time.Now()
		if err := step(); err != nil {
			return err
		}
		ts[i] = float64(time.Since(t0).Microseconds()) / 1e3
	}
	sort.Float64s(ts)
	med := ts[len(ts)/2]
	if len(ts)%2 == 0 {
		med = (ts[len(ts)/2-1] + ts[len(ts)/2]) / 2
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	out := map[string]any{
		"model": name, "impl": "dpfinetune", "batch": batch, "threads": goruntime.GOMAXPROCS(0),
		"step_ms_median": round(med), "step_ms_min": round(ts[0]),
		"maxrss_mb":  round(float64(ru.Maxrss) / 1024),
		"arena_mb":   round(float64(p.ArenaBytes()) / (1 << 20)),
		"params_mb":  round(float64(4*nParam) / (1 << 20)),
		"loss_first": losses[0],
	}
	if resetPeak {
		out["train_peak_mb"] = round(vmHWM())
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func round(x float64) float64 { return math.Round(x*100) / 100 }

// vmHWM returns the peak resident set in MiB from /proc/self/status.
func vmHWM() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}
