package dpengine

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/hostile"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

// fuzzMaxMemory is the memory ceiling of one fuzz input's compiled plan,
// and fuzzMaxAlloc the most the whole pipeline may allocate for one input
// (a fixture's step at batch 2 allocates a few MiB).
const (
	fuzzMaxMemory = 64 << 20
	fuzzMaxAlloc  = 1 << 30
)

// fuzzFixtures loads every model under testdata/models and the exports as
// users write them under testdata/exports (fixed batches, extra outputs),
// sorted by name. An input's first byte picks its fixture by position
// (modulo the count): a new fixture moves the ones after it, so that the
// inputs kept under testdata/fuzz/FuzzPipeline are renumbered with it to
// still reach the model each was found on.
func fuzzFixtures(f testing.TB) []*onnxpb.ModelProto {
	paths, _ := filepath.Glob("../testdata/models/*.onnx")
	sort.Strings(paths)
	fixed, _ := filepath.Glob("../testdata/exports/*.onnx")
	sort.Strings(fixed)
	paths = append(paths, fixed...)
	if len(paths) == 0 {
		f.Fatal("no fixtures under testdata/models")
	}
	var out []*onnxpb.ModelProto
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		m := &onnxpb.ModelProto{}
		if err := proto.Unmarshal(b, m); err != nil {
			f.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// runPipeline takes a model through everything a training run does to
// it: load, the loader's widening of half precision and of uint8 pixels,
// the release of a fixed batch, shape inference, rewrite, compile for a batch of 2 under
// fuzzMaxMemory, one DP step, and export. Errors are fine; a panic fails.
func runPipeline(t *testing.T, data []byte, mode Mode) {
	m, err := onnx.LoadBytes(data, "")
	if err != nil {
		return
	}
	g, err := graph.FromONNX(m)
	if err != nil || g.Validate() != nil || len(g.Inputs) != 1 {
		return
	}
	if _, err := g.UpcastHalf(); err != nil {
		return
	}
	g.CastInputsToFloat()
	if _, _, err := rewrite.ReleaseBatch(g); err != nil {
		return
	}
	in := g.Inputs[0]
	if len(in.Shape) < 2 {
		return
	}
	sample := make([]int64, len(in.Shape)-1)
	per := int64(1)
	for i, d := range in.Shape[1:] {
		if d.Size <= 0 || d.Size > 1<<12 {
			return
		}
		sample[i] = d.Size
		per *= d.Size
		if per > 1<<16 {
			return
		}
	}
	// The model read back as a PyTorch state dict (`weights`): an error
	// at most, the graph unchanged.
	_, _ = rewrite.StateDictOf(g, sample, false)
	original := g.Clone()
	const batch = 2
	c := g.Clone()
	if err := c.InferShapes(map[string][]int64{in.Name: append([]int64{batch}, sample...)}); err != nil {
		return
	}
	if len(c.Outputs) == 0 || len(c.Outputs[0].Shape) != 2 {
		return
	}
	classes := c.Outputs[0].Shape[1].Size
	if classes <= 0 {
		return
	}
	rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: sample, Batch: batch}})
	if err != nil {
		return
	}
	eng, err := New(g, rp, Config{Mode: mode, Clipping: Clipping{Fn: Abadi, R: 1}, NoiseMultiplier: 1, ExpectedBatch: batch,
		PhysicalBatch: batch, Source: NewSeededSource(1), Optimizer: &SGD{LR: 0.1}, MaxMemory: fuzzMaxMemory})
	if err != nil {
		return
	}
	fill := func(idx []int, x []float32, y []int64) error {
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		for i, j := range idx {
			y[i] = int64(j) % classes
		}
		return nil
	}
	if _, err := eng.Step([]int{0, 1}, fill); err != nil {
		return
	}
	if eg, err := rewrite.ExportGraph(g); err == nil {
		if sd, err := rewrite.StateDictOf(eg, sample, true); err == nil {
			// (`weights --like`: the mutated model as the original of a
			// frozen run it is not.)
			_, _ = rewrite.UnfoldBatchNorm(sd, eg, original)
		}
	}
	if out, err := g.ToONNX(); err == nil {
		if b, err := out.Bytes(); err == nil {
			if _, err := onnx.LoadBytes(b, ""); err != nil {
				t.Errorf("the exported model does not load again: %v", err)
			}
		}
	}
}

// FuzzPipeline mutates the fixture models and the dynamo-style model
// (functions, Attention, GatherND, CastLike, signature marks; shapes, attributes, opsets,
// dtypes, node order, dangling names, operators, truncated data) and runs
// each through load, shape inference, the state dict, rewrite, compile, a
// DP step, export and its state dict: no input may panic or allocate more than fuzzMaxAlloc.
func FuzzPipeline(f *testing.F) {
	fixtures := append(fuzzFixtures(f), dynamoStyleModel())
	for i := range fixtures {
		f.Add(uint8(i), uint8(0), []byte{})
		// One seed per mutation kind on each fixture.
		for k := byte(0); k < 12; k++ {
			f.Add(uint8(i), k, []byte{k, byte(i * 7), byte(k*5 + 1)})
		}
	}
	modes := []Mode{BK, Mixed, Ghost, Instantiate}
	// A crash outside the fuzz function's goroutine (a kernel worker)
	// kills the fuzzing process without saying which input did it: with
	// DPFINETUNE_FUZZ_LAST set, each input is written there first.
	last := os.Getenv("DPFINETUNE_FUZZ_LAST")
	f.Fuzz(func(t *testing.T, which, mode uint8, prog []byte) {
		if last != "" {
			os.WriteFile(last, append([]byte{which, mode}, prog...), 0o644)
		}
		m := proto.Clone(fixtures[int(which)%len(fixtures)]).(*onnxpb.ModelProto)
		hostile.Mutate(m, prog)
		data, err := proto.Marshal(m)
		if err != nil {
			return
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		runPipeline(t, data, modes[int(mode)%len(modes)])
		runtime.ReadMemStats(&after)
		if d := after.TotalAlloc - before.TotalAlloc; d > fuzzMaxAlloc {
			t.Errorf("one input allocated %d MiB, over %d MiB", d>>20, fuzzMaxAlloc>>20)
		}
	})
}

// FuzzCheckpoint reads arbitrary bytes as a checkpoint: an error, or a
// checkpoint whose tensors match its names and sizes; never a panic, and
// nothing allocated beyond what the input holds (sizes are checked against
// the length first).
func FuzzCheckpoint(f *testing.F) {
	dir := f.TempDir()
	for i, v := range []float32{1, -3.5, 2} {
		path := filepath.Join(dir, fmt.Sprint(i))
		c := sampleCheckpointF(v)
		switch i {
		case 1:
			c.Optimizer = nil
		case 2: // with the parameters' average
			c.Average, c.AverageSteps = [][]float32{{1, 2, 3}, {4}}, 5
		}
		if err := WriteCheckpoint(path, c); err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(checkpointMagic + "\xff\xff\xff\xff\xff\xff\xff\x7f"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := readCheckpoint(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if len(c.Params) != len(c.ParamNames) {
			t.Fatalf("%d tensors for %d names", len(c.Params), len(c.ParamNames))
		}
		if c.Optimizer != nil {
			for name, slot := range c.Optimizer.Slots {
				if len(slot) != len(c.Params) {
					t.Fatalf("slot %s: %d tensors for %d parameters", name, len(slot), len(c.Params))
				}
			}
		}
		if c.Average != nil {
			if len(c.Average) != len(c.Params) {
				t.Fatalf("the average: %d tensors for %d parameters", len(c.Average), len(c.Params))
			}
			for k, a := range c.Average {
				if len(a) != len(c.Params[k]) {
					t.Fatalf("the average of %q: %d elements for %d", c.ParamNames[k], len(a), len(c.Params[k]))
				}
			}
		}
	})
}
