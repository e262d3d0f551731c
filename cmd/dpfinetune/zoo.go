package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/zoo"
)

func init() {
	register(&command{
		name:    "zoo",
		summary: "built-in models (ResNet, VGG, ViT, ...): list them, or export one as ONNX with seeded random weights",
		run:     runZoo,
	})
}

const zooUsage = `usage: dpfinetune zoo <subcommand> [flags]

subcommands:
  list     the models, their default input and classes, and parameter counts
  export   write one model as ONNX: NAME --out M.onnx [--num-classes K] [--input-shape C,H,W] [--seed S] [--batchnorm]

Models are built in Go with PyTorch's (or torchvision's / timm's) random
initialization, seeded, and written as torch 1.13 exports them at opset 14:
input "input" (batch, C, H, W), output "logits" (batch, K). BatchNorm is
folded into the preceding convolution, as in an eval-mode export, unless
--batchnorm keeps the BatchNormalization nodes.

Run "dpfinetune zoo <subcommand> -h" for the flags of one.
`

func runZoo(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usagef("missing subcommand (list or export)\n\n%s", zooUsage)
	}
	switch args[0] {
	case "list":
		return runZooList(args[1:], stdout)
	case "export":
		return runZooExport(args[1:], stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, zooUsage)
		return flag.ErrHelp
	}
	return usagef("unknown subcommand %q (want list or export)\n\n%s", args[0], zooUsage)
}

// zooEntry is one model in "dpfinetune zoo list --json".
type zooEntry struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Input       []int64 `json:"input_shape"`
	Classes     int     `json:"num_classes"`
	// Params is PyTorch's parameter count of the module (BatchNorm kept);
	// EvalParams that of the default export, with BatchNorm folded into
	// the convolutions.
	Params       int64 `json:"parameters"`
	EvalParams   int64 `json:"parameters_bn_folded"`
	Buffers      int64 `json:"batchnorm_buffers"`
	HasBatchNorm bool  `json:"has_batchnorm"`
}

func runZooList(args []string, stdout io.Writer) error {
	fs := newFlagSet("zoo list", "[--json] [--long]")
	asJSON := fs.Bool("json", false, "print JSON")
	long := fs.Bool("long", false, "print each model's description")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var entries []zooEntry
	for _, name := range zoo.Names() {
		info, err := zoo.Lookup(name)
		if err != nil {
			return err
		}
		bn, err := zoo.Count(name, zoo.Options{BatchNorm: true})
		if err != nil {
			return err
		}
		folded, err := zoo.Count(name, zoo.Options{})
		if err != nil {
			return err
		}
		entries = append(entries, zooEntry{
			Name: name, Description: info.Description, Input: bn.Input, Classes: bn.Classes,
			Params: bn.Params, EvalParams: folded.Params, Buffers: bn.Buffers, HasBatchNorm: info.HasBatchNorm,
		})
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	fmt.Fprintf(stdout, "%-24s %-11s %7s %13s %13s\n", "MODEL", "INPUT", "CLASSES", "PARAMETERS", "BN FOLDED")
	for _, e := range entries {
		f := "-"
		if e.EvalParams != e.Params {
			f = thousands(e.EvalParams)
		}
		fmt.Fprintf(stdout, "%-24s %-11s %7d %13s %13s\n", e.Name, dimsArg(e.Input), e.Classes, thousands(e.Params), f)
		if *long {
			fmt.Fprintf(stdout, "    %s\n", e.Description)
		}
	}
	fmt.Fprintln(stdout, "\nPARAMETERS counts as PyTorch does for the module (BatchNorm weight and bias included,")
	fmt.Fprintln(stdout, "running statistics not); BN FOLDED is the default export, where each BatchNorm after a")
	fmt.Fprintln(stdout, "convolution is folded into it (its 2 parameters per channel become 1 conv bias, or merge")
	fmt.Fprintln(stdout, "into an existing one). Counts are for the default input and classes.")
	return nil
}

// zooExportReport is the JSON form of "dpfinetune zoo export --json".
type zooExportReport struct {
	Model      string  `json:"model"`
	Out        string  `json:"out"`
	Input      []int64 `json:"input_shape"`
	Classes    int     `json:"num_classes"`
	Seed       int64   `json:"seed"`
	BatchNorm  string  `json:"batchnorm,omitempty"`
	Parameters int64   `json:"parameters"`
	Buffers    int64   `json:"batchnorm_buffers"`
	External   bool    `json:"external_data"`
}

func runZooExport(args []string, stdout io.Writer) error {
	fs := newFlagSet("zoo export", "NAME --out M.onnx [--num-classes K] [--input-shape C,H,W] [--seed S] [--batchnorm | --batchnorm-train] [--json]")
	out := fs.String("out", "", "output ONNX file (required); tensors go to M.onnx.data when the model exceeds 2 GiB")
	classes := fs.Int("num-classes", 0, "number of classes (default: the model's, see zoo list)")
	inShape := fs.String("input-shape", "", "shape of one sample C,H,W (default: the model's, see zoo list)")
	seed := fs.Int64("seed", 0, "seed of the random initialization")
	bn := fs.Bool("batchnorm", false, "keep BatchNorm as BatchNormalization nodes (eval form) instead of folding it into the convolutions")
	bnTrain := fs.Bool("batchnorm-train", false, "keep BatchNorm as BatchNormalization nodes in training form (batch statistics, as torch exports in TrainingMode.TRAINING)")
	external := fs.Bool("external-data", false, "store every tensor of 1 KiB or more in M.onnx.data, whatever the model's size")
	asJSON := fs.Bool("json", false, "print JSON")
	// The model name may come before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	rest := fs.Args()
	if name == "" && len(rest) > 0 {
		name, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	if name == "" {
		return usagef("missing model name (see dpfinetune zoo list)")
	}
	if *out == "" {
		return usagef("--out is required")
	}
	if *classes < 0 {
		return usagef("--num-classes must be positive, got %d", *classes)
	}
	opts := zoo.Options{NumClasses: *classes, Seed: *seed, BatchNorm: *bn, BatchNormTraining: *bnTrain}
	if *inShape != "" {
		dims, err := parseDims(*inShape)
		if err != nil {
			return usageError{err.Error()}
		}
		if len(dims) != 3 {
			return usagef("--input-shape %q: want C,H,W", *inShape)
		}
		opts.InputShape = dims
	}
	if _, err := zoo.Lookup(name); err != nil {
		return usageError{err.Error()}
	}
	// Count validates the options (shape, classes) without drawing weights.
	counts, err := zoo.Count(name, opts)
	if err != nil {
		return usageError{err.Error()}
	}
	m, err := zoo.Build(name, opts)
	if err != nil {
		return err
	}
	so := &onnx.SaveOptions{}
	if *external {
		so.External = onnx.ExternalAlways
	}
	if err := m.Save(*out, so); err != nil {
		return err
	}
	rep := zooExportReport{
		Model: name, Out: *out, Input: counts.Input, Classes: counts.Classes, Seed: *seed,
		Parameters: counts.Params, Buffers: counts.Buffers, External: hasExternal(m),
	}
	for _, kv := range m.Proto.GetMetadataProps() {
		if kv.GetKey() == "zoo.batchnorm" {
			rep.BatchNorm = kv.GetValue()
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "wrote %s: %s, input (batch,%s), output (batch,%d), %s parameters, seed %d\n",
		*out, name, dimsArg(counts.Input), counts.Classes, thousands(counts.Params), *seed)
	if counts.Buffers > 0 {
		fmt.Fprintf(stdout, "BatchNorm: %s, %s running-statistics scalars\n", rep.BatchNorm, thousands(counts.Buffers))
	} else if rep.BatchNorm != "" {
		fmt.Fprintf(stdout, "BatchNorm: %s\n", rep.BatchNorm)
	}
	if rep.External {
		fmt.Fprintf(stdout, "tensors stored in %s.data\n", *out)
	}
	return nil
}

// hasExternal reports whether Save moved tensors to external data.
func hasExternal(m *onnx.Model) bool {
	for _, t := range m.Proto.GetGraph().GetInitializer() {
		if len(t.GetExternalData()) > 0 {
			return true
		}
	}
	return false
}

// dimsArg formats dims as "3,224,224", the form --input-shape takes.
func dimsArg(d []int64) string {
	parts := make([]string, len(d))
	for i, v := range d {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ",")
}

// thousands formats n with comma separators.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
