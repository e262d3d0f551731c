package onnx

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
	"github.com/dpfinetune/dpfinetune/internal/sysmem"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// externalRef is a parsed TensorProto.external_data.
type externalRef struct {
	location string
	offset   int64
	length   int64 // -1: to the end of the file
}

func parseExternal(t *onnxpb.TensorProto) (externalRef, error) {
	r := externalRef{length: -1}
	for _, kv := range t.GetExternalData() {
		switch kv.GetKey() {
		case "location":
			r.location = kv.GetValue()
		case "offset", "length":
			v, err := strconv.ParseInt(kv.GetValue(), 10, 64)
			if err != nil || v < 0 {
				return r, fmt.Errorf("external data %s %q is not a non-negative integer", kv.GetKey(), kv.GetValue())
			}
			if kv.GetKey() == "offset" {
				r.offset = v
			} else {
				r.length = v
			}
		}
	}
	if r.location == "" {
		return r, errors.New("external data has no location")
	}
	// The location is relative to the model's directory and must stay inside
	// it: a model file must not make us read or overwrite arbitrary files.
	if filepath.IsAbs(r.location) || strings.HasPrefix(r.location, "/") || strings.HasPrefix(r.location, `\`) {
		return r, fmt.Errorf("external data location %q is absolute", r.location)
	}
	clean := filepath.Clean(filepath.FromSlash(r.location))
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) || clean == "." {
		return r, fmt.Errorf("external data location %q leaves the model directory", r.location)
	}
	r.location = clean
	return r, nil
}

func isExternal(t *onnxpb.TensorProto) bool {
	return t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL
}

// readExternal loads the bytes of every EXTERNAL tensor.
func (m *Model) readExternal(dir string) error {
	files := map[string]*os.File{}
	// The total read is held to the memory available before each read.
	var total int64
	perFile := map[string]int64{}
	avail, availSrc, haveAvail := sysmem.Available()
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	return walkTensors(m.Proto, func(t *onnxpb.TensorProto) error {
		if !isExternal(t) {
			return nil
		}
		ref, err := parseExternal(t)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.GetName(), err)
		}
		if dir == "" {
			return fmt.Errorf("tensor %q: stored as external data in %q, but the model was loaded from memory with no directory", t.GetName(), ref.location)
		}
		f := files[ref.location]
		if f == nil {
			f, err = os.Open(filepath.Join(dir, ref.location))
			if err != nil {
				return fmt.Errorf("tensor %q: external data: %w", t.GetName(), err)
			}
			files[ref.location] = f
		}
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("tensor %q: external data: %w", t.GetName(), err)
		}
		n := ref.length
		if n < 0 {
			n = st.Size() - ref.offset
		}
		if ref.offset > st.Size() || n < 0 || ref.offset+n > st.Size() {
			return fmt.Errorf("tensor %q: external data %q has %d bytes, need offset %d + length %d (truncated?)", t.GetName(), ref.location, st.Size(), ref.offset, n)
		}
		if want, ok := wantBytes(t); ok && want != n {
			return fmt.Errorf("tensor %q: external data length %d does not match its shape and type (%d bytes)", t.GetName(), n, want)
		}
		// Each byte of a file is read once in a well-formed model; many
		// tensors over the same bytes would multiply a small file.
		perFile[ref.location] += n
		if perFile[ref.location] > st.Size() {
			return fmt.Errorf("tensor %q: external data: the tensors so far read %d bytes of %q, which holds %d: their ranges overlap", t.GetName(), perFile[ref.location], ref.location, st.Size())
		}
		total += n
		if haveAvail && total > avail {
			return fmt.Errorf("tensor %q: external data read so far (%d MiB) exceeds the %d MiB of memory available (%s)", t.GetName(), total>>20, avail>>20, availSrc)
		}
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, ref.offset); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
			return fmt.Errorf("tensor %q: reading external data %q: %w", t.GetName(), ref.location, err)
		}
		if m.external == nil {
			m.external = map[*onnxpb.TensorProto][]byte{}
		}
		m.external[t] = buf
		return nil
	})
}

// ExternalMode says when Save stores tensors as external data.
type ExternalMode int

const (
	// ExternalAuto keeps the model's layout, and moves large tensors to an
	// external file only if the model would otherwise exceed the 2 GiB
	// protobuf limit.
	ExternalAuto ExternalMode = iota
	// ExternalAlways moves every tensor of at least Threshold bytes to the
	// external file.
	ExternalAlways
	// ExternalNever keeps the layout the model has and fails if the model
	// exceeds 2 GiB.
	ExternalNever
)

// SaveOptions controls Save. The zero value is ExternalAuto with a 1 KiB
// threshold and the data file named after the model file plus ".data".
type SaveOptions struct {
	External ExternalMode
	// Threshold is the smallest tensor, in bytes, that is moved to external
	// data. Zero means 1024.
	Threshold int64
	// DataFile is the external file name, relative to the model file's
	// directory. Empty means base(path) + ".data".
	DataFile string
}

// Save writes the model to path and the bytes of its external tensors to
// their files beside it. Every file is written to a temporary name and then
// renamed, so an interrupted save never leaves a half-written model behind.
//
// Tensors that were external when loaded keep their location, offset and
// length. Moving tensors to external data (ExternalAlways, or ExternalAuto
// for a model over 2 GiB) changes m.Proto to reference the data file.
func (m *Model) Save(path string, opts *SaveOptions) error {
	var o SaveOptions
	if opts != nil {
		o = *opts
	}
	if o.Threshold <= 0 {
		o.Threshold = 1024
	}
	if o.DataFile == "" {
		o.DataFile = filepath.Base(path) + ".data"
	}
	move := o.External == ExternalAlways ||
		(o.External == ExternalAuto && proto.Size(m.Proto) > maxProtoSize)
	if move {
		if err := m.externalize(o.DataFile, o.Threshold); err != nil {
			return fmt.Errorf("onnx: saving %s: %w", path, err)
		}
	}
	data, err := m.Bytes()
	if err != nil {
		return fmt.Errorf("onnx: saving %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := m.writeExternal(dir); err != nil {
		return fmt.Errorf("onnx: saving %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	}); err != nil {
		return fmt.Errorf("onnx: saving %s: %w", path, err)
	}
	return nil
}

// externalize moves every inline tensor of at least threshold bytes into
// dataFile, appending after what the file already receives.
func (m *Model) externalize(dataFile string, threshold int64) error {
	var end int64
	for t := range m.external {
		if ref, err := parseExternal(t); err == nil && ref.location == filepath.Clean(dataFile) {
			if e := ref.offset + int64(len(m.external[t])); e > end {
				end = e
			}
		}
	}
	return walkTensors(m.Proto, func(t *onnxpb.TensorProto) error {
		if isExternal(t) || t.GetDataType() == int32(onnxpb.TensorProto_STRING) {
			return nil
		}
		b, err := m.TensorBytes(t)
		if err != nil {
			return err
		}
		if int64(len(b)) < threshold {
			return nil
		}
		// Page-align each tensor so readers can memory-map it.
		const align = 4096
		end = (end + align - 1) / align * align
		clearData(t)
		t.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
		t.ExternalData = []*onnxpb.StringStringEntryProto{
			kv("location", filepath.ToSlash(dataFile)),
			kv("offset", strconv.FormatInt(end, 10)),
			kv("length", strconv.Itoa(len(b))),
		}
		if m.external == nil {
			m.external = map[*onnxpb.TensorProto][]byte{}
		}
		m.external[t] = b
		end += int64(len(b))
		return nil
	})
}

func kv(k, v string) *onnxpb.StringStringEntryProto {
	return &onnxpb.StringStringEntryProto{Key: proto.String(k), Value: proto.String(v)}
}

// writeExternal writes every external tensor at its location and offset.
func (m *Model) writeExternal(dir string) error {
	type chunk struct {
		off  int64
		data []byte
	}
	byFile := map[string][]chunk{}
	err := walkTensors(m.Proto, func(t *onnxpb.TensorProto) error {
		if !isExternal(t) {
			return nil
		}
		ref, err := parseExternal(t)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.GetName(), err)
		}
		b, ok := m.external[t]
		if !ok {
			return fmt.Errorf("tensor %q: marked external but its data was never loaded", t.GetName())
		}
		if ref.length >= 0 && ref.length != int64(len(b)) {
			return fmt.Errorf("tensor %q: external length %d but %d bytes held", t.GetName(), ref.length, len(b))
		}
		byFile[ref.location] = append(byFile[ref.location], chunk{ref.offset, b})
		return nil
	})
	if err != nil {
		return err
	}
	names := make([]string, 0, len(byFile))
	for n := range byFile {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		chunks := byFile[name]
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		err := atomicfile.WriteFile(p, func(f *os.File) error {
			for _, c := range chunks {
				if _, err := f.WriteAt(c.data, c.off); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("external data %s: %w", name, err)
		}
	}
	return nil
}
