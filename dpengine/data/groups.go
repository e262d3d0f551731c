package data

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
)

// SamplePaths is implemented by a Dataset whose samples are image files
// of their own: a folder's, a CSV listing's.
type SamplePaths interface {
	// SamplePath returns the file sample i was read from, "" where the
	// samples are not files of their own.
	SamplePath(i int) string
}

var (
	_ SamplePaths = (*Images)(nil)
	_ SamplePaths = (*View)(nil)
)

// SamplePath returns the file sample i was read from — a folder's or a
// CSV listing's image, as it was opened — or "" where the samples are not
// files of their own (IDX, CIFAR, NumPy arrays, NewImages).
func (m *Images) SamplePath(i int) string {
	if m.spec.Scheme != SchemeFolder && m.spec.Scheme != SchemeCSV {
		return ""
	}
	// The loaders stamp the samples' files in sample order (a listing's
	// own file after them).
	if i < 0 || i >= m.Len() || i >= len(m.sources) {
		return ""
	}
	return m.sources[i].path
}

// SamplePath returns the file sample i was read from (Images.SamplePath).
func (v *View) SamplePath(i int) string { return v.src.SamplePath(i) }

// DirGroups numbers the directories holding d's samples' files densely
// in sorted order of their names: group[i] is sample i's directory's
// number, dirs names them by number. A study's views (CheXpert's
// "patient00001/study1/view1_frontal.jpg", MURA's, MIMIC-CXR's) share
// their directory. ok is false where d's samples are not files of their
// own (SamplePaths).
func DirGroups(d interface{ Len() int }) (group []int32, dirs []string, ok bool) {
	return pathGroups(d, filepath.Dir)
}

// FileGroups numbers the files of d's samples densely in sorted order of
// their paths, as DirGroups numbers their directories: a multi-frame
// DICOM file's frames, each a sample (Fit.Frame "all"), are one group,
// and so are a series' slices (Fit.Series: by the series' name).
func FileGroups(d interface{ Len() int }) (group []int32, files []string, ok bool) {
	if su, isSeries := d.(interface{ SampleSeries(i int) string }); isSeries && su.SampleSeries(0) != "" {
		name := make([]string, d.Len())
		for i := range name {
			name[i] = su.SampleSeries(i)
		}
		group, files = numberDensely(name)
		return group, files, true
	}
	return pathGroups(d, func(p string) string { return p })
}

// SampleSeries returns the series sample i is of — its directory, or
// "DIR#N" for one of a directory's several series (seriesIn) — where the
// samples are series' slices (Fit.Series), else "".
func (m *Images) SampleSeries(i int) string {
	if i < 0 || i >= len(m.seriesNames) {
		return ""
	}
	return m.seriesNames[i]
}

// SampleSeries returns the series sample i is of (Images.SampleSeries).
func (v *View) SampleSeries(i int) string { return v.src.SampleSeries(i) }

// pathGroups numbers the names key gives d's samples' paths densely.
func pathGroups(d interface{ Len() int }, key func(string) string) (group []int32, names []string, ok bool) {
	sp, isPaths := d.(SamplePaths)
	if !isPaths || d.Len() == 0 {
		return nil, nil, false
	}
	name := make([]string, d.Len())
	for i := range name {
		p := sp.SamplePath(i)
		if p == "" {
			return nil, nil, false
		}
		name[i] = key(p)
	}
	group, names = numberDensely(name)
	return group, names, true
}

// StudyGroups numbers the studies of d's samples densely in sorted order
// of their Study Instance UIDs (0020,000D), read from each sample's DICOM
// file: a study's images — a mammogram's four views, a chest radiograph's
// two —, wherever an archive's export put them. ok is false where d's
// samples are not files of their own; a sample whose file is not DICOM,
// or names no study, is an error naming it.
func StudyGroups(d interface{ Len() int }) (group []int32, studies []string, ok bool, err error) {
	return uidGroups(d, FileStudy)
}

// SeriesGroups numbers the series of d's samples densely in sorted order
// of their Series Instance UIDs (0020,000E), read from each sample's
// DICOM file: a CT's or an MR's slices, a file each, wherever an
// archive's export put them, as StudyGroups numbers studies.
func SeriesGroups(d interface{ Len() int }) (group []int32, series []string, ok bool, err error) {
	return uidGroups(d, FileSeries)
}

// uidGroups numbers the UIDs read (by uid) from d's samples' files.
func uidGroups(d interface{ Len() int }, uid func(path string) (string, error)) (group []int32, names []string, ok bool, err error) {
	read := map[string]string{} // by path: a file's frames are samples of one
	group, names, ok = pathGroups(d, func(p string) string {
		if err != nil {
			return ""
		}
		u, seen := read[p]
		if !seen {
			u, err = uid(p)
			read[p] = u
		}
		return u
	})
	if err != nil {
		return nil, nil, true, err
	}
	return group, names, ok, nil
}

// FileStudy reads the Study Instance UID of the DICOM file at path (the
// study StudyGroups groups it in).
func FileStudy(path string) (string, error) { return fileUID(path, "study", dicom.StudyUID) }

// FileSeries reads the Series Instance UID of the DICOM file at path (the
// series SeriesGroups groups it in).
func FileSeries(path string) (string, error) { return fileUID(path, "series", dicom.SeriesUID) }

// fileUID reads an identifier (of what) of the DICOM file at path.
func fileUID(path, what string, read func(io.Reader) (string, error)) (string, error) {
	if !hasDICOMPrefix(path) {
		return "", fmt.Errorf("%s: not a DICOM file: it names no %s", path, what)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	u, err := read(bufio.NewReader(f))
	if err != nil {
		return "", fmt.Errorf("%s: %v", path, err)
	}
	return u, nil
}
