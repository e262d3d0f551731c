package data

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/dpfinetune/dpfinetune/internal/sysmem"
)

// csvPathColumns and csvLabelColumns are the header names (in any case)
// that loadCSV reads an image's path and its label from: the names
// Hugging Face's imagefolder metadata, Kaggle's and pandas' exports use.
var (
	csvPathColumns  = []string{"path", "file", "filename", "file_name", "filepath", "file_path", "image", "image_path", "img", "img_path"}
	csvLabelColumns = []string{"label", "labels", "class", "class_name", "target", "category", "y"}
)

// maxCSVLabels bounds the distinct class names of a CSV (the labels are
// int32, and a model's head has one logit a class).
const maxCSVLabels = 1 << 20

// loadCSV reads a CSV file listing one image a row, its path and its
// label (SchemeCSV). A header row naming the columns (csvPathColumns,
// csvLabelColumns) is read where the first row has one; without a header
// the first column is the path and the second the label. A relative path
// is relative to the CSV file's directory. Labels that are all
// non-negative integers are the labels themselves (classes "0", "1", …);
// otherwise they are class names, numbered in sorted order as
// ImageFolder numbers its directories. An image listed twice is refused:
// the accountant counts rows as individuals. The samples are ordered
// round-robin over the classes (each class in file order), so that a
// limit keeps them balanced; :holdout=F holds a fraction of each class
// out as the test split, by a hash of the paths, as a folder's.
func loadCSV(spec Spec, fit Fit) (*Images, error) {
	path := spec.Dir
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("csv: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("csv: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("csv: %s is not a file (want a CSV file listing an image path and a label a row)", path)
	}
	// encoding/csv holds a record in memory: a file that could not fit
	// is refused before it is read.
	if avail, src, ok := sysmem.Available(); ok && 4*fi.Size() > avail {
		return nil, fmt.Errorf("csv: %s: %d MiB of listing is more than a quarter of the %d MiB of memory available (%s)", path, fi.Size()>>20, avail>>20, src)
	}
	if spec.split() == Test && spec.Holdout == 0 {
		return nil, fmt.Errorf("csv: %s has no test split: hold some of its rows out with :holdout=F (e.g. csv:%s:holdout=0.1), or list the test images in a CSV of their own", path, path)
	}
	rows, err := readCSVRows(f, path)
	if err != nil {
		return nil, err
	}
	base := filepath.Dir(path)

	// The labels: integers as they are, or names numbered in sorted order.
	numeric := true
	for _, r := range rows {
		if v, err := strconv.Atoi(r.label); err != nil || v < 0 || v >= maxCSVLabels {
			numeric = false
			break
		}
	}
	var classes []string
	index := map[string]int32{}
	if numeric {
		top := 0
		for _, r := range rows {
			v, _ := strconv.Atoi(r.label)
			top = max(top, v)
		}
		classes = numberedClasses(top + 1)
		for i, c := range classes {
			index[c] = int32(i)
		}
	} else {
		for _, r := range rows {
			if _, ok := index[r.label]; !ok {
				if len(index) == maxCSVLabels {
					return nil, fmt.Errorf("csv: %s: more than %d distinct labels", path, maxCSVLabels)
				}
				index[r.label] = 0
				classes = append(classes, r.label)
			}
		}
		sort.Strings(classes)
		for i, c := range classes {
			index[c] = int32(i)
		}
	}

	perClass := make([][]labelledFile, len(classes))
	seen := make(map[string]int, len(rows))
	for _, r := range rows {
		p := r.path
		if !filepath.IsAbs(p) {
			p = filepath.Join(base, p)
		}
		p = filepath.Clean(p)
		if first, dup := seen[p]; dup {
			return nil, fmt.Errorf("csv: %s: line %d lists %s again (first on line %d): each row is one individual to the accountant; remove the duplicate", path, r.line, r.path, first)
		}
		seen[p] = r.line
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("csv: %s: line %d: %w", path, r.line, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("csv: %s: line %d: %s is not a file", path, r.line, p)
		}
		l := index[r.label]
		if numeric {
			v, _ := strconv.Atoi(r.label)
			l = int32(v)
		}
		perClass[l] = append(perClass[l], labelledFile{p, l})
	}
	total := 0
	for c, items := range perClass {
		if spec.Holdout > 0 && len(items) > 0 {
			keep := holdout(base, len(items), func(k int) string { return items[k].path }, spec.Holdout)
			part := items[:0:0]
			for k, it := range items {
				if keep[k] == (spec.split() == Test) {
					part = append(part, it)
				}
			}
			perClass[c] = part
		}
		total += len(perClass[c])
	}
	if total == 0 {
		return nil, fmt.Errorf("csv: %s: no images in the %s split", path, spec.split())
	}
	paths, labels := roundRobin(perClass, spec.Limit)
	im, err := decodeFiles("csv", paths, labels, classes, fit)
	if err != nil {
		return nil, err
	}
	// The listing is a source too: a label changed under a running job
	// changes the data its checkpoint would resume on.
	im.sourcePaths = append(im.sourcePaths, path)
	return im, nil
}

// csvRow is one image of a CSV listing and the line it is on.
type csvRow struct {
	path, label string
	line        int
}

// readCSVRows reads the path and label of every row of a CSV listing
// (loadCSV), naming the file and line of any row it cannot read.
func readCSVRows(r io.Reader, name string) ([]csvRow, error) {
	br := bufio.NewReader(r)
	if bom, err := br.Peek(3); err == nil && string(bom) == "\ufeff" {
		br.Discard(3) // a byte-order mark, as spreadsheets write
	}
	cr := csv.NewReader(br)
	cr.FieldsPerRecord = -1 // checked below, with the line
	cr.ReuseRecord = true
	cr.Comment = '#'
	pathCol, labelCol := 0, 1
	var rows []csvRow
	first := true
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("csv: %s: line %d: %v", name, pe.Line, pe.Err)
			}
			return nil, fmt.Errorf("csv: %s: %w", name, err)
		}
		line, _ := cr.FieldPos(0) // after a good Read only: FieldPos panics after an error
		if first {
			first = false
			if p, l, header, err := csvHeader(rec); err != nil {
				return nil, fmt.Errorf("csv: %s: line %d: %w", name, line, err)
			} else if header {
				pathCol, labelCol = p, l
				continue
			}
		}
		if len(rec) <= max(pathCol, labelCol) {
			return nil, fmt.Errorf("csv: %s: line %d: %d fields, want an image path and a label (columns %d and %d)", name, line, len(rec), pathCol+1, labelCol+1)
		}
		p, l := strings.TrimSpace(rec[pathCol]), strings.TrimSpace(rec[labelCol])
		if p == "" || l == "" {
			return nil, fmt.Errorf("csv: %s: line %d: an empty image path or label", name, line)
		}
		rows = append(rows, csvRow{p, l, line})
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("csv: %s lists no images (want a row a sample: an image path and a label)", name)
	}
	return rows, nil
}

// csvHeader reads a CSV's first row as a header where it names a path or a
// label column (csvPathColumns, csvLabelColumns): then it must name both.
func csvHeader(rec []string) (pathCol, labelCol int, header bool, err error) {
	find := func(names []string) int {
		for i, f := range rec {
			f = strings.ToLower(strings.TrimSpace(f))
			for _, n := range names {
				if f == n {
					return i
				}
			}
		}
		return -1
	}
	pathCol, labelCol = find(csvPathColumns), find(csvLabelColumns)
	switch {
	case pathCol < 0 && labelCol < 0:
		return 0, 1, false, nil
	case pathCol < 0:
		return 0, 0, true, fmt.Errorf("the header %q names a label column but no image path column (one of %s)", strings.Join(rec, ","), strings.Join(csvPathColumns, ", "))
	case labelCol < 0:
		return 0, 0, true, fmt.Errorf("the header %q names an image path column but no label column (one of %s)", strings.Join(rec, ","), strings.Join(csvLabelColumns, ", "))
	}
	return pathCol, labelCol, true, nil
}
