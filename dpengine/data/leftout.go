package data

import "fmt"

// LeftOut returns the files a load left out: DICOM objects that hold no
// image (dicom.ErrNoImage: structured reports, presentation states, key
// object selections, which an archive's exports hold beside the images),
// in listing order. They are not examples; the commands say how many.
func (m *Images) LeftOut() []string { return m.leftOut }

// LeftOutNote says, for a log, which files a load left out (LeftOut): ""
// where none.
func LeftOutNote(files []string) string {
	switch len(files) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("1 DICOM object without an image (a report, a presentation state…): %s", files[0])
	}
	return fmt.Sprintf("%d DICOM objects without an image (reports, presentation states…), the first %s", len(files), files[0])
}

// leaveOut drops the samples at the ascending indices out, recording their
// files as left out: their labels and files, and, where the pixels are
// mapped already, their empty places (a kept pixel file's, which keeps
// them so that a later load leaves them out too).
func (m *Images) leaveOut(out []int) {
	if len(out) == 0 {
		return
	}
	n := len(m.labels)
	gone := make([]bool, n)
	for _, i := range out {
		gone[i] = true
		m.leftOut = append(m.leftOut, m.sourcePaths[i])
	}
	// New slices: the loaders' own (their listing's paths and labels)
	// are left as they were.
	labels, paths := make([]int64, 0, n-len(out)), make([]string, 0, len(m.sourcePaths)-len(out))
	var samples [][]uint8
	var sizes [][2]int32
	for i := range n {
		if gone[i] {
			continue
		}
		labels, paths = append(labels, m.labels[i]), append(paths, m.sourcePaths[i])
		if m.samples != nil {
			samples = append(samples, m.samples[i])
		}
		if m.sizes != nil {
			sizes = append(sizes, m.sizes[i])
		}
	}
	k := len(labels)
	// The files after the samples' (a listing's own) stay.
	m.labels, m.sourcePaths = labels, append(paths, m.sourcePaths[n:]...)
	if m.samples != nil {
		m.samples = samples
	}
	if m.sizes != nil {
		m.sizes = sizes
		// The empty places gone, the rest may share one size.
		uniform := true
		for _, s := range m.sizes {
			uniform = uniform && s == m.sizes[0]
		}
		if uniform && k > 0 {
			m.h, m.w, m.sizes = int(m.sizes[0][0]), int(m.sizes[0][1]), nil
		}
	}
}

// Narrow16 says how many of the images decoded were 16-bit photos (PNG,
// TIFF) read by their high bytes whose values are all 12 bits or fewer —
// 16 gray levels each —, and the first of them by name. A load whose
// pixels were kept by an earlier one decodes none, and counts none.
func (m *Images) Narrow16() (n int, first string) { return m.narrow16, m.narrow16First }

// Narrow16 is the source dataset's Narrow16.
func (v *View) Narrow16() (int, string) { return v.src.Narrow16() }

// Narrow16 is the frames' Narrow16.
func (v *ClipView) Narrow16() (int, string) { return v.frames.Narrow16() }

// Narrow16Note says, for the logs, that n 16-bit photos (the first named)
// read by their high bytes kept 16 levels of 12-bit values, and what reads
// them whole; "" where n is 0.
func Narrow16Note(n int, first string) string {
	if n == 0 {
		return ""
	}
	what := fmt.Sprintf("%d 16-bit grayscale images hold", n)
	if n == 1 {
		what = "1 16-bit grayscale image holds"
	}
	return fmt.Sprintf("%s values of 12 bits or fewer (the first %s): read by their high bytes, 16 gray levels each; --window range reads each through its own range, --window C,W through a window of its values", what, first)
}
