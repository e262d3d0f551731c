package dpengine

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
)

func sampleCheckpoint(t *testing.T, v float32) *Checkpoint {
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
