package dpengine

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
)

// checkpointMagic starts every checkpoint file. Version 2 follows the
// header and every tensor with the SHA-256 of its bytes, so that a flipped
// bit anywhere is refused, naming the part it hit; version 1 had no check
// and is refused.
const (
	checkpointMagic   = "DPFINETUNE-CHECKPOINT-2\n"
	checkpointMagicV1 = "DPFINETUNE-CHECKPOINT-1\n"
)

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
	// Average is the parameters' moving average in ParamNames order
	// (Engine.HostAverage; nil for a run without one), and AverageSteps
	// the updates it has taken in (Engine.AverageSteps).
	Average      [][]float32 `json:"-"`
	AverageSteps int64       `json:"average_steps,omitempty"`
	// ClipNorm is the clip norm the next step clips with where the run
	// adapts it (dptrain's adaptive clipping; 0 otherwise).
	ClipNorm float64 `json:"clip_norm,omitempty"`

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
	// Averaged says the optimizer's slots are followed by the
	// parameters' average, a tensor each.
	Averaged bool `json:"averaged,omitempty"`
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
	if c.Average != nil {
		if len(c.Average) != len(c.Params) {
			return fmt.Errorf("checkpoint: the average has %d tensors for %d parameters", len(c.Average), len(c.Params))
		}
		for k, a := range c.Average {
			if len(a) != len(c.Params[k]) {
				return fmt.Errorf("checkpoint: the average of %q has %d elements, the parameter %d", c.ParamNames[k], len(a), len(c.Params[k]))
			}
		}
		h.Averaged = true
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	err = atomicfile.Write(path, func(out io.Writer) error {
		if checkpointWriter != nil {
			out = checkpointWriter(out)
		}
		return writeCheckpoint(out, c, &h, hb)
	})
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// writeCheckpoint writes the checkpoint's bytes: magic, header length,
// header and its SHA-256, then every tensor followed by its SHA-256.
func writeCheckpoint(w io.Writer, c *Checkpoint, h *header, hb []byte) error {
	io.WriteString(w, checkpointMagic)
	var hlen [8]byte
	binary.LittleEndian.PutUint64(hlen[:], uint64(len(hb)))
	sum := sha256.New()
	sum.Write(hlen[:])
	sum.Write(hb)
	w.Write(hlen[:])
	w.Write(hb)
	w.Write(sum.Sum(nil))
	write := func(xs []float32) error {
		var buf [4]byte
		sum.Reset()
		for _, v := range xs {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
			sum.Write(buf[:])
			if _, err := w.Write(buf[:]); err != nil {
				return err
			}
		}
		_, err := w.Write(sum.Sum(nil))
		return err
	}
	for _, p := range c.Params {
		if err := write(p); err != nil {
			return err
		}
	}
	for _, s := range h.Slots {
		slot := c.Optimizer.Slots[s]
		if len(slot) != len(c.Params) {
			return fmt.Errorf("optimizer slot %q has %d tensors for %d parameters", s, len(slot), len(c.Params))
		}
		for _, t := range slot {
			if err := write(t); err != nil {
				return err
			}
		}
	}
	for _, t := range c.Average {
		if err := write(t); err != nil {
			return err
		}
	}
	return nil
}

// ReadCheckpoint reads a checkpoint written by WriteCheckpoint, checking
// every part against the SHA-256 it carries: a corrupt or modified
// checkpoint is refused with an error naming the part that does not match.
// Sizes in the header are checked against the file's length before
// anything is allocated.
func ReadCheckpoint(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	c, err := readCheckpoint(bufio.NewReaderSize(f, 1<<20), st.Size())
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return c, nil
}

// readCheckpoint decodes a checkpoint of size bytes from r.
func readCheckpoint(r io.Reader, size int64) (*Checkpoint, error) {
	magic := make([]byte, len(checkpointMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != checkpointMagic {
		if string(magic) == checkpointMagicV1 {
			return nil, errors.New("written by an older dpfinetune, without an integrity check: it cannot be verified, start the run again")
		}
		return nil, errors.New("not a dpfinetune checkpoint")
	}
	const hashLen = sha256.Size
	left := size - int64(len(checkpointMagic))
	var hlen [8]byte
	if _, err := io.ReadFull(r, hlen[:]); err != nil {
		return nil, errors.New("truncated header")
	}
	n := binary.LittleEndian.Uint64(hlen[:])
	left -= 8
	if n > 1<<30 || int64(n)+hashLen > left {
		return nil, fmt.Errorf("truncated or corrupt header: it claims %d bytes, the file holds %d more", n, left)
	}
	sum := sha256.New()
	// check reads the SHA-256 that follows a part and compares it with
	// the part's.
	check := func(what string) error {
		var want [hashLen]byte
		if _, err := io.ReadFull(r, want[:]); err != nil {
			return fmt.Errorf("%s: truncated: its SHA-256 is missing", what)
		}
		if !bytes.Equal(sum.Sum(nil), want[:]) {
			return fmt.Errorf("integrity check failed: %s does not match its SHA-256 (the file is corrupt or was modified)", what)
		}
		return nil
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, fmt.Errorf("truncated header: %w", err)
	}
	sum.Write(hlen[:])
	sum.Write(hb)
	if err := check("the header (settings, step counters, accountant, sampler and noise position)"); err != nil {
		return nil, err
	}
	left -= int64(n) + hashLen
	var h header
	if err := json.Unmarshal(hb, &h); err != nil {
		return nil, fmt.Errorf("corrupt header: %w", err)
	}
	if len(h.Sizes) != len(h.ParamNames) {
		return nil, fmt.Errorf("%d parameter names for %d tensors", len(h.ParamNames), len(h.Sizes))
	}
	if len(h.Slots) > 8 {
		return nil, fmt.Errorf("corrupt header: %d optimizer slots", len(h.Slots))
	}
	// What the header declares must be what the file holds, before any
	// tensor is allocated.
	// k copies of every parameter's size: the parameters, the
	// optimizer's slots, the average.
	k := int64(1)
	if h.OptName != "" {
		k += int64(len(h.Slots))
	}
	if h.Averaged {
		k++
	}
	need := int64(len(h.Sizes)) * k * hashLen
	for _, sz := range h.Sizes {
		if sz < 0 || int64(sz) > left/4 {
			return nil, fmt.Errorf("the header declares a tensor of %d elements, the file holds %d more bytes", sz, left)
		}
		need += 4 * int64(sz) * k
		if need > left {
			break
		}
	}
	if need != left {
		return nil, fmt.Errorf("truncated or corrupt: the header declares %d bytes of tensors, the file holds %d", need, left)
	}
	read := func(size int, what string) ([]float32, error) {
		buf := make([]byte, 4*size)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("%s: truncated: %w", what, err)
		}
		sum.Reset()
		sum.Write(buf)
		if err := check(what); err != nil {
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
		t, err := read(s, fmt.Sprintf("parameter %q", h.ParamNames[i]))
		if err != nil {
			return nil, err
		}
		c.Params = append(c.Params, t)
	}
	if h.OptName != "" {
		c.Optimizer = &OptimizerState{Name: h.OptName, Step: h.OptStep, Slots: map[string][][]float32{}}
		for _, s := range h.Slots {
			for i, size := range h.Sizes {
				t, err := read(size, fmt.Sprintf("optimizer %s of %q", s, h.ParamNames[i]))
				if err != nil {
					return nil, err
				}
				c.Optimizer.Slots[s] = append(c.Optimizer.Slots[s], t)
			}
		}
	}
	if h.Averaged {
		for i, size := range h.Sizes {
			t, err := read(size, fmt.Sprintf("the average of %q", h.ParamNames[i]))
			if err != nil {
				return nil, err
			}
			c.Average = append(c.Average, t)
		}
	}
	var one [1]byte
	if k, _ := r.Read(one[:]); k > 0 {
		return nil, errors.New("trailing data")
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

// InOrder returns the state s, whose tensors follow the parameters names
// (a checkpoint's order), with its tensors in the order of want (an
// engine's ParamNames): a checkpoint's parameters are matched by name
// (SetParams), and so must their optimizer state be, whatever order the
// run that saved it kept them in. Every name of want must be in names.
func (s *OptimizerState) InOrder(names, want []string) (*OptimizerState, error) {
	at := make(map[string]int, len(names))
	for k, n := range names {
		at[n] = k
	}
	out := &OptimizerState{Name: s.Name, Step: s.Step, Slots: map[string][][]float32{}}
	for slot, ts := range s.Slots {
		if len(ts) != len(names) {
			return nil, fmt.Errorf("dpengine: optimizer %s holds %d tensors for %d parameters", slot, len(ts), len(names))
		}
		re := make([][]float32, len(want))
		for j, n := range want {
			k, ok := at[n]
			if !ok {
				return nil, fmt.Errorf("dpengine: the optimizer state has no %s for parameter %q", slot, n)
			}
			re[j] = ts[k]
		}
		out.Slots[slot] = re
	}
	return out, nil
}

// SetParams copies saved parameter values into the engine's parameters,
// matching them by name: into the graph's initializers, then to the
// device (LoadParams).
func (e *Engine) SetParams(names []string, values [][]float32) error {
	err := e.byNames("checkpoint", "checkpoint", names, values, func(p *param, v []float32) error {
		copy(e.plan.HostParam(p.name), v)
		return nil
	})
	if err != nil {
		return err
	}
	return e.LoadParams()
}

// byNames calls fn with each of values and the trainable parameter its
// name (names[k], a checkpoint's order) names, after checking its size,
// and checks that every trainable parameter was given: the saved tensors
// (what: "checkpoint" parameters, whole: the "checkpoint" holding them)
// are matched by name whatever order the run that saved them kept.
func (e *Engine) byNames(what, whole string, names []string, values [][]float32, fn func(p *param, v []float32) error) error {
	if len(names) != len(values) {
		return fmt.Errorf("dpengine: %d names for %d %s tensors", len(names), len(values), what)
	}
	seen := 0
	for k, name := range names {
		p := e.byName[name]
		if p == nil {
			return fmt.Errorf("dpengine: %s parameter %q is not trainable in this model", what, name)
		}
		if len(p.data) != len(values[k]) {
			return fmt.Errorf("dpengine: %s parameter %q has %d elements, the model %d", what, name, len(values[k]), len(p.data))
		}
		if err := fn(p, values[k]); err != nil {
			return err
		}
		seen++
	}
	if seen != len(e.params) {
		return fmt.Errorf("dpengine: %s has %d of the model's %d trainable parameters", whole, seen, len(e.params))
	}
	return nil
}
