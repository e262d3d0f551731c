package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/zoo"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "step time, memory and the largest physical batch of each clipping mode (the paper's Tables 4–6)",
		run:     runBench,
	})
}

// benchRow is one clipping mode's measurements.
type benchRow struct {
	Mode         string    `json:"mode"`
	StepMS       float64   `json:"step_ms"` // median (over the rounds of per-round medians)
	RoundsMS     []float64 `json:"step_ms_per_round,omitempty"`
	TimeRatio    float64   `json:"time_vs_nondp"`
	HeapBytes    int64     `json:"heap_bytes"` // measured: live heap after warm-up, engine and plan included
	MemRatio     float64   `json:"heap_vs_nondp"`
	EstPeakBytes int64     `json:"estimated_peak_bytes"`
	// DevicePeakBytes is the most device memory the mode's engine held,
	// on a device that counts it (runtime.MemoryReporter: CUDA), each
	// mode on the device opened afresh.
	DevicePeakBytes int64   `json:"device_peak_bytes,omitempty"`
	MaxBatch        int     `json:"max_physical_batch,omitempty"`
	MaxBatchSPS     float64 `json:"samples_per_second_at_max_batch,omitempty"`
	SamplesPerSec   float64 `json:"samples_per_second"`
}

type benchReport struct {
	Model      string  `json:"model"`
	Device     string  `json:"device"`
	TF32       bool    `json:"tf32,omitempty"`
	InputShape []int64 `json:"input_shape"`
	Batch      int     `json:"batch"`
	Logical    int     `json:"logical_batch"`
	// Views is --augment-multiplicity where above 1: a sample's rows.
	Views int64 `json:"augment_multiplicity,omitempty"`
	// LoRA is --lora's rank where the modes train adapters (0: every
	// parameter).
	LoRA int64 `json:"lora,omitempty"`
	// EMA is --ema's decay where the modes keep the parameters' average.
	EMA       float64    `json:"ema,omitempty"`
	Threads   int        `json:"threads"`
	Steps     int        `json:"steps"`
	Rounds    int        `json:"rounds"`
	Priority  string     `json:"priority"`
	MemoryCap int64      `json:"memory_cap_bytes,omitempty"`
	Rows      []benchRow `json:"rows"`
}

// benchGraph loads a model file or builds a zoo model (zoo:NAME); zoo
// models keep BatchNorm nodes, which the rewrite turns into GroupNorm as
// for an exported PyTorch model.
func benchGraph(spec string, sample []int64, classes int) (*graph.Graph, error) {
	if name, ok := strings.CutPrefix(spec, "zoo:"); ok {
		m, err := zoo.Build(name, zoo.Options{NumClasses: classes, InputShape: sample, BatchNorm: true})
		if err != nil {
			return nil, err
		}
		return graph.FromONNX(m)
	}
	lm, err := loadGraph(spec)
	if err != nil {
		return nil, err
	}
	if err := lm.dynamicBatch(); err != nil {
		return nil, err
	}
	return lm.g, nil
}

func runBench(args []string, stdout io.Writer) error {
	fs := newFlagSet("bench", "--model M.onnx|zoo:NAME --input-shape C,H,W --batch B [--logical-batch L] [--modes nondp,instantiate,ghost,mixed,bk] [--priority memory|speed] [--max-memory 16GiB] [--steps N] [--rounds R] [--json]")
	model := fs.String("model", "", "ONNX model file or zoo:NAME (see dpfinetune zoo list) (required)")
	inShape := fs.String("input-shape", "", "per-sample input shape C,H,W (default: the model's)")
	batch := fs.Int("batch", 32, "physical batch of the timed steps")
	logical := fs.Int("logical-batch", 0, "logical batch of a timed step, a multiple of --batch: each step runs logical/batch physical batches, then one draw of noise and one optimizer update (default: --batch)")
	modes := fs.String("modes", "nondp,instantiate,ghost,mixed,bk", "clipping modes to compare (nondp first: the ratios are to it)")
	steps := fs.Int("steps", 5, "timed steps per mode (median reported), after one warm-up step")
	priority := fs.String("priority", "memory", "layerwise decision of mixed and bk: memory (2T² < pD, the paper's eq. 4.1) or speed (time terms of the paper's Table 2)")
	rounds := fs.Int("rounds", 1, "run the modes in turn this many times and report each mode's median round: on a shared machine the modes then see the same load")
	classes := fs.Int("num-classes", 10, "classes of a zoo model")
	views := fs.Int64("augment-multiplicity", 1, "each sample fed as K views (train's --augment-multiplicity): --batch counts samples, each K rows")
	ema := fs.Float64("ema", 0, "keep an exponential moving average of the parameters with this decay, as train --ema does: one more update a step and a copy of the trained parameters (0: none)")
	lora := fs.Int64("lora", 0, "train low-rank adapters of this rank beside the linear layers, with the classifier head, as train --lora does (0: every parameter)")
	maxMem := fs.String("max-memory", "", "also find each mode's largest physical batch whose estimated peak memory fits nine tenths of this cap (as train's), and its throughput")
	asJSON := fs.Bool("json", false, "print JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed steps to this file (go tool pprof), not the set-up, the warm-up step or the largest-batch search: the file itself for one mode and one round, else FILE.MODE for each mode and FILE.MODE.rK for its round K ≥ 2 (go tool pprof BIN FILE.bk* reads a mode's rounds together)")
	devFlag := addDeviceFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dev, err := devFlag.open()
	if err != nil {
		return err
	}
	allowNondeterministic(dev) // as a training run with secure noise
	if *model == "" {
		return usagef("--model is required")
	}
	if *batch <= 0 || *steps <= 0 || *rounds <= 0 {
		return usagef("--batch, --steps and --rounds must be positive")
	}
	if err := checkViews(*views); err != nil {
		return err
	}
	prio := rewrite.Priority(*priority)
	if prio != rewrite.PriorityMemory && prio != rewrite.PrioritySpeed {
		return usagef("--priority must be memory or speed, got %q", *priority)
	}
	if *lora < 0 {
		return usagef("--lora must be a positive rank (or 0 for none), got %d", *lora)
	}
	if !(*ema >= 0 && *ema < 1) {
		return usagef("--ema must be in [0, 1), got %v", *ema)
	}
	ro := rewrite.Options{PlanOptions: rewrite.PlanOptions{Priority: prio, Multiplicity: *views, Averaged: *ema > 0}, LoRA: rewrite.LoRAOptions{Rank: *lora}}
	if *logical == 0 {
		*logical = *batch
	}
	if *logical < *batch || *logical%*batch != 0 {
		return usagef("--logical-batch %d must be a positive multiple of --batch %d", *logical, *batch)
	}
	var ms []dpengine.Mode
	for _, s := range strings.Split(*modes, ",") {
		m, err := dpengine.ParseMode(strings.TrimSpace(s))
		if err != nil {
			return usageError{err.Error()}
		}
		ms = append(ms, m)
	}
	var capBytes int64
	if *maxMem != "" {
		var err error
		if capBytes, err = parseBytes(*maxMem); err != nil {
			return usageError{err.Error()}
		}
	}
	var sample []int64
	if *inShape != "" {
		d, err := parseDims(*inShape)
		if err != nil {
			return usageError{err.Error()}
		}
		sample = d
	}
	g0, err := benchGraph(*model, sample, *classes)
	if err != nil {
		return err
	}
	if sample == nil {
		if sample, err = modelSample(g0, ""); err != nil {
			return err
		}
	}
	rep := benchReport{Model: *model, Device: dev.Name(), TF32: runtime.TF32On(dev), InputShape: sample, Batch: *batch, Logical: *logical, Threads: goruntime.GOMAXPROCS(0), Steps: *steps, Rounds: *rounds, Priority: *priority, MemoryCap: capBytes}
	if *views > 1 {
		rep.Views = *views
	}
	rep.LoRA, rep.EMA = *lora, *ema
	rep.Rows = make([]benchRow, len(ms))
	profileAt := func(m dpengine.Mode, r int) string {
		switch {
		case *cpuProfile == "":
			return ""
		case len(ms) == 1 && *rounds == 1:
			return *cpuProfile
		case r == 0:
			return *cpuProfile + "." + string(m)
		}
		return fmt.Sprintf("%s.%s.r%d", *cpuProfile, m, r+1)
	}
	// A device with memory of its own (CUDA) keeps an engine's buffers
	// until it closes: each mode gets the device afresh, so that none
	// runs in what an earlier one left and each one's peak is its own.
	closer, fresh := dev.(io.Closer)
	if fresh {
		if err := closer.Close(); err != nil {
			return err
		}
	}
	for r := 0; r < *rounds; r++ {
		for i, m := range ms {
			c := capBytes
			if r > 0 {
				c = 0 // the largest batch is searched once
			}
			mdev := dev
			if fresh {
				if mdev, err = devFlag.open(); err != nil {
					return err
				}
				allowNondeterministic(mdev)
			}
			row, err := benchMode(mdev, *model, sample, *classes, ro, *ema, m, *batch, *logical, *steps, c, profileAt(m, r))
			if fresh {
				if cerr := mdev.(io.Closer).Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				return fmt.Errorf("mode %s: %w", m, err)
			}
			if r == 0 {
				rep.Rows[i] = row
			}
			rep.Rows[i].RoundsMS = append(rep.Rows[i].RoundsMS, row.StepMS)
			rep.Rows[i].HeapBytes = max(rep.Rows[i].HeapBytes, row.HeapBytes)
			rep.Rows[i].DevicePeakBytes = max(rep.Rows[i].DevicePeakBytes, row.DevicePeakBytes)
		}
	}
	for i := range rep.Rows {
		rw := &rep.Rows[i]
		rw.StepMS = median(rw.RoundsMS)
		rw.SamplesPerSec = float64(*logical) / (rw.StepMS / 1000)
		if *rounds == 1 {
			rw.RoundsMS = nil
		}
	}
	if len(rep.Rows) > 0 && rep.Rows[0].Mode == string(dpengine.NonDP) {
		base := rep.Rows[0]
		for i := range rep.Rows {
			rep.Rows[i].TimeRatio = rep.Rows[i].StepMS / base.StepMS
			rep.Rows[i].MemRatio = float64(rep.Rows[i].HeapBytes) / float64(base.HeapBytes)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	inTurn := ""
	if rep.Rounds > 1 {
		inTurn = fmt.Sprintf("; modes run in turn %d times, the median round", rep.Rounds)
	}
	each := ""
	if rep.Views > 1 {
		each = fmt.Sprintf(" (%d views each)", rep.Views)
	}
	trained := ""
	if rep.LoRA > 0 {
		trained = fmt.Sprintf(", LoRA adapters of rank %d and the classifier head trained", rep.LoRA)
	}
	if rep.EMA > 0 {
		trained += fmt.Sprintf(", the parameters' average kept (decay %g)", rep.EMA)
	}
	fmt.Fprintf(stdout, "model %s, input %v, physical batch %d%s, logical batch %d, %d threads, median of %d steps%s (Adam, per-sample cross-entropy, %s priority%s)\n\n", rep.Model, rep.InputShape, rep.Batch, each, rep.Logical, rep.Threads, rep.Steps, inTurn, rep.Priority, trained)
	devPeak := false
	for _, r := range rep.Rows {
		devPeak = devPeak || r.DevicePeakBytes > 0
	}
	fmt.Fprintf(stdout, "%-12s %10s %8s %12s %8s %12s", "mode", "step ms", "× nondp", "heap", "× nondp", "est. peak")
	if devPeak {
		fmt.Fprintf(stdout, " %12s", "device peak")
	}
	if capBytes > 0 {
		fmt.Fprintf(stdout, " %10s %12s", "max batch", "samples/s")
	}
	fmt.Fprintln(stdout)
	for _, r := range rep.Rows {
		fmt.Fprintf(stdout, "%-12s %10.1f %8.2f %12s %8.2f %12s", r.Mode, r.StepMS, r.TimeRatio, humanBytes(r.HeapBytes), r.MemRatio, humanBytes(r.EstPeakBytes))
		if devPeak {
			fmt.Fprintf(stdout, " %12s", humanBytes(r.DevicePeakBytes))
		}
		if capBytes > 0 {
			fmt.Fprintf(stdout, " %10d %12.1f", r.MaxBatch, r.MaxBatchSPS)
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintln(stdout, "\nheap: live Go heap after warm-up (weights, plan arena, engine buffers); est. peak: the rewrite plan's estimate, activations as the mode's compiled plan holds them (docs/REWRITES.md)")
	if devPeak {
		fmt.Fprintln(stdout, "device peak: the most device memory the mode's engine held (its own device, opened afresh)")
	}
	return nil
}

// liveHeap returns the live heap after a full collection.
func liveHeap() int64 {
	goruntime.GC()
	var st goruntime.MemStats
	goruntime.ReadMemStats(&st)
	return int64(st.HeapAlloc)
}

// benchMode builds a fresh model and engine for one mode and times it.
func benchMode(dev runtime.Device, model string, sample []int64, classes int, ro rewrite.Options, ema float64, mode dpengine.Mode, batch, logical, steps int, capBytes int64, profile string) (benchRow, error) {
	row := benchRow{Mode: string(mode)}
	g, err := benchGraph(model, sample, classes)
	if err != nil {
		return row, err
	}
	ro.InputShape, ro.Batch = sample, int64(batch)
	rp, err := rewrite.Prepare(g, ro)
	if err != nil {
		return row, err
	}
	// The estimate counts the buffers of the plan the mode's engine
	// compiles, as train --max-memory does.
	if err := dpengine.MeasureActivations(g, rp, dev, mode); err != nil {
		return row, err
	}
	for _, m := range rp.Memory {
		if m.Mode == string(mode) {
			row.EstPeakBytes = m.Total
		}
	}
	base := liveHeap()
	ms, sps, err := timeSteps(dev, g, rp, mode, ema, batch, logical, steps, sample, 0, profile)
	if err != nil {
		return row, err
	}
	row.HeapBytes = lastHeap - base
	row.StepMS, row.SamplesPerSec = ms, sps
	if mr, ok := dev.(runtime.MemoryReporter); ok {
		_, row.DevicePeakBytes = mr.MemoryStats()
	}
	if capBytes > 0 {
		b, err := dptrain.FitBatch(rp, string(mode), capBytes, 1<<16)
		if err != nil {
			return row, err
		}
		row.MaxBatch = b
		if _, row.MaxBatchSPS, err = timeSteps(dev, g, rp, mode, ema, b, b, 2, sample, capBytes, ""); err != nil {
			return row, err
		}
	}
	return row, nil
}

// lastHeap is the live heap measured by the last timeSteps, with its engine
// alive.
var lastHeap int64

// timeSteps runs one warm-up step and n timed steps of an engine at the
// given physical and logical batch (a step: logical/batch physical
// batches, one draw of noise, one update), held to the memory cap capBytes
// where it is positive (dpengine.Config.MaxMemory, as train's), returning
// the median step time in ms and the samples per second. Where profile is
// set, a CPU profile of the timed steps alone goes to that file.
func timeSteps(dev runtime.Device, g *graph.Graph, rp *rewrite.Plan, mode dpengine.Mode, ema float64, batch, logical, n int, sample []int64, capBytes int64, profile string) (_, _ float64, err error) {
	cfg := dpengine.Config{Device: dev, Mode: mode, Clipping: dpengine.Clipping{Fn: dpengine.Abadi, R: 1}, NoiseMultiplier: 1,
		ExpectedBatch: float64(logical), PhysicalBatch: batch, Source: dpengine.NewSeededSource(1), Optimizer: dpengine.NewAdam(1e-3, 0, false), MaxMemory: capBytes, EMADecay: ema}
	eng, err := dpengine.New(g, rp, cfg)
	if err != nil {
		return 0, 0, err
	}
	_, oshape := eng.Plan().Output(0)
	k := oshape[len(oshape)-1]
	r := rand.New(rand.NewPCG(1, 2))
	sl := 1
	for _, d := range sample {
		sl *= int(d)
	}
	xs := make([]float32, batch*sl)
	for i := range xs {
		xs[i] = float32(r.NormFloat64())
	}
	idx := make([]int, logical)
	for i := range idx {
		idx[i] = i
	}
	fill := func(ix []int, x []float32, y []int64) error {
		for j := 0; j < len(x); j += len(xs) {
			copy(x[j:], xs)
		}
		for i := range y {
			y[i] = int64(ix[i] % k)
		}
		return nil
	}
	// A GPU's step may return with its last kernels queued: each timed
	// step ends when the device has run them.
	sync := func() error { return nil }
	if s, ok := dev.(interface{ Synchronize() error }); ok {
		sync = s.Synchronize
	}
	if _, err := eng.Step(idx, fill); err != nil {
		return 0, 0, err
	}
	if err := sync(); err != nil {
		return 0, 0, err
	}
	lastHeap = liveHeap()
	// A device's operation profile (DPFINETUNE_CUDA_PROFILE) covers the
	// timed steps only, not the warm-up's first uses of each shape.
	if r, ok := dev.(interface{ ResetProfile() }); ok {
		r.ResetProfile()
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return 0, 0, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return 0, 0, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("--cpuprofile: %w", cerr)
			}
		}()
	}
	times := make([]float64, n)
	for i := range times {
		t0 := time.Now()
		if _, err := eng.Step(idx, fill); err != nil {
			return 0, 0, err
		}
		if err := sync(); err != nil {
			return 0, 0, err
		}
		times[i] = float64(time.Since(t0).Microseconds()) / 1000
	}
	med := median(times)
	goruntime.KeepAlive(eng)
	return med, float64(logical) / (med / 1000), nil
}

// median returns the median of xs (sorting a copy).
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[n/2]
}
