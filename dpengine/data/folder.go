package data

import (
	"bufio"
	"errors"
	"fmt"
	"hash/fnv"
	"image"
	"image/color"
	_ "image/jpeg" // register the decoders for image.Decode
	_ "image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
	_ "github.com/dpfinetune/dpfinetune/internal/pnm"
	"github.com/dpfinetune/dpfinetune/internal/sysmem"
	par "github.com/dpfinetune/dpfinetune/internal/workers"
	_ "golang.org/x/image/bmp"
	_ "golang.org/x/image/tiff"
	_ "golang.org/x/image/webp"
)

// imageExts are the extensions of the files a folder's classes hold:
// torchvision's ImageFolder's (IMG_EXTENSIONS), the other Netpbm names,
// and DICOM's. A file's format is read from its contents, not its name.
var imageExts = []string{".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".pbm", ".pnm", ".dcm", ".dicom", ".ima", ".nii"}

// imageKinds names the formats for messages.
const imageKinds = "PNG, JPEG, BMP, TIFF, WebP, Netpbm, DICOM or NIfTI"

// imageFiles says which files are read, for messages.
var imageFiles = imageKinds + ": *" + strings.Join(imageExts, ", *") + ", *.nii.gz, or DICOM files named without an extension"

// isImageFile reports whether the file at path is one a folder holds: by
// one of imageExts, in any case, or, for a name without an extension, by
// the DICOM prefix in its first bytes — archives name their images
// IM000001 or 1.2.840.113619.2.55.3 (whose last "extension" is a number),
// and a study's DICOMDIR index, which holds no image, is skipped.
func isImageFile(path string) bool {
	if isNIfTI(path) {
		return true
	}
	name := filepath.Base(path)
	ext := strings.ToLower(filepath.Ext(name))
	for _, e := range imageExts {
		if ext == e {
			return true
		}
	}
	if (ext != "" && !numericExt(ext)) || strings.EqualFold(name, "DICOMDIR") {
		return false
	}
	return hasDICOMPrefix(path)
}

// numericExt reports whether ext is a dot and digits, a UID's last part.
func numericExt(ext string) bool {
	if len(ext) < 2 {
		return false
	}
	for _, c := range ext[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// hasDICOMPrefix reports whether a file starts as DICOM Part 10 files do:
// a 128-byte preamble and "DICM".
func hasDICOMPrefix(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [dicom.PrefixLen]byte
	_, err = io.ReadFull(f, b[:])
	return err == nil && dicom.IsPart10(b[:])
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// loadFolder reads an image folder: DIR/CLASS/IMAGE (imageExts), or
// DIR/train/CLASS/… and DIR/test/CLASS/… (or DIR/val/CLASS/…). Labels
// are the indices of the sorted training class names. Images with at
// least fit's pixels are fitted as each is decoded. A class directory's
// files are read in name order, its sub-directories not at all, unless
// the spec names users.
//
// With :users=REGEX (Spec.Users) each image belongs to the user the
// expression names from its path within its class directory
// ('/'-separated: "person1_virus_6.jpeg"): the first capture group, or
// the whole match where it has none. The images one level down, in a
// class directory's sub-directories (CLASS/USER/IMAGE, matched as
// "USER/IMAGE"), are read too, each sub-directory's in name order where
// it stands among the class's entries; deeper directories are not read.
// An image whose path does not match, or matches with an empty user,
// fails the load, naming the file and the expression. The users are
// numbered in sorted order of their names over the samples kept (after a
// holdout and a limit), so that a person in two classes is one user; the
// test directory's images are named by the same expression.
// :holdout=F then holds out whole users — round(F·users) of the training
// directory's users, at least one of two or more, never all, chosen by a
// hash of their names as a CSV listing's (holdoutKeys) — so that no user
// has images in both splits; without users it holds out a fraction of
// each class's files, by a hash of their paths.
func loadFolder(spec Spec, fit Fit) (*Images, error) {
	if err := checkDir("folder", spec.Dir); err != nil {
		return nil, err
	}
	root := spec.Dir
	// users names an image's user, where the folder names them.
	var users func(cdir, path string) (string, error)
	switch {
	case spec.Users != "":
		re, err := compileUsers(spec.Users)
		if err != nil {
			return nil, fmt.Errorf("folder: %s: %v", spec.Dir, err)
		}
		users = func(cdir, path string) (string, error) { return folderUser(re, root, cdir, path) }
	case spec.DICOMUsers:
		users = func(_, path string) (string, error) { return dicomUser(root, path) }
	}
	trainDir, testDir := root, ""
	hasSplits := isDir(filepath.Join(root, "train"))
	if hasSplits {
		trainDir = filepath.Join(root, "train")
		names := []string{"test", "val"}
		if spec.Validation {
			names = []string{"val", "test"}
		}
		for _, name := range names {
			if p := filepath.Join(root, name); isDir(p) {
				testDir = p
				break
			}
		}
	}
	classes, err := classDirs(trainDir)
	if err != nil {
		return nil, err
	}
	if len(classes) == 0 {
		return nil, fmt.Errorf("folder: %s: no class sub-directories (want one directory of images per class: %s)", trainDir, imageKinds)
	}
	dir, dirClasses := trainDir, classes
	if spec.split() == Test && spec.Holdout == 0 {
		if testDir == "" {
			if hasSplits {
				return nil, fmt.Errorf("folder: %s has a train/ directory but no test/ or val/ directory for the test split", root)
			}
			return nil, fmt.Errorf("folder: %s has no test split: put the class directories under %s and %s (or val)", root, filepath.Join(root, "train"), filepath.Join(root, "test"))
		}
		dir = testDir
		if dirClasses, err = classDirs(testDir); err != nil {
			return nil, err
		}
		if len(dirClasses) == 0 {
			return nil, fmt.Errorf("folder: %s: no class sub-directories (want one directory of images per class: %s)", testDir, imageKinds)
		}
	}
	label := make(map[string]int64, len(classes))
	for i, c := range classes {
		label[c] = int64(i)
	}

	// List every class's files, then order the samples round-robin over
	// the classes so that a limit keeps them balanced.
	var perClass [][]labelledFile
	var userOf map[string]string // each file's user, by path, with users
	if users != nil {
		userOf = map[string]string{}
	}
	for _, c := range dirClasses {
		l, ok := label[c]
		if !ok {
			return nil, fmt.Errorf("folder: %s: class %q is not among the %d training classes in %s", filepath.Join(dir, c), c, len(classes), trainDir)
		}
		cdir := filepath.Join(dir, c)
		items, err := classFiles(cdir, l, users != nil)
		if fit.Series {
			items, err = classSeries(cdir, l)
		}
		if err != nil {
			return nil, err
		}
		if len(items) == 0 && fit.Series {
			what := "no sub-directories"
			if files, _ := classFiles(cdir, l, false); len(files) > 0 {
				what = fmt.Sprintf("%d image file(s) of its own and no sub-directories", len(files))
			}
			return nil, fmt.Errorf("folder: %s: class directory holds %s: with --series each example is a sub-directory of a class directory, a series' slices (CLASS/SERIES/IMAGE), and several series in one sub-directory are split by their Series Instance UIDs", cdir, what)
		}
		if len(items) == 0 {
			where := ""
			if users != nil {
				where = ", nor its sub-directories"
			}
			return nil, fmt.Errorf("folder: %s: class directory%s holds no images (%s)", cdir, where, imageFiles)
		}
		for _, it := range items {
			if users == nil {
				break
			}
			if userOf[it.path], err = users(cdir, it.path); err != nil {
				return nil, err
			}
		}
		perClass = append(perClass, items)
	}
	// One ID over the training images is blanked IDs, not one patient (a
	// test directory may well hold one patient's images).
	if spec.DICOMUsers && dir == trainDir {
		ids := make([]string, 0, len(userOf))
		for _, u := range userOf {
			ids = append(ids, u)
		}
		if err := sameDICOMUser("folder", dir, ids); err != nil {
			return nil, err
		}
	}
	if spec.Holdout > 0 {
		// With users, those held out: all of a user's images, in every
		// class, are on one side.
		var heldUser map[string]bool
		if users != nil {
			names := make([]string, 0, len(userOf))
			for _, u := range userOf {
				names = append(names, u)
			}
			heldUser = heldOutUsers(names, spec.Holdout)
		}
		kept := perClass[:0]
		for _, items := range perClass {
			var keep []bool
			if users != nil {
				keep = make([]bool, len(items))
				for k, it := range items {
					keep[k] = heldUser[userOf[it.path]]
				}
			} else {
				keep = holdout(trainDir, len(items), func(k int) string { return items[k].path }, spec.Holdout)
			}
			// The test split's files, or the rest, still in name order.
			part := items[:0:0]
			for k, it := range items {
				if keep[k] == (spec.split() == Test) {
					part = append(part, it)
				}
			}
			if len(part) > 0 { // a class of one image trains on it
				kept = append(kept, part)
			}
		}
		perClass = kept
	}
	paths, labels := roundRobin(perClass, spec.Limit)
	if len(paths) == 0 {
		// Every class a single image (or a single user) and held out of
		// the test split.
		return nil, fmt.Errorf("folder: %s: no images in the %s split of holdout=%s: each class holds a single image (or the folder a single user), which trains", root, spec.split(), strconv.FormatFloat(spec.Holdout, 'g', -1, 64))
	}
	im, units, _, expanded, err := loadUnits("folder", paths, labels, classes, fit)
	if err != nil {
		return nil, err
	}
	switch {
	case users != nil:
		// Numbered over the samples kept: a limit or a holdout leaves no
		// user without samples.
		names := make([]string, len(units))
		for i, p := range units {
			names[i] = userOf[p]
		}
		im.users, im.userNames = numberUsers(names)
	case expanded:
		im.users, im.userNames = fileUsers(root, units)
	}
	return im, nil
}

// classFiles lists the image files of a class directory (hidden ones
// skipped) in name order, labelled l; with sub, those of its visible
// sub-directories too, one level down, each sub-directory's where it
// stands among the class's entries.
func classFiles(cdir string, l int64, sub bool) ([]labelledFile, error) {
	entries, err := os.ReadDir(cdir)
	if err != nil {
		return nil, fmt.Errorf("folder: %w", err)
	}
	var items []labelledFile
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(cdir, e.Name())
		if sub && isDir(p) {
			inner, err := os.ReadDir(p)
			if err != nil {
				return nil, fmt.Errorf("folder: %w", err)
			}
			for _, f := range inner {
				if q := filepath.Join(p, f.Name()); !strings.HasPrefix(f.Name(), ".") && isRegular(q) && isImageFile(q) {
					items = append(items, labelledFile{q, l})
				}
			}
			continue
		}
		if isRegular(p) && isImageFile(p) {
			items = append(items, labelledFile{p, l})
		}
	}
	return items, nil
}

// classSeries lists the series of a class directory (Fit.Series): its
// visible sub-directories, in name order, labelled l.
func classSeries(cdir string, l int64) ([]labelledFile, error) {
	entries, err := os.ReadDir(cdir)
	if err != nil {
		return nil, fmt.Errorf("folder: %w", err)
	}
	var items []labelledFile
	for _, e := range entries {
		if p := filepath.Join(cdir, e.Name()); !strings.HasPrefix(e.Name(), ".") && isDir(p) {
			items = append(items, labelledFile{p, l})
		}
	}
	return items, nil
}

// isRegular reports whether path is (or links to) a regular file.
func isRegular(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// folderUser returns the user the expression re (a folder's users=)
// names from path, an image in the class directory cdir of the folder
// root: its first capture group, or its whole match where it has none,
// matched against the path within cdir, '/'-separated. A path that does
// not match, or matches with an empty user, is an error naming the file.
func folderUser(re *regexp.Regexp, root, cdir, path string) (string, error) {
	rel, err := filepath.Rel(cdir, path)
	if err != nil {
		rel = path
	}
	rel = filepath.ToSlash(rel)
	u, err := matchUser(re, rel)
	if err != nil {
		return "", fmt.Errorf("folder: %s: %s: its path within its class directory, %q: %v; every image must name its user", root, path, rel, err)
	}
	return u, nil
}

// dicomUser returns the Patient ID of the DICOM file at path, an image of
// the folder (or listing) root read with dicom-users.
func dicomUser(root, path string) (string, error) {
	if !isDir(path) {
		return filePatient(root, path)
	}
	// A directory of series (Fit.Series): its slices' patient, read from
	// each series' first, which must agree.
	series, _, err := seriesIn(path)
	if err != nil {
		return "", fmt.Errorf("folder: %s: %v; with %s every series must hold DICOM images naming their patient", root, err, dicomUsersOption)
	}
	var id string
	for i, s := range series {
		p, err := filePatient(root, s.slices[0])
		if err != nil {
			return "", err
		}
		if i > 0 && p != id {
			return "", fmt.Errorf("folder: %s: %s: its series name patients %q and %q: a directory's series are one example's, of one patient", root, path, id, p)
		}
		id = p
	}
	return id, nil
}

// filePatient returns the Patient ID of the DICOM file at path, of the
// folder (or listing) root.
func filePatient(root, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("folder: %w", err)
	}
	defer f.Close()
	id, err := dicom.PatientID(f)
	if err != nil {
		return "", fmt.Errorf("folder: %s: %s: %v; with %s every image must be a DICOM file naming its patient", root, path, err, dicomUsersOption)
	}
	return id, nil
}

// sameDICOMUser refuses the Patient IDs of a data set's training images
// when they are all one (of two images or more): an export that blanked
// them, which dicom-users would make one user.
func sameDICOMUser(scheme, where string, ids []string) error {
	if len(ids) < 2 {
		return nil
	}
	for _, id := range ids[1:] {
		if id != ids[0] {
			return nil
		}
	}
	return fmt.Errorf("%s: %s: all %d images carry the one Patient ID %q: an export that blanked the IDs? %s would make the patients one user; name them by path (users=REGEX) instead", scheme, where, len(ids), ids[0], dicomUsersOption)
}

// matchUser returns the user a users= expression names in s: its first
// capture group, or its whole match where it has none; an error where it
// does not match or names the empty user.
func matchUser(re *regexp.Regexp, s string) (string, error) {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return "", fmt.Errorf("does not match users=%s", re)
	}
	u, what := m[0], "the match"
	if len(m) > 1 {
		u, what = m[1], "its first group"
	}
	if u == "" {
		return "", fmt.Errorf("users=%s matches it with an empty user (%s is empty)", re, what)
	}
	return u, nil
}

// labelledFile is an image file of a dataset and its label.
type labelledFile struct {
	path  string
	label int64
}

// roundRobin orders the files of every class round-robin over the
// classes (each class's first file, then each one's second, …), so that
// a limit (when positive) keeps the classes balanced, and returns the
// first limit of them.
func roundRobin(perClass [][]labelledFile, limit int) (paths []string, labels []int64) {
	total := 0
	for _, items := range perClass {
		total += len(items)
	}
	if limit > 0 {
		total = min(total, limit)
	}
	for k := 0; len(paths) < total; k++ {
		for _, items := range perClass {
			if k < len(items) && len(paths) < total {
				paths, labels = append(paths, items[k].path), append(labels, items[k].label)
			}
		}
	}
	return paths, labels
}

// decodedImages counts the images decodeFiles decoded (tests: a load
// from a kept pixel file decodes none).
var decodedImages atomic.Int64

// decodeFiles decodes the image files at paths, in parallel, into Images
// of the given labels and classes, fitting each as it is decoded. Its
// errors name the file, after scheme (the dataset's kind). frames, where
// not nil, are the DICOM frames expandFrames made samples of (0 for a
// file read as it is): a file's consecutive samples of frames 1 to n
// are decoded in one pass over it. members, where not nil, are the
// slices of series whose projections (fit.Frame) the paths name.
func decodeFiles(scheme string, paths []string, labels []int64, classes []string, fit Fit, frames []int, members map[string][]string) (*Images, error) {
	// Decode in parallel, keeping the order. Every image's size is read
	// from its header before it is decoded, and the decoded total is held
	// to the memory available.
	imgs := make([]decoded, len(paths))
	errs := make([]error, len(paths))
	budget := int64(math.MaxInt64)
	budgetSrc := ""
	if avail, src, ok := sysmem.Available(); ok {
		budget, budgetSrc = avail, src
	}
	m := &Images{classes: classes, labels: labels, channels: 1, fit: fit, sourcePaths: paths}
	// Kept by an earlier load (DPFINETUNE_PIXEL_CACHE, keptpixels.go): the
	// pixels mapped from its file, none decoded. A folder's and a
	// listing's only: predict's photos are read once.
	var kept *keptFile
	if scheme != "images" {
		var err error
		if kept, err = keptFileFor(scheme, paths, fit, members); err != nil {
			return nil, fmt.Errorf("%s: %w", scheme, err)
		}
		if kept != nil && kept.load(m) {
			return m, nil
		}
	}
	// Where the fitted images would take more than half the memory, their
	// pixels go to a file as they are decoded (pixelfile.go): then only
	// the images being decoded count against the budget. Where they are
	// to be kept, they go to the kept file's.
	var disk *pixelFile
	var err error
	if kept != nil {
		_, est := diskChoice(len(paths), fit, budget, "disk")
		disk, err = kept.create(est)
	} else {
		disk, err = pixelsOnDisk(len(paths), fit, budget)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", scheme, err)
	}
	dcm := fit.dicomOptions()
	var used atomic.Int64
	admit := func(path string, w, h int, decoder int64) error {
		// The decoder's bytes and our image (3 a pixel); ours, or its
		// fitted window, stays.
		fh, fw := fit.size(h, w)
		kept := 3 * int64(fh) * int64(fw)
		if fit.Gray {
			kept /= 3
		}
		if disk != nil {
			kept = 0 // on disk: the decoder's image alone
		}
		if u := used.Add(kept); u+decoder > budget {
			return fmt.Errorf("%s: decoding %d×%d pixels would take the images read so far over the %d MiB of memory available (%s)", path, w, h, budget>>20, budgetSrc)
		}
		return nil
	}
	// finish fits sample i's image as it is kept.
	var narrowMu sync.Mutex
	finish := func(i int, d decoded, err error) {
		decodedImages.Add(1)
		if d.narrow {
			narrowMu.Lock()
			if m.narrow16 == 0 || paths[i] < m.narrow16First {
				m.narrow16First = paths[i]
			}
			m.narrow16++
			narrowMu.Unlock()
		}
		if err == nil && fit.Gray && !d.gray {
			d.pix, d.gray = pilGray(d.pix), true
		}
		if err == nil && fit.fits(d.h, d.w) {
			c := 3
			if d.gray {
				c = 1
			}
			d.pix = fitPixels(d.pix, c, d.h, d.w, fit)
			d.h, d.w = fit.size(d.h, d.w)
		}
		if err == nil && disk != nil {
			d.off, d.n = disk.put(d.pix), len(d.pix)
			d.pix = nil
		}
		imgs[i], errs[i] = d, err
	}
	// The jobs: a file each, its samples [lo, hi) — several where its
	// frames are samples of their own, or a clip's, in increasing order
	// (expandFrames), repeated where a clip has fewer frames than it needs.
	var jobs [][2]int
	for lo := 0; lo < len(paths); {
		hi := lo + 1
		for frames != nil && frames[lo] > 0 && hi < len(paths) && paths[hi] == paths[lo] && frames[hi] >= frames[hi-1] {
			hi++
		}
		jobs = append(jobs, [2]int{lo, hi})
		lo = hi
	}
	var next atomic.Int64
	var wg par.Group
	for range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := int(next.Add(1) - 1)
				if j >= len(jobs) {
					return
				}
				lo, hi := jobs[j][0], jobs[j][1]
				opts := dcm
				if frames != nil && frames[lo] > 0 {
					opts.Frame = dicom.Frame{Kind: dicom.FrameNumber, Number: frames[lo]}
				}
				if ss, ok := members[paths[lo]]; ok {
					d, err := decodeProjection(paths[lo], ss, opts, admit)
					finish(lo, d, err)
					continue
				}
				if hi-lo == 1 {
					d, err := decodeImage(paths[lo], opts, admit)
					finish(lo, d, err)
					continue
				}
				want := slices.Compact(slices.Clone(frames[lo:hi]))
				i := lo // the next sample to finish
				err := decodeFrames(paths[lo], opts, admit, want, func(k int, d decoded) error {
					for first := true; i < hi && frames[i] == k; i, first = i+1, false {
						if !first { // a frame twice in a clip: each sample its own pixels
							d.pix = slices.Clone(d.pix)
						}
						finish(i, d, nil)
					}
					return nil
				})
				if err == nil && i != hi {
					err = fmt.Errorf("%s: %d of the %d frames listed decoded", paths[lo], i-lo, hi-lo)
				}
				if err != nil {
					finish(lo, decoded{}, err)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, dicom.ErrNoImage) {
			disk.close()
			return nil, fmt.Errorf("%s: %w", scheme, err)
		}
	}
	// DICOM objects without an image (reports, presentation states, key
	// object selections, as an archive exports them beside the images)
	// are left out, and said to be (Images.LeftOut). A kept pixel file
	// holds their places, empty, so that a later load leaves them out too.
	var out []int
	for i, err := range errs {
		if err != nil {
			out = append(out, i)
		}
	}
	if len(out) == len(paths) {
		disk.close()
		return nil, fmt.Errorf("%s: no images: the %d files are DICOM objects without an image (%s)", scheme, len(paths), errs[0])
	}
	for _, d := range imgs {
		if !d.gray && d.h > 0 {
			m.channels = 3
		}
	}
	if disk != nil {
		if err := m.mapPixels(disk, imgs); err != nil {
			return nil, fmt.Errorf("%s: %w", scheme, err)
		}
		m.leaveOut(out)
		return m, nil
	}
	m.leaveOut(out)
	imgs = slices.DeleteFunc(imgs, func(d decoded) bool { return d.h == 0 })

	uniform := true
	for _, d := range imgs {
		if d.h != imgs[0].h || d.w != imgs[0].w {
			uniform = false
		}
	}
	if m.channels == 3 {
		for i := range imgs {
			if imgs[i].gray {
				imgs[i].pix = grayToRGB(imgs[i].pix)
			}
		}
	}
	if uniform {
		m.h, m.w = imgs[0].h, imgs[0].w
		n := m.channels * m.h * m.w
		m.pix = make([]uint8, len(imgs)*n)
		for i := range imgs {
			copy(m.pix[i*n:], imgs[i].pix)
			imgs[i].pix = nil
		}
		return m, nil
	}
	m.samples = make([][]uint8, len(imgs))
	m.sizes = make([][2]int32, len(imgs))
	for i, d := range imgs {
		m.samples[i] = d.pix
		m.sizes[i] = [2]int32{int32(d.h), int32(d.w)}
	}
	return m, nil
}

// holdout marks which of a class's n files (path(k), under dir) are held
// out: holdoutKeys of their paths within dir.
func holdout(dir string, n int, path func(int) string, f float64) []bool {
	rels := make([]string, n)
	for k := range rels {
		rel, err := filepath.Rel(dir, path(k))
		if err != nil {
			rel = path(k)
		}
		rels[k] = filepath.ToSlash(rel)
	}
	return holdoutKeys(rels, f)
}

// holdoutKeys marks which of n things, named by keys (a class's files by
// their paths, a listing's users by their names), are held out: round(f·n)
// of them, at least one of two or more, never all — those whose keys, with
// a fixed salt, hash lowest (FNV-1a), ties broken by the key. The choice
// depends on the keys alone, and adding one moves at most one other
// between the sides.
func holdoutKeys(keys []string, f float64) []bool {
	n := len(keys)
	held := int(math.Round(f * float64(n)))
	if held == 0 && n >= 2 {
		held = 1
	}
	held = max(min(held, n-1), 0)
	type key struct {
		h   uint64
		key string
		k   int
	}
	sorted := make([]key, n)
	for k, s := range keys {
		h := fnv.New64a()
		h.Write([]byte("dpfinetune holdout\x00" + s))
		sorted[k] = key{h.Sum64(), s, k}
	}
	sort.Slice(sorted, func(a, b int) bool {
		if sorted[a].h != sorted[b].h {
			return sorted[a].h < sorted[b].h
		}
		return sorted[a].key < sorted[b].key
	})
	out := make([]bool, n)
	for _, kk := range sorted[:held] {
		out[kk.k] = true
	}
	return out
}

// classDirs returns the sorted names of the visible sub-directories of dir.
func classDirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("folder: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if isDir(filepath.Join(dir, e.Name())) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// decoded is one decoded image: gray (1 channel) or RGB (3 channels,
// channel-major).
type decoded struct {
	// narrow says the image is a 16-bit photo read by its high bytes
	// whose values all lie below 4096: 12 bits or fewer, 16 levels
	// (gray16).
	narrow bool
	gray   bool
	h, w   int
	pix    []uint8
	// off and n place the pixels in a load's pixel file instead of pix
	// (pixelsOnDisk).
	off int64
	n   int
}

// mapPixels makes m's samples the images of imgs in the pixel file p:
// gray ones of an RGB dataset are made RGB and written again, then the
// file is mapped and each sample is its part of the mapping.
func (m *Images) mapPixels(p *pixelFile, imgs []decoded) error {
	if m.channels == 3 {
		for i := range imgs {
			if !imgs[i].gray {
				continue
			}
			g, err := p.read(imgs[i].off, imgs[i].n)
			if err != nil {
				p.close()
				return err
			}
			rgb := grayToRGB(g)
			imgs[i].off, imgs[i].n = p.put(rgb), len(rgb)
		}
	}
	if p.keep != nil {
		if err := p.keep.seal(p, imgs, m.channels); err != nil {
			p.close()
			return err
		}
	}
	b, err := p.mapAll()
	if err != nil {
		return err
	}
	m.samples = make([][]uint8, len(imgs))
	m.sizes = make([][2]int32, len(imgs))
	uniform := true
	for i, d := range imgs {
		m.samples[i] = b[d.off : d.off+int64(d.n) : d.off+int64(d.n)]
		m.sizes[i] = [2]int32{int32(d.h), int32(d.w)}
		uniform = uniform && m.sizes[i] == m.sizes[0]
	}
	if uniform && len(imgs) > 0 {
		// One size, as a load in memory has it (UniformSize), its samples
		// in the mapping's order.
		m.h, m.w, m.sizes = imgs[0].h, imgs[0].w, nil
	}
	m.mapped = newPixelMapping(b, p.dir)
	m.mapped.kept = p.kept
	return nil
}

func grayToRGB(g []uint8) []uint8 {
	out := make([]uint8, 3*len(g))
	copy(out, g)
	copy(out[len(g):], g)
	copy(out[2*len(g):], g)
	return out
}

// maxImagePixels bounds one image: 2²⁸ pixels (16384×16384) is beyond any
// photograph, and decoding it takes up to 2 GiB.
const maxImagePixels = 1 << 28

// admitFunc admits an image of w×h pixels at path before it is decoded,
// its decoder taking the given bytes (an error where they, and the image
// kept, would take the memory past what is available).
type admitFunc func(path string, w, h int, decoder int64) error

// decodeImage decodes an image file of any format in imageKinds.
// Grayscale images stay one channel; every other colour model becomes RGB
// with the alpha channel dropped (colours un-premultiplied, as PIL's
// convert("RGB") does). The size in the file's header is checked against
// maxImagePixels, then passed to admit, before the decoder allocates
// anything.
//
// dcm are the choices DICOM images are read with (Fit.Window, Fit.Frame).
func decodeImage(path string, dcm dicom.Options, admit admitFunc) (decoded, error) {
	if isNIfTI(path) {
		var d decoded
		err := decodeNIfTI(path, dcm, admit, nil, func(_ int, nd decoded) error { d = nd; return nil })
		return d, err
	}
	f, err := os.Open(path)
	if err != nil {
		return decoded{}, err
	}
	defer f.Close()
	return decodeImageFrom(f, path, dcm, admit)
}

// decodeImageFrom is decodeImage on the contents of path read from f. A
// decoder's panic is returned as an error: the decoders of five formats,
// three from outside the standard library, read files a user did not
// write, and one bad file must not take the run down.
func decodeImageFrom(f io.ReadSeeker, path string, dcm dicom.Options, admit admitFunc) (d decoded, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = decoded{}, fmt.Errorf("%s: corrupt or unsupported image: the decoder failed: %v", path, p)
		}
	}()
	// DICOM first: a DICOM file's preamble may be a TIFF header (GE's
	// "dual personality" files), which the image package's sniffing, in
	// the order the formats registered, would take for a TIFF.
	br := bufio.NewReader(f)
	var cfg image.Config
	kind := "dicom"
	if p, _ := br.Peek(dicom.PrefixLen); dicom.IsPart10(p) {
		cfg, err = dicom.DecodeConfig(br)
	} else {
		cfg, kind, err = image.DecodeConfig(br)
	}
	if errors.Is(err, dicom.ErrNoImage) {
		return decoded{}, fmt.Errorf("%s: %w", path, err)
	}
	if err != nil {
		return decoded{}, fmt.Errorf("%s: corrupt or unsupported image: %v", path, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return decoded{}, fmt.Errorf("%s: empty image (%d×%d)", path, cfg.Width, cfg.Height)
	}
	if int64(cfg.Width)*int64(cfg.Height) > maxImagePixels {
		return decoded{}, fmt.Errorf("%s: image of %d×%d pixels, over the limit of %d pixels", path, cfg.Width, cfg.Height, maxImagePixels)
	}
	if admit != nil {
		// The decoder's image: up to 8 bytes a pixel (a 16-bit RGBA); a
		// DICOM projection's float64 sum a pixel beside a frame's stored
		// values, 16.
		per := int64(8)
		if kind == "dicom" && dcm.Frame.Projection() {
			per = 16
		}
		if err := admit(path, cfg.Width, cfg.Height, per*int64(cfg.Width)*int64(cfg.Height)); err != nil {
			return decoded{}, err
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return decoded{}, err
	}
	var img image.Image
	format := kind
	if kind == "dicom" {
		img, err = dicom.DecodeWith(bufio.NewReader(f), dcm)
	} else {
		img, format, err = image.Decode(bufio.NewReader(f))
	}
	if errors.Is(err, dicom.ErrMultiFrame) || errors.Is(err, dicom.ErrNoFrame) {
		return decoded{}, fmt.Errorf("%s: %w", path, err)
	}
	if err != nil {
		return decoded{}, fmt.Errorf("%s: corrupt or unsupported image: %v", path, err)
	}
	if g, ok := img.(*image.Gray16); ok && kind != "dicom" {
		return gray16(g, dcm, path)
	}
	return toDecoded(img, format, path)
}

// decodeFrames decodes the frames want (numbered from 1, increasing) of
// the DICOM file at path in one pass (dicom.DecodeFrames), as decodeImage
// decodes one image, each frame admitted before it is kept, and gives
// each to each with its number.
func decodeFrames(path string, dcm dicom.Options, admit admitFunc, want []int, each func(frame int, d decoded) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: corrupt or unsupported image: the decoder failed: %v", path, p)
		}
	}()
	if isNIfTI(path) {
		return decodeNIfTI(path, dcm, admit, want, each)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	cfg, err := dicom.DecodeConfig(bufio.NewReader(f))
	if err != nil {
		return fmt.Errorf("%s: corrupt or unsupported image: %v", path, err)
	}
	if int64(cfg.Width)*int64(cfg.Height) > maxImagePixels {
		return fmt.Errorf("%s: image of %d×%d pixels, over the limit of %d pixels", path, cfg.Width, cfg.Height, maxImagePixels)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	var eachErr error
	err = dicom.DecodeFrames(bufio.NewReader(f), dcm, want, func(k int, img image.Image) error {
		if eachErr = admit(path, cfg.Width, cfg.Height, 8*int64(cfg.Width)*int64(cfg.Height)); eachErr != nil {
			return eachErr
		}
		d, err := toDecoded(img, "dicom", path)
		if err == nil {
			err = each(k, d)
		}
		eachErr = err
		return err
	})
	switch {
	case eachErr != nil:
		return eachErr
	case err != nil:
		return fmt.Errorf("%s: corrupt or unsupported image: %v", path, err)
	}
	return nil
}

// toDecoded is a decoded image of format (the image package's name) as
// decoded keeps it: gray, or RGB with the alpha channel dropped.
func toDecoded(img image.Image, format, path string) (decoded, error) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if w <= 0 || h <= 0 {
		return decoded{}, fmt.Errorf("%s: empty image (%d×%d)", path, w, h)
	}
	plane := w * h
	switch im := img.(type) {
	case *image.Gray:
		pix := make([]uint8, plane)
		for y := range h {
			o := im.PixOffset(b.Min.X, b.Min.Y+y)
			copy(pix[y*w:(y+1)*w], im.Pix[o:o+w])
		}
		return decoded{gray: true, h: h, w: w, pix: pix}, nil
	case *image.Paletted:
		// A palette of grays (an 8-bit gray BMP) is a gray image, as PIL
		// opens it.
		lut, ok := grayPalette(im.Palette)
		if !ok {
			break
		}
		pix := make([]uint8, plane)
		for y := range h {
			o := im.PixOffset(b.Min.X, b.Min.Y+y)
			for x := range w {
				pix[y*w+x] = lut[im.Pix[o+x]]
			}
		}
		return decoded{gray: true, h: h, w: w, pix: pix}, nil
	}
	pix := make([]uint8, 3*plane)
	r, g, bl := pix[:plane], pix[plane:2*plane], pix[2*plane:]
	switch im := img.(type) {
	case *image.NYCbCrA: // a lossy WebP with alpha; the alpha is dropped
		if !ycbcrToRGB(&im.YCbCr, format == "webp", r, g, bl) {
			defaultToRGB(img, r, g, bl)
		}
	case *image.YCbCr:
		if !ycbcrToRGB(im, format == "webp", r, g, bl) {
			defaultToRGB(img, r, g, bl)
		}
	case *dicom.RawJPEG:
		if !rawJPEGToRGB(im.YCbCr, r, g, bl) {
			defaultToRGB(img, r, g, bl)
		}
	case *image.NRGBA:
		for y := range h {
			o := im.PixOffset(b.Min.X, b.Min.Y+y)
			for x := range w {
				k, p := y*w+x, o+4*x
				r[k], g[k], bl[k] = im.Pix[p], im.Pix[p+1], im.Pix[p+2]
			}
		}
	case *image.RGBA:
		for y := range h {
			o := im.PixOffset(b.Min.X, b.Min.Y+y)
			for x := range w {
				k, p := y*w+x, o+4*x
				r[k], g[k], bl[k] = unpremul(im.Pix[p], im.Pix[p+3]), unpremul(im.Pix[p+1], im.Pix[p+3]), unpremul(im.Pix[p+2], im.Pix[p+3])
			}
		}
	default:
		defaultToRGB(img, r, g, bl)
	}
	return decoded{h: h, w: w, pix: pix}, nil
}

// defaultToRGB converts any image to RGB planes through its colour model.
func defaultToRGB(img image.Image, r, g, b []uint8) {
	bounds := img.Bounds()
	w := bounds.Dx()
	for y := range bounds.Dy() {
		for x := range w {
			c := color.NRGBAModel.Convert(img.At(bounds.Min.X+x, bounds.Min.Y+y)).(color.NRGBA)
			k := y*w + x
			r[k], g[k], b[k] = c.R, c.G, c.B
		}
	}
}

// grayPalette returns a palette's gray levels by index when every entry is
// an opaque gray (indices past the palette are black, as the image
// package draws them).
func grayPalette(p color.Palette) (lut [256]uint8, ok bool) {
	for i, c := range p {
		if i == len(lut) {
			break
		}
		n := color.NRGBAModel.Convert(c).(color.NRGBA)
		if n.A != 0xff || n.R != n.G || n.G != n.B {
			return lut, false
		}
		lut[i] = n.R
	}
	return lut, true
}

func unpremul(c, a uint8) uint8 {
	switch a {
	case 0xff:
		return c
	case 0:
		return 0
	}
	return uint8((uint32(c)*0xff + uint32(a)/2) / uint32(a))
}

// gray16 is a 16-bit grayscale photo (PNG, TIFF: a CXR archive's, as
// PadChest and BIMCV ship them) as decoded keeps it: through dcm's
// windows, in its own values, as a DICOM image's Modality LUT output is
// (three an RGB image), or through its own range (dcm.OwnRange), else its
// high bytes — marked narrow where its values are 12 bits or fewer, which
// leaves it 16 levels (the loader says so: Images.Narrow16).
func gray16(g *image.Gray16, dcm dicom.Options, path string) (decoded, error) {
	b := g.Bounds()
	w, h := b.Dx(), b.Dy()
	if w <= 0 || h <= 0 {
		return decoded{}, fmt.Errorf("%s: empty image (%d×%d)", path, w, h)
	}
	plane := w * h
	vals := make([]uint16, plane)
	hi := uint16(0)
	lo := uint16(math.MaxUint16)
	for y := range h {
		o := g.PixOffset(b.Min.X, b.Min.Y+y)
		for x := range w {
			v := uint16(g.Pix[o+2*x])<<8 | uint16(g.Pix[o+2*x+1])
			vals[y*w+x] = v
			hi, lo = max(hi, v), min(lo, v)
		}
	}
	eight := func(y float64) uint8 { return uint8(math.Round(min(max(y, 0), 1) * 255)) }
	switch {
	case len(dcm.Windows) > 0:
		pix := make([]uint8, len(dcm.Windows)*plane)
		for c, win := range dcm.Windows {
			for i, v := range vals {
				pix[c*plane+i] = eight(win.Level(float64(v)))
			}
		}
		return decoded{gray: len(dcm.Windows) == 1, h: h, w: w, pix: pix}, nil
	case dcm.OwnRange:
		pix := make([]uint8, plane)
		if hi > lo {
			for i, v := range vals {
				pix[i] = eight(float64(v-lo) / float64(hi-lo))
			}
		}
		return decoded{gray: true, h: h, w: w, pix: pix}, nil
	}
	pix := make([]uint8, plane)
	for i, v := range vals {
		pix[i] = uint8(v >> 8)
	}
	return decoded{gray: true, h: h, w: w, pix: pix, narrow: hi < 1<<12}, nil
}
