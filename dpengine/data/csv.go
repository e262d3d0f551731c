package data

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/dpfinetune/dpfinetune/internal/sysmem"
)

// csvPathColumns and csvLabelColumns are the header names (in any case)
// that loadCSV reads an image's path and its label from: the names
// Hugging Face's imagefolder metadata, Kaggle's and pandas' exports use.
// csvUserColumns are those of the optional column naming the user (the
// patient, subject, participant) an image belongs to, for a user-level
// guarantee: the names medical and personal datasets' listings use.
var (
	csvPathColumns  = []string{"path", "file", "filename", "file_name", "filepath", "file_path", "image", "image_path", "img", "img_path"}
	csvLabelColumns = []string{"label", "labels", "class", "class_name", "target", "category", "y"}
	csvUserColumns  = []string{"user", "user_id", "userid", "patient", "patient_id", "subject", "subject_id", "participant", "participant_id", "individual", "person", "person_id", "owner", "group"}
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
// without users the accountant counts rows as individuals, and with them
// the image would count twice for its user. The samples are ordered
// round-robin over the classes (each class in file order), so that a
// limit keeps them balanced; :holdout=F holds a fraction of each class
// out as the test split, by a hash of the paths, as a folder's.
//
// A header may also name a user column (csvUserColumns: user, patient_id,
// subject, …): the individual each image belongs to, whom a user-level
// guarantee protects as a whole (Users). Every row then names its user;
// the users are numbered in sorted order of their names, counting only
// those with samples in the split and within the limit. :holdout=F then
// holds out whole users rather than images — round(F·users) of them, at
// least one of two or more, never all, chosen by a hash of their names as
// a folder's files are by their paths — so that no user has images in
// both splits. A listing without a header names no users.
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
	// The labels: integers as they are, or names numbered in sorted order;
	// a multi-label listing's sets of names, or its label columns, as bits.
	var rows []csvRow
	var classes []string
	multi := len(spec.Labels) > 0 || spec.MultiLabel != "" // label sets: csvRow.set
	switch {
	case len(spec.Labels) > 0:
		rows, err = readCSVColumns(f, path, spec.Labels, spec.Uncertain)
		classes = slices.Clone(spec.Labels)
	default:
		rows, err = readCSVRows(f, path, spec.MultiLabel != "")
		if err == nil && spec.MultiLabel != "" {
			classes, err = labelSets(rows, spec.MultiLabel, path)
		}
	}
	if err != nil {
		return nil, err
	}
	base := filepath.Dir(path)
	hasUsers := rows[0].user != "" // every row's, or none's (readCSVRows)
	numeric := !multi
	for _, r := range rows {
		if !numeric {
			break
		}
		if v, err := strconv.Atoi(r.label); err != nil || v < 0 || v >= maxCSVLabels {
			numeric = false
			break
		}
	}
	index := map[string]int32{}
	switch {
	case multi:
	case numeric:
		top := 0
		for _, r := range rows {
			v, _ := strconv.Atoi(r.label)
			top = max(top, v)
		}
		classes = numberedClasses(top + 1)
		for i, c := range classes {
			index[c] = int32(i)
		}
	default:
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

	// Samples are grouped by class — for a multi-label listing by label
	// set, in increasing order of its bits — and taken round-robin over
	// the groups.
	group := func(l int32) int { return int(l) }
	groups := len(classes)
	if multi {
		sets := make([]int32, len(rows))
		for i, r := range rows {
			sets[i] = r.set
		}
		number, distinct := numberDensely(sets)
		index := make(map[int32]int, len(distinct))
		for i, m := range sets {
			index[m] = int(number[i])
		}
		group, groups = func(l int32) int { return index[l] }, len(distinct)
	}
	perClass := make([][]labelledFile, groups)
	seen := make(map[string]int, len(rows))
	var userOf map[string]string // by cleaned path, with users
	if hasUsers {
		userOf = make(map[string]string, len(rows))
	}
	for _, r := range rows {
		p := r.path
		if !filepath.IsAbs(p) {
			p = filepath.Join(base, p)
		}
		p = filepath.Clean(p)
		if first, dup := seen[p]; dup {
			why := "each row is one individual to the accountant"
			if hasUsers {
				why = "the image would count twice for its user"
			}
			return nil, fmt.Errorf("csv: %s: line %d lists %s again (first on line %d): %s; remove the duplicate", path, r.line, r.path, first, why)
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
		switch {
		case multi:
			l = r.set
		case numeric:
			v, _ := strconv.Atoi(r.label)
			l = int32(v)
		}
		perClass[group(l)] = append(perClass[group(l)], labelledFile{p, l})
		if hasUsers {
			userOf[p] = r.user
		}
	}
	// With users, the held-out users: all of a user's images are on one
	// side.
	var heldUser map[string]bool
	if hasUsers && spec.Holdout > 0 {
		names := make([]string, len(rows))
		for i, r := range rows {
			names[i] = r.user
		}
		heldUser = heldOutUsers(names, spec.Holdout)
	}
	total := 0
	for c, items := range perClass {
		if spec.Holdout > 0 && len(items) > 0 {
			var keep []bool
			if hasUsers {
				keep = make([]bool, len(items))
				for k, it := range items {
					keep[k] = heldUser[userOf[it.path]]
				}
			} else {
				keep = holdout(base, len(items), func(k int) string { return items[k].path }, spec.Holdout)
			}
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
	if hasUsers {
		// Numbered over the samples kept: a limit or a holdout leaves no
		// user without samples.
		names := make([]string, len(paths))
		for i, p := range paths {
			names[i] = userOf[p]
		}
		im.users, im.userNames = numberUsers(names)
	}
	im.multiLabel = multi
	// The listing is a source too: a label changed under a running job
	// changes the data its checkpoint would resume on.
	im.sourcePaths = append(im.sourcePaths, path)
	return im, nil
}

// labelSets reads a multi-label listing's rows: each label a set of names
// separated by sep (spaces around them trimmed, empty ones dropped, a
// name twice refused). It returns the names in sorted order, at most
// MaxLabels, and sets each row's set as bits of that order.
func labelSets(rows []csvRow, sep, path string) ([]string, error) {
	names := map[string]bool{}
	sets := make([][]string, len(rows))
	for i, r := range rows {
		for _, n := range strings.Split(r.label, sep) {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if slices.Contains(sets[i], n) {
				return nil, fmt.Errorf("csv: %s: line %d: label %q twice in %q", path, r.line, n, r.label)
			}
			sets[i] = append(sets[i], n)
			if !names[n] {
				if len(names) == MaxLabels {
					return nil, fmt.Errorf("csv: %s: line %d: label %q is one more than the %d labels a multi-label listing may name", path, r.line, n, MaxLabels)
				}
				names[n] = true
			}
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("csv: %s: no row names a label (multilabel: labels separated by %q)", path, sep)
	}
	classes := slices.Sorted(maps.Keys(names))
	for i, set := range sets {
		for _, n := range set {
			rows[i].set |= 1 << slices.Index(classes, n)
		}
	}
	return classes, nil
}

// csvRow is one image of a CSV listing and the line it is on; user is
// its user's name where the header names a user column (then every row
// has one), "" where it names none; set is a multi-label listing's label
// set as bits (labelSets, readCSVColumns).
type csvRow struct {
	path, label, user string
	line              int
	set               int32
}

// readCSVRows reads the path, label and user of every row of a CSV
// listing (loadCSV), naming the file and line of any row it cannot read.
func readCSVRows(r io.Reader, name string, emptyLabels bool) ([]csvRow, error) {
	pathCol, labelCol, userCol := 0, 1, -1
	var userName string // the user column's header, for messages
	var rows []csvRow
	first := true
	err := forEachCSVRecord(r, name, func(rec []string, line int) error {
		if first {
			first = false
			if p, l, u, header, err := csvHeader(rec); err != nil {
				return fmt.Errorf("csv: %s: line %d: %w", name, line, err)
			} else if header {
				pathCol, labelCol, userCol = p, l, u
				if u >= 0 {
					userName = strings.TrimSpace(rec[u])
				}
				return nil
			}
		}
		if userCol >= 0 && len(rec) <= max(pathCol, labelCol, userCol) {
			return fmt.Errorf("csv: %s: line %d: %d fields, want an image path (column %d), a label (column %d) and a user (column %d, %q)", name, line, len(rec), pathCol+1, labelCol+1, userCol+1, userName)
		}
		if len(rec) <= max(pathCol, labelCol) {
			return fmt.Errorf("csv: %s: line %d: %d fields, want an image path and a label (columns %d and %d)", name, line, len(rec), pathCol+1, labelCol+1)
		}
		p, l := strings.TrimSpace(rec[pathCol]), strings.TrimSpace(rec[labelCol])
		if p == "" || l == "" && !emptyLabels {
			return fmt.Errorf("csv: %s: line %d: an empty image path or label", name, line)
		}
		u, err := csvUser(rec, userCol, userName, name, line)
		if err != nil {
			return err
		}
		rows = append(rows, csvRow{path: p, label: l, user: u, line: line})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("csv: %s lists no images (want a row a sample: an image path and a label)", name)
	}
	return rows, nil
}

// newCSVReader reads a listing's records: a byte-order mark skipped (as
// spreadsheets write one), '#' comments, fields counted by the caller
// (with the line), records reused.
func newCSVReader(r io.Reader) *csv.Reader {
	br := bufio.NewReader(r)
	if bom, err := br.Peek(3); err == nil && string(bom) == "\ufeff" {
		br.Discard(3)
	}
	cr := csv.NewReader(br)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	cr.Comment = '#'
	return cr
}

// forEachCSVRecord calls fn with each record of the listing r (name, for
// messages) and its line, through newCSVReader; fn's error stops it.
func forEachCSVRecord(r io.Reader, name string, fn func(rec []string, line int) error) error {
	cr := newCSVReader(r)
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return csvReadError(name, err)
		}
		line, _ := cr.FieldPos(0) // after a good Read only: FieldPos panics after an error
		if err := fn(rec, line); err != nil {
			return err
		}
	}
}

// csvUser is a row's user, from the user column col (−1: none): an empty
// one is an error naming the column (header: its name).
func csvUser(rec []string, col int, header, name string, line int) (string, error) {
	if col < 0 {
		return "", nil
	}
	u := strings.TrimSpace(rec[col])
	if u == "" {
		return "", fmt.Errorf("csv: %s: line %d: an empty user (column %d, %q): every row of a listing with a user column names the user its image belongs to", name, line, col+1, header)
	}
	return u, nil
}

// csvReadError names the listing, and the line where the reader knows it.
func csvReadError(name string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("csv: %s: line %d: %v", name, pe.Line, pe.Err)
	}
	return fmt.Errorf("csv: %s: %w", name, err)
}

// readCSVColumns reads a listing whose labels are columns of their own
// (Spec.Labels): a header naming an image path column, each label column
// (its name as given, or in another case) and optionally a user column;
// each row's label set as bits of the columns' order — 1 (or
// 1.0) where the label applies, 0 or empty where it does not, -1 as
// uncertain says (zero, one; "" refuses it).
func readCSVColumns(r io.Reader, name string, labels []string, uncertain string) ([]csvRow, error) {
	var rows []csvRow
	pathCol, userCol := -1, -1
	var cols []int
	var userName string // the user column's header, for messages
	err := forEachCSVRecord(r, name, func(rec []string, line int) error {
		if cols == nil {
			find := func(names []string, exact bool) int {
				for i, f := range rec {
					f = strings.TrimSpace(f)
					for _, n := range names {
						if f == n || !exact && strings.EqualFold(f, n) {
							return i
						}
					}
				}
				return -1
			}
			if pathCol = find(csvPathColumns, false); pathCol < 0 {
				return fmt.Errorf("csv: %s: line %d: the header %q names no image path column (one of %s); labels= needs a header", name, line, strings.Join(rec, ","), strings.Join(csvPathColumns, ", "))
			}
			if userCol = find(csvUserColumns, false); userCol >= 0 {
				userName = strings.TrimSpace(rec[userCol])
			}
			for _, l := range labels {
				c := find([]string{l}, true)
				if c < 0 {
					c = find([]string{l}, false)
				}
				if c < 0 {
					return fmt.Errorf("csv: %s: line %d: no column %q in the header %q", name, line, l, strings.Join(rec, ","))
				}
				cols = append(cols, c)
			}
			return nil
		}
		need := max(pathCol, userCol, slices.Max(cols))
		if len(rec) <= need {
			return fmt.Errorf("csv: %s: line %d: %d fields, want at least %d", name, line, len(rec), need+1)
		}
		p := strings.TrimSpace(rec[pathCol])
		if p == "" {
			return fmt.Errorf("csv: %s: line %d: an empty image path", name, line)
		}
		u, err := csvUser(rec, userCol, userName, name, line)
		if err != nil {
			return err
		}
		var m int32
		for j, c := range cols {
			v := strings.TrimSpace(rec[c])
			if v == "" {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			switch {
			case err == nil && f == 1:
				m |= 1 << j
			case err == nil && f == 0:
			case err == nil && f == -1 && uncertain == "one":
				m |= 1 << j
			case err == nil && f == -1 && uncertain == "zero":
			case err == nil && f == -1:
				return fmt.Errorf("csv: %s: line %d: %q is -1, uncertain: say what it means with :uncertain=zero or :uncertain=one", name, line, labels[j])
			default:
				return fmt.Errorf("csv: %s: line %d: %q is %q: want 1, 0, empty or -1", name, line, labels[j], v)
			}
		}
		rows = append(rows, csvRow{path: p, user: u, line: line, set: m})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("csv: %s lists no images", name)
	}
	return rows, nil
}

// csvHeader reads a CSV's first row as a header where it names a path or a
// label column (csvPathColumns, csvLabelColumns): then it must name both,
// and may name a user column (csvUserColumns; userCol is -1 where it
// does not).
func csvHeader(rec []string) (pathCol, labelCol, userCol int, header bool, err error) {
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
		return 0, 1, -1, false, nil
	case pathCol < 0:
		return 0, 0, -1, true, fmt.Errorf("the header %q names a label column but no image path column (one of %s)", strings.Join(rec, ","), strings.Join(csvPathColumns, ", "))
	case labelCol < 0:
		return 0, 0, -1, true, fmt.Errorf("the header %q names an image path column but no label column (one of %s)", strings.Join(rec, ","), strings.Join(csvLabelColumns, ", "))
	}
	return pathCol, labelCol, find(csvUserColumns), true, nil
}
