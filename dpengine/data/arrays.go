package data

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/internal/sysmem"
)

// Arrays is a dataset of NumPy arrays as LoadArrays read it: samples of
// one shape in float32 (read from float32 or float64) or uint8, with
// integer labels. Arrays whose samples are 8-bit images become Images
// (Arrays.Images) and are preprocessed as images are; any other samples —
// already-normalised tensors, video clips (C,T,H,W), volumes — are fed to
// the model as they are through a TensorView.
//
// An Arrays is read-only after it is built and safe for concurrent use.
type Arrays struct {
	spec    Spec
	shape   []int // one sample
	per     int   // values a sample
	u8      []uint8
	f32     []float32
	labels  []int64
	classes []string
	sources []fileStamp

	// users, where the optional users array names them, is the user of
	// each sample in [0, len(userNames)); userNames are their ids in
	// increasing order, as decimal strings. Both nil where none are.
	users     []int32
	userNames []string

	// multiLabel marks multi-hot labels (a y of shape (samples, labels)):
	// each label a label set (MultiLabel; internal/labelset).
	multiLabel bool
	uncertain  []float64 // UncertainTargets

	fingerprint struct {
		once sync.Once
		sum  string
	}
}

// The member names LoadArrays looks for, by split: the first pair of the
// two lists (the samples' and the labels' names at one index) that the
// archive or directory holds — Keras's, the plain ones, MedMNIST's —; and
// the optional class names. The users arrays are optional too.
var (
	arrayNamesX     = map[Split][]string{Train: {"x_train", "x", "train_images"}, Test: {"x_test", "x_val", "test_images", "val_images"}}
	arrayNamesY     = map[Split][]string{Train: {"y_train", "y", "train_labels"}, Test: {"y_test", "y_val", "test_labels", "val_labels"}}
	arrayNamesUsers = map[Split][]string{Train: {"users_train", "users"}, Test: {"users_test", "users_val"}}
)

const arrayNamesClasses = "classes"

// LoadArrays reads the split spec names of a SchemeNPY dataset: spec.Dir is
// a .npz archive (np.savez or np.savez_compressed) or a directory of .npy
// files. The samples are the array x_train (or x, or train_images) and
// their labels y_train (or y, or train_labels); the test split is x_test
// and y_test (or x_val and y_val, test_images and test_labels,
// val_images and val_labels) — the names of Keras's datasets, the plain
// ones of np.savez(f, x=…, y=…), and MedMNIST's (its 2-D and 3-D sets,
// (N, 1) labels, ChestMNIST's multi-hot ones). The first axis of x indexes the samples; every sample has
// the shape of the rest (at least one axis). Samples are float32, float64
// (rounded to float32) or uint8; every float value must be finite. Labels
// are int64, int32 or uint8, one axis (or a trailing axis of 1), in [0,
// classes): classes is the length of the optional array classes, which
// names them (strings: np.array(["cat", "dog"])), else spec.Classes, else
// one more than the largest label.
//
// The optional integer array users (users_train, or users_test and
// users_val for the test split; int64, int32 or uint8) names the user
// each sample belongs to — the individual a user-level guarantee protects
// as a whole (Users) — one id a sample, any values; the users are
// numbered in increasing order of their ids, counting only those among
// the samples kept.
func LoadArrays(spec Spec) (*Arrays, error) {
	where := spec.Scheme + ": " + spec.Dir
	split := spec.split()
	xs, ys := arrayNamesX[split], arrayNamesY[split]
	if split == Test && spec.Validation {
		// The validation pairs first (x_val, val_images).
		xs, ys = []string{"x_val", "val_images", "x_test", "test_images"}, []string{"y_val", "val_labels", "y_test", "test_labels"}
	}
	fi, err := os.Stat(spec.Dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.Scheme, err)
	}
	// The names first, then only the two arrays the split reads.
	var names []string
	if fi.IsDir() {
		entries, err := os.ReadDir(spec.Dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec.Scheme, err)
		}
		for _, e := range entries {
			if name, ok := strings.CutSuffix(e.Name(), ".npy"); ok && e.Type().IsRegular() {
				names = append(names, name)
			}
		}
	} else if _, names, err = npy.ReadNPZSelect(spec.Dir, func(string) bool { return false }); err != nil {
		if isNPY(spec.Dir) {
			return nil, fmt.Errorf("%s: one .npy array; the samples and their labels are two: save them with np.savez(FILE, x=…, y=…), or as x.npy and y.npy in a directory", where)
		}
		return nil, err
	}
	xn, yn := pickPair(names, xs, ys)
	if xn == "" {
		pairs := make([]string, len(xs))
		for i := range xs {
			pairs[i] = xs[i] + " and " + ys[i]
		}
		holds := "no arrays"
		if len(names) > 0 {
			holds = strings.Join(names, ", ")
		}
		return nil, fmt.Errorf("%s: the %s split needs its samples and their labels under one pair of names — %s; it holds %s", where, split, strings.Join(pairs, ", "), holds)
	}
	read := []string{xn, yn}
	if slices.Contains(names, arrayNamesClasses) {
		read = append(read, arrayNamesClasses)
	}
	un := pick(names, arrayNamesUsers[split])
	if un != "" {
		read = append(read, un)
	}
	var (
		arrays  = map[string]*npy.Array{}
		sources []string
	)
	if fi.IsDir() {
		for _, name := range read {
			path := filepath.Join(spec.Dir, name+".npy")
			if arrays[name], err = npy.ReadFile(path); err != nil {
				return nil, fmt.Errorf("%s: %w", spec.Scheme, err)
			}
			sources = append(sources, path)
		}
	} else {
		if arrays, _, err = npy.ReadNPZSelect(spec.Dir, func(n string) bool { return slices.Contains(read, n) }); err != nil {
			return nil, err
		}
		sources = []string{spec.Dir}
	}
	x, y := arrays[xn], arrays[yn]
	var classNames []string // the classes array's, for uncertain='s columns
	if c := arrays[arrayNamesClasses]; c != nil && c.DType == npy.Unicode {
		classNames = c.Str
	}
	a, err := newArrays(where+": "+xn, x, yn, y, spec, classNames)
	if err != nil {
		return nil, err
	}
	if c := arrays[arrayNamesClasses]; c != nil {
		if err := a.nameClasses(where+": "+arrayNamesClasses, c, spec.Classes); err != nil {
			return nil, err
		}
	}
	if un != "" {
		if err := a.nameUsers(where+": "+un, arrays[un], x.Shape[0]); err != nil {
			return nil, err
		}
	}
	a.spec = spec
	if a.sources, err = stampFiles(sources); err != nil {
		return nil, err
	}
	return a, nil
}

// isNPY reports whether path starts as a .npy file does.
func isNPY(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [6]byte
	_, err = io.ReadFull(f, b[:])
	return err == nil && string(b[:]) == "\x93NUMPY"
}

// nameClasses names a's classes by the strings of c, one a class in label
// order (at least as many as the labels need, distinct and not empty);
// classes, where positive, is the count the spec asked for.
func (a *Arrays) nameClasses(where string, c *npy.Array, classes int) error {
	if c.DType != npy.Unicode || len(c.Shape) != 1 {
		return fmt.Errorf("%s: %s of shape %v: want the class names, strings of one axis (np.array([\"cat\", \"dog\"]))", where, c.DType, c.Shape)
	}
	if classes > 0 && classes != len(c.Str) {
		return fmt.Errorf("%s: %d class names, but the spec says classes=%d", where, len(c.Str), classes)
	}
	seen := map[string]int{}
	for i, n := range c.Str {
		if n == "" {
			return fmt.Errorf("%s: class %d has an empty name", where, i)
		}
		if j, ok := seen[n]; ok {
			return fmt.Errorf("%s: classes %d and %d are both named %q", where, j, i, n)
		}
		seen[n] = i
	}
	if a.multiLabel && len(c.Str) != len(a.classes) {
		return fmt.Errorf("%s: %d names for %d labels", where, len(c.Str), len(a.classes))
	}
	if err := checkLabels(where, a.labels, len(c.Str)); !a.multiLabel && err != nil {
		return err
	}
	a.classes = slices.Clone(c.Str)
	return nil
}

// nameUsers reads the users of a's samples from u: one integer id a
// sample of the n the array held before a limit (a trailing axis of 1
// allowed), numbered in increasing order over the samples kept.
func (a *Arrays) nameUsers(where string, u *npy.Array, n int) error {
	shape := u.Shape
	if len(shape) == 2 && shape[1] == 1 {
		shape = shape[:1]
	}
	if len(shape) != 1 || shape[0] != n {
		return fmt.Errorf("%s: shape %v: want one user a sample, (%d,)", where, u.Shape, n)
	}
	id := make([]int64, a.Len())
	for i := range id {
		switch u.DType {
		case npy.Int64:
			id[i] = u.I64[i]
		case npy.Int32:
			id[i] = int64(u.I32[i])
		case npy.Uint8:
			id[i] = int64(u.U8[i])
		default:
			return fmt.Errorf("%s: %s: want integer user ids (int64, int32 or uint8), one a sample", where, u.DType)
		}
	}
	a.users, a.userNames = numberIntUsers(id)
	return nil
}

// pick returns the first of want that names holds, or "".
// pickPair returns the first of the pairs xs[i], ys[i] that names both
// holds, "" and "" where none is whole.
func pickPair(names, xs, ys []string) (x, y string) {
	for i := range xs {
		if slices.Contains(names, xs[i]) && slices.Contains(names, ys[i]) {
			return xs[i], ys[i]
		}
	}
	return "", ""
}

// pick returns the first of want that names holds, "" where none is.
func pick(names, want []string) string {
	for _, n := range want {
		if slices.Contains(names, n) {
			return n
		}
	}
	return ""
}

// newArrays checks x and its labels y and keeps the first spec.Limit
// samples.
func newArrays(where string, x *npy.Array, yn string, y *npy.Array, spec Spec, names []string) (*Arrays, error) {
	if len(x.Shape) < 2 {
		return nil, fmt.Errorf("%s: shape %v: want (samples, …) with at least one axis a sample", where, x.Shape)
	}
	n := x.Shape[0]
	shape := slices.Clone(x.Shape[1:])
	if n == 0 {
		return nil, fmt.Errorf("%s: shape %v: no samples", where, x.Shape)
	}
	// npy bounded the product of every axis; with no sample it is 0
	// whatever the others.
	per := 1
	for _, d := range shape {
		if d == 0 {
			return nil, fmt.Errorf("%s: shape %v: a sample holds no values", where, x.Shape)
		}
		per *= d
	}
	if len(y.Shape) == 2 && y.Shape[1] == 1 {
		y.Shape = y.Shape[:1]
	}
	if len(y.Shape) == 2 && y.Shape[0] == n {
		return newMultiHot(where, x, yn, y, spec, shape, per, names)
	}
	if spec.Uncertain != "" {
		return nil, fmt.Errorf("%s: uncertain= says what a multi-hot label's -1 means; %s holds a class a sample", where, yn)
	}
	if len(y.Shape) != 1 || y.Shape[0] != n {
		return nil, fmt.Errorf("%s: %s has shape %v: want one label a sample, (%d,), or multi-hot label sets, (%d, labels)", where, yn, y.Shape, n, n)
	}
	if spec.Limit > 0 && spec.Limit < n {
		n = spec.Limit
	}
	labels := make([]int64, n)
	for i := range labels {
		var l int64
		switch y.DType {
		case npy.Int64:
			l = y.I64[i]
		case npy.Int32:
			l = int64(y.I32[i])
		case npy.Uint8:
			l = int64(y.U8[i])
		default:
			return nil, fmt.Errorf("%s: %s holds %s: want integer labels (int64, int32 or uint8)", where, yn, y.DType)
		}
		if l < 0 || l >= 1<<24 {
			return nil, fmt.Errorf("%s: sample %d has label %d: want 0 ≤ label < 2^24", where, i, l)
		}
		labels[i] = l
	}
	k := spec.Classes
	if k == 0 {
		for _, l := range labels {
			k = max(k, int(l)+1)
		}
	}
	if err := checkLabels(where, labels, k); err != nil {
		return nil, err
	}
	a := &Arrays{shape: shape, per: per, labels: labels, classes: numberedClasses(k)}
	return a, a.keepSamples(where, x, n)
}

// newMultiHot is newArrays of multi-hot labels y, (samples, labels) of
// 0s and 1s (integers, or floats that are exactly 0 or 1), and -1s
// (uncertain) as spec.Uncertain's rule for the label says (its columns
// named by the classes array's names, one a label, else by their numbers:
// uncertain=zero,Edema=ignore or uncertain=zero,3=ignore): a multi-label
// dataset of at most MaxLabels labels.
func newMultiHot(where string, x *npy.Array, yn string, y *npy.Array, spec Spec, shape []int, per int, names []string) (*Arrays, error) {
	n, k := y.Shape[0], y.Shape[1]
	if k > MaxLabels {
		return nil, fmt.Errorf("%s: %s has shape %v: %d labels, at most %d", where, yn, y.Shape, k, MaxLabels)
	}
	ur, err := parseUncertain(spec.Uncertain)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	rules, err := ur.forColumns(numberedClasses(k))
	if len(names) == k {
		if byName, nerr := ur.forColumns(names); nerr == nil || err != nil {
			rules, err = byName, nerr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s has %d labels: %w", where, yn, k, err)
	}
	if spec.Classes > 0 && spec.Classes != k {
		return nil, fmt.Errorf("%s: %s has %d labels, but the spec says classes=%d", where, yn, k, spec.Classes)
	}
	if spec.Limit > 0 && spec.Limit < n {
		n = spec.Limit
	}
	soft := softTargets(rules)
	labels := make([]int64, n)
	var on, ign []int
	for i := range labels {
		on, ign = on[:0], ign[:0]
		for j := 0; j < k; j++ {
			var v float64
			switch e := i*k + j; y.DType {
			case npy.Int64:
				v = float64(y.I64[e])
			case npy.Int32:
				v = float64(y.I32[e])
			case npy.Uint8:
				v = float64(y.U8[e])
			case npy.Float32:
				v = float64(y.F32[e])
			case npy.Float64:
				v = y.F64[e]
			default:
				return nil, fmt.Errorf("%s: %s holds %s: want multi-hot labels of 0s and 1s (integers or floats)", where, yn, y.DType)
			}
			switch {
			case v == 0, v == -1 && rules[j] == "zero":
			case v == 1, v == -1 && rules[j] == "one":
				on = append(on, j)
			case v == -1 && (rules[j] == "ignore" || soft != nil && soft[j] > 0):
				ign = append(ign, j)
			case v == -1:
				return nil, fmt.Errorf("%s: sample %d has -1 (uncertain) for label %d: say what it means with :uncertain=zero, :uncertain=one or :uncertain=ignore (or per label, :uncertain=zero,%d=one)", where, i, j, j)
			default:
				return nil, fmt.Errorf("%s: sample %d has %v for label %d: want multi-hot labels of 0s and 1s (-1 uncertain)", where, i, v, j)
			}
		}
		var err error
		if labels[i], err = labelset.OfIgnoring(k, on, ign); err != nil {
			return nil, fmt.Errorf("%s: sample %d: %v", where, i, err)
		}
	}
	a := &Arrays{shape: shape, per: per, labels: labels, classes: numberedClasses(k), multiLabel: true, uncertain: soft}
	return a, a.keepSamples(where, x, n)
}

// keepSamples keeps x's first n samples in a, as float32 or uint8.
func (a *Arrays) keepSamples(where string, x *npy.Array, n int) error {
	per := a.per
	switch x.DType {
	case npy.Uint8:
		a.u8 = x.U8[: n*per : n*per]
	case npy.Float32:
		a.f32 = x.F32[: n*per : n*per]
	case npy.Float64:
		if avail, src, ok := sysmem.Available(); ok && int64(4*n*per) > avail {
			return fmt.Errorf("%s: rounding %d float64 values to float32 needs %d MiB, more than the %d MiB of memory available (%s)", where, n*per, 4*n*per>>20, avail>>20, src)
		}
		a.f32 = make([]float32, n*per)
		for i := range a.f32 {
			a.f32[i] = float32(x.F64[i])
		}
	default:
		return fmt.Errorf("%s: samples of %s: want float32, float64 or uint8", where, x.DType)
	}
	for i, v := range a.f32 {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%s: sample %d holds %v at element %d of the sample", where, i/per, v, i%per)
		}
	}
	return nil
}

// MultiLabel reports whether the labels are multi-hot label sets
// (Images.MultiLabel).
func (a *Arrays) MultiLabel() bool { return a.multiLabel }

// UncertainTargets is Images.UncertainTargets of the arrays' multi-hot
// labels.
func (a *Arrays) UncertainTargets() []float64 { return a.uncertain }

// Spec returns the spec the arrays were loaded from.
func (a *Arrays) Spec() Spec { return a.spec }

// Len returns the number of samples.
func (a *Arrays) Len() int { return len(a.labels) }

// NumClasses returns the number of classes.
func (a *Arrays) NumClasses() int { return len(a.classes) }

// Classes returns the class names: the archive's classes array, else "0",
// "1", ….
func (a *Arrays) Classes() []string { return a.classes }

// SampleShape returns the shape of one sample as stored. The caller must
// not modify it.
func (a *Arrays) SampleShape() []int { return a.shape }

// Pixels reports whether the samples are uint8.
func (a *Arrays) Pixels() bool { return a.u8 != nil }

// String describes the arrays for logs.
func (a *Arrays) String() string {
	dt := "float32"
	if a.u8 != nil {
		dt = "uint8"
	}
	return fmt.Sprintf("%s: %d samples, %d classes, %s %v", a.spec, a.Len(), a.NumClasses(), dt, a.shape)
}

// Images returns the samples as Images, preprocessed then as images are
// (resized, converted between gray and RGB, normalised after scaling to
// [0,1]), where they are 8-bit images: uint8 samples of shape (C,H,W) or
// (H,W,C) with C 1 or 3, or (H,W). The pixels are copied into channel-major
// order where they are not in it. ok is false for any other samples.
func (a *Arrays) Images() (im *Images, ok bool, err error) {
	if a.u8 == nil {
		return nil, false, nil
	}
	var c, h, w int
	last := false
	switch s := a.shape; {
	case len(s) == 2:
		c, h, w = 1, s[0], s[1]
	case len(s) == 3 && (s[0] == 1 || s[0] == 3):
		c, h, w = s[0], s[1], s[2]
	case len(s) == 3 && (s[2] == 1 || s[2] == 3):
		c, h, w, last = s[2], s[0], s[1], true
	default:
		return nil, false, nil
	}
	pix := a.u8
	if last && c > 1 {
		pix = channelsFirst(pix, []int{h, w}, c)
	}
	labels := a.labels
	if a.multiLabel {
		labels = make([]int64, len(a.labels)) // NewImages takes classes
	}
	im, err = NewImages(a.classes, c, h, w, pix, labels)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", a.spec, err)
	}
	im.labels, im.multiLabel, im.uncertain = a.labels, a.multiLabel, a.uncertain
	im.spec = a.spec
	im.sources = a.sources
	im.users, im.userNames = a.users, a.userNames
	return im, true, nil
}

// channelsFirst copies samples of shape (space…, C) into (C, space…).
func channelsFirst[T any](src []T, space []int, c int) []T {
	plane := 1
	for _, d := range space {
		plane *= d
	}
	per := plane * c
	dst := make([]T, len(src))
	for s := 0; s+per <= len(src); s += per {
		in, out := src[s:s+per], dst[s:s+per]
		for p := range plane {
			for ch := range c {
				out[ch*plane+p] = in[p*c+ch]
			}
		}
	}
	return dst
}

// CheckSources reports a file the arrays were read from that changed
// since (see Images.CheckSources).
func (a *Arrays) CheckSources() error {
	return checkStamps(a.sources)
}

// Fingerprint is the SHA-256 (hex) of the samples as loaded: the sample
// shape and type, every label and value, and every sample's user where
// the users array names them (a change of grouping changes what a
// user-level guarantee protects). Computed once.
func (a *Arrays) Fingerprint() string {
	a.fingerprint.once.Do(func() {
		h := sha256.New()
		var b [8]byte
		put := func(v int64) {
			binary.LittleEndian.PutUint64(b[:], uint64(v))
			h.Write(b[:])
		}
		h.Write([]byte("arrays"))
		put(int64(len(a.shape)))
		for _, d := range a.shape {
			put(int64(d))
		}
		put(int64(len(a.labels)))
		hashLabels(put, a.labels, a.multiLabel, len(a.classes))
		if a.u8 != nil {
			h.Write([]byte("uint8"))
			h.Write(a.u8)
		} else {
			h.Write([]byte("float32"))
			buf := make([]byte, 0, 1<<16)
			for _, v := range a.f32 {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
				if len(buf) == cap(buf) {
					h.Write(buf)
					buf = buf[:0]
				}
			}
			h.Write(buf)
		}
		// Last: arrays without users keep their fingerprint.
		hashUsers(h, a.users, a.userNames)
		a.fingerprint.sum = hex.EncodeToString(h.Sum(nil))
	})
	return a.fingerprint.sum
}

// dimsString formats a shape as 3×16×112×112.
func dimsString(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return strings.Join(parts, "×")
}
