package dptrain

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
)

// A kept feature file (Config.KeepFeatures) holds one dataset's rows of a
// frozen part's outputs: featureFileMagic, a JSON header line
// (featureFileHeader), zeros to featureFileOffset, and the rows as
// little-endian float32, example after example — page-aligned, so that a
// later run maps them into memory as they are.
const (
	featureFileMagic  = "dpfinetune features 1\n"
	featureFileOffset = 4096
)

// featureFileHeader says whose rows a kept file holds: the key of
// featureKey (the frozen part's cut and parameters, the data's fingerprint
// and preprocessing, the device), their count and shape, and the SHA-256
// of the rows' bytes, checked when the file is read.
type featureFileHeader struct {
	Key      string `json:"key"`
	Examples int    `json:"examples"`
	Row      int    `json:"row"`
	Shape    []int  `json:"shape"`
	SHA256   string `json:"sha256"`
}

// keptPath is the file of key's rows in dir.
func keptPath(dir, key string) string { return filepath.Join(dir, key[:32]+".features") }

// keepable reports whether ds's rows can be kept: only a dataset with a
// fingerprint of its samples (data.Images' SHA-256), which the key holds —
// without one, two datasets of one name and size could share a file.
func keepable(ds data.Dataset) bool {
	s, ok := ds.(sourced)
	return ok && s.Fingerprint() != ""
}

// loadKept returns the rows of key over ds kept in dir, with shape a row,
// mapped into memory where the system can (else read): nil and no error
// where dir holds no file of key; an error where it holds one that is not
// key's rows or not whole (the caller computes them afresh).
func loadKept(dir, key string, ds data.Dataset, shape []int) (*features, error) {
	path := keptPath(dir, key)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(io.LimitReader(f, featureFileOffset))
	magic := make([]byte, len(featureFileMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != featureFileMagic {
		return nil, fmt.Errorf("%s: not a kept feature file", path)
	}
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("%s: its header: %w", path, err)
	}
	var h featureFileHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, fmt.Errorf("%s: its header: %w", path, err)
	}
	row := prodInts(shape)
	if h.Key != key || h.Examples != ds.Len() || h.Row != row || !slices.Equal(h.Shape, shape) {
		return nil, fmt.Errorf("%s holds %d rows of %v for another frozen part or data", path, h.Examples, h.Shape)
	}
	n := h.Examples * h.Row
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if want := featureFileOffset + 4*int64(n); st.Size() != want {
		return nil, fmt.Errorf("%s: %d bytes, its header promises %d", path, st.Size(), want)
	}
	x, release, err := mapFloats(f, featureFileOffset, n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	fc := &features{Dataset: ds, shape: shape, row: row, x: x, release: release}
	if sum := floatsSHA256(x); sum != h.SHA256 {
		fc.close()
		return nil, fmt.Errorf("%s: its rows' SHA-256 is %.12s…, its header's %.12s…: the file changed since it was written", path, sum, h.SHA256)
	}
	return fc, nil
}

// keep writes f's rows to dir as key's (a file only its owner reads,
// written beside and renamed into place, so that a reader never sees
// half of it), creating dir where it is missing.
func keep(dir, key string, f *features) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".features-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	h := featureFileHeader{Key: key, Examples: f.Dataset.Len(), Row: f.row, Shape: f.shape, SHA256: floatsSHA256(f.x)}
	hb, err := json.Marshal(h)
	if err != nil {
		tmp.Close()
		return err
	}
	head := append([]byte(featureFileMagic), hb...)
	head = append(head, '\n')
	if len(head) > featureFileOffset {
		tmp.Close()
		return fmt.Errorf("a feature file's header of %d bytes", len(head))
	}
	w := bufio.NewWriterSize(tmp, 1<<20)
	w.Write(head)
	w.Write(make([]byte, featureFileOffset-len(head)))
	writeFloats(w, f.x)
	err = w.Flush()
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), keptPath(dir, key))
}

// writeFloats writes x as little-endian float32.
func writeFloats(w io.Writer, x []float32) {
	var buf [4096]byte
	for len(x) > 0 {
		m := min(len(x), len(buf)/4)
		for i, v := range x[:m] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		w.Write(buf[:4*m])
		x = x[m:]
	}
}

// floatsSHA256 is the SHA-256 of x as little-endian float32.
func floatsSHA256(x []float32) string {
	h := sha256.New()
	writeFloats(h, x)
	return hex.EncodeToString(h.Sum(nil))
}
