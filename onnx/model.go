package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// MaxIRVersion is the newest ONNX IR version this package understands.
const MaxIRVersion = int64(onnxpb.Version_IR_VERSION)

// MinIRVersion is the oldest IR version accepted: version 3 introduced
// opset imports, without which operators have no defined semantics.
const MinIRVersion = 3

// maxProtoSize is the largest message protobuf implementations decode
// (2 GiB - 1). Models beyond it must keep tensors as external data.
const maxProtoSize = 1<<31 - 1

// Model is a loaded ONNX model.
//
// Proto is the model exactly as decoded; tensors stored as external data keep
// their external_data references there, and their bytes are held beside the
// proto so that TensorBytes can return them and Save can write them back.
type Model struct {
	Proto *onnxpb.ModelProto

	// external holds the bytes of every EXTERNAL tensor, read on load or
	// set by SetTensorBytes.
	external map[*onnxpb.TensorProto][]byte
}

// ErrNotONNX reports input that does not decode as an ONNX model.
var ErrNotONNX = errors.New("not an ONNX model")

// ErrUnsupportedIR reports a model whose IR version this package does not
// support.
var ErrUnsupportedIR = errors.New("unsupported ONNX IR version")

// Load reads the model file at path, with the external data it references
// (resolved relative to the file's directory).
func Load(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	m, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", path, err)
	}
	if err := m.readExternal(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", path, err)
	}
	return m, nil
}

// LoadBytes decodes a model from memory. External data locations are
// resolved relative to dir; if dir is empty, a model that references
// external data is an error.
func LoadBytes(data []byte, dir string) (*Model, error) {
	m, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	if err := m.readExternal(dir); err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	return m, nil
}

// NewModel wraps a model built in memory.
func NewModel(p *onnxpb.ModelProto) *Model { return &Model{Proto: p} }

func decode(data []byte) (*Model, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty input", ErrNotONNX)
	}
	p := new(onnxpb.ModelProto)
	if err := proto.Unmarshal(data, p); err != nil {
		return nil, fmt.Errorf("%w (truncated or corrupt?): %v", ErrNotONNX, err)
	}
	if p.IrVersion == nil || p.GetGraph() == nil {
		return nil, fmt.Errorf("%w: no ir_version or no graph", ErrNotONNX)
	}
	if v := p.GetIrVersion(); v < MinIRVersion || v > MaxIRVersion {
		return nil, fmt.Errorf("%w %d (supported: %d to %d)", ErrUnsupportedIR, v, MinIRVersion, MaxIRVersion)
	}
	if len(p.GetOpsetImport()) == 0 {
		return nil, fmt.Errorf("%w: no opset_import", ErrNotONNX)
	}
	return &Model{Proto: p}, nil
}

// Bytes encodes the model. Tensors held as external data stay references;
// use Save to write their bytes too. Re-encoding an unchanged model gives the
// bytes it was decoded from.
func (m *Model) Bytes() ([]byte, error) {
	if n := proto.Size(m.Proto); n > maxProtoSize {
		return nil, fmt.Errorf("onnx: model encodes to %d bytes, over the 2 GiB protobuf limit: save it to a file with external data", n)
	}
	b, err := proto.Marshal(m.Proto)
	if err != nil {
		return nil, fmt.Errorf("onnx: encoding model: %w", err)
	}
	return b, nil
}

// walkTensors calls fn for every TensorProto in the model: initializers,
// sparse initializers, tensor attributes, in the main graph, every subgraph,
// training graphs and functions.
func walkTensors(p *onnxpb.ModelProto, fn func(*onnxpb.TensorProto) error) error {
	var graph func(g *onnxpb.GraphProto) error
	var node func(n *onnxpb.NodeProto) error
	tensor := func(t *onnxpb.TensorProto) error {
		if t == nil {
			return nil
		}
		return fn(t)
	}
	sparse := func(s *onnxpb.SparseTensorProto) error {
		if s == nil {
			return nil
		}
		if err := tensor(s.GetValues()); err != nil {
			return err
		}
		return tensor(s.GetIndices())
	}
	node = func(n *onnxpb.NodeProto) error {
		for _, a := range n.GetAttribute() {
			if err := tensor(a.GetT()); err != nil {
				return err
			}
			for _, t := range a.GetTensors() {
				if err := tensor(t); err != nil {
					return err
				}
			}
			if err := sparse(a.GetSparseTensor()); err != nil {
				return err
			}
			for _, s := range a.GetSparseTensors() {
				if err := sparse(s); err != nil {
					return err
				}
			}
			if a.GetG() != nil {
				if err := graph(a.GetG()); err != nil {
					return err
				}
			}
			for _, g := range a.GetGraphs() {
				if err := graph(g); err != nil {
					return err
				}
			}
		}
		return nil
	}
	graph = func(g *onnxpb.GraphProto) error {
		if g == nil {
			return nil
		}
		for _, t := range g.GetInitializer() {
			if err := tensor(t); err != nil {
				return err
			}
		}
		for _, s := range g.GetSparseInitializer() {
			if err := sparse(s); err != nil {
				return err
			}
		}
		for _, n := range g.GetNode() {
			if err := node(n); err != nil {
				return err
			}
		}
		return nil
	}
	if err := graph(p.GetGraph()); err != nil {
		return err
	}
	for _, ti := range p.GetTrainingInfo() {
		if err := graph(ti.GetInitialization()); err != nil {
			return err
		}
		if err := graph(ti.GetAlgorithm()); err != nil {
			return err
		}
	}
	for _, f := range p.GetFunctions() {
		for _, n := range f.GetNode() {
			if err := node(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// Derive returns a model for p, a proto built from m's, that keeps m's
// external data for every tensor p shares with m by pointer.
func (m *Model) Derive(p *onnxpb.ModelProto) *Model {
	d := &Model{Proto: p}
	if len(m.external) > 0 {
		d.external = make(map[*onnxpb.TensorProto][]byte, len(m.external))
		_ = walkTensors(p, func(t *onnxpb.TensorProto) error {
			if b, ok := m.external[t]; ok {
				d.external[t] = b
			}
			return nil
		})
	}
	return d
}
