package zoo

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// Options configure a model.
type Options struct {
	// NumClasses is the number of logits; 0 selects the model's default
	// (1000 for ImageNet models, 10 for the CIFAR and Fashion-MNIST ones).
	NumClasses int
	// InputShape is the shape of one sample, (C, H, W); nil selects the
	// model's default. Layers whose size depends on it (position
	// embeddings, the first Linear of a CNN without adaptive pooling) are
	// sized for it, as the PyTorch constructor would size them for that
	// image size.
	InputShape []int64
	// Seed seeds the random initialization: equal options give equal
	// bytes.
	Seed int64
	// BatchNorm keeps BatchNorm layers as BatchNormalization nodes with
	// their weight, bias and running statistics, as in PyTorch. Without it
	// each BatchNorm that follows a convolution is folded into it, as
	// torch's eval-mode export does (BatchNorm layers that follow anything
	// else, such as DenseNet's pre-activation norms, stay nodes either
	// way). Models without BatchNorm ignore it.
	BatchNorm bool
	// BatchNormTraining writes the BatchNormalization nodes in the form
	// torch exports in TrainingMode.TRAINING (batch statistics,
	// training_mode=1, three outputs). It implies BatchNorm.
	BatchNormTraining bool
}

func (o Options) keepBN() bool { return o.BatchNorm || o.BatchNormTraining }

func (o Options) bnMode() string {
	switch {
	case o.BatchNormTraining:
		return "nodes (training mode)"
	case o.BatchNorm:
		return "nodes (eval mode)"
	}
	return "folded into the Conv it follows"
}

// Info describes a model of the zoo.
type Info struct {
	Name string
	// Description says what the model is and where its structure comes
	// from.
	Description string
	// DefaultInput is the (C, H, W) the model is built for by default.
	DefaultInput []int64
	// DefaultClasses is the default NumClasses.
	DefaultClasses int
	// HasBatchNorm reports whether Options.BatchNorm changes the graph.
	HasBatchNorm bool
}

// spec is a registered model.
type spec struct {
	Info
	build func(b *builder, x tensor, classes int64) tensor
	// check validates the input shape beyond what the layers check
	// (channels, minimum size, divisibility), or is nil.
	check func(shape []int64) error
}

var registry = map[string]*spec{}

func register(s *spec) {
	if _, dup := registry[s.Name]; dup {
		panic("zoo: model " + s.Name + " registered twice")
	}
	registry[s.Name] = s
}

// Names returns the names of every model, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ErrUnknownModel is returned (wrapped) for a name that is not in the zoo.
var ErrUnknownModel = errors.New("unknown model")

// Lookup returns the description of a model.
func Lookup(name string) (Info, error) {
	s, err := lookup(name)
	if err != nil {
		return Info{}, err
	}
	info := s.Info
	info.DefaultInput = append([]int64(nil), info.DefaultInput...)
	return info, nil
}

func lookup(name string) (*spec, error) {
	s, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("zoo: %w %q; the zoo has: %s", ErrUnknownModel, name, strings.Join(Names(), ", "))
	}
	return s, nil
}

// Build returns the ONNX model name with the given options: opset 14, IR
// version 8, one input "input" (batch, C, H, W) and one output "logits"
// (batch, classes), where batch is a symbolic dimension, with seeded random
// initializers.
func Build(name string, opts Options) (*onnx.Model, error) {
	p, _, err := build(name, opts, dataRandom)
	if err != nil {
		return nil, err
	}
	return onnx.NewModel(p), nil
}

// Counts are the sizes of a model as PyTorch counts them.
type Counts struct {
	// Params is the number of trainable scalars (nn.Parameter): what
	// sum(p.numel() for p in model.parameters()) gives for the PyTorch
	// module the graph is. With BatchNorm folded (the default), a folded
	// BatchNorm's weight and bias are gone and the convolution has a bias:
	// the count is that of torch's eval-mode export, not of the module.
	Params int64
	// Buffers is the number of BatchNorm running-statistics scalars in the
	// graph.
	Buffers int64
	// Input is the (C, H, W) the model was sized for and Classes its
	// number of logits.
	Input   []int64
	Classes int
}

// Count returns a model's parameter counts without drawing its weights.
func Count(name string, opts Options) (Counts, error) {
	_, c, err := build(name, opts, dataNone)
	return c, err
}

func build(name string, opts Options, data dataMode) (*onnxpb.ModelProto, Counts, error) {
	s, err := lookup(name)
	if err != nil {
		return nil, Counts{}, err
	}
	return buildSpec(s, opts, data)
}

// buildSpec builds the model s describes.
func buildSpec(s *spec, opts Options, data dataMode) (p *onnxpb.ModelProto, c Counts, err error) {
	name := s.Name
	classes := opts.NumClasses
	if classes == 0 {
		classes = s.DefaultClasses
	}
	if classes < 0 {
		return nil, c, fmt.Errorf("zoo: %s: number of classes must be positive, got %d", name, classes)
	}
	shape := opts.InputShape
	if shape == nil {
		shape = s.DefaultInput
	}
	if len(shape) != 3 {
		return nil, c, fmt.Errorf("zoo: %s: input shape %v: want (C, H, W), e.g. %s", name, shape, dimsString(s.DefaultInput))
	}
	for _, d := range shape {
		if d <= 0 {
			return nil, c, fmt.Errorf("zoo: %s: input shape %v: dimensions must be positive", name, shape)
		}
	}
	if s.check != nil {
		if err := s.check(shape); err != nil {
			return nil, c, fmt.Errorf("zoo: %s: input shape %s: %w", name, dimsString(shape), err)
		}
	}
	opts.NumClasses = classes
	opts.InputShape = shape
	b := newBuilder(name, opts, data)
	defer func() {
		if r := recover(); r != nil {
			be, ok := r.(buildError)
			if !ok {
				panic(r)
			}
			p, err = nil, fmt.Errorf("zoo: %s: input shape %s: %s", name, dimsString(shape), be.msg)
		}
	}()
	x := tensor{name: InputName, shape: append([]int64{-1}, shape...)}
	y := s.build(b, x, int64(classes))
	if len(y.shape) != 2 || y.shape[1] != int64(classes) {
		panic(fmt.Sprintf("zoo: %s: output shape %v, want (batch, %d)", name, y.shape, classes))
	}
	p = b.finish(x, y, s.Description)
	c = Counts{Params: b.params, Buffers: b.buffers, Input: append([]int64(nil), shape...), Classes: classes}
	return p, c, nil
}

// dimsString formats (C, H, W) as "3,224,224".
func dimsString(d []int64) string {
	parts := make([]string, len(d))
	for i, v := range d {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ",")
}

// minSize returns a check that the input has c channels (0: any) and is
// at least min pixels on each side.
func minSize(c, min int64) func([]int64) error {
	return func(s []int64) error {
		if c > 0 && s[0] != c {
			return fmt.Errorf("the model takes %d input channels, got %d", c, s[0])
		}
		if s[1] < min || s[2] < min {
			return fmt.Errorf("too small: the model needs at least %d×%d pixels", min, min)
		}
		return nil
	}
}
