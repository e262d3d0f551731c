package data

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dpfinetune/dpfinetune/internal/labelset"
)

// The spec schemes: the formats Load reads.
const (
	// SchemeIDX names MNIST-style IDX files in a directory:
	// train-images-idx3-ubyte, train-labels-idx1-ubyte,
	// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each plain or
	// gzip-compressed (with or without a .gz suffix).
	SchemeIDX = "idx"
	// SchemeCIFAR10 names the CIFAR-10 binary version: data_batch_1.bin …
	// data_batch_5.bin and test_batch.bin.
	SchemeCIFAR10 = "cifar10"
	// SchemeCIFAR100 names the CIFAR-100 binary version: train.bin and
	// test.bin, read with their fine (100-class) labels.
	SchemeCIFAR100 = "cifar100"
	// SchemeFolder names a directory with one sub-directory of images per
	// class (PNG, JPEG, BMP, TIFF, WebP or Netpbm: torchvision's
	// ImageFolder's extensions), optionally split into train/ and test/ (or
	// val/). The option users=REGEX names each image's user from its path
	// (Spec.Users).
	SchemeFolder = "folder"
	// SchemeNPY names NumPy arrays: a .npz archive or a directory of .npy
	// files holding the samples and their labels (see LoadArrays).
	SchemeNPY = "npy"
	// SchemeCSV names a CSV file listing an image file and its label a
	// row (a header naming the columns, or the path first and the label
	// second; see loadCSV). It has no test split but :holdout=F.
	SchemeCSV = "csv"
)

// Schemes lists the valid spec schemes in the order the help text names them.
func Schemes() []string {
	return []string{SchemeIDX, SchemeCIFAR10, SchemeCIFAR100, SchemeFolder, SchemeNPY, SchemeCSV}
}

// Split selects the part of a dataset to load.
type Split string

// The splits.
const (
	// Train is the training split (the default).
	Train Split = "train"
	// Test is the held-out split: t10k-* for IDX, test_batch.bin /
	// test.bin for CIFAR, DIR/test or DIR/val for folders, x_test and
	// y_test (or x_val and y_val) for arrays.
	Test Split = "test"
)

// ParseSplit parses "train", "test" or "val" (a synonym of test).
func ParseSplit(s string) (Split, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "train":
		return Train, nil
	case "test", "val", "valid", "validation":
		return Test, nil
	}
	return "", fmt.Errorf("unknown split %q (valid: train, test, val)", s)
}

// Spec says where a dataset lives and which part of it to load.
//
// The string form, parsed by ParseSpec, is
//
//	SCHEME:DIR[:OPTION]...
//
// where SCHEME is one of Schemes() and each OPTION is one of
//
//	split=train|test|val   (or just train, test, val)
//	limit=N                keep the first N samples (0: all)
//	classes=N              number of classes (idx: default 10; npy:
//	                       default one more than the largest label)
//	holdout=F              folder and csv only: hold out a fraction F of
//	                       each training class (of the users, where the
//	                       samples name them) as the test split (see
//	                       Holdout)
//	multilabel[=SEP]       csv only: a row's label is a set of labels
//	                       separated by SEP ('|' by default; see
//	                       MultiLabel)
//	labels=COL1,COL2,…     csv only: the columns holding a row's labels,
//	                       one a label: 1, 0 or empty, -1 (see Labels);
//	                       FIRST..LAST the columns from FIRST to LAST,
//	                       * every column but the path and user columns
//	uncertain=RULE[,COL=RULE…]  what a labels= column's -1 means (or a
//	                       multi-hot NumPy label's, COL its name or number):
//	                       zero, one or ignore, per column (Uncertain)
//	path=COL, label=COL,   csv only: the header's image path, label and
//	user=COL               user columns, where their names are not the
//	                       usual ones (see PathColumn)
//	root=DIR               csv only: relative image paths are relative
//	                       to DIR, not to the listing's directory (Root)
//	ext=.EXT               csv only: added to listed paths that have no
//	                       extension (Ext)
//	where=COL=V1|V2|…      csv only: only the rows whose column COL holds
//	                       one of the values (Where)
//	users=REGEX            folder and csv: each image's user is read from
//	                       its path — within its class directory, or as
//	                       the listing gives it — by the regular
//	                       expression REGEX (see Users); REGEX may not
//	                       contain ':', the spec separator
//
// Options are recognised from the right, so DIR may itself contain colons
// as long as its last component does not look like an option (nor any
// component start with "users=": see Users). Examples:
// "idx:/usr/share/datasets/fashion-mnist", "cifar10:./cifar-10-batches-bin:limit=5000",
// "folder:/data/flowers:split=val", "csv:/data/labels.csv:holdout=0.1",
// "folder:/data/chest_xray:users=^(person\d+)_:holdout=0.2".
type Spec struct {
	// Scheme is one of the Scheme* constants.
	Scheme string
	// Dir is the dataset directory (the file of an npy archive or a csv
	// listing).
	Dir string
	// Split is the part to load; empty means Train.
	Split Split
	// Validation says the held-out split was asked for as the validation
	// one (val, valid, validation): where the data hold a validation
	// split beside a test split — a folder's val/ beside test/, an
	// archive's x_val or val_images beside x_test or test_images
	// (MedMNIST's) — that one, so that a threshold or a temperature chosen
	// on it leaves the test split unseen. Test splits are read otherwise.
	Validation bool
	// Limit keeps only the first Limit samples when positive. For
	// folders and CSV listings the samples are ordered round-robin over
	// the classes (the first file of every class, then the second, …), so
	// a limit keeps the classes balanced; IDX and CIFAR keep their file
	// order.
	Limit int
	// Classes is the number of classes of an IDX or NPY dataset (their
	// files do not record it); 0 means 10 for IDX and one more than the
	// largest label for NPY. Ignored by the other schemes, whose class
	// count is fixed (CIFAR) or read from the directory (folder).
	Classes int
	// Holdout, in (0, 1), splits a folder's (or a CSV listing's)
	// training images instead of reading a test directory: of each class, a fraction Holdout of its
	// files (rounded, at least one of a class of two or more, never all)
	// is the test split and the rest the training split. The files are
	// chosen by a hash of their paths within the folder, not by their
	// contents: the same files every run, and adding a file to a class
	// moves at most one of its other files between the splits. A test
	// directory, if the folder has one, is not read. A CSV listing that
	// names its users (see loadCSV), and a folder read with Users, hold
	// out a fraction of their users instead, with all of their images,
	// chosen by a hash of their names.
	Holdout float64
	// Users, for a folder or a CSV listing, is a regular expression (Go's
	// regexp syntax) that names each image's user — the patient, subject
	// or person a user-level guarantee protects — from the image's path:
	// a CSV listing's path as it is listed ('/'-separated; CheXpert's
	// "…/train/patient00001/study1/view1_frontal.jpg", users=/(patient\d+)/),
	// and instead of any user column; a folder's path within its class
	// directory, '/'-separated: "person1_virus_6.jpeg",
	// or "P017/img3.png" where a class directory holds a sub-directory of
	// images per user. The user is the expression's first capture group
	// where it has one, else the whole match: "^(person\d+)_" or
	// "^([^/]+)/". With Users the images one level down, in the
	// sub-directories of a class directory, are read too (CLASS/USER/IMAGE;
	// deeper directories are not); every image must match, with a
	// non-empty user, or the load fails naming it. Users are numbered in
	// sorted order of their names over the samples loaded, one user
	// across the classes (the Users interface). Empty: the folder names no
	// users, and a class directory's sub-directories are not read.
	//
	// Users may not contain ':', the spec separator, so that the string
	// form reads back: write a literal colon as \x3a, and use capture
	// groups for (?:…). ParseSpec refuses a directory holding ":users=",
	// which is what such an expression would leave of the spec.
	Users string
	// DICOMUsers, for a folder or a CSV listing of DICOM images, names each
	// image's user by its file's Patient ID (0010,0020) instead of its
	// path or a column, the rest as with Users (a folder's class
	// directories' sub-directories read too, one level down). Every image
	// must be a DICOM file with a non-empty Patient ID, or the load fails
	// naming it; the IDs are the users' names (eval --group-by user shows
	// them). Training images that all carry one ID (an export that blanked
	// them to "ANONYMOUS") are refused: they would make the patients one
	// user. The string form is ":dicom-users".
	DICOMUsers bool
	// MultiLabel, for a CSV listing only, makes each row's label a set of
	// labels separated by this character ("|": NIH ChestX-ray14's
	// "Finding Labels", "Atelectasis|Effusion"; an empty label is the
	// empty set): the dataset is then multi-label (MultiLabeled), its
	// classes the labels' names in sorted order, at most MaxLabels, and a
	// sample's label the set (internal/labelset: the bits, bit j label j,
	// to 62 labels). Empty: one
	// class a row.
	MultiLabel string
	// Labels, for a CSV listing only, names the columns that hold each
	// row's labels, one column a label (CheXpert's and MIMIC-CXR's
	// listings: "Atelectasis", "Cardiomegaly", …): 1 where the label
	// applies, 0 or empty where it does not, and -1 — uncertain — as
	// Uncertain says (CelebA's attributes, 1 or -1: Uncertain "zero"). The
	// dataset is then multi-label, its classes these names in this order.
	// The listing must have a header naming them and an image path
	// column. An element "FIRST..LAST" names the header's columns from
	// FIRST to LAST, both included (CheXpert's "No Finding..Support
	// Devices"); "*", alone, every column but the image path and user
	// columns (CelebA's 40 attributes). At most MaxLabels in all.
	Labels []string
	// PathColumn, LabelColumn and UserColumn, for a CSV listing only, name
	// the header's image path, label and user columns (matched in any
	// case) where the listing does not use one of the usual names
	// (csvPathColumns, csvLabelColumns, csvUserColumns): HAM10000's
	// "image_id", "dx" and "lesion_id". A listing with any of them must
	// have a header holding it. Empty: the usual names.
	PathColumn, LabelColumn, UserColumn string
	// Root, for a CSV listing only, is the directory relative image paths
	// are relative to (CheXpert's train.csv, whose paths begin with the
	// folder it sits in, is read with Root its parent). Empty: the
	// listing's directory.
	Root string
	// Ext, for a CSV listing only, is an extension (".jpg") added to each
	// listed path that has none: HAM10000's image_id "ISIC_0027419" names
	// ISIC_0027419.jpg. Empty: paths as listed.
	Ext string
	// Where, for a CSV listing only, keeps only the rows whose column
	// (named before the first '=') holds one of the values after it,
	// separated by '|', exactly: "Frontal/Lateral=Frontal" (CheXpert's
	// frontal views), "dx_type=histo|confocal". The others are not read
	// at all — not even checked —, as if the listing did not hold them.
	// The listing must have a header naming the column.
	Where string
	// Uncertain says what a Labels column's -1 (an uncertain label) is —
	// or a multi-hot NumPy label's (SchemeNPY; its columns named by the
	// classes array's names, or by their numbers, "0", "1", …):
	// "zero" (absent: U-Zeros), "one" (present: CheXpert's U-Ones),
	// "ignore" (neither: the label left out of the sample's loss and of
	// the evaluation's figures, U-Ignore; internal/labelset's partial
	// sets), a number T in (0, 1) (uncertain: a soft target T in the
	// loss, left out of the evaluation's figures — label smoothing
	// regularization, Pham et al. 2021; UncertainTargets) — or such a rule for every column followed by COLUMN=RULE
	// exceptions, comma separated ("zero,Atelectasis=one,Edema=one", the
	// CheXpert paper's choice per finding), or exceptions alone — and "",
	// or a column no rule covers: refused, naming the row.
	Uncertain string
}

// uncertainRules is what a Spec.Uncertain says: the rule of the columns
// it does not name (all, "" for none) and the exceptions by column name.
type uncertainRules struct {
	all     string
	columns map[string]string
	order   []string // the exceptions' columns as given, for messages
}

// parseUncertain reads a Spec.Uncertain.
func parseUncertain(val string) (uncertainRules, error) {
	var r uncertainRules
	ok := func(rule string) bool {
		_, soft := softTarget(rule)
		return rule == "zero" || rule == "one" || rule == "ignore" || soft
	}
	if val == "" {
		return r, nil
	}
	for i, part := range strings.Split(val, ",") {
		part = strings.TrimSpace(part)
		col, rule, named := strings.Cut(part, "=")
		col, rule = strings.TrimSpace(col), strings.TrimSpace(rule)
		switch {
		case !named && i == 0 && ok(part):
			r.all = part
		case !named:
			return r, fmt.Errorf("uncertain=%s: %q: want zero, one, ignore or a soft target in (0, 1) (what a label column's -1 means), then COLUMN=RULE exceptions", val, part)
		case col == "" || !ok(rule):
			return r, fmt.Errorf("uncertain=%s: %q: want COLUMN=zero, COLUMN=one, COLUMN=ignore or COLUMN=T, T in (0, 1)", val, part)
		case r.columns[col] != "":
			return r, fmt.Errorf("uncertain=%s: column %q twice", val, col)
		default:
			if r.columns == nil {
				r.columns = map[string]string{}
			}
			r.columns[col] = rule
			r.order = append(r.order, col)
		}
	}
	return r, nil
}

// softTarget reads a rule that is a soft target: a number in (0, 1).
func softTarget(rule string) (float64, bool) {
	v, err := strconv.ParseFloat(rule, 64)
	return v, err == nil && v > 0 && v < 1
}

// targets returns each column's soft target under rules (forColumns'),
// 0 where its rule is none: nil where no column's is.
func softTargets(rules []string) []float64 {
	var out []float64
	for j, r := range rules {
		if v, ok := softTarget(r); ok {
			if out == nil {
				out = make([]float64, len(rules))
			}
			out[j] = v
		}
	}
	return out
}

// forColumns returns the rule of each of the label columns names (the
// header's names), an exception's column matched exactly, else in another
// case; an exception that names no label column is an error.
func (r uncertainRules) forColumns(names []string) ([]string, error) {
	rules := make([]string, len(names))
	for j := range rules {
		rules[j] = r.all
	}
	for _, col := range r.order {
		j := slices.Index(names, col)
		if j < 0 {
			j = slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, col) })
		}
		if j < 0 {
			return nil, fmt.Errorf("uncertain=: %q is not one of the label columns", col)
		}
		rules[j] = r.columns[col]
	}
	return rules, nil
}

// MaxLabels is the most labels a multi-label dataset names, as many as
// the loss head takes (runtime.MaxLabels): a sample's label set is its
// int64 label as internal/labelset says — the bits themselves to 62
// labels (CelebA's 40 attributes, PASCAL VOC's 20, CheXpert's 14), an
// interned set's handle past them (COCO's 80 categories, NUS-WIDE's 81).
const MaxLabels = labelset.Max

// usersOption is the spec option that names a folder's users (Spec.Users).
const usersOption = "users"

// dicomUsersOption is the spec option that names a folder's users by
// their DICOM files' Patient IDs (Spec.DICOMUsers).
const dicomUsersOption = "dicom-users"

// parseLabelColumns reads labels=: column names separated by commas,
// FIRST..LAST ranges among them, or "*" alone (Spec.Labels). The names are
// checked against the header when the listing is read.
func parseLabelColumns(val string) ([]string, error) {
	var cols []string
	seen := map[string]bool{}
	for _, c := range strings.Split(val, ",") {
		c = strings.TrimSpace(c)
		if first, last, ok := strings.Cut(c, ".."); ok && (strings.TrimSpace(first) == "" || strings.TrimSpace(last) == "") {
			return nil, fmt.Errorf("labels=%s: the range %q wants a first and a last column, FIRST..LAST", val, c)
		}
		if c == "" || seen[c] {
			return nil, fmt.Errorf("labels=%s: want distinct, non-empty column names separated by commas", val)
		}
		seen[c] = true
		cols = append(cols, c)
	}
	if slices.Contains(cols, "*") && len(cols) > 1 {
		return nil, fmt.Errorf("labels=%s: * (every column but the image path and user columns) stands alone", val)
	}
	if len(cols) > MaxLabels {
		return nil, fmt.Errorf("labels= names %d columns, at most %d", len(cols), MaxLabels)
	}
	return cols, nil
}

// compileUsers compiles a folder's users expression (Spec.Users),
// refusing one that the spec's string form could not carry.
func compileUsers(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, fmt.Errorf("users=: want a regular expression naming each image's user, such as ^(person\\d+)_")
	}
	if strings.Contains(expr, ":") {
		return nil, fmt.Errorf("users=%s: the expression may not contain ':', which separates a spec's options (write a literal colon as \\x3a)", expr)
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("users=%s: bad regular expression: %v", expr, err)
	}
	return re, nil
}

// ParseSpec parses the string form of a Spec (see Spec).
func ParseSpec(s string) (Spec, error) {
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Spec{}, fmt.Errorf("data spec %q: want SCHEME:DIR with SCHEME one of %s", s, strings.Join(Schemes(), ", "))
	}
	spec := Spec{Scheme: strings.ToLower(scheme)}
	if !validScheme(spec.Scheme) {
		return Spec{}, fmt.Errorf("data spec %q: unknown scheme %q (valid: %s)", s, scheme, strings.Join(Schemes(), ", "))
	}
	seen := map[string]bool{}
options:
	for {
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			break
		}
		opt := rest[i+1:]
		key, val, isKV := strings.Cut(opt, "=")
		if !isKV {
			switch strings.ToLower(opt) {
			case "train", "test", "val":
				key, val = "split", opt
			case "multilabel":
				key, val = "multilabel", "|"
			case dicomUsersOption:
				key = dicomUsersOption
			default:
				// Not an option: part of the directory name.
				break options
			}
		}
		key = strings.ToLower(key)
		if seen[key] {
			return Spec{}, fmt.Errorf("data spec %q: option %s given twice", s, key)
		}
		switch key {
		case "split":
			sp, err := ParseSplit(val)
			if err != nil {
				return Spec{}, fmt.Errorf("data spec %q: %v", s, err)
			}
			spec.Split = sp
			spec.Validation = sp == Test && !strings.EqualFold(strings.TrimSpace(val), "test")
		case "limit":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return Spec{}, fmt.Errorf("data spec %q: limit=%s: want a non-negative integer", s, val)
			}
			spec.Limit = n
		case "holdout":
			f, err := strconv.ParseFloat(val, 64)
			if err != nil || !(f > 0 && f < 1) {
				return Spec{}, fmt.Errorf("data spec %q: holdout=%s: want a fraction between 0 and 1, such as 0.1", s, val)
			}
			if spec.Scheme != SchemeFolder && spec.Scheme != SchemeCSV {
				return Spec{}, fmt.Errorf("data spec %q: holdout= applies to the folder and csv schemes only (the others have test splits)", s)
			}
			spec.Holdout = f
		case "classes":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > 1<<24 {
				return Spec{}, fmt.Errorf("data spec %q: classes=%s: want a positive integer", s, val)
			}
			if spec.Scheme != SchemeIDX && spec.Scheme != SchemeNPY {
				return Spec{}, fmt.Errorf("data spec %q: classes= applies to the idx and npy schemes only", s)
			}
			spec.Classes = n
		case "labels":
			if spec.Scheme != SchemeCSV {
				return Spec{}, fmt.Errorf("data spec %q: labels= applies to the csv scheme only", s)
			}
			cols, err := parseLabelColumns(val)
			if err != nil {
				return Spec{}, fmt.Errorf("data spec %q: %v", s, err)
			}
			spec.Labels = cols
		case "where":
			if spec.Scheme != SchemeCSV {
				return Spec{}, fmt.Errorf("data spec %q: where= applies to the csv scheme only", s)
			}
			if _, err := parseWhere(val); err != nil {
				return Spec{}, fmt.Errorf("data spec %q: %v", s, err)
			}
			spec.Where = val
		case "ext":
			if spec.Scheme != SchemeCSV {
				return Spec{}, fmt.Errorf("data spec %q: ext= applies to the csv scheme only", s)
			}
			if len(val) < 2 || val[0] != '.' || strings.ContainsAny(val[1:], `./\`) {
				return Spec{}, fmt.Errorf("data spec %q: ext=%s: want an extension such as .jpg", s, val)
			}
			spec.Ext = val
		case "path", "label", "user", "root":
			if spec.Scheme != SchemeCSV {
				return Spec{}, fmt.Errorf("data spec %q: %s= applies to the csv scheme only", s, key)
			}
			if strings.TrimSpace(val) == "" {
				return Spec{}, fmt.Errorf("data spec %q: %s=: want a column's name", s, key)
			}
			switch key {
			case "path":
				spec.PathColumn = val
			case "label":
				spec.LabelColumn = val
			case "user":
				spec.UserColumn = val
			case "root":
				spec.Root = val
			}
		case "uncertain":
			if _, err := parseUncertain(val); err != nil {
				return Spec{}, fmt.Errorf("data spec %q: %w", s, err)
			}
			spec.Uncertain = val
		case "multilabel":
			if spec.Scheme != SchemeCSV {
				return Spec{}, fmt.Errorf("data spec %q: multilabel applies to the csv scheme only", s)
			}
			if len([]rune(val)) != 1 || val == ":" || strings.TrimSpace(val) == "" {
				return Spec{}, fmt.Errorf("data spec %q: multilabel=%s: want one character separating a row's labels (multilabel alone: '|')", s, val)
			}
			spec.MultiLabel = val
		case dicomUsersOption:
			if isKV {
				return Spec{}, fmt.Errorf("data spec %q: %s takes no value", s, dicomUsersOption)
			}
			if spec.Scheme != SchemeFolder && spec.Scheme != SchemeCSV {
				return Spec{}, fmt.Errorf("data spec %q: %s applies to the folder and csv schemes only", s, dicomUsersOption)
			}
			spec.DICOMUsers = true
		case usersOption:
			if spec.Scheme != SchemeFolder && spec.Scheme != SchemeCSV {
				return Spec{}, fmt.Errorf("data spec %q: users= applies to the folder and csv schemes only (npy arrays name their users in a users array)", s)
			}
			if _, err := compileUsers(val); err != nil {
				return Spec{}, fmt.Errorf("data spec %q: %v", s, err)
			}
			spec.Users = val
		default:
			if colonInUsers(rest[:i]) {
				return Spec{}, fmt.Errorf("data spec %q: unknown option %q after users=: the users expression may not contain ':', which separates a spec's options (write a literal colon as \\x3a)", s, key)
			}
			return Spec{}, fmt.Errorf("data spec %q: unknown option %q (valid: split=train|test|val, limit=N, classes=N, holdout=F, users=REGEX, dicom-users, multilabel[=SEP], labels=COLUMNS, uncertain=zero|one|ignore[,COL=RULE…], path=COL, label=COL, user=COL, root=DIR, ext=.EXT, where=COL=V1|V2)", s, key)
		}
		seen[key] = true
		rest = rest[:i]
	}
	switch {
	case spec.Uncertain != "" && len(spec.Labels) == 0 && spec.Scheme != SchemeNPY:
		return Spec{}, fmt.Errorf("data spec %q: uncertain= needs labels=COLUMNS (or multi-hot NumPy labels)", s)
	case len(spec.Labels) > 0 && spec.MultiLabel != "":
		return Spec{}, fmt.Errorf("data spec %q: labels=COLUMNS and multilabel are two ways to list label sets: give one", s)
	case len(spec.Labels) > 0 && spec.LabelColumn != "":
		return Spec{}, fmt.Errorf("data spec %q: labels=COLUMNS names a label column each, label=COL one column of labels: give one", s)
	case spec.Users != "" && spec.DICOMUsers:
		return Spec{}, fmt.Errorf("data spec %q: users=REGEX reads the users from the paths, dicom-users from the files' Patient IDs: give one", s)
	case spec.DICOMUsers && spec.UserColumn != "":
		return Spec{}, fmt.Errorf("data spec %q: dicom-users reads the users from the files' Patient IDs, user=COL from a column: give one", s)
	case spec.Users != "" && spec.UserColumn != "":
		return Spec{}, fmt.Errorf("data spec %q: users=REGEX reads the users from the paths, user=COL from a column: give one", s)
	}
	spec.Dir = rest
	if spec.Dir == "" {
		return Spec{}, fmt.Errorf("data spec %q: empty directory", s)
	}
	if colonInUsers(spec.Dir) {
		// "folder:DIR:users=a:b" would read as the directory "DIR:users=a:b".
		return Spec{}, fmt.Errorf("data spec %q: the directory %q holds a users= option: the users expression may not contain ':', which separates a spec's options (write a literal colon as \\x3a)", s, spec.Dir)
	}
	return spec, nil
}

// colonInUsers reports whether the part of a spec left of an option, or
// its directory, holds a users= option: what a users expression with a
// ':' leaves there.
func colonInUsers(s string) bool {
	for _, c := range strings.Split(s, ":")[1:] {
		if k, _, ok := strings.Cut(c, "="); ok && strings.EqualFold(k, usersOption) {
			return true
		}
	}
	return false
}

// String returns the canonical string form of s, which ParseSpec reads
// back to s (with an empty Split shown as train).
func (s Spec) String() string {
	var b strings.Builder
	b.WriteString(s.Scheme)
	b.WriteByte(':')
	b.WriteString(s.Dir)
	b.WriteString(":split=")
	if s.split() == Test && s.Validation {
		b.WriteString("val")
	} else {
		b.WriteString(string(s.split()))
	}
	if s.Limit > 0 {
		fmt.Fprintf(&b, ":limit=%d", s.Limit)
	}
	if s.Classes > 0 && (s.Scheme == SchemeIDX || s.Scheme == SchemeNPY) {
		fmt.Fprintf(&b, ":classes=%d", s.Classes)
	}
	if s.Holdout > 0 {
		b.WriteString(":holdout=" + strconv.FormatFloat(s.Holdout, 'g', -1, 64))
	}
	if len(s.Labels) > 0 {
		b.WriteString(":labels=" + strings.Join(s.Labels, ","))
	}
	for _, o := range []struct{ key, val string }{{"path", s.PathColumn}, {"label", s.LabelColumn}, {"user", s.UserColumn}, {"root", s.Root}, {"ext", s.Ext}, {"where", s.Where}} {
		if o.val != "" {
			b.WriteString(":" + o.key + "=" + o.val)
		}
	}
	if s.Uncertain != "" {
		b.WriteString(":uncertain=" + s.Uncertain)
	}
	switch s.MultiLabel {
	case "":
	case "|":
		b.WriteString(":multilabel")
	default:
		b.WriteString(":multilabel=" + s.MultiLabel)
	}
	if s.DICOMUsers {
		b.WriteString(":" + dicomUsersOption)
	}
	if s.Users != "" {
		b.WriteString(":" + usersOption + "=" + s.Users)
	}
	return b.String()
}

func (s Spec) split() Split {
	if s.Split == "" {
		return Train
	}
	return s.Split
}

func validScheme(s string) bool {
	for _, v := range Schemes() {
		if s == v {
			return true
		}
	}
	return false
}

// Load reads the split of the dataset named by spec into memory.
func Load(spec Spec) (*Images, error) { return LoadFitted(spec, Fit{}) }

// LoadFitted is Load with the images of a folder fitted to a model's input
// as they are decoded (see Fit): a folder of photos then takes the memory
// of its windows, not of the photos. IDX and CIFAR files, whose small
// images share one size, load as Load loads them.
func LoadFitted(spec Spec, fit Fit) (*Images, error) {
	if err := fit.check(); err != nil {
		return nil, err
	}
	if spec.Limit < 0 {
		return nil, fmt.Errorf("data %s: negative limit %d", spec.Scheme, spec.Limit)
	}
	switch spec.split() {
	case Train, Test:
	default:
		return nil, fmt.Errorf("data %s: unknown split %q (valid: train, test)", spec.Scheme, spec.Split)
	}
	if spec.Users != "" && spec.Scheme != SchemeFolder && spec.Scheme != SchemeCSV {
		return nil, fmt.Errorf("data %s: %s: users= applies to the folder and csv schemes only (npy arrays name their users in a users array)", spec.Scheme, spec.Dir)
	}
	var (
		im  *Images
		err error
	)
	switch spec.Scheme {
	case SchemeIDX:
		im, err = loadIDX(spec)
	case SchemeCIFAR10:
		im, err = loadCIFAR(spec, false)
	case SchemeCIFAR100:
		im, err = loadCIFAR(spec, true)
	case SchemeFolder:
		im, err = loadFolder(spec, fit)
	case SchemeCSV:
		im, err = loadCSV(spec, fit)
	case SchemeNPY:
		// Stamped by LoadArrays.
		return loadArrayImages(spec)
	default:
		return nil, fmt.Errorf("data: unknown scheme %q (valid: %s)", spec.Scheme, strings.Join(Schemes(), ", "))
	}
	if err != nil {
		return nil, err
	}
	im.spec = spec
	// The files left out are stamped too: one made an image is other data.
	if im.sources, err = stampFiles(slices.Concat(im.sourcePaths, im.leftOut)); err != nil {
		return nil, err
	}
	im.sourcePaths = nil
	return im, nil
}

// loadArrayImages is LoadArrays for samples that are 8-bit images.
func loadArrayImages(spec Spec) (*Images, error) {
	a, err := LoadArrays(spec)
	if err != nil {
		return nil, err
	}
	im, ok, err := a.Images()
	if err == nil && !ok {
		err = fmt.Errorf("%s: samples of %s are not 8-bit images; a TensorView feeds them to a model as they are", spec, a.String())
	}
	return im, err
}

// LoadString parses spec with ParseSpec and loads it with Load.
func LoadString(spec string) (*Images, error) { return LoadStringFitted(spec, Fit{}) }

// LoadStringFitted parses spec with ParseSpec and loads it with
// LoadFitted.
func LoadStringFitted(spec string, fit Fit) (*Images, error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return LoadFitted(s, fit)
}
