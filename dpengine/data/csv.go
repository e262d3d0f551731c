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

	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/internal/sysmem"
)

// csvPathColumns and csvLabelColumns are the header names (in any case)
// that loadCSV reads an image's path and its label from: the names
// Hugging Face's imagefolder metadata, Kaggle's and pandas' exports use.
// csvUserColumns are those of the optional column naming the user (the
// patient, subject, participant) an image belongs to, for a user-level
// guarantee: the names medical and personal datasets' listings use.
var (
	csvPathColumns  = []string{"path", "file", "filename", "file_name", "filepath", "file_path", "image", "image_path", "image_id", "image_name", "img", "img_path"}
	csvLabelColumns = []string{"label", "labels", "class", "class_name", "target", "category", "y"}
	csvUserColumns  = []string{"user", "user_id", "userid", "patient", "patient_id", "subject", "subject_id", "participant", "participant_id", "individual", "person", "person_id", "owner", "group"}
)

// maxCSVLabels bounds the distinct class names of a CSV (a model's head
// has one logit a class).
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
	// a multi-label listing's sets of names, or its label columns, as sets
	// (internal/labelset).
	var rows []csvRow
	var classes []string
	// soft are the label columns' soft targets (uncertain=T).
	var soft []float64
	multi := len(spec.Labels) > 0 || spec.MultiLabel != "" // label sets: csvRow.set
	where, err := parseWhere(spec.Where)
	if err != nil {
		return nil, fmt.Errorf("csv: %s: %w", path, err)
	}
	pick := csvPick{path: spec.PathColumn, label: spec.LabelColumn, user: spec.UserColumn, noUser: spec.Users != "" || spec.DICOMUsers, where: where}
	switch {
	case len(spec.Labels) > 0:
		rows, classes, soft, err = readCSVColumns(f, path, spec.Labels, spec.Uncertain, pick)
	default:
		rows, err = readCSVRows(f, path, spec.MultiLabel != "", pick)
		if err == nil && spec.MultiLabel != "" {
			classes, err = labelSets(rows, spec.MultiLabel, path)
		}
	}
	if err == nil && spec.Users != "" {
		err = csvPathUsers(rows, spec.Users, path)
	}
	if err != nil {
		return nil, err
	}
	if spec.Ext != "" {
		for i, r := range rows {
			if filepath.Ext(r.path) == "" {
				rows[i].path += spec.Ext
			}
		}
	}
	base := filepath.Dir(path)
	if spec.Root != "" {
		if st, err := os.Stat(spec.Root); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("csv: %s: root=%s: not a directory (the directory the listing's relative image paths are relative to)", path, spec.Root)
		}
		base = spec.Root
	}
	if spec.DICOMUsers {
		// A listing read whole for evaluation may be one patient's.
		training := spec.split() == Train || spec.Holdout > 0
		if err := csvDICOMUsers(rows, base, path, training); err != nil {
			return nil, err
		}
	}
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
	index := map[string]int64{}
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
			index[c] = int64(i)
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
			index[c] = int64(i)
		}
	}

	// Samples are grouped by class — for a multi-label listing by label
	// set, in increasing order of the number its bits write
	// (labelset.Compare) — and taken round-robin over the groups.
	group := func(l int64) int { return int(l) }
	groups := len(classes)
	if multi {
		index := map[int64]int{}
		var distinct []int64
		for _, r := range rows {
			if _, ok := index[r.set]; !ok {
				index[r.set] = 0
				distinct = append(distinct, r.set)
			}
		}
		slices.SortFunc(distinct, func(a, b int64) int { return labelset.Compare(a, b, len(classes)) })
		for g, l := range distinct {
			index[l] = g
		}
		group, groups = func(l int64) int { return index[l] }, len(distinct)
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
		switch {
		case fit.Series && !st.IsDir():
			return nil, fmt.Errorf("csv: %s: line %d: %s is not a directory (with series, a row lists a directory of a series' slices)", path, r.line, p)
		case !fit.Series && !st.Mode().IsRegular():
			return nil, fmt.Errorf("csv: %s: line %d: %s is not a file", path, r.line, p)
		}
		l := index[r.label]
		switch {
		case multi:
			l = r.set
		case numeric:
			v, _ := strconv.Atoi(r.label)
			l = int64(v)
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
	im, units, _, expanded, err := loadUnits("csv: "+path, paths, labels, classes, fit)
	if err != nil {
		return nil, err
	}
	switch {
	case hasUsers:
		// Numbered over the samples kept: a limit or a holdout leaves no
		// user without samples.
		names := make([]string, len(units))
		for i, p := range units {
			names[i] = userOf[p]
		}
		im.users, im.userNames = numberUsers(names)
	case expanded:
		im.users, im.userNames = fileUsers(base, units)
	}
	im.multiLabel, im.uncertain = multi, soft
	// The listing is a source too: a label changed under a running job
	// changes the data its checkpoint would resume on.
	im.sourcePaths = append(im.sourcePaths, path)
	return im, nil
}

// labelSets reads a multi-label listing's rows: each label a set of names
// separated by sep (spaces around them trimmed, empty ones dropped, a
// name twice refused). It returns the names in sorted order, at most
// MaxLabels, and sets each row's set in that order (internal/labelset).
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
	index := make(map[string]int, len(classes))
	for j, n := range classes {
		index[n] = j
	}
	var on []int
	for i, set := range sets {
		on = on[:0]
		for _, n := range set {
			on = append(on, index[n])
		}
		var err error
		if rows[i].set, err = labelset.Of(len(classes), on); err != nil {
			return nil, fmt.Errorf("csv: %s: line %d: %v", path, rows[i].line, err)
		}
	}
	return classes, nil
}

// csvRow is one image of a CSV listing and the line it is on; user is
// its user's name where the header names a user column (then every row
// has one), "" where it names none; set is a multi-label listing's label
// set (labelSets, readCSVColumns; internal/labelset).
type csvRow struct {
	path, label, user string
	line              int
	set               int64
}

// csvPick is a listing's choice of columns (Spec.PathColumn, LabelColumn,
// UserColumn), empty where the usual names are looked for; noUser: no
// user column is looked for (Spec.Users reads the users from the paths).
type csvPick struct {
	path, label, user string
	noUser            bool
	// where selects the rows read (Spec.Where); nil reads them all.
	where *csvWhere
}

// any reports whether a column is named: the listing must have a header.
func (p csvPick) any() bool { return p.path != "" || p.label != "" || p.user != "" || p.where != nil }

// csvWhere is Spec.Where: the column, its index in the header once found,
// and the values a row read holds in it.
type csvWhere struct {
	col    string
	values []string
	idx    int
}

// noRows is the error of a listing that gives no row: none at all (want
// says what a row holds), or none where= selects.
func noRows(name string, w *csvWhere, want string) error {
	if w != nil {
		return fmt.Errorf("csv: %s: no row's %q is %s (where=)", name, w.col, strings.Join(w.values, " or "))
	}
	return fmt.Errorf("csv: %s lists no images (%s)", name, want)
}

// parseWhere reads a where= option, COL=V1|V2|…; nil for "".
func parseWhere(s string) (*csvWhere, error) {
	if s == "" {
		return nil, nil
	}
	col, vals, ok := strings.Cut(s, "=")
	w := &csvWhere{col: strings.TrimSpace(col), idx: -1}
	for _, v := range strings.Split(vals, "|") {
		if v = strings.TrimSpace(v); v != "" {
			w.values = append(w.values, v)
		}
	}
	if !ok || w.col == "" || len(w.values) == 0 {
		return nil, fmt.Errorf("where=%s: want COL=VALUE, or COL=V1|V2 for any of several", s)
	}
	return w, nil
}

// find finds w's column in the header rec.
func (w *csvWhere) find(rec []string) error {
	if w == nil {
		return nil
	}
	if w.idx = csvColumn(rec, w.col); w.idx < 0 {
		return fmt.Errorf("where=%s=…: no such column in the header %q", w.col, strings.Join(rec, ","))
	}
	return nil
}

// keep reports whether the row rec is read: its column holds one of w's
// values (every row where w is nil).
func (w *csvWhere) keep(rec []string, name string, line int) (bool, error) {
	if w == nil {
		return true, nil
	}
	if len(rec) <= w.idx {
		return false, fmt.Errorf("csv: %s: line %d: %d fields, want the where= column %q (column %d)", name, line, len(rec), w.col, w.idx+1)
	}
	return slices.Contains(w.values, strings.TrimSpace(rec[w.idx])), nil
}

// csvColumn returns the index of the header's column named name in any
// case (an exact match first), -1 where there is none.
func csvColumn(rec []string, name string) int {
	fold := -1
	for i, f := range rec {
		switch f = strings.TrimSpace(f); {
		case f == name:
			return i
		case fold < 0 && strings.EqualFold(f, name):
			fold = i
		}
	}
	return fold
}

// csvFirstColumn returns the index of the header's first column that has
// one of names (in any case), -1 where none has.
func csvFirstColumn(rec []string, names []string) int {
	for i, f := range rec {
		f = strings.TrimSpace(f)
		for _, n := range names {
			if strings.EqualFold(f, n) {
				return i
			}
		}
	}
	return -1
}

// pathAndUserColumns finds a header's image path column and user column
// (−1: none) as pick says, an error naming what is missing.
func (p csvPick) pathAndUserColumns(rec []string) (pathCol, userCol int, err error) {
	header := strings.Join(rec, ",")
	if p.path != "" {
		if pathCol = csvColumn(rec, p.path); pathCol < 0 {
			return 0, 0, fmt.Errorf("path=%s: no such column in the header %q", p.path, header)
		}
	} else if pathCol = csvFirstColumn(rec, csvPathColumns); pathCol < 0 {
		return 0, 0, fmt.Errorf("the header %q names no image path column (one of %s; or name it with :path=COL)", header, strings.Join(csvPathColumns, ", "))
	}
	switch {
	case p.user != "":
		if userCol = csvColumn(rec, p.user); userCol < 0 {
			return 0, 0, fmt.Errorf("user=%s: no such column in the header %q", p.user, header)
		}
	case p.noUser:
		userCol = -1
	default:
		userCol = csvFirstColumn(rec, csvUserColumns)
	}
	if userCol == pathCol {
		return 0, 0, fmt.Errorf("the column %q is both the image path and the user column of the header %q", strings.TrimSpace(rec[pathCol]), header)
	}
	return pathCol, userCol, nil
}

// csvPathUsers sets each row's user from its path as listed, '/'-separated,
// by the expression expr (Spec.Users): the first capture group, or the
// whole match where it has none; a row whose path does not match, or
// names an empty user, is an error naming its line.
func csvPathUsers(rows []csvRow, expr, name string) error {
	re, err := compileUsers(expr)
	if err != nil {
		return fmt.Errorf("csv: %s: %v", name, err)
	}
	for i, r := range rows {
		p := filepath.ToSlash(r.path)
		u, err := matchUser(re, p)
		if err != nil {
			return fmt.Errorf("csv: %s: line %d: the path %q: %v; every image must name its user", name, r.line, p, err)
		}
		rows[i].user = u
	}
	return nil
}

// csvDICOMUsers sets each row's user to its DICOM file's Patient ID
// (Spec.DICOMUsers), the paths relative to base; a file that is not
// DICOM, or names no patient, is an error naming its line, and one ID
// over every row of training data is refused (blanked IDs:
// sameDICOMUser).
func csvDICOMUsers(rows []csvRow, base, name string, training bool) error {
	ids := make([]string, len(rows))
	for i, r := range rows {
		p := r.path
		if !filepath.IsAbs(p) {
			p = filepath.Join(base, p)
		}
		id, err := dicomUser(name, p)
		if err != nil {
			return fmt.Errorf("csv: %s: line %d: %v", name, r.line, err)
		}
		rows[i].user, ids[i] = id, id
	}
	if !training {
		return nil
	}
	return sameDICOMUser("csv", name, ids)
}

// readCSVRows reads the path, label and user of every row of a CSV
// listing (loadCSV), naming the file and line of any row it cannot read.
func readCSVRows(r io.Reader, name string, emptyLabels bool, pick csvPick) ([]csvRow, error) {
	pathCol, labelCol, userCol := 0, 1, -1
	var userName string // the user column's header, for messages
	var rows []csvRow
	first := true
	err := forEachCSVRecord(r, name, func(rec []string, line int) error {
		if first {
			first = false
			if p, l, u, header, err := csvHeader(rec, pick); err != nil {
				return fmt.Errorf("csv: %s: line %d: %w", name, line, err)
			} else if header {
				pathCol, labelCol, userCol = p, l, u
				if u >= 0 {
					userName = strings.TrimSpace(rec[u])
				}
				if err := pick.where.find(rec); err != nil {
					return fmt.Errorf("csv: %s: line %d: %w", name, line, err)
				}
				return nil
			}
		}
		if ok, err := pick.where.keep(rec, name, line); !ok || err != nil {
			return err
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
		return nil, noRows(name, pick.where, "want a row a sample: an image path and a label")
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
// (its name as given, or in another case; FIRST..LAST ranges and * as
// labelColumns reads them) and optionally a user column; each row's label
// set in the columns' order (internal/labelset) — 1 (or 1.0) where the label applies,
// 0 or empty where it does not, -1 as uncertain's rule for the column says
// (zero, one, ignore: a partial set; none refuses it; Spec.Uncertain). It
// returns the label columns' names as the header has them.
func readCSVColumns(r io.Reader, name string, labels []string, uncertain string, pick csvPick) ([]csvRow, []string, []float64, error) {
	var rows []csvRow
	pathCol, userCol := -1, -1
	var cols []int
	var names, rules []string
	var on, ign []int   // a row's labels that apply, and those it ignores
	var userName string // the user column's header, for messages
	ur, err := parseUncertain(uncertain)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("csv: %s: %w", name, err)
	}
	var soft []float64 // the columns' soft targets (softTargets)
	err = forEachCSVRecord(r, name, func(rec []string, line int) error {
		if cols == nil {
			var err error
			if pathCol, userCol, err = pick.pathAndUserColumns(rec); err != nil {
				return fmt.Errorf("csv: %s: line %d: %w; labels= needs a header", name, line, err)
			}
			if userCol >= 0 {
				userName = strings.TrimSpace(rec[userCol])
			}
			if cols, err = labelColumns(rec, labels, pathCol, userCol); err != nil {
				return fmt.Errorf("csv: %s: line %d: %w", name, line, err)
			}
			for _, c := range cols {
				names = append(names, strings.TrimSpace(rec[c]))
			}
			if rules, err = ur.forColumns(names); err != nil {
				return fmt.Errorf("csv: %s: line %d: %w", name, line, err)
			}
			soft = softTargets(rules)
			if err := pick.where.find(rec); err != nil {
				return fmt.Errorf("csv: %s: line %d: %w", name, line, err)
			}
			return nil
		}
		if ok, err := pick.where.keep(rec, name, line); !ok || err != nil {
			return err
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
		on, ign = on[:0], ign[:0]
		for j, c := range cols {
			v := strings.TrimSpace(rec[c])
			if v == "" {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			switch {
			case err == nil && f == 1:
				on = append(on, j)
			case err == nil && f == 0:
			case err == nil && f == -1 && rules[j] == "one":
				on = append(on, j)
			case err == nil && f == -1 && rules[j] == "zero":
			case err == nil && f == -1 && (rules[j] == "ignore" || soft != nil && soft[j] > 0):
				ign = append(ign, j)
			case err == nil && f == -1:
				return fmt.Errorf("csv: %s: line %d: %q is -1, uncertain: say what it means with :uncertain=zero, :uncertain=one or :uncertain=ignore (or per column, :uncertain=zero,%s=one)", name, line, names[j], names[j])
			default:
				return fmt.Errorf("csv: %s: line %d: %q is %q: want 1, 0, empty or -1", name, line, names[j], v)
			}
		}
		m, err := labelset.OfIgnoring(len(cols), on, ign)
		if err != nil {
			return fmt.Errorf("csv: %s: line %d: %v", name, line, err)
		}
		rows = append(rows, csvRow{path: p, user: u, line: line, set: m})
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	if len(rows) == 0 {
		return nil, nil, nil, noRows(name, pick.where, "want a row an image and its labels")
	}
	return rows, names, soft, nil
}

// labelColumns returns the header rec's columns that labels= names
// (Spec.Labels): each name (exactly, else in another case), FIRST..LAST
// the columns from FIRST to LAST in the header's order, * every column
// but the path and user columns; a column twice, none, or more than
// MaxLabels is an error.
func labelColumns(rec []string, labels []string, pathCol, userCol int) ([]int, error) {
	header := strings.Join(rec, ",")
	column := func(n string) (int, error) {
		if c := csvColumn(rec, strings.TrimSpace(n)); c >= 0 {
			return c, nil
		}
		return 0, fmt.Errorf("no column %q in the header %q", strings.TrimSpace(n), header)
	}
	var cols []int
	for _, l := range labels {
		first, last, isRange := strings.Cut(l, "..")
		switch {
		case l == "*":
			for c := range rec {
				if c != pathCol && c != userCol {
					cols = append(cols, c)
				}
			}
		case isRange:
			a, err := column(first)
			if err != nil {
				return nil, fmt.Errorf("labels= range %q: %w", l, err)
			}
			b, err := column(last)
			if err != nil {
				return nil, fmt.Errorf("labels= range %q: %w", l, err)
			}
			if b < a {
				return nil, fmt.Errorf("labels= range %q: %q comes before %q in the header %q", l, strings.TrimSpace(last), strings.TrimSpace(first), header)
			}
			for c := a; c <= b; c++ {
				cols = append(cols, c)
			}
		default:
			c, err := column(l)
			if err != nil {
				return nil, err
			}
			cols = append(cols, c)
		}
	}
	seen, named := map[int]bool{}, map[string]bool{}
	for _, c := range cols {
		name := strings.TrimSpace(rec[c])
		switch {
		case named[name] && !seen[c]:
			return nil, fmt.Errorf("labels=%s: two columns of the header %q are named %q: a label's name must say which it is", strings.Join(labels, ","), header, name)
		case c == pathCol:
			return nil, fmt.Errorf("labels=%s takes the image path column %q for a label", strings.Join(labels, ","), strings.TrimSpace(rec[c]))
		case c == userCol:
			return nil, fmt.Errorf("labels=%s takes the user column %q for a label", strings.Join(labels, ","), strings.TrimSpace(rec[c]))
		case seen[c]:
			return nil, fmt.Errorf("labels=%s names the column %q twice", strings.Join(labels, ","), name)
		}
		seen[c], named[name] = true, true
	}
	switch {
	case len(cols) == 0:
		return nil, fmt.Errorf("labels=%s names no column of the header %q", strings.Join(labels, ","), header)
	case len(cols) > MaxLabels:
		return nil, fmt.Errorf("labels=%s names %d columns, at most %d", strings.Join(labels, ","), len(cols), MaxLabels)
	}
	return cols, nil
}

// csvHeader reads a CSV's first row as a header where it names a path or a
// label column (csvPathColumns, csvLabelColumns, or pick's): then it must
// name both, and may name a user column (csvUserColumns or pick's; userCol
// is -1 where it does not). Where pick names a column the first row must
// be a header that has it.
func csvHeader(rec []string, pick csvPick) (pathCol, labelCol, userCol int, header bool, err error) {
	labelCol = csvFirstColumn(rec, csvLabelColumns)
	if pick.label != "" {
		if labelCol = csvColumn(rec, pick.label); labelCol < 0 {
			return 0, 0, -1, true, fmt.Errorf("label=%s: no such column in the header %q", pick.label, strings.Join(rec, ","))
		}
	}
	if !pick.any() && labelCol < 0 && csvFirstColumn(rec, csvPathColumns) < 0 {
		return 0, 1, -1, false, nil
	}
	pathCol, userCol, err = pick.pathAndUserColumns(rec)
	switch {
	case err != nil:
		return 0, 0, -1, true, err
	case labelCol < 0:
		return 0, 0, -1, true, fmt.Errorf("the header %q names an image path column but no label column (one of %s; or name it with :label=COL)", strings.Join(rec, ","), strings.Join(csvLabelColumns, ", "))
	case labelCol == pathCol || labelCol == userCol:
		return 0, 0, -1, true, fmt.Errorf("the column %q is the label column and the image path or user column of the header %q", strings.TrimSpace(rec[labelCol]), strings.Join(rec, ","))
	}
	return pathCol, labelCol, userCol, true, nil
}
