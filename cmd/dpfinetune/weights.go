package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
	"github.com/dpfinetune/dpfinetune/internal/torchfile"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

func init() {
	register(&command{
		name:    "weights",
		summary: "write a model's weights as its PyTorch module's state dict (.pt for torch.load, .safetensors), to load the tuned weights into the module itself",
		run:     runWeights,
	})
}

// WeightsRecord is the record "dpfinetune.json" a state dict written by
// `weights` carries (the .pt archive's record extra/dpfinetune.json, the
// safetensors header's "__metadata__" key "dpfinetune"): what a loader
// (docs/load_state_dict.py) must do to the module besides loading the
// tensors, and what the model's metadata said.
type WeightsRecord struct {
	// Format names this record's layout.
	Format string `json:"format"`
	// Model is the ONNX file the weights were read from.
	Model string `json:"model"`
	// GroupNorms are the modules the state dict holds as GroupNorm: where
	// the user's module has a BatchNorm there (a run with --bn groupnorm
	// replaced it), it must be replaced by GroupNorm(groups, channels,
	// eps=epsilon) before the state dict loads.
	GroupNorms []rewrite.GroupNormModule `json:"groupnorms,omitempty"`
	// BatchNormsFrom names the export (--like) whose BatchNorms the state
	// dict was given back, unfolded from the convolutions (a --bn freeze
	// run's, an eval-form export's).
	BatchNormsFrom string `json:"batchnorms_from,omitempty"`
	// Transposed lists the keys whose initializer held the transpose (a
	// Linear weight the exporter folded its transpose into).
	Transposed []string `json:"transposed,omitempty"`
	// Unnamed lists the initializers left out (--allow-unnamed).
	Unnamed []rewrite.UnnamedTensor `json:"unnamed,omitempty"`
	// Calibration holds what `calibrate` added to the model, which is no
	// part of the module: the temperature the logits are divided by, or
	// each label's scale and shift of its logit.
	Calibration map[string][]float32 `json:"calibration,omitempty"`
	// Metadata is the model's dpfinetune metadata (the run's ε and δ,
	// classes, preprocessing: docs/SERVING.md), its keys without the
	// "dpfinetune." prefix.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// weightsFormat is WeightsRecord.Format's value.
const weightsFormat = "dpfinetune-state-dict-1"

// weightsRecordName is the record's name in a .pt archive and its key in
// a safetensors header's metadata.
const weightsRecordName = "dpfinetune.json"

func runWeights(args []string, stdout io.Writer) error {
	fs := newFlagSet("weights", "--model M.onnx --out W.pt|W.safetensors [--like ORIGINAL.onnx] [--input-shape C,H,W] [--allow-unnamed] [--json]")
	model := fs.String("model", "", "ONNX model file (required): a model train wrote, or an export")
	out := fs.String("out", "", "the state dict to write (required): .pt (torch.load) or .safetensors (safetensors.torch.load_file)")
	inShape := fs.String("input-shape", "", "shape of one sample, e.g. 3,224,224 (default: the model's), where the model's is not fixed")
	like := fs.String("like", "", "an export of the same module that keeps its BatchNorms (the one a --bn freeze run started from, or the training-form export of an eval-form one): the BatchNorms the run or the exporter folded into the convolutions given back to the module (required for a --bn freeze run)")
	allowUnnamed := fs.Bool("allow-unnamed", false, "write the tensors that have state-dict names even where some have none (they are listed, and left out)")
	asJSON := fs.Bool("json", false, "print what was written as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *model == "":
		return usagef("--model is required")
	case *out == "":
		return usagef("--out is required")
	}
	if *inShape != "" {
		if _, err := parseDims(*inShape); err != nil {
			return usageError{err.Error()}
		}
	}
	return writeWeights(stateDictJob{model: *model, out: *out, like: *like, inShape: *inShape, allowUnnamed: *allowUnnamed, asJSON: *asJSON}, stdout)
}

// stateDictJob is what `weights` is asked to write: the state dict of model
// to out (its extension the format), BatchNorms given back from like
// (likeIfFrozen where the model is a --bn freeze run and like is empty:
// train's own --model).
type stateDictJob struct {
	model, out, like, likeIfFrozen, inShape string
	allowUnnamed, asJSON                    bool
}

// stateDictFormat returns out's format (".pt", ".pth", ".safetensors"),
// or a usage error.
func stateDictFormat(flag, out string) (string, error) {
	format := strings.ToLower(filepath.Ext(out))
	if format != ".pt" && format != ".pth" && format != ".safetensors" {
		return "", usagef("%s %q: want a .pt (or .pth) or .safetensors file", flag, out)
	}
	return format, nil
}

// writeWeights writes j's state dict and says what it wrote.
func writeWeights(j stateDictJob, stdout io.Writer) error {
	format, err := stateDictFormat("--out", j.out)
	if err != nil {
		return err
	}
	lm, err := loadGraph(j.model)
	if err != nil {
		return err
	}
	// (A fixed batch the loader could not release is no obstacle: the
	// weights are read as they are.)
	rec := WeightsRecord{Format: weightsFormat, Model: filepath.Base(j.model), Metadata: map[string]string{}}
	for _, kv := range lm.m.Proto.GetMetadataProps() {
		if k, ok := strings.CutPrefix(kv.GetKey(), dptrain.MetaPrefix); ok {
			rec.Metadata[k] = kv.GetValue()
		}
	}
	frozenRun := strings.HasPrefix(rec.Metadata["batchnorm"], string(rewrite.BNFreeze))
	if frozenRun && j.like == "" {
		j.like = j.likeIfFrozen
	}
	if bn := rec.Metadata["batchnorm"]; frozenRun && j.like == "" {
		return usagef("%s: trained with --bn freeze (%s): its frozen BatchNorms were folded into the convolutions; --like ORIGINAL.onnx, the export the run started from, gives them back", j.model, bn)
	}
	g := lm.g
	sample, err := modelSample(g, j.inShape)
	if err != nil {
		return fmt.Errorf("%s: %w", j.model, err)
	}
	sd, err := rewrite.StateDictOf(g, sample, j.like != "")
	if errors.Is(err, rewrite.ErrFoldedExport) {
		return fmt.Errorf("%s: %w; or give a training-form export of the same module with --like, whose BatchNorms weights then unfolds from the convolutions", j.model, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", j.model, err)
	}
	if j.like != "" {
		orig, err := loadGraph(j.like)
		if err != nil {
			return err
		}
		if !frozenRun && orig.moved > 0 {
			// The exporter folded the module's own statistics; a --bn
			// freeze run froze (and folded) the export's, moved or not.
			return fmt.Errorf("--like %s: %d of its BatchNorms' running statistics were moved by the training-mode export's own forward pass (momentum %.3g toward its dummy input's batch), while %s folded the module's own: export it again with each BatchNorm's momentum set to 0 (README, \"Export\")", j.like, orig.moved, orig.momentum, j.model)
		}
		n, err := rewrite.UnfoldBatchNorm(sd, g, orig.g)
		if err != nil {
			return fmt.Errorf("%s (--like %s): %w", j.model, j.like, err)
		}
		var frozen int
		if _, err := fmt.Sscanf(rec.Metadata["batchnorm"], string(rewrite.BNFreeze)+": %d", &frozen); err == nil && n != frozen {
			return fmt.Errorf("%s: the run froze %d BatchNorms, and --like %s names %d of them: give the export the run started from", j.model, frozen, j.like, n)
		}
		if n == 0 {
			return usagef("--like %s: %s has no BatchNorm folded into a convolution to give back", j.like, j.model)
		}
		rec.BatchNormsFrom = filepath.Base(j.like)
	}
	if len(sd.Unnamed) > 0 && !j.allowUnnamed {
		var list []string
		for _, u := range sd.Unnamed[:min(len(sd.Unnamed), 5)] {
			list = append(list, fmt.Sprintf("%s %v (%s)", u.Source, u.Shape, u.Reason))
		}
		if len(sd.Unnamed) > 5 {
			list = append(list, fmt.Sprintf("and %d more", len(sd.Unnamed)-5))
		}
		return fmt.Errorf("%s: %d tensors have no state-dict name: %s; --allow-unnamed writes the others and lists these", j.model, len(sd.Unnamed), strings.Join(list, "; "))
	}
	rec.GroupNorms, rec.Unnamed = sd.GroupNorms, sd.Unnamed
	var ts []torchfile.Tensor
	for _, e := range sd.Entries {
		vals, err := e.Values()
		if err != nil {
			return err
		}
		// What calibrate added divides or maps the logits after the
		// module: recorded beside the state dict, not in it.
		if name, ok := strings.CutPrefix(e.Source, rewrite.OwnPrefix); ok {
			if rec.Calibration == nil {
				rec.Calibration = map[string][]float32{}
			}
			rec.Calibration[name] = vals
			continue
		}
		if e.Transposed {
			rec.Transposed = append(rec.Transposed, e.Key)
		}
		ts = append(ts, torchfile.Tensor{Name: e.Key, Shape: e.Shape, Data: vals})
	}
	if len(ts) == 0 {
		return fmt.Errorf("%s: the model holds no tensor of a state dict", j.model)
	}
	recJSON, _ := json.Marshal(rec) // strings, numbers and finite floats always marshal
	err = atomicfile.Write(j.out, func(w io.Writer) error {
		if format == ".safetensors" {
			return torchfile.WriteSafetensors(w, ts, map[string]string{strings.TrimSuffix(weightsRecordName, ".json"): string(recJSON)})
		}
		return torchfile.WritePT(w, ts, map[string][]byte{"extra/" + weightsRecordName: recJSON})
	})
	if err != nil {
		return fmt.Errorf("writing %s: %w", j.out, err)
	}
	if j.asJSON {
		type written struct {
			Out     string        `json:"out"`
			Tensors int           `json:"tensors"`
			Values  int64         `json:"values"`
			Keys    []string      `json:"keys"`
			Record  WeightsRecord `json:"record"`
		}
		w := written{Out: j.out, Tensors: len(ts), Record: rec}
		for _, t := range ts {
			w.Keys = append(w.Keys, t.Name)
			w.Values += int64(len(t.Data))
		}
		b, _ := json.MarshalIndent(w, "", "  ")
		_, err := fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	var values int64
	for _, t := range ts {
		values += int64(len(t.Data))
	}
	fmt.Fprintf(stdout, "%s: %d tensors, %d values, from %s\n", j.out, len(ts), values, j.model)
	if len(rec.Transposed) > 0 {
		fmt.Fprintf(stdout, "  transposed back to PyTorch's (out, in): %s\n", shortList(rec.Transposed, 4))
	}
	if len(rec.GroupNorms) > 0 {
		fmt.Fprintf(stdout, "  GroupNorm modules (where your module has BatchNorm, replace it before loading; docs/load_state_dict.py does):\n")
		for _, gn := range rec.GroupNorms {
			fmt.Fprintf(stdout, "    %s = nn.GroupNorm(%d, %d, eps=%s)\n", gn.Module, gn.Groups, gn.Channels, strconv.FormatFloat(gn.Epsilon, 'g', 6, 64))
		}
	}
	if len(rec.Calibration) > 0 {
		names := make([]string, 0, len(rec.Calibration))
		for k := range rec.Calibration {
			names = append(names, k)
		}
		sort.Strings(names)
		fmt.Fprintf(stdout, "  calibration (applied to the module's logits, not in the state dict; in its record): %s\n", strings.Join(names, ", "))
	}
	for _, u := range rec.Unnamed {
		fmt.Fprintf(stdout, "  left out: %s %v (%s)\n", u.Source, u.Shape, u.Reason)
	}
	return nil
}

// shortList joins the first n of s and says how many more there are.
func shortList(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(s[:n], ", "), len(s)-n)
}
