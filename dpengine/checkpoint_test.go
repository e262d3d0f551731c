package dpengine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
)

func sampleCheckpoint(t *testing.T, v float32) *Checkpoint { return sampleCheckpointF(v) }

// sampleCheckpointF is a small checkpoint with an Adam state whose first
// weight starts at v.
func sampleCheckpointF(v float32) *Checkpoint {
	a, _ := accountant.New("rdp")
	a.Step(1.1, 0.01, 100)
	o := NewAdam(1e-3, 0, false)
	params := [][]float32{{v, 2, 3}, {4}}
	o.Step(params, [][]float32{{1, 1, 1}, {1}})
	return &Checkpoint{Settings: json.RawMessage(`{"x":1}`), Step: 7, Epoch: 1, EpochStep: 3, Accountant: a.State(),
		SourceStream: 42, Seeded: true, ParamNames: []string{"w", "b"}, Params: params, Optimizer: o.State()}
}

func TestCheckpointRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.ckpt")
	c := sampleCheckpoint(t, 1)
	if err := WriteCheckpoint(path, c); err != nil {
		t.Fatal(err)
	}
	r, err := ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if r.Step != 7 || r.Epoch != 1 || r.EpochStep != 3 || r.SourceStream != 42 || !r.Seeded || len(r.Params) != 2 || r.Params[0][0] != c.Params[0][0] {
		t.Errorf("read back %+v", r)
	}
	if r.Optimizer.Name != "adam" || r.Optimizer.Step != 1 || r.Optimizer.Slots["m"][0][1] != c.Optimizer.Slots["m"][0][1] {
		t.Errorf("optimizer state %+v", r.Optimizer)
	}
	a, err := accountant.Restore(r.Accountant)
	if err != nil || a.TotalSteps() != 100 {
		t.Errorf("accountant %v, %v", a, err)
	}
	// Truncated and foreign files are clear errors.
	b, _ := os.ReadFile(path)
	os.WriteFile(path, b[:len(b)-5], 0o644)
	if _, err := ReadCheckpoint(path); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("truncated: %v", err)
	}
	os.WriteFile(path, []byte("hello"), 0o644)
	if _, err := ReadCheckpoint(path); err == nil || !strings.Contains(err.Error(), "not a dpfinetune checkpoint") {
		t.Errorf("foreign file: %v", err)
	}
}

// TestCheckpointAverage: the parameters' average (Checkpoint.Average)
// round-trips with its update count, after the optimizer's state and
// under the same integrity check; one of the wrong shape is refused on
// writing; and a checkpoint without one reads back without one.
func TestCheckpointAverage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.ckpt")
	c := sampleCheckpoint(t, 1)
	c.Average, c.AverageSteps = [][]float32{{0.5, 1.5, 2.5}, {-4}}, 6
	if err := WriteCheckpoint(path, c); err != nil {
		t.Fatal(err)
	}
	r, err := ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if r.AverageSteps != 6 || len(r.Average) != 2 || !numcheck.SameBits(r.Average[0], c.Average[0]) || !numcheck.SameBits(r.Average[1], c.Average[1]) {
		t.Fatalf("average read back as %v (%d updates), want %v (6)", r.Average, r.AverageSteps, c.Average)
	}
	if r.Optimizer == nil || !numcheck.SameBits(r.Optimizer.Slots["v"][1], c.Optimizer.Slots["v"][1]) || !numcheck.SameBits(r.Params[0], c.Params[0]) {
		t.Fatal("the parameters or the optimizer's state changed beside the average")
	}
	// The last tensor of the file is the average of "b".
	good, _ := os.ReadFile(path)
	b := append([]byte(nil), good...)
	b[len(b)-33] ^= 0x10
	os.WriteFile(path, b, 0o644)
	if _, err := ReadCheckpoint(path); err == nil || !strings.Contains(err.Error(), `the average of "b"`) {
		t.Errorf("a flipped byte in the average: %v, want an error naming it", err)
	}
	c.Average = [][]float32{{1, 2, 3}, {4, 5}}
	if err := WriteCheckpoint(path, c); err == nil || !strings.Contains(err.Error(), `the average of "b" has 2 elements`) {
		t.Errorf("an average of the wrong size: %v", err)
	}
	c.Average = [][]float32{{1, 2, 3}}
	if err := WriteCheckpoint(path, c); err == nil || !strings.Contains(err.Error(), "1 tensors for 2 parameters") {
		t.Errorf("an average of too few tensors: %v", err)
	}
	c.Average, c.AverageSteps = nil, 0
	if err := WriteCheckpoint(path, c); err != nil {
		t.Fatal(err)
	}
	if r, err := ReadCheckpoint(path); err != nil || r.Average != nil {
		t.Errorf("without an average: read back %v, %v", r.Average, err)
	}
}

// failingWriter fails with ENOSPC after n bytes, like a full disk.
type failingWriter struct {
	w io.Writer
	n int
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k, _ := f.w.Write(p[:f.n])
		f.n = 0
		return k, &os.PathError{Op: "write", Path: "checkpoint", Err: syscall.ENOSPC}
	}
	f.n -= len(p)
	return f.w.Write(p)
}

// TestCheckpointDiskFull: a write that fails half way (disk full) returns
// the error and leaves the previous checkpoint intact and no temporary file.
func TestCheckpointDiskFull(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.ckpt")
	if err := WriteCheckpoint(path, sampleCheckpoint(t, 1)); err != nil {
		t.Fatal(err)
	}
	checkpointWriter = func(w io.Writer) io.Writer { return &failingWriter{w: w, n: 100} }
	defer func() { checkpointWriter = nil }()
	err := WriteCheckpoint(path, sampleCheckpoint(t, 99))
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("err = %v, want ENOSPC", err)
	}
	r, err := ReadCheckpoint(path)
	if err != nil || r.Params[0][0] > 2 { // 0.999 after one Adam step; the failed write held 98.999
		t.Fatalf("previous checkpoint lost: %v %v", r, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// TestCheckpointIntegrity: one byte XOR 0x10 anywhere (the test
// flips the midpoint) is refused, naming the part it hit; so are a
// version-1 checkpoint, which carries no check, and a header whose sizes
// disagree with the file.
func TestCheckpointIntegrity(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.ckpt")
	c := sampleCheckpoint(t, 1)
	big := make([]float32, 1000)
	for i := range big {
		big[i] = float32(i) / 7
	}
	c.ParamNames = append(c.ParamNames, "conv.weight")
	c.Params = append(c.Params, big)
	for k, s := range c.Optimizer.Slots {
		c.Optimizer.Slots[k] = append(s, make([]float32, len(big)))
	}
	if err := WriteCheckpoint(path, c); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	if _, err := ReadCheckpoint(path); err != nil {
		t.Fatal(err)
	}
	hdrEnd := len(checkpointMagic) + 8 + int(binaryLen(good)) + 32
	for _, tc := range []struct {
		name string
		at   int
		want string
	}{
		{"midpoint", len(good) / 2, "does not match its SHA-256"},
		{"header", len(checkpointMagic) + 8 + 10, "the header"},
		{"first parameter", hdrEnd + 1, `parameter "w"`},
		{"last byte", len(good) - 1, "optimizer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			b[tc.at] ^= 0x10
			os.WriteFile(path, b, 0o644)
			_, err := ReadCheckpoint(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("byte %d of %d flipped: err = %v, want one naming %q", tc.at, len(good), err, tc.want)
			}
		})
	}
	// The midpoint of this file lies in the parameters or the optimizer
	// state: say which.
	b := append([]byte(nil), good...)
	b[len(b)/2] ^= 0x10
	os.WriteFile(path, b, 0o644)
	if _, err := ReadCheckpoint(path); err == nil || !(strings.Contains(err.Error(), `"conv.weight"`)) {
		t.Errorf("midpoint: %v, want it to name conv.weight", err)
	}

	v1 := append([]byte(checkpointMagicV1), good[len(checkpointMagic):]...)
	os.WriteFile(path, v1, 0o644)
	if _, err := ReadCheckpoint(path); err == nil || !strings.Contains(err.Error(), "without an integrity check") {
		t.Errorf("version 1: %v", err)
	}
	// Appended or removed bytes: the sizes disagree before any tensor is
	// allocated.
	for _, b := range [][]byte{append(append([]byte(nil), good...), 0), good[:len(good)-33]} {
		os.WriteFile(path, b, 0o644)
		if _, err := ReadCheckpoint(path); err == nil || !strings.Contains(err.Error(), "truncated or corrupt") {
			t.Errorf("%d bytes of %d: %v", len(b), len(good), err)
		}
	}
}

// binaryLen reads the header length of a checkpoint file.
func binaryLen(b []byte) uint64 {
	return binary.LittleEndian.Uint64(b[len(checkpointMagic):])
}

// readOnlyDir returns a directory this process cannot write: a chmod'ed
// temporary directory, or /proc where the test runs as root (which writes
// through permissions).
func readOnlyDir(t *testing.T) string {
	if os.Geteuid() != 0 {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return dir
	}
	return "/proc"
}

// TestCheckpointReadOnlyDir: writing into a directory that cannot be
// written fails with the path named and leaves nothing under the name.
func TestCheckpointReadOnlyDir(t *testing.T) {
	path := filepath.Join(readOnlyDir(t), "dpfinetune-test.ckpt")
	err := WriteCheckpoint(path, sampleCheckpoint(t, 1))
	if err == nil || !strings.Contains(err.Error(), "dpfinetune-test.ckpt") {
		t.Errorf("err = %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s exists after a failed write (%v)", path, err)
	}
}

// TestOptimizerStateInOrder: a saved optimizer state follows its
// checkpoint's parameter order into an engine's, by name; a parameter the
// state lacks, or a slot of the wrong length, is an error.
func TestOptimizerStateInOrder(t *testing.T) {
	s := &OptimizerState{Name: "adam", Step: 3, Slots: map[string][][]float32{
		"m": {{1}, {2, 2}, {3, 3, 3}},
		"v": {{4}, {5, 5}, {6, 6, 6}},
	}}
	got, err := s.InOrder([]string{"a", "b", "c"}, []string{"c", "a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "adam" || got.Step != 3 {
		t.Fatalf("name %q step %d", got.Name, got.Step)
	}
	for slot, want := range map[string][]float32{"m": {3, 1, 2}, "v": {6, 4, 5}} {
		for j, w := range want {
			if got.Slots[slot][j][0] != w {
				t.Errorf("%s[%d] starts with %v, want %v", slot, j, got.Slots[slot][j][0], w)
			}
		}
	}
	if _, err := s.InOrder([]string{"a", "b", "c"}, []string{"a", "d"}); err == nil {
		t.Error("a parameter the state lacks: no error")
	}
	if _, err := s.InOrder([]string{"a", "b"}, []string{"a", "b"}); err == nil {
		t.Error("three tensors for two names: no error")
	}
}
