package data

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
)

// A series (Fit.Series) is a directory of single-frame DICOM images, the
// slices of a CT or MR volume as archives export them, a file a slice: one
// example, read as a multi-frame object would be — a slice picked by
// Fit.Frame, a projection of them all, every slice a sample of its own,
// or, for a model of clips, T slices picked evenly — its slices ordered
// along the normal of their plane (seriesIn). A directory whose slices
// name several series (their Series Instance UIDs: a CT's soft-tissue and
// bone reconstructions and its scout, exported together) is that many
// examples, each with the directory's label, the directory their unit.

// dirSeries is a series found in a directory: its name — the directory,
// or, where the directory holds several series, the directory and the
// series, "DIR#N" by its Series Number (by its Series Instance UID where
// the numbers do not tell the series apart) — and its slices' paths in
// their order.
type dirSeries struct {
	name   string
	uid    string // its Series Instance UID ("" where its slices name none)
	slices []string
}

// seriesIn lists the series in directory dir: its images grouped by their
// Series Instance UIDs, in order of their Series Numbers (else UIDs), each
// one's slices in their order: by their position along their plane's
// normal where every slice gives one and they share the plane, else by
// Instance Number where every slice has one, else by name (ties by
// Instance Number, then name). Hidden files and files that are no image
// (isImageFile: a DICOMDIR, notes) are skipped as a folder skips them,
// DICOM objects without an image left out (returned), and an image that
// is not DICOM is an error naming it, as is a directory whose slices name
// several series and some none.
func seriesIn(dir string) (series []dirSeries, leftOut []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	type slice struct {
		path string
		dicom.Slice
	}
	byUID := map[string][]slice{}
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
		byUID[s.Series] = append(byUID[s.Series], slice{p, s})
	}
	if len(byUID) == 0 {
		return nil, leftOut, fmt.Errorf("%s: a series directory without images", dir)
	}
	if none := byUID[""]; none != nil && len(byUID) > 1 {
		return nil, nil, fmt.Errorf("%s: its slices name %d series (Series Instance UID) and %d slices none (%s): which series those are of cannot be told", dir, len(byUID)-1, len(none), none[0].path)
	}
	type group struct {
		uid    string
		number int
		ss     []slice
	}
	var groups []group
	numbered := true // every series numbered, no two alike
	numbers := map[int]bool{}
	for uid, ss := range byUID {
		n := ss[0].SeriesNumber
		numbered = numbered && ss[0].HasSeriesNumber && !numbers[n]
		numbers[n] = true
		groups = append(groups, group{uid: uid, number: n, ss: ss})
	}
	slices.SortFunc(groups, func(a, b group) int {
		if numbered {
			return cmp.Compare(a.number, b.number)
		}
		return strings.Compare(a.uid, b.uid)
	})
	for _, g := range groups {
		name := dir
		if len(groups) > 1 {
			name = dir + "#" + g.uid
			if numbered {
				name = dir + "#" + strconv.Itoa(g.number)
			}
		}
		ss := g.ss
		byPos, byInst := true, true
		for _, s := range ss {
			byPos = byPos && s.HasPosition && samePlane(s.Normal, ss[0].Normal)
			byInst = byInst && s.HasInstance
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
		ds := dirSeries{name: name, uid: g.uid}
		for _, s := range ss {
			ds.slices = append(ds.slices, s.path)
		}
		series = append(series, ds)
	}
	return series, leftOut, nil
}

// samePlane reports whether two slices' normals (unit vectors, as row ×
// column of an orthonormal Image Orientation) are one to within a
// thousandth: positions along different normals do not order slices (a
// scout's three planes in one series).
func samePlane(a, b [3]float64) bool {
	return math.Abs(a[0]-b[0]) < 1e-3 && math.Abs(a[1]-b[1]) < 1e-3 && math.Abs(a[2]-b[2]) < 1e-3
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

// seriesSamples are the samples expandSeries makes of series directories.
type seriesSamples struct {
	// paths are the files to decode, the slices picked, each read as it
	// is; for a projection, each series' name, its slices in members.
	paths   []string
	labels  []int64
	members map[string][]string
	// unit maps each path to its directory (the unit a user or a holdout
	// goes by), name to its series' name.
	unit, name map[string]string
	// expanded says whether a directory gave more than one sample: every
	// slice a sample (Fit.Frame "all"), or several series.
	expanded bool
	// leftOut are the directories' objects without an image.
	leftOut []string
}

// expandSeries makes the series directories dirs (with their labels)
// the samples fit asks for, as expandFrames does a multi-frame file's
// frames: each series' slices picked (Fit.Frame, or a clip's T: Fit.Clip)
// or projected.
func expandSeries(dirs []string, labels []int64, fit Fit) (out seriesSamples, err error) {
	f, err := dicom.ParseFrame(fit.Frame)
	if err != nil {
		return out, err
	}
	out.unit, out.name = map[string]string{}, map[string]string{}
	seen := map[string]string{} // each series' name by its UID
	for i, d := range dirs {
		series, left, err := seriesIn(d)
		out.leftOut = append(out.leftOut, left...)
		if err != nil {
			return out, err
		}
		out.expanded = out.expanded || len(series) > 1
		for _, s := range series {
			// A series in two directories (split over them, or exported
			// twice) would be two examples of one, under two units.
			if other, ok := seen[s.uid]; ok && s.uid != "" {
				return out, fmt.Errorf("%s: its slices' series (Series Instance UID %s) is %s's too: a series split over directories, or exported twice, would be two examples of one; put its slices in one directory", s.name, s.uid, other)
			}
			seen[s.uid] = s.name
			ss, n := s.slices, len(s.slices)
			if f.Projection() {
				if out.members == nil {
					out.members = map[string][]string{}
				}
				out.paths, out.labels = append(out.paths, s.name), append(out.labels, labels[i])
				out.members[s.name], out.unit[s.name], out.name[s.name] = ss, d, s.name
				continue
			}
			var pick []int // 0-based
			switch {
			case fit.Clip > 0:
				if n < 2 {
					return out, fmt.Errorf("%s: a series of one image: a clip of %d slices needs several", s.name, fit.Clip)
				}
				for _, k := range clipFrames(n, fit.Clip) {
					pick = append(pick, k-1)
				}
			case f.Kind == dicom.FrameAll:
				pick = make([]int, n)
				for k := range pick {
					pick[k] = k
				}
				out.expanded = out.expanded || n > 1
			case f.Kind == dicom.FrameNone && n > 1:
				return out, fmt.Errorf("%s: %w: a series of %d slices and no slice chosen", s.name, dicom.ErrMultiFrame, n)
			default:
				k, err := f.Index(n)
				if err != nil {
					return out, fmt.Errorf("%s: %w: slice %d of a series of %d", s.name, dicom.ErrNoFrame, f.Number, n)
				}
				pick = []int{k}
			}
			for _, k := range pick {
				out.paths, out.labels = append(out.paths, ss[k]), append(out.labels, labels[i])
				out.unit[ss[k]], out.name[ss[k]] = d, s.name
			}
		}
	}
	return out, nil
}

// decodeProjection decodes the slices of the series name into one image,
// their projection (dcm.Frame: FrameMax, FrameMean or FrameMin; dicom.
// Projection), admitted before the first is read at 16 bytes a pixel —
// the projection's float64 sum beside a slice's stored values — as
// decodeImage admits a multi-frame object's projection.
func decodeProjection(name string, slicePaths []string, dcm dicom.Options, admit admitFunc) (d decoded, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = decoded{}, fmt.Errorf("%s: corrupt or unsupported image: the decoder failed: %v", name, p)
		}
	}()
	p, err := dicom.NewProjection(dcm.Frame)
	if err != nil {
		return decoded{}, err
	}
	for i, path := range slicePaths {
		if err := addSlice(p, path, i == 0, name, admit); err != nil {
			return decoded{}, err
		}
	}
	img, err := p.Image(dcm)
	if err != nil {
		return decoded{}, fmt.Errorf("%s: %v", name, err)
	}
	return toDecoded(img, "dicom", name)
}

// addSlice adds the slice at path to the projection p of the series
// name; the first slice's size is checked and admitted first.
func addSlice(p *dicom.Projection, path string, first bool, name string, admit admitFunc) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if first {
		cfg, err := dicom.DecodeConfig(bufio.NewReader(f))
		if err != nil {
			return fmt.Errorf("%s: corrupt or unsupported image: %v", path, err)
		}
		if int64(cfg.Width)*int64(cfg.Height) > maxImagePixels {
			return fmt.Errorf("%s: image of %d×%d pixels, over the limit of %d pixels", path, cfg.Width, cfg.Height, maxImagePixels)
		}
		if admit != nil {
			if err := admit(name, cfg.Width, cfg.Height, 16*int64(cfg.Width)*int64(cfg.Height)); err != nil {
				return err
			}
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
	if err := p.Add(bufio.NewReader(f)); err != nil {
		return fmt.Errorf("%s: in the projection of %s: %v", path, name, err)
	}
	return nil
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
