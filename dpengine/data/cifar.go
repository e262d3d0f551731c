package data

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dpfinetune/dpfinetune/internal/sysmem"
)

const cifarPixels = 3 * 32 * 32

var cifar10Classes = []string{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}

// loadCIFAR reads the CIFAR-10 or CIFAR-100 binary version. Each record
// is the label byte(s) followed by 3072 pixel bytes, already channel-major
// (1024 red, 1024 green, 1024 blue, rows top to bottom).
func loadCIFAR(spec Spec, hundred bool) (*Images, error) {
	scheme, sub := SchemeCIFAR10, "cifar-10-batches-bin"
	train := []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"}
	test := []string{"test_batch.bin"}
	labelBytes, nclass := 1, 10
	if hundred {
		scheme, sub = SchemeCIFAR100, "cifar-100-binary"
		train, test = []string{"train.bin"}, []string{"test.bin"}
		labelBytes, nclass = 2, 100
	}
	if err := checkDir(scheme, spec.Dir); err != nil {
		return nil, err
	}
	files := train
	if spec.split() == Test {
		files = test
	}
	dir := spec.Dir
	// Accept the directory the official tarball extracts to.
	if !exists(filepath.Join(dir, files[0])) && exists(filepath.Join(dir, sub, files[0])) {
		dir = filepath.Join(dir, sub)
	}
	rec := labelBytes + cifarPixels
	var (
		pix    []uint8
		labels []int64
		read   []string
	)
	for _, name := range files {
		if spec.Limit > 0 && len(labels) >= spec.Limit {
			break
		}
		path := filepath.Join(dir, name)
		if fi, err := os.Stat(path); err == nil {
			// The file is read whole, then its records copied: a file
			// larger than memory (a wrong path, a device) is refused first.
			if avail, src, ok := sysmem.Available(); ok && 2*fi.Size() > avail {
				return nil, fmt.Errorf("%s: %s: %d MiB file, more than the memory available can load (%d MiB, %s)", scheme, path, fi.Size()>>20, avail>>20, src)
			}
			if !fi.Mode().IsRegular() {
				return nil, fmt.Errorf("%s: %s is not a regular file", scheme, path)
			}
		}
		read = append(read, path)
		b, err := os.ReadFile(path)
		if err != nil {
			if os.IsNotExist(err) {
				return nil, fmt.Errorf("%s: %s: missing %s split file %s (want %s)", scheme, dir, spec.split(), name, strings.Join(files, ", "))
			}
			return nil, fmt.Errorf("%s: %w", scheme, err)
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("%s: %s: empty file", scheme, path)
		}
		if len(b)%rec != 0 {
			return nil, fmt.Errorf("%s: %s: truncated: %d bytes is %d whole %d-byte records and %d bytes over", scheme, path, len(b), len(b)/rec, rec, len(b)%rec)
		}
		n := len(b) / rec
		if pix == nil {
			// Files of a split hold equally many records.
			c := n * len(files)
			if spec.Limit > 0 {
				c = min(c, spec.Limit)
			}
			pix = make([]uint8, 0, c*cifarPixels)
			labels = make([]int64, 0, c)
		}
		if spec.Limit > 0 {
			n = min(n, spec.Limit-len(labels))
		}
		for r := range n {
			base := r * rec
			l := int64(b[base+labelBytes-1]) // CIFAR-100: the second byte is the fine label
			if int(l) >= nclass {
				return nil, fmt.Errorf("%s: %s: record %d (sample %d) has label %d, but the dataset has %d classes (labels 0..%d)", scheme, path, r, len(labels), l, nclass, nclass-1)
			}
			labels = append(labels, l)
			pix = append(pix, b[base+labelBytes:base+rec]...)
		}
	}
	classes := cifar10Classes
	names := "batches.meta.txt"
	if hundred {
		classes = numberedClasses(100)
		names = "fine_label_names.txt"
	}
	if c := readClassNames(filepath.Join(dir, names), nclass); c != nil {
		classes = c
	}
	return &Images{
		classes:  append([]string(nil), classes...),
		labels:   labels,
		channels: 3,
		h:        32,
		w:        32,
		pix:      pix,

		sourcePaths: read,
	}, nil
}

// readClassNames reads one class name a line from path, returning nil
// unless the file exists and names exactly n classes.
func readClassNames(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			names = append(names, s)
		}
	}
	if sc.Err() != nil || len(names) != n {
		return nil
	}
	return names
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
