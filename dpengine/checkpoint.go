package dpengine

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
)

// checkpointMagic starts every checkpoint file.
const checkpointMagic = "DPFINETUNE-CHECKPOINT-1\n"

// Checkpoint is everything a training run needs to continue as if it had
// not stopped: weights, optimizer state, the accountant's phases, the
// position of a seeded random source, and the loop counters. Settings holds
// the run's configuration (free-form JSON) so that a resume can check it.
type Checkpoint struct {
	Settings json.RawMessage `json:"settings"`
	Step     int64           `json:"step"`  // logical steps done
	Epoch    int             `json:"epoch"` // epochs completed
	// EpochStep is the number of steps done in the current epoch.
	EpochStep  int              `json:"epoch_step"`
	Accountant accountant.State `json:"accountant"`
	// SourceStream is the position of a seeded source (0 for secure
	// sources, which need none).
	SourceStream uint64 `json:"source_stream"`
	Seeded       bool   `json:"seeded"`

	ParamNames []string        `json:"param_names"`
	Params     [][]float32     `json:"-"`
	Optimizer  *OptimizerState `json:"-"`

	// Extra is free-form state of the caller (timings, per-epoch ε).
	Extra json.RawMessage `json:"extra,omitempty"`
}

// header is what precedes the tensors in the file.
type header struct {
	Checkpoint
	OptName string   `json:"optimizer"`
	OptStep int64    `json:"optimizer_step"`
	Sizes   []int    `json:"sizes"`
	Slots   []string `json:"slots"`
}

// checkpointWriter, when set by tests, wraps the checkpoint file's writer
// (to simulate a full disk).
var checkpointWriter func(io.Writer) io.Writer

// WriteCheckpoint writes c to path through a temporary file in the same
// directory that is renamed over path only when complete, so a crash or a
// full disk never destroys the previous checkpoint.
func WriteCheckpoint(path string, c *Checkpoint) error {
	h := header{Checkpoint: *c}
	for _, p := range c.Params {
		h.Sizes = append(h.Sizes, len(p))
	}
	if c.Optimizer != nil {
		h.OptName, h.OptStep = c.Optimizer.Name, c.Optimizer.Step
		for name := range c.Optimizer.Slots {
			h.Slots = append(h.Slots, name)
		}
		sortStrings(h.Slots)
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	var out io.Writer = f
	if checkpointWriter != nil {
		out = checkpointWriter(f)
	}
	w := bufio.NewWriterSize(out, 1<<20)
	w.WriteString(checkpointMagic)
	binary.Write(w, binary.LittleEndian, uint64(len(hb)))
	w.Write(hb)
	write := func(xs []float32) error {
		var buf [4]byte
		for _, v := range xs {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
			if _, err := w.Write(buf[:]); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range c.Params {
		if err := write(p); err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
	}
	for _, s := range h.Slots {
		slot := c.Optimizer.Slots[s]
		if len(slot) != len(c.Params) {
			return fmt.Errorf("checkpoint: optimizer slot %q has %d tensors for %d parameters", s, len(slot), len(c.Params))
		}
		for _, t := range slot {
			if err := write(t); err != nil {
				return fmt.Errorf("checkpoint %s: %w", path, err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	ok = true
	return nil
}

// ReadCheckpoint reads a checkpoint written by WriteCheckpoint.
func ReadCheckpoint(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	magic := make([]byte, len(checkpointMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != checkpointMagic {
		return nil, fmt.Errorf("checkpoint %s: not a dpfinetune checkpoint", path)
	}
	var n uint64
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil || n > 1<<30 {
		return nil, fmt.Errorf("checkpoint %s: truncated or corrupt header", path)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, fmt.Errorf("checkpoint %s: truncated header: %w", path, err)
	}
	var h header
	if err := json.Unmarshal(hb, &h); err != nil {
		return nil, fmt.Errorf("checkpoint %s: corrupt header: %w", path, err)
	}
	if len(h.Sizes) != len(h.ParamNames) {
		return nil, fmt.Errorf("checkpoint %s: %d parameter names for %d tensors", path, len(h.ParamNames), len(h.Sizes))
	}
	read := func(size int) ([]float32, error) {
		if size < 0 || size > 1<<34 {
			return nil, errors.New("bad tensor size")
		}
		buf := make([]byte, 4*size)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		out := make([]float32, size)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		}
		return out, nil
	}
	c := h.Checkpoint
	for i, s := range h.Sizes {
		t, err := read(s)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: parameter %q: truncated: %w", path, h.ParamNames[i], err)
		}
		c.Params = append(c.Params, t)
	}
	if h.OptName != "" {
		c.Optimizer = &OptimizerState{Name: h.OptName, Step: h.OptStep, Slots: map[string][][]float32{}}
		for _, s := range h.Slots {
			for i, size := range h.Sizes {
				t, err := read(size)
				if err != nil {
					return nil, fmt.Errorf("checkpoint %s: optimizer %s of %q: truncated: %w", path, s, h.ParamNames[i], err)
				}
				c.Optimizer.Slots[s] = append(c.Optimizer.Slots[s], t)
			}
		}
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return nil, fmt.Errorf("checkpoint %s: trailing data", path)
	}
	return &c, nil
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// SetParams copies saved parameter values into the engine's parameters,
// matching them by name.
func (e *Engine) SetParams(names []string, values [][]float32) error {
	if len(names) != len(values) {
		return fmt.Errorf("dpengine: %d names for %d tensors", len(names), len(values))
	}
	seen := 0
	for k, name := range names {
		p := e.byName[name]
		if p == nil {
			return fmt.Errorf("dpengine: checkpoint parameter %q is not trainable in this model", name)
		}
		if len(p.data) != len(values[k]) {
			return fmt.Errorf("dpengine: checkpoint parameter %q has %d elements, the model %d", name, len(values[k]), len(p.data))
		}
		copy(p.data, values[k])
		seen++
	}
	if seen != len(e.params) {
		return fmt.Errorf("dpengine: checkpoint has %d of the model's %d trainable parameters", seen, len(e.params))
	}
	return nil
}
