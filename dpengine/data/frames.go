package data

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
)

// maxFramesEach bounds the frames one file gives as samples of their own
// (Fit.Frame "all"): a cine loop has hundreds, an enhanced CT or MR a few
// thousand; a whole-slide image's tiles are not a classifier's samples.
const maxFramesEach = 1 << 16

// allFrames reports whether f makes every frame of a multi-frame DICOM
// object a sample of its own.
func (f Fit) allFrames() bool { return f.Frame == "all" }

// expandFrames makes every frame of the multi-frame DICOM files at paths a
// sample of its own, with its file's label, where fit asks for all frames
// (Fit.Frame "all"): each path and label repeated, a frame number each
// (from 1; 0 for a file that is not DICOM, read as it is). Otherwise it
// returns them as they are, and no frames. expanded reports whether some
// file gave more than one sample.
//
// Where fit asks for clips (Fit.Clip T), each file gives T samples
// instead, the frames clipFrames picks, in order: a clip, not samples of
// their own (expanded is false).
func expandFrames(paths []string, labels []int64, fit Fit) (_ []string, _ []int64, frames []int, expanded bool, err error) {
	if !fit.allFrames() && fit.Clip == 0 {
		return paths, labels, nil, false, nil
	}
	var outPaths []string
	var outLabels []int64
	for i, p := range paths {
		n, err := fileFrames(p)
		if errors.Is(err, dicom.ErrNoImage) {
			// One sample, read as it is: left out as it decodes
			// (Images.LeftOut).
			outPaths, outLabels, frames = append(outPaths, p), append(outLabels, labels[i]), append(frames, 0)
			continue
		}
		if err != nil {
			return nil, nil, nil, false, err
		}
		if fit.Clip > 0 {
			if n < 2 {
				return nil, nil, nil, false, fmt.Errorf("%s: a single image: a clip of %d frames is read from a multi-frame DICOM object (a cine loop, an enhanced CT or MR)", p, fit.Clip)
			}
			for _, k := range clipFrames(n, fit.Clip) {
				outPaths, outLabels, frames = append(outPaths, p), append(outLabels, labels[i]), append(frames, k)
			}
			continue
		}
		for k := range max(n, 1) {
			outPaths, outLabels = append(outPaths, p), append(outLabels, labels[i])
			frames = append(frames, min(n, k+1))
		}
		expanded = expanded || n > 1
	}
	return outPaths, outLabels, frames, expanded, nil
}

// clipFrames picks t of n frames (numbered from 1) evenly from the first
// to the last, as torchvision's UniformTemporalSubsample does — frame
// ⌊j·(n−1)/(t−1)⌋+1 for j = 0…t−1, in exact arithmetic —, a frame twice
// where n < t; the first alone where t is 1.
func clipFrames(n, t int) []int {
	k := make([]int, t)
	for j := range k {
		if t > 1 {
			k[j] = j*(n-1)/(t-1) + 1
		} else {
			k[j] = 1
		}
	}
	return k
}

// fileFrames is a DICOM file's Number of Frames, a NIfTI volume's slices
// (niftiFrames; 0 for another format),
// held to maxFramesEach and to what the file's size can hold; an object
// without an image is dicom.ErrNoImage.
func fileFrames(path string) (int, error) {
	if isNIfTI(path) {
		return niftiFrames(path)
	}
	if !hasDICOMPrefix(path) {
		return 0, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	n, err := dicom.FrameCount(bufio.NewReader(f))
	switch {
	case errors.Is(err, dicom.ErrNoImage):
		return 0, fmt.Errorf("%s: %w", path, err)
	case err != nil:
		return 0, fmt.Errorf("%s: corrupt or unsupported image: %v", path, err)
	case n > maxFramesEach:
		return 0, fmt.Errorf("%s: %d frames, over the %d a file's frames may give as samples (choose a frame or a projection instead)", path, n, maxFramesEach)
	case int64(n) > fi.Size()/8:
		return 0, fmt.Errorf("%s: %d frames in a file of %d bytes", path, n, fi.Size())
	}
	return n, nil
}

// fileUsers makes each file a user (its path within root, '/'-separated),
// for samples that are the frames of multi-frame files: a file's frames
// are one person's, and a guarantee per frame would be none per file.
func fileUsers(root string, paths []string) ([]int32, []string) {
	names := make([]string, len(paths))
	for i, p := range paths {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			rel = p
		}
		names[i] = filepath.ToSlash(rel)
	}
	return numberUsers(names)
}

// loadUnits makes the listed units — image files, or series directories
// where fit.Series — the samples fit asks for (expandFrames,
// expandSeries) and decodes them: the Images (fitted as fit says), each
// sample's unit (its listed file or directory, which users and holdouts
// go by) and name (its file, or its series: seriesIn), and whether a unit
// gave more than one sample of its own.
func loadUnits(scheme string, paths []string, labels []int64, classes []string, fit Fit) (_ *Images, units, names []string, expanded bool, err error) {
	var frames []int
	var series seriesSamples
	read := fit
	if fit.Series {
		series, err = expandSeries(paths, labels, fit)
		paths, labels, expanded = series.paths, series.labels, series.expanded
		read.Clip, read.Series = 0, false // each slice a file read as it is
		if series.members == nil {
			read.Frame = ""
		}
	} else {
		paths, labels, frames, expanded, err = expandFrames(paths, labels, fit)
	}
	if err != nil {
		return nil, nil, nil, false, fmt.Errorf("%s: %w", scheme, err)
	}
	im, err := decodeFiles(scheme, paths, labels, classes, read, frames, series.members)
	if err != nil {
		return nil, nil, nil, false, err
	}
	im.fit = fit
	im.leftOut = append(series.leftOut, im.leftOut...)
	// The samples' files, the paths but those left out, as units.
	n := im.Len()
	units, names = slices.Clone(im.sourcePaths[:n]), slices.Clone(im.sourcePaths[:n])
	for i, p := range im.sourcePaths[:n] {
		if u, ok := series.unit[p]; ok {
			units[i], names[i] = u, series.name[p]
		}
	}
	if fit.Series {
		im.seriesNames = names
	}
	if series.members != nil {
		// A projection's sample stands for its first slice (SamplePath:
		// its study), its other slices are stamped after the samples.
		var firsts, rest []string
		for _, p := range im.sourcePaths[:n] {
			firsts, rest = append(firsts, series.members[p][0]), append(rest, series.members[p][1:]...)
		}
		im.sourcePaths = slices.Concat(firsts, rest, im.sourcePaths[n:])
	}
	return im, units, names, expanded, nil
}
