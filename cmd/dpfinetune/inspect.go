package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/runtime"
)

func init() {
	register(&command{
		name:    "inspect",
		summary: "describe an ONNX model: opsets, inputs, outputs, operators, parameters, inferred shapes",
		run:     runInspect,
	})
}

// inspectReport is the JSON form of "dpfinetune inspect".
type inspectReport struct {
	Model         string           `json:"model"`
	IRVersion     int64            `json:"ir_version"`
	Producer      string           `json:"producer"`
	Opsets        map[string]int64 `json:"opsets"`
	Inputs        []valueReport    `json:"inputs"`
	Outputs       []valueReport    `json:"outputs"`
	Operators     map[string]int   `json:"operators"`
	Nodes         int              `json:"nodes"`
	Parameters    int64            `json:"parameters"`
	ParamBytes    int64            `json:"parameter_bytes"`
	ParamTensors  int              `json:"parameter_tensors"`
	Buffers       int64            `json:"buffers"`
	BufferTensors int              `json:"buffer_tensors"`
	// Constants are the float initializers torch.export's signature marks
	// as no parameters (graph.Value.ExportConstant), but running
	// statistics, and those no gradient reaches (graph.Value.NoGradient).
	Constants       int64 `json:"constants,omitempty"`
	ConstantTensors int   `json:"constant_tensors,omitempty"`
	Untied          int   `json:"untied_identity_params,omitempty"`
	// FixedBatch is the batch size the export fixed in its input's shape
	// (no dynamic_axes), which the other commands make dynamic.
	FixedBatch int64 `json:"fixed_batch,omitempty"`
	// HalfPrecision lists the half-precision types of the model's
	// values, which the other commands widen to float32.
	HalfPrecision []string `json:"half_precision,omitempty"`
	// PixelInput marks a uint8 input the model casts to float at once,
	// which the other commands feed the pixel values as float32.
	PixelInput bool `json:"pixel_input,omitempty"`
	// UnrolledLoops and InlinedIfs count the control flow the loader
	// replaced by operators (static trip counts and conditions),
	// SliceAssignments the ScatterNDs over index grids it read as Slice
	// and Concat.
	UnrolledLoops    int               `json:"unrolled_loops,omitempty"`
	InlinedIfs       int               `json:"inlined_ifs,omitempty"`
	SliceAssignments int               `json:"slice_assignments,omitempty"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	Inferred         *inferredReport   `json:"inferred,omitempty"`
	// Unsupported lists the nodes no command can run (runtime.CheckOps).
	Unsupported []runtime.UnsupportedNode `json:"unsupported,omitempty"`
}

type valueReport struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape []any  `json:"shape"` // ints, or strings for symbolic dims
}

type inferredReport struct {
	InputShapes map[string][]int64 `json:"input_shapes"`
	Outputs     []valueReport      `json:"outputs"`
	Operators   map[string]int     `json:"operators"`
	FoldedNodes int                `json:"folded_nodes"`
	Nodes       []nodeReport       `json:"nodes"`
}

type nodeReport struct {
	Name    string        `json:"name"`
	Op      string        `json:"op"`
	Outputs []valueReport `json:"outputs"`
}

func describe(v *graph.Value) valueReport {
	r := valueReport{Name: v.Name, DType: v.DType.String(), Shape: []any{}}
	for _, d := range v.Shape {
		switch {
		case d.Size >= 0:
			r.Shape = append(r.Shape, d.Size)
		case d.Param != "":
			r.Shape = append(r.Shape, d.Param)
		default:
			r.Shape = append(r.Shape, "?")
		}
	}
	if v.Shape == nil {
		r.Shape = nil
	}
	return r
}

// parseDims parses "3,224,224" (also "3x224x224").
func parseDims(s string) ([]int64, error) {
	s = strings.TrimSpace(s)
	sep := ","
	if !strings.Contains(s, ",") {
		sep = "x"
	}
	var out []int64
	for _, f := range strings.Split(s, sep) {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad dimension %q in %q: want positive integers like 3,224,224", f, s)
		}
		out = append(out, v)
	}
	return out, nil
}

// isBuffer reports whether an initializer is read only as BatchNorm running
// statistics: state, not a parameter.
func isBuffer(v *graph.Value) bool {
	if len(v.Consumers) == 0 {
		return false
	}
	for _, n := range v.Consumers {
		if n.OpType != "BatchNormalization" {
			return false
		}
		for i, in := range n.Inputs {
			if in == v && i < 3 {
				return false
			}
		}
	}
	return true
}

func runInspect(args []string, stdout io.Writer) error {
	fs := newFlagSet("inspect", "--model M.onnx [--input-shape C,H,W] [--batch N] [--json]")
	model := fs.String("model", "", "ONNX model file (required)")
	inShape := fs.String("input-shape", "", "shape of one sample, e.g. 3,224,224: infers the shape of every node output")
	batch := fs.Int64("batch", 1, "batch size used with --input-shape")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *model == "" {
		return usagef("--model is required")
	}
	if *batch <= 0 {
		return usagef("--batch must be positive, got %d", *batch)
	}
	m, err := onnx.Load(*model)
	if err != nil {
		return err
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		return fmt.Errorf("%s: %w", *model, err)
	}
	if err := g.Validate(); err != nil {
		return fmt.Errorf("%s: %w", *model, err)
	}
	rep := inspectReport{
		Model: *model, IRVersion: m.Proto.GetIrVersion(), Producer: strings.TrimSpace(m.Proto.GetProducerName() + " " + m.Proto.GetProducerVersion()),
		Opsets: g.Opsets, Operators: opCounts(g), Nodes: len(g.Nodes),
	}
	for _, kv := range m.Proto.GetMetadataProps() {
		if rep.Metadata == nil {
			rep.Metadata = map[string]string{}
		}
		rep.Metadata[kv.GetKey()] = kv.GetValue()
	}
	for _, v := range g.Inputs {
		rep.Inputs = append(rep.Inputs, describe(v))
	}
	rep.FixedBatch = g.FixedBatch()
	// What loadGraph would widen, seen on a copy (inspect shows the model
	// as it is).
	rep.PixelInput = len(g.Clone().CastInputsToFloat()) > 0
	rep.UnrolledLoops, rep.InlinedIfs, rep.SliceAssignments = g.UnrolledLoops, g.InlinedIfs, g.SliceAssignments
	seen := map[graph.DType]bool{}
	for _, v := range g.Values {
		if d := v.DType; (d == graph.Float16 || d == graph.BFloat16) && !seen[d] {
			seen[d] = true
			rep.HalfPrecision = append(rep.HalfPrecision, d.String())
		}
	}
	sort.Strings(rep.HalfPrecision)
	// Count parameters as PyTorch had them: equal-valued parameters that
	// the exporter stored once behind Identity nodes count once per copy.
	rep.Untied = len(g.UntieIdentityParams())
	for _, v := range g.Outputs {
		rep.Outputs = append(rep.Outputs, describe(v))
	}
	for _, v := range g.Initializers {
		if (v.ExportConstant || v.NoGradient) && !isBuffer(v) {
			rep.Constants += int64(v.Const.Len())
			rep.ConstantTensors++
			continue
		}
		if !v.IsParam() && !v.ExportConstant || v.ResizeArgument() {
			continue
		}
		n := int64(v.Const.Len())
		if isBuffer(v) {
			rep.Buffers += n
			rep.BufferTensors++
			continue
		}
		rep.Parameters += n
		rep.ParamBytes += int64(len(v.Const.Bytes()))
		rep.ParamTensors++
	}
	var unsup *runtime.UnsupportedError
	if err := runtime.CheckOps(g); err != nil {
		if !errors.As(err, &unsup) {
			return fmt.Errorf("%s: %w", *model, err)
		}
		rep.Unsupported = unsup.Nodes
	}
	if *inShape != "" && unsup == nil {
		dims, err := parseDims(*inShape)
		if err != nil {
			return usageError{err.Error()}
		}
		if len(g.Inputs) != 1 {
			return fmt.Errorf("%s: --input-shape needs a model with one input, this one has %d", *model, len(g.Inputs))
		}
		full := append([]int64{*batch}, dims...)
		in := g.Inputs[0]
		shapes := map[string][]int64{in.Name: full}
		before := len(g.Nodes)
		if err := g.InferShapes(shapes); err != nil {
			return fmt.Errorf("%s: input shape %v: %w", *model, full, err)
		}
		inf := &inferredReport{InputShapes: shapes, Operators: opCounts(g), FoldedNodes: before - len(g.Nodes)}
		for _, v := range g.Outputs {
			inf.Outputs = append(inf.Outputs, describe(v))
		}
		for _, n := range g.Nodes {
			nr := nodeReport{Name: n.Name, Op: n.OpType}
			for _, o := range n.Outputs {
				if o != nil {
					nr.Outputs = append(nr.Outputs, describe(o))
				}
			}
			inf.Nodes = append(inf.Nodes, nr)
		}
		rep.Inferred = inf
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printInspect(stdout, &rep)
	}
	if unsup != nil {
		return fmt.Errorf("%s: %d node(s) the runtime cannot run (listed in the report); predict, plan, train and eval refuse this model", *model, len(unsup.Nodes))
	}
	return nil
}

func opCounts(g *graph.Graph) map[string]int {
	c := map[string]int{}
	for _, n := range g.Nodes {
		c[n.OpType]++
	}
	return c
}

func shapeString(r valueReport) string {
	if r.Shape == nil {
		return "?"
	}
	parts := make([]string, len(r.Shape))
	for i, d := range r.Shape {
		parts[i] = fmt.Sprint(d)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func printInspect(w io.Writer, r *inspectReport) {
	fmt.Fprintf(w, "model:       %s\n", r.Model)
	fmt.Fprintf(w, "ir_version:  %d   producer: %s\n", r.IRVersion, r.Producer)
	var ops []string
	for d, v := range r.Opsets {
		if d == "" {
			d = "ai.onnx"
		}
		ops = append(ops, fmt.Sprintf("%s %d", d, v))
	}
	sort.Strings(ops)
	fmt.Fprintf(w, "opsets:      %s\n", strings.Join(ops, ", "))
	for _, v := range r.Inputs {
		fmt.Fprintf(w, "input:       %s %s %s\n", v.Name, v.DType, shapeString(v))
	}
	if r.FixedBatch > 0 {
		fmt.Fprintf(w, "             the export fixed the batch at %d (no dynamic_axes): plan, train, predict and eval make it dynamic\n", r.FixedBatch)
	}
	if r.PixelInput {
		fmt.Fprintf(w, "             uint8 pixels the model casts to float: the other commands feed it the pixel values (--norm pixels)\n")
	}
	if len(r.HalfPrecision) > 0 {
		fmt.Fprintf(w, "             in %s: the other commands run and train it in float32; train writes it back in %s\n", strings.Join(r.HalfPrecision, " and "), halfWritten(r.HalfPrecision))
	}
	for _, v := range r.Outputs {
		fmt.Fprintf(w, "output:      %s %s %s\n", v.Name, v.DType, shapeString(v))
	}
	if s := loadRewrites(&graph.Graph{UnrolledLoops: r.UnrolledLoops, InlinedIfs: r.InlinedIfs, SliceAssignments: r.SliceAssignments}); s != "" {
		fmt.Fprintf(w, "%-13s%s (the nodes below are the result)\n", "", s)
	}
	fmt.Fprintf(w, "parameters:  %d in %d tensors (%s)\n", r.Parameters, r.ParamTensors, humanBytes(r.ParamBytes))
	if r.Untied > 0 {
		fmt.Fprintf(w, "             %d of them stored once by the exporter and read through Identity nodes (equal values)\n", r.Untied)
	}
	if r.BufferTensors > 0 {
		fmt.Fprintf(w, "buffers:     %d in %d tensors (BatchNorm running statistics)\n", r.Buffers, r.BufferTensors)
	}
	if r.ConstantTensors > 0 {
		fmt.Fprintf(w, "constants:   %d in %d tensors (no parameters: the export's signature says so — constant tensors and the\n"+
			"             constants PyTorch's dynamo exporter lifts into initializers — or no gradient reaches them; never trained)\n", r.Constants, r.ConstantTensors)
	}
	fmt.Fprintf(w, "nodes:       %d\n", r.Nodes)
	printOps(w, r.Operators)
	if len(r.Metadata) > 0 {
		// What train recorded (the guarantee, the preprocessing a user must
		// repeat to serve the model, the class names) and any other key.
		fmt.Fprintln(w, "metadata:")
		for _, k := range slices.Sorted(maps.Keys(r.Metadata)) {
			v := r.Metadata[k]
			if len(v) > 200 { // a thousand class names
				v = v[:199] + "…"
			}
			fmt.Fprintf(w, "  %-26s %s\n", k, v)
		}
	}
	if len(r.Unsupported) > 0 {
		fmt.Fprintf(w, "\nunsupported: %d node(s) the runtime cannot run (no shapes inferred):\n", len(r.Unsupported))
		for _, u := range r.Unsupported {
			fmt.Fprintf(w, "  %s %q (opset %d): %s\n", u.Op, u.Node, u.Opset, u.Reason)
		}
	}
	if inf := r.Inferred; inf != nil {
		fmt.Fprintf(w, "\ninferred for input shapes %v (%d shape nodes folded):\n", inf.InputShapes, inf.FoldedNodes)
		for _, v := range inf.Outputs {
			fmt.Fprintf(w, "output:      %s %s %s\n", v.Name, v.DType, shapeString(v))
		}
		fmt.Fprintln(w)
		for _, n := range inf.Nodes {
			for _, o := range n.Outputs {
				fmt.Fprintf(w, "  %-22s %-32s %-8s %s\n", n.Op, trunc(n.Name, 32), o.DType, shapeString(o))
			}
		}
	}
}

func printOps(w io.Writer, c map[string]int) {
	names := make([]string, 0, len(c))
	for k := range c {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if c[names[i]] != c[names[j]] {
			return c[names[i]] > c[names[j]]
		}
		return names[i] < names[j]
	})
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s×%d", n, c[n]))
	}
	fmt.Fprintf(w, "operators:   %s\n", strings.Join(parts, " "))
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n+1:]
}

func humanBytes(b int64) string { return dptrain.FormatBytes(b) }

// halfWritten says what train writes a model exported in the half types
// half back in: that type, or float32 for a mix of two.
func halfWritten(half []string) string {
	if len(half) == 1 {
		return half[0]
	}
	return "float32"
}
