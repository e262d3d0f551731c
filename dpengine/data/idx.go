package data

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dpfinetune/dpfinetune/internal/sysmem"
)

// loadIDX reads an MNIST-style IDX pair (images, labels) from spec.Dir.
func loadIDX(spec Spec) (*Images, error) {
	prefix := "train"
	if spec.split() == Test {
		prefix = "t10k"
	}
	nclass := spec.Classes
	if nclass == 0 {
		nclass = 10
	}
	if err := checkDir("idx", spec.Dir); err != nil {
		return nil, err
	}
	imgPath, err := findIDX(spec.Dir, prefix, "images", 3)
	if err != nil {
		return nil, err
	}
	lblPath, err := findIDX(spec.Dir, prefix, "labels", 1)
	if err != nil {
		return nil, err
	}
	pix, idims, err := readIDX(imgPath, 3)
	if err != nil {
		return nil, err
	}
	raw, ldims, err := readIDX(lblPath, 1)
	if err != nil {
		return nil, err
	}
	n := idims[0]
	if ldims[0] != n {
		return nil, fmt.Errorf("idx: %s holds %d images but %s holds %d labels", imgPath, n, lblPath, ldims[0])
	}
	if idims[1] == 0 || idims[2] == 0 {
		return nil, fmt.Errorf("idx: %s: images of size %d×%d", imgPath, idims[1], idims[2])
	}
	if n == 0 {
		return nil, fmt.Errorf("idx: %s: no images", imgPath)
	}
	if spec.Limit > 0 && spec.Limit < n {
		n = spec.Limit
		raw = raw[:n]
		// Copy the kept prefix so the rest of the file can be freed.
		pix = append([]uint8(nil), pix[:n*idims[1]*idims[2]]...)
	}
	labels := make([]int64, n)
	for i, l := range raw {
		labels[i] = int64(l)
	}
	if err := checkLabels("idx: "+lblPath, labels, nclass); err != nil {
		return nil, err
	}
	return &Images{
		classes:  numberedClasses(nclass),
		labels:   labels,
		channels: 1,
		h:        idims[1],
		w:        idims[2],
		pix:      pix,

		sourcePaths: []string{imgPath, lblPath},
	}, nil
}

// checkDir reports a missing or non-directory dataset directory.
func checkDir(scheme, dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: dataset directory: %w", scheme, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: dataset directory %s is not a directory", scheme, dir)
	}
	return nil
}

// findIDX finds prefix-kind-idxN-ubyte in dir, plain or with .gz, also
// accepting the prefix-kind.idxN-ubyte spelling some mirrors use.
func findIDX(dir, prefix, kind string, ndims int) (string, error) {
	names := []string{
		fmt.Sprintf("%s-%s-idx%d-ubyte", prefix, kind, ndims),
		fmt.Sprintf("%s-%s.idx%d-ubyte", prefix, kind, ndims),
	}
	var tried []string
	for _, name := range names {
		for _, suffix := range []string{"", ".gz"} {
			p := filepath.Join(dir, name+suffix)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return p, nil
			}
			tried = append(tried, name+suffix)
		}
	}
	return "", fmt.Errorf("idx: %s: missing %s %s file (looked for %s)", dir, prefix, kind, strings.Join(tried, ", "))
}

// readIDX reads an IDX file of unsigned bytes with ndims dimensions,
// gzip-compressed or not (detected from the content), and returns its
// data and dimensions. The data must be exactly as long as the dimensions
// say.
func readIDX(path string, ndims int) ([]uint8, []int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("idx: %w", err)
	}
	defer f.Close()
	return readIDXFrom(f, path, ndims)
}

// readIDXFrom is readIDX on the contents of path read from f.
func readIDXFrom(f io.Reader, path string, ndims int) ([]uint8, []int, error) {
	br := bufio.NewReaderSize(f, 1<<16)
	var r io.Reader = br
	what := "file"
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("idx: %s: gzip: %v", path, err)
		}
		defer zr.Close()
		r = zr
		what = "decompressed file"
	}
	hdr := make([]byte, 4+4*ndims)
	if k, err := io.ReadFull(r, hdr[:4]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, nil, fmt.Errorf("idx: %s: truncated: the %s holds %d bytes, fewer than the 4-byte IDX magic number", path, what, k)
		}
		return nil, nil, fmt.Errorf("idx: %s: %v", path, err)
	}
	magic := binary.BigEndian.Uint32(hdr)
	if want := uint32(0x0800 | ndims); magic != want {
		kind := "images (idx3)"
		if ndims == 1 {
			kind = "labels (idx1)"
		}
		return nil, nil, fmt.Errorf("idx: %s: bad magic number 0x%08x, want 0x%08x (IDX unsigned bytes, %d dimensions: %s)", path, magic, want, ndims, kind)
	}
	if k, err := io.ReadFull(r, hdr[4:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, nil, fmt.Errorf("idx: %s: truncated: the header needs %d dimension sizes (%d bytes) but the %s ends after %d", path, ndims, 4*ndims, what, k)
		}
		return nil, nil, fmt.Errorf("idx: %s: %v", path, err)
	}
	dims := make([]int, ndims)
	size := int64(1)
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(hdr[4+4*i:]))
		// Checked before multiplying: two sizes near 2³² overflow int64.
		if dims[i] != 0 && size > (1<<40)/int64(dims[i]) {
			return nil, nil, fmt.Errorf("idx: %s: header dimensions %v are implausibly large", path, dims[:i+1])
		}
		size *= int64(dims[i])
	}
	if avail, src, ok := sysmem.Available(); ok && size > avail {
		return nil, nil, fmt.Errorf("idx: %s: the header declares %s (%d MiB of data), more than the %d MiB of memory available (%s)", path, describeDims(dims), size>>20, avail>>20, src)
	}
	data, err := readN(r, int(size))
	if len(data) < int(size) {
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil, fmt.Errorf("idx: %s: %v", path, err)
		}
		return nil, nil, fmt.Errorf("idx: %s: truncated: the header declares %s (%d bytes of data) but the %s holds only %d", path, describeDims(dims), size, what, len(data))
	}
	// The data must end here; reading to the end also verifies a gzip
	// checksum.
	extra, err := io.Copy(io.Discard, r)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, nil, fmt.Errorf("idx: %s: truncated gzip stream: it ends before its checksum", path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("idx: %s: %v", path, err)
	}
	if extra > 0 {
		return nil, nil, fmt.Errorf("idx: %s: %d bytes beyond the %d bytes of data the header declares (%s)", path, extra, size, describeDims(dims))
	}
	return data, dims, nil
}

func describeDims(dims []int) string {
	switch len(dims) {
	case 1:
		return fmt.Sprintf("%d labels", dims[0])
	case 3:
		return fmt.Sprintf("%d images of %d×%d", dims[0], dims[1], dims[2])
	}
	return fmt.Sprint(dims)
}

// readN reads up to n bytes, growing its buffer as data arrives so that a
// corrupt header cannot make it allocate more than the input holds (plus
// the doubling slack). The buffer ends with capacity n when the input has
// n bytes.
func readN(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, 1<<24))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), min(2*cap(buf)+1, n))
			copy(nb, buf)
			buf = nb
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil {
			if errors.Is(err, io.EOF) && len(buf) == n {
				return buf, nil
			}
			return buf, err
		}
	}
	return buf, nil
}
