package data

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/dpfinetune/dpfinetune/internal/labelset"
)

// Images is a dataset held in memory: per sample, channel-major (C,H,W)
// uint8 pixels and an integer label in [0, NumClasses()). All samples have
// the same number of channels (1 or 3); their heights and widths may
// differ (image folders), in which case NewView resizes each one. A folder
// split is gray (1 channel) when all its images are, RGB otherwise, so the
// train and test splits may differ; NewView converts both to the model's
// channel count.
//
// An Images is read-only after it is built and safe for concurrent use.
type Images struct {
	spec     Spec
	classes  []string
	labels   []int64
	channels int

	// Uniform size: h, w > 0 and pix holds every sample, n*c*h*w bytes.
	h, w int
	pix  []uint8

	// Varied sizes (h == w == 0): one slice and one size per sample.
	samples [][]uint8
	sizes   [][2]int32

	// users, where named (a CSV listing's user column, a folder's
	// users= expression, WithUsers), is the user of each sample, in
	// sample order, in [0, len(userNames)); userNames names them in
	// sorted order. Both nil where none are.
	users     []int32
	userNames []string

	// multiLabel marks a multi-label dataset (MultiLabel): labels are
	// label sets (internal/labelset); uncertain are its labels' soft
	// targets (UncertainTargets), nil for none.
	multiLabel bool
	uncertain  []float64
	// mapped holds the samples where they are mapped from a file
	// (pixelsOnDisk); nil where they are in memory. The samples point
	// into it: it stays reachable while m is.
	mapped *pixelMapping

	// fit is what LoadFitted shrank the images to: every sample of
	// fit's size holds its view's window (the zero Fit: none).
	fit Fit

	// sources are the files the samples were read from, as they were
	// when read (CheckSources).
	sources     []fileStamp
	sourcePaths []string // set by the loaders, stamped by Load
	leftOut     []string // files that hold no image, left out (LeftOut)
	// narrow16 counts the 16-bit photos read by their high bytes whose
	// values are 12 bits or fewer (decoded.narrow), narrow16First the
	// first of them by name: for the loaders' note (Narrow16Note).
	narrow16      int
	narrow16First string
	// seriesNames are, with Fit.Series, the series each sample is of
	// (seriesIn's names: a directory, or a series in one), which
	// FileGroups groups by.
	seriesNames []string
	// fingerprint caches Fingerprint.
	fingerprint struct {
		once sync.Once
		sum  string
	}
}

// NewImages builds an in-memory dataset of len(labels) samples of
// channels×height×width uint8 pixels stored back to back in pix (sample
// major, then channel, row, column), for tests and for callers with their
// own readers. classes names the classes; every label must lie in
// [0, len(classes)). pix and labels are kept, not copied.
func NewImages(classes []string, channels, height, width int, pix []uint8, labels []int64) (*Images, error) {
	if channels != 1 && channels != 3 {
		return nil, fmt.Errorf("data: %d channels: want 1 or 3", channels)
	}
	if height <= 0 || width <= 0 {
		return nil, fmt.Errorf("data: image size %d×%d: want positive", height, width)
	}
	if len(classes) == 0 {
		return nil, fmt.Errorf("data: no classes")
	}
	if want := len(labels) * channels * height * width; len(pix) != want {
		return nil, fmt.Errorf("data: %d pixel bytes for %d samples of %d×%d×%d: want %d", len(pix), len(labels), channels, height, width, want)
	}
	if err := checkLabels("data", labels, len(classes)); err != nil {
		return nil, err
	}
	return &Images{classes: classes, labels: labels, channels: channels, h: height, w: width, pix: pix}, nil
}

// checkLabels reports the first label outside [0, n), naming where.
func checkLabels(where string, labels []int64, n int) error {
	for i, l := range labels {
		if l < 0 || int(l) >= n {
			return fmt.Errorf("%s: sample %d has label %d, but the dataset has %d classes (labels 0..%d)", where, i, l, n, n-1)
		}
	}
	return nil
}

// Spec returns the spec the dataset was loaded from (the zero Spec for
// NewImages).
func (m *Images) Spec() Spec { return m.spec }

// Len returns the number of samples.
func (m *Images) Len() int { return len(m.labels) }

// NumClasses returns the number of classes.
func (m *Images) NumClasses() int { return len(m.classes) }

// Classes returns the class names, indexed by label. The slice is shared;
// do not modify it.
func (m *Images) Classes() []string { return m.classes }

// Label returns the label of sample i: its class, or for a multi-label
// dataset its set of labels (MultiLabeled).
func (m *Images) Label(i int) int { return int(m.labels[i]) }

// MultiLabel reports whether the dataset is multi-label (a CSV listing's
// Spec.MultiLabel, arrays of multi-hot labels): each sample's label is a
// set of labels (MultiLabeled), NumClasses the number of labels.
func (m *Images) MultiLabel() bool { return m.multiLabel }

// UncertainTargets returns each label's soft target of its uncertain
// entries (the labels a sample ignores: uncertain=T, T in (0, 1); 0 where
// they are left out), nil where no label has one (dpengine.Config.UncertainTargets).
func (m *Images) UncertainTargets() []float64 { return m.uncertain }

// Labels returns a copy of all labels, indexed by sample.
func (m *Images) Labels() []int64 { return append([]int64(nil), m.labels...) }

// Channels returns the number of channels of every sample: 1 (grayscale)
// or 3 (RGB).
func (m *Images) Channels() int { return m.channels }

// UniformSize returns the height and width shared by every sample, and
// false when the sizes differ.
func (m *Images) UniformSize() (height, width int, ok bool) {
	return m.h, m.w, m.h > 0
}

// Fitted returns the fit the images were loaded with (LoadFitted); the
// zero Fit when none was. A view of fitted images must read them at the
// fit's size and resize.
func (m *Images) Fitted() Fit { return m.fit }

// Size returns the height and width of sample i.
func (m *Images) Size(i int) (height, width int) {
	if m.h > 0 {
		return m.h, m.w
	}
	return int(m.sizes[i][0]), int(m.sizes[i][1])
}

// Pixels returns the (C,H,W) uint8 pixels of sample i. The slice is
// shared; do not modify it.
func (m *Images) Pixels(i int) []uint8 {
	if m.pix != nil {
		n := m.channels * m.h * m.w
		return m.pix[i*n : (i+1)*n : (i+1)*n]
	}
	return m.samples[i]
}

// hashLabels puts each label into a fingerprint: the label itself, a
// label set of more than labelset.Bits labels (multi: multi-label, of k)
// as its words, and a partial set of any width as −1, its words and its
// ignored labels' words — an interned set's handle is the process's own,
// its words are the data's.
func hashLabels(put func(int64), labels []int64, multi bool, k int) {
	var w []uint64
	if multi {
		w = make([]uint64, 2*labelset.Words(k))
	}
	for _, l := range labels {
		if !multi || (k <= labelset.Bits && !labelset.Partial(l)) {
			put(l)
			continue
		}
		words := w[:len(w)/2]
		if labelset.Partial(l) {
			put(-1)
			words = w
		}
		if labelset.Expand(l, k, w[:len(w)/2]) != nil || labelset.Ignored(l, k, w[len(w)/2:]) != nil {
			clear(w) // not a set: the loaders made none such
		}
		for _, x := range words {
			put(int64(x))
		}
	}
}

// PixelsOnDisk returns the bytes of the images' pixels mapped from a file
// in dir (the fitted images took more than half the memory available:
// see DPFINETUNE_PIXELS), 0 where they are in memory.
func (m *Images) PixelsOnDisk() (bytes int64, dir string) {
	if m.mapped == nil {
		return 0, ""
	}
	return int64(len(m.mapped.b)), m.mapped.dir
}

// Bytes returns the memory held by the pixels, labels and users.
func (m *Images) Bytes() int64 {
	n := int64(len(m.pix)) + 8*int64(len(m.labels)) + 4*int64(len(m.users))
	if m.mapped == nil { // mapped pixels are the page cache's, not ours
		for _, s := range m.samples {
			n += int64(len(s))
		}
	}
	return n + 8*int64(len(m.sizes))
}

// DefaultNorm returns the normalisation conventionally used with the
// dataset's format: Fashion-MNIST statistics for idx (pass "mnist" to
// ParseNorm for MNIST), the CIFAR-10 and CIFAR-100 training statistics for
// cifar10 and cifar100, and the ImageNet statistics for folders and for
// datasets built with NewImages.
func (m *Images) DefaultNorm() Norm {
	switch m.spec.Scheme {
	case SchemeIDX:
		return presetNorm("fmnist")
	case SchemeCIFAR10:
		return presetNorm("cifar10")
	case SchemeCIFAR100:
		return presetNorm("cifar100")
	}
	return presetNorm("imagenet")
}

// String describes the dataset for logs, e.g.
// "idx:/usr/share/datasets/fashion-mnist:split=train: 60000 samples, 10 classes, 1×28×28".
func (m *Images) String() string {
	size := "varied sizes"
	if m.h > 0 {
		size = strconv.Itoa(m.channels) + "×" + strconv.Itoa(m.h) + "×" + strconv.Itoa(m.w)
	} else {
		size = strconv.Itoa(m.channels) + " channels, " + size
	}
	name := "images"
	if m.spec.Scheme != "" {
		name = m.spec.String()
	}
	users := ""
	if m.NumUsers() > 0 {
		users = fmt.Sprintf(", %d users", m.NumUsers())
	}
	return fmt.Sprintf("%s: %d samples, %d classes%s, %s", name, m.Len(), m.NumClasses(), users, size)
}

// numberedClasses returns the names "0", "1", … for n classes.
func numberedClasses(n int) []string {
	c := make([]string, n)
	for i := range c {
		c[i] = strconv.Itoa(i)
	}
	return c
}

// fileStamp is what a source file looked like when it was read.
type fileStamp struct {
	path  string
	size  int64
	mtime time.Time
}

// stampFiles records the size and modification time of paths.
func stampFiles(paths []string) ([]fileStamp, error) {
	out := make([]fileStamp, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		out[i] = fileStamp{path: p, size: fi.Size(), mtime: fi.ModTime()}
	}
	return out, nil
}

// CheckSources reports a source file that changed (size or modification
// time), disappeared or was replaced since the dataset was loaded: the
// samples in memory are no longer those on disk, so a resumed run would
// train on other data under the same privacy accounting. Datasets built
// with NewImages have no sources.
func (m *Images) CheckSources() error { return checkStamps(m.sources) }

// checkStamps reports the first of sources that changed, disappeared or
// was replaced since it was stamped.
func checkStamps(sources []fileStamp) error {
	for _, f := range sources {
		fi, err := os.Stat(f.path)
		if err != nil {
			return fmt.Errorf("data: %s was read at load time and is now unreadable: %w", f.path, err)
		}
		if fi.Size() != f.size || !fi.ModTime().Equal(f.mtime) {
			return fmt.Errorf("data: %s changed since it was loaded (%d bytes modified %s, now %d bytes modified %s)",
				f.path, f.size, f.mtime.UTC().Format(time.RFC3339Nano), fi.Size(), fi.ModTime().UTC().Format(time.RFC3339Nano))
		}
	}
	return nil
}

// Fingerprint is the SHA-256 (hex) of the samples as loaded: channels,
// every label, size and pixel, and, where the samples name their users,
// every sample's user name. Two loads of the same data give the same
// fingerprint whatever the files' names or times; a changed pixel or label
// changes it, and so does a change of who a sample belongs to: a
// user-level guarantee resumed on regrouped data would protect other
// people. Without users it is what it was before users were named.
// Computed once (it reads every byte).
func (m *Images) Fingerprint() string {
	m.fingerprint.once.Do(func() {
		h := sha256.New()
		var b [8]byte
		put := func(v int64) {
			binary.LittleEndian.PutUint64(b[:], uint64(v))
			h.Write(b[:])
		}
		put(int64(m.channels))
		put(int64(len(m.labels)))
		hashLabels(put, m.labels, m.multiLabel, len(m.classes))
		switch {
		case m.h > 0:
			// One size: the samples one after another, whether in one
			// slice or mapped from disk in another order (mapPixels).
			put(int64(m.h))
			put(int64(m.w))
			if m.pix != nil {
				h.Write(m.pix)
			}
			for _, s := range m.samples {
				h.Write(s)
			}
		default:
			for i, s := range m.samples {
				put(int64(m.sizes[i][0]))
				put(int64(m.sizes[i][1]))
				h.Write(s)
			}
		}
		// After everything the fingerprint held before users: a dataset
		// without them keeps its fingerprint.
		hashUsers(h, m.users, m.userNames)
		m.fingerprint.sum = hex.EncodeToString(h.Sum(nil))
	})
	return m.fingerprint.sum
}
