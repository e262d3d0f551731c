package torchfile

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sample is a state dict of every shape the writers must carry: a scalar,
// vectors, a 4-D weight, an empty tensor, a name outside ASCII, and values
// whose bits a float64 round trip would change (NaN payloads excepted).
func sample() []Tensor {
	conv := make([]float32, 4*3*3*3)
	for i := range conv {
		conv[i] = float32(i)*0.37 - 20
	}
	return []Tensor{
		{Name: "conv1.weight", Shape: []int64{4, 3, 3, 3}, Data: conv},
		{Name: "bn1.running_var", Shape: []int64{4}, Data: []float32{1, 2.5e-38, math.MaxFloat32, float32(math.Inf(1))}},
		{Name: "scale", Shape: []int64{}, Data: []float32{-0.1}},
		{Name: "empty", Shape: []int64{0, 3}, Data: []float32{}},
		{Name: "tête.bias", Shape: []int64{2}, Data: []float32{float32(math.SmallestNonzeroFloat32), -0}},
	}
}

// TestWritersRejectBadTensors: names and shapes are checked before a
// byte is written.
func TestWritersRejectBadTensors(t *testing.T) {
	cases := []struct {
		name string
		ts   []Tensor
		want string
	}{
		{"no name", []Tensor{{Shape: []int64{1}, Data: []float32{1}}}, "no name"},
		{"twice", []Tensor{{Name: "a", Shape: []int64{1}, Data: []float32{1}}, {Name: "a", Shape: []int64{1}, Data: []float32{1}}}, `"a" twice`},
		{"short data", []Tensor{{Name: "a", Shape: []int64{2, 2}, Data: []float32{1}}}, "holds 4 values, got 1"},
		{"negative", []Tensor{{Name: "a", Shape: []int64{-1}, Data: nil}}, "negative dimension"},
		{"not UTF-8", []Tensor{{Name: "a\xff", Shape: []int64{}, Data: []float32{1}}}, "not UTF-8"},
	}
	for _, c := range cases {
		for _, w := range []struct {
			format string
			write  func([]Tensor) error
		}{
			{"pt", func(ts []Tensor) error { return WritePT(&bytes.Buffer{}, ts, nil) }},
			{"safetensors", func(ts []Tensor) error { return WriteSafetensors(&bytes.Buffer{}, ts, nil) }},
		} {
			err := w.write(c.ts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, %s: got %v, want an error containing %q", c.name, w.format, err, c.want)
			}
		}
	}
	if err := WritePT(&bytes.Buffer{}, sample(), map[string][]byte{"data/0": nil}); err == nil {
		t.Error("an extra record over a storage's name was written")
	}
	if err := WriteSafetensors(&bytes.Buffer{}, []Tensor{{Name: "__metadata__", Shape: []int64{}, Data: []float32{1}}}, nil); err == nil {
		t.Error(`a tensor named "__metadata__" was written to safetensors`)
	}
}

// readBack is run by /usr/bin/python3: torch.load (weights-only and not)
// of the .pt, the archive's layout by zipfile, and the safetensors file by
// the format's description (and by the safetensors package where it is
// installed); it prints what it read as JSON, each value's bits as an
// integer.
const readBack = `
import json, struct, sys, zipfile
import numpy as np, torch
pt, st = sys.argv[1], sys.argv[2]
def bits(t):
    a = np.array(t.detach().numpy() if hasattr(t, "detach") else t, dtype=np.float32, order="C")  # (ascontiguousarray makes a scalar 1-D)
    return {"shape": list(a.shape), "bits": a.view(np.uint32).ravel().tolist()}
out = {}
for wo in (True, False):
    sd = torch.load(pt, weights_only=wo)
    out["pt_weights_only" if wo else "pt"] = {"type": type(sd).__name__, "keys": list(sd), "tensors": {k: bits(v) for k, v in sd.items()},
        "dtypes": sorted({str(v.dtype) for v in sd.values()}), "contiguous": all(v.is_contiguous() for v in sd.values())}
z = zipfile.ZipFile(pt)
recs = {}
for i in z.infolist():
    with open(pt, "rb") as f:
        f.seek(i.header_offset)
        h = f.read(30)
        n, e = struct.unpack("<HH", h[26:30])
    recs[i.filename] = {"method": i.compress_type, "data_at": i.header_offset + 30 + n + e}
out["records"] = recs
out["extra"] = z.read("archive/extra/note.json").decode()
with open(st, "rb") as f:
    b = f.read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.pop("__metadata__", None)
base = 8 + n
got = {}
for k, v in h.items():
    lo, hi = v["data_offsets"]
    got[k] = {"shape": v["shape"], "dtype": v["dtype"], "bits": np.frombuffer(b[base + lo:base + hi], dtype="<u4").tolist()}
out["st"] = {"keys": list(h), "tensors": got, "metadata": meta, "header_len": n, "spans": sorted(v["data_offsets"] for v in h.values()), "size": len(b) - base}
try:
    from safetensors.torch import load_file
    out["st_package"] = {k: bits(v) for k, v in load_file(st).items()}
except ImportError:
    pass
print(json.dumps(out))
`

// TestWrittenFilesLoadInPyTorch writes the sample in both formats and has
// PyTorch read them back: every tensor, in order, bit for bit, under
// weights_only too; each storage 64-byte aligned and stored; the extra
// record and the safetensors metadata kept; the safetensors byte ranges
// covering the data without a hole.
func TestWrittenFilesLoadInPyTorch(t *testing.T) {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, numpy").Run(); err != nil {
		t.Skip("no /usr/bin/python3 with torch and numpy")
	}
	dir := t.TempDir()
	ts := sample()
	var pt, st bytes.Buffer
	if err := WritePT(&pt, ts, map[string][]byte{"extra/note.json": []byte(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{"format": "pt", "groupnorms": `[{"module":"bn1"}]`}
	if err := WriteSafetensors(&st, ts, meta); err != nil {
		t.Fatal(err)
	}
	ptPath, stPath := filepath.Join(dir, "w.pt"), filepath.Join(dir, "w.safetensors")
	if err := os.WriteFile(ptPath, pt.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stPath, st.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "-c", readBack, ptPath, stPath).Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, err.(*exec.ExitError).Stderr)
	}
	type read struct {
		Shape []int64  `json:"shape"`
		DType string   `json:"dtype"`
		Bits  []uint32 `json:"bits"`
	}
	var got struct {
		PT struct {
			Type       string          `json:"type"`
			Keys       []string        `json:"keys"`
			Tensors    map[string]read `json:"tensors"`
			DTypes     []string        `json:"dtypes"`
			Contiguous bool            `json:"contiguous"`
		} `json:"pt"`
		Records map[string]struct {
			Method int   `json:"method"`
			DataAt int64 `json:"data_at"`
		} `json:"records"`
		Extra string `json:"extra"`
		ST    struct {
			Keys      []string          `json:"keys"`
			Tensors   map[string]read   `json:"tensors"`
			Metadata  map[string]string `json:"metadata"`
			HeaderLen int64             `json:"header_len"`
			Spans     [][2]int64        `json:"spans"`
			Size      int64             `json:"size"`
		} `json:"st"`
		STPackage map[string]read `json:"st_package"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var wo struct {
		PT struct {
			Keys    []string        `json:"keys"`
			Tensors map[string]read `json:"tensors"`
		} `json:"pt_weights_only"`
	}
	if err := json.Unmarshal(out, &wo); err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(ts))
	for i, tn := range ts {
		names[i] = tn.Name
	}
	same := func(what string, keys []string, tensors map[string]read, dtype string) {
		t.Helper()
		if strings.Join(keys, "|") != strings.Join(names, "|") {
			t.Errorf("%s: keys %q, want %q in order", what, keys, names)
		}
		for _, tn := range ts {
			r, ok := tensors[tn.Name]
			if !ok {
				t.Errorf("%s: %q missing", what, tn.Name)
				continue
			}
			if !slices.Equal(r.Shape, tn.Shape) {
				t.Errorf("%s: %q shape %v, want %v", what, tn.Name, r.Shape, tn.Shape)
			}
			if dtype != "" && r.DType != dtype {
				t.Errorf("%s: %q dtype %q, want %q", what, tn.Name, r.DType, dtype)
			}
			if len(r.Bits) != len(tn.Data) {
				t.Errorf("%s: %q has %d values, want %d", what, tn.Name, len(r.Bits), len(tn.Data))
				continue
			}
			for i, v := range tn.Data {
				if r.Bits[i] != math.Float32bits(v) {
					t.Errorf("%s: %q[%d] bits %#x, want %#x", what, tn.Name, i, r.Bits[i], math.Float32bits(v))
					break
				}
			}
		}
	}
	same("torch.load", got.PT.Keys, got.PT.Tensors, "")
	same("torch.load(weights_only=True)", wo.PT.Keys, wo.PT.Tensors, "")
	if got.PT.Type != "OrderedDict" || strings.Join(got.PT.DTypes, ",") != "torch.float32" || !got.PT.Contiguous {
		t.Errorf("torch.load: a %s of %v tensors (contiguous %v), want an OrderedDict of contiguous torch.float32", got.PT.Type, got.PT.DTypes, got.PT.Contiguous)
	}
	for name, r := range got.Records {
		if r.Method != 0 {
			t.Errorf("record %s compressed (method %d): torch.load reads storages stored", name, r.Method)
		}
		if strings.HasPrefix(name, Archive+"/data/") && r.DataAt%align != 0 {
			t.Errorf("record %s's bytes at %d, not %d-byte aligned", name, r.DataAt, align)
		}
	}
	for _, want := range []string{"data.pkl", "version", "byteorder", "data/0", "data/4", "extra/note.json"} {
		if _, ok := got.Records[Archive+"/"+want]; !ok {
			t.Errorf("no record %s/%s", Archive, want)
		}
	}
	if got.Extra != `{"a":1}` {
		t.Errorf("extra record read back as %q", got.Extra)
	}
	same("safetensors", got.ST.Keys, got.ST.Tensors, "F32")
	if len(got.ST.Metadata) != 2 || got.ST.Metadata["groupnorms"] != meta["groupnorms"] {
		t.Errorf("safetensors metadata %v, want %v", got.ST.Metadata, meta)
	}
	if got.ST.HeaderLen%8 != 0 {
		t.Errorf("safetensors header of %d bytes: the data is not 8-byte aligned", got.ST.HeaderLen)
	}
	var at int64
	for _, s := range got.ST.Spans {
		if s[0] != at {
			t.Errorf("safetensors spans %v: a hole or overlap at %d", got.ST.Spans, at)
			break
		}
		at = s[1]
	}
	if at != got.ST.Size {
		t.Errorf("safetensors spans end at %d of %d data bytes", at, got.ST.Size)
	}
	if got.STPackage != nil {
		keys := make([]string, 0, len(got.STPackage))
		for _, n := range names {
			if _, ok := got.STPackage[n]; ok {
				keys = append(keys, n)
			}
		}
		same("safetensors.torch.load_file", keys, got.STPackage, "")
	} else {
		t.Log("the safetensors package is not installed: its file checked by the format's description only")
	}
}
