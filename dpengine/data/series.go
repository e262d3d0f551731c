package data

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
)

// A series (Fit.Series) is a directory of single-frame DICOM images, the
// slices of a CT or MR volume as archives export them, a file a slice: one
// example, read as a multi-frame object would be — a slice picked by
// Fit.Frame, every slice a sample of its own, or, for a model of clips,
// T slices picked evenly — its slices ordered along the normal of their
// plane (seriesSlices).

// seriesSlices lists the slices of the series in directory dir in their
// order: by their position along their plane's normal where every slice
// gives one, else by Instance Number where every slice has one, else by
// name (ties by Instance Number, then name). Hidden files and files that
// are no image (isImageFile: a DICOMDIR, notes) are skipped as a folder
// skips them, DICOM objects without an image left out (returned), and an
// image that is not DICOM is an error naming it.
func seriesSlices(dir string) (slicePaths, leftOut []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	type slice struct {
		path string
		dicom.Slice
	}
	var ss []slice
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), ".") || !isRegular(p) || !isImageFile(p) {
			continue
		}
		if !hasDICOMPrefix(p) {
			return nil, nil, fmt.Errorf("%s: not a DICOM file: a series directory holds the DICOM images of its slices", p)
		}
		s, err := sliceOf(p)
		if errors.Is(err, dicom.ErrNoImage) {
			leftOut = append(leftOut, p)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %v", p, err)
		}
		ss = append(ss, slice{p, s})
	}
	if len(ss) == 0 {
		return nil, leftOut, fmt.Errorf("%s: a series directory without images", dir)
	}
	byPos, byInst := true, true
	for _, s := range ss {
		byPos, byInst = byPos && s.HasPosition, byInst && s.HasInstance
	}
	slices.SortStableFunc(ss, func(a, b slice) int {
		if byPos {
			if c := cmp.Compare(a.Position, b.Position); c != 0 {
				return c
			}
		}
		if byInst {
			if c := cmp.Compare(a.Instance, b.Instance); c != 0 {
				return c
			}
		}
		return strings.Compare(a.path, b.path)
	})
	for _, s := range ss {
		slicePaths = append(slicePaths, s.path)
	}
	return slicePaths, leftOut, nil
}

// sliceOf reads the Slice of the DICOM file at path.
func sliceOf(path string) (dicom.Slice, error) {
	f, err := os.Open(path)
	if err != nil {
		return dicom.Slice{}, err
	}
	defer f.Close()
	return dicom.SliceOf(bufio.NewReader(f))
}

// expandSeries makes the series directories dirs (with their labels)
// the samples fit asks for, as expandFrames does a multi-frame file's
// frames: the slices picked (Fit.Frame, or a clip's T: Fit.Clip), each a
// file read as it is. unit maps each slice to its series; expanded says
// whether a series gave more than one sample of its own (Fit.Frame
// "all"); leftOut are the series' objects without an image.
func expandSeries(dirs []string, labels []int64, fit Fit) (paths []string, outLabels []int64, unit map[string]string, expanded bool, leftOut []string, err error) {
	f, err := dicom.ParseFrame(fit.Frame)
	if err != nil {
		return nil, nil, nil, false, nil, err
	}
	unit = map[string]string{}
	for i, d := range dirs {
		ss, out, err := seriesSlices(d)
		leftOut = append(leftOut, out...)
		if err != nil {
			return nil, nil, nil, false, nil, err
		}
		n := len(ss)
		var pick []int // 0-based
		switch {
		case fit.Clip > 0:
			if n < 2 {
				return nil, nil, nil, false, nil, fmt.Errorf("%s: a series of one image: a clip of %d slices needs several", d, fit.Clip)
			}
			for _, k := range clipFrames(n, fit.Clip) {
				pick = append(pick, k-1)
			}
		case f.Kind == dicom.FrameAll:
			pick = make([]int, n)
			for k := range pick {
				pick[k] = k
			}
			expanded = expanded || n > 1
		case f.Projection():
			return nil, nil, nil, false, nil, fmt.Errorf("%s: a %s projection of a series' slices is not read: choose a slice (--frame first, middle, last or a number), every slice (all), or a model of clips", d, f)
		case f.Kind == dicom.FrameNone && n > 1:
			return nil, nil, nil, false, nil, fmt.Errorf("%s: %w: a series of %d slices and no slice chosen", d, dicom.ErrMultiFrame, n)
		default:
			k := 0
			switch f.Kind {
			case dicom.FrameMiddle:
				k = n / 2
			case dicom.FrameLast:
				k = n - 1
			case dicom.FrameNumber:
				if f.Number > n {
					return nil, nil, nil, false, nil, fmt.Errorf("%s: %w: slice %d of a series of %d", d, dicom.ErrNoFrame, f.Number, n)
				}
				k = f.Number - 1
			}
			pick = []int{k}
		}
		for _, k := range pick {
			paths, outLabels = append(paths, ss[k]), append(outLabels, labels[i])
			unit[ss[k]] = d
		}
	}
	return paths, outLabels, unit, expanded, leftOut, nil
}

// SeriesDirs lists the series directories under paths, in lexical order:
// each directory that holds image files of its own (ImageFiles': hidden
// files, a study's DICOMDIR and notes skipped), the paths themselves or
// any directory below them (predict's --images, a part of them at a time
// to LoadFiles).
func SeriesDirs(paths []string) ([]string, error) {
	for _, p := range paths {
		if !isDir(p) {
			return nil, fmt.Errorf("images: %s: not a directory: with series, each is a directory of a series' slices, or of such directories", p)
		}
	}
	files, err := ImageFiles(paths)
	if err != nil {
		return nil, err
	}
	var dirs []string
	seen := map[string]bool{}
	for _, f := range files {
		if d := filepath.Dir(f); !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}
