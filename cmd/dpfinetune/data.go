package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
)

func init() {
	register(&command{
		name:    "data",
		summary: "describe a dataset as the other commands read it: examples, users, classes or labels and their counts, image sizes; fitted to a model, it decodes the images as train would (and keeps them with DPFINETUNE_PIXEL_CACHE)",
		run:     runData,
	})
}

// dataReport is the JSON form of "dpfinetune data".
type dataReport struct {
	Data     string `json:"data"`
	Scheme   string `json:"scheme"`
	Examples int    `json:"examples"`
	// Users is the number of users the data names (0: none), and
	// UserExamples the least, median and largest number of examples a
	// user has (what train's --examples-per-user caps).
	Users        int     `json:"users,omitempty"`
	UserExamples *[3]int `json:"user_examples,omitempty"`
	MultiLabel   bool    `json:"multi_label,omitempty"`
	// Classes holds each class's (or label's) name and count: its
	// examples, or a multi-label dataset's positives and the examples
	// that ignore the label (uncertain=ignore).
	Classes []dataClass `json:"classes"`
	// LabelSets counts a multi-label dataset's distinct label sets (the
	// labels that apply, whatever is ignored), and NoLabel its examples
	// with none.
	LabelSets int `json:"label_sets,omitempty"`
	NoLabel   int `json:"no_label,omitempty"`
	// UncertainTargets are the labels' soft targets of their uncertain
	// entries (uncertain=T): train's loss terms for them.
	UncertainTargets []float64 `json:"uncertain_targets,omitempty"`
	// Channels, and the images' sizes: Height×Width where all share one
	// (fitted, or as they are), else the least, median and largest of
	// each side. Nil for arrays that are not images.
	Channels int     `json:"channels,omitempty"`
	Height   int     `json:"height,omitempty"`
	Width    int     `json:"width,omitempty"`
	Heights  *[3]int `json:"heights,omitempty"`
	Widths   *[3]int `json:"widths,omitempty"`
	Sample   []int   `json:"sample_shape,omitempty"` // arrays fed as they are
	Fit      string  `json:"fit,omitempty"`
	Pixels   string  `json:"pixels"`
	Kept     string  `json:"kept,omitempty"` // the kept pixel file
	Reused   bool    `json:"kept_reused,omitempty"`
	// ClipFrames, for a model of clips, is the frames a clip (an example):
	// Examples and Classes count the clips, the images' figures their
	// frames.
	ClipFrames int `json:"clip_frames,omitempty"`
	// LeftOut are the files the load left out: DICOM objects without an
	// image (data.Images.LeftOut).
	LeftOut []string `json:"left_out,omitempty"`
	// Narrow16 counts the 16-bit photos read by their high bytes whose
	// values are 12 bits or fewer (data.Images.Narrow16), Narrow16First
	// names the first.
	Narrow16      int    `json:"narrow16,omitempty"`
	Narrow16First string `json:"narrow16_first,omitempty"`
	// Fingerprint is the SHA-256 of the examples as loaded: what train
	// records and --resume checks.
	Fingerprint string `json:"fingerprint"`
	// HeldOut is the examples a :holdout=F spec holds out (its test
	// split), counted as the examples are: train's test data by default.
	HeldOut *dataReport `json:"held_out,omitempty"`
	// Groups counts the groups of --group-by: what eval --group-by
	// scores.
	Groups *groupReport `json:"groups,omitempty"`
}

// groupReport counts a dataset's groups of examples (data --group-by).
type groupReport struct {
	By     string `json:"by"`
	Groups int    `json:"groups"`
	// Sizes are the least, median and largest number of examples a
	// group holds; Single the groups of one.
	Sizes  [3]int `json:"sizes"`
	Single int    `json:"single"`
	// Mixed counts the groups whose examples differ in label — eval
	// --group-by refuses them —, FirstMixed names the first and two of
	// its examples that differ.
	Mixed      int    `json:"mixed,omitempty"`
	FirstMixed string `json:"first_mixed,omitempty"`
}

// countGroups counts im's groups by by ("dir" or "user"), read from spec.
func countGroups(im *data.Images, by, spec string) (*groupReport, error) {
	gr, _, err := groupingOf(im, spec, by, "--group-by")
	if err != nil {
		return nil, err
	}
	of, names := gr.Of, gr.Names
	g := &groupReport{By: by, Groups: len(names)}
	size, first := make([]int, len(names)), make([]int, len(names))
	mixed := make([]bool, len(names))
	name := func(i int) string {
		if gr.Example != nil && gr.Example(i) != "" {
			return gr.Example(i)
		}
		return fmt.Sprintf("example %d", i)
	}
	for i, k := range of {
		if size[k] == 0 {
			first[k] = i
		} else if !mixed[k] && im.Label(i) != im.Label(first[k]) {
			mixed[k] = true
			if g.Mixed == 0 {
				g.FirstMixed = fmt.Sprintf("%s: %s and %s", names[k], name(first[k]), name(i))
			}
			g.Mixed++
		}
		size[k]++
	}
	for _, n := range size {
		if n == 1 {
			g.Single++
		}
	}
	slices.Sort(size)
	if n := len(size); n > 0 {
		g.Sizes = [3]int{size[0], size[n/2], size[n-1]}
	}
	return g, nil
}

// dataClass is one class's or label's count in a dataReport.
type dataClass struct {
	Name     string `json:"name"`
	Examples int    `json:"examples"`
	Ignored  int    `json:"ignored,omitempty"`
}

func runData(args []string, stdout io.Writer) error {
	fs := newFlagSet("data", "--data SPEC [--model M.onnx [--resize ...] [--window ...] [--frame ...] [--augment ...] [--input-shape C,H,W]] [--json]")
	spec := fs.String("data", "", "dataset: idx:DIR, cifar10:DIR, cifar100:DIR, folder:DIR, npy:FILE.npz|DIR or csv:FILE.csv with its options, as train takes it (required)")
	model := fs.String("model", "", "fit the images to this model's input as train does (the same --resize and --augment), so that DPFINETUNE_PIXEL_CACHE keeps them for train; without it images are decoded as they are")
	resize := fs.String("resize", "stretch", resizeUsage+" (with --model)")
	window := fs.String("window", windowFile, windowUsage+" (with --model)")
	frame := fs.String("frame", "", frameUsage)
	series := fs.Bool("series", false, seriesUsage)
	augment := fs.String("augment", "none", "train's --augment (with --model: rrc keeps photos whole)")
	inShape := fs.String("input-shape", "", "per-sample input shape C,H,W (default: the model's)")
	groupBy := fs.String("group-by", "", "count the groups eval --group-by would score: dir (each image's directory: a study's views), user, file (a multi-frame file's frames, --frame all) study (DICOM images by their Study Instance UID) or series (by their Series Instance UID); their sizes, and the groups whose examples differ in label (which eval refuses)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *spec == "" {
		return usagef("--data is required")
	}
	if *groupBy != "" && !isGrouping(*groupBy) {
		return usagef("--group-by %q: want %s", *groupBy, groupingValues)
	}
	s, err := data.ParseSpec(*spec)
	if err != nil {
		return usageError{err.Error()}
	}
	rep := dataReport{Data: s.String(), Scheme: s.Scheme, Pixels: "in memory"}
	var im *data.Images
	var clips *data.ClipView // a model of clips' examples
	switch {
	case s.Scheme == data.SchemeNPY:
		a, err := data.LoadArrays(s)
		if err != nil {
			return err
		}
		images, ok, err := a.Images()
		if err != nil {
			return err
		}
		if ok {
			im = images
		} else {
			rep.Sample = a.SampleShape()
			rep.Fingerprint = a.Fingerprint()
			rep.MultiLabel, rep.UncertainTargets = a.MultiLabel(), a.UncertainTargets()
			countClasses(&rep, a, a.Classes(), 0)
		}
	case *model != "":
		lm, err := loadGraph(*model)
		if err != nil {
			return err
		}
		sample, err := modelSample(lm.g, *inShape)
		if err != nil {
			return err
		}
		v, err := openViewOf(func(fit data.Fit) (*data.Images, error) {
			im, err = data.LoadFitted(s, fit)
			return im, err
		}, sample, "default", *augment, *resize, dicomRead{*window, *frame, *series})
		if err != nil {
			return err
		}
		clips, _ = v.(*data.ClipView)
	default:
		frame, err := parseFrame(*frame)
		if err != nil {
			return err
		}
		if im, err = data.LoadFitted(s, data.Fit{Frame: frame, Series: *series}); err != nil {
			return withFrameHint(err)
		}
	}
	if im != nil {
		describeImages(&rep, im)
	}
	if clips != nil {
		// A model of clips: the examples are the clips, the images their
		// frames.
		rep.ClipFrames = clips.SampleShape()[1]
		countClasses(&rep, clips, clips.Classes(), clips.NumUsers())
		rep.Fingerprint = clips.Fingerprint() // what train records
	}
	if *groupBy != "" {
		if im == nil {
			return usagef("--group-by %s: the samples of %s are arrays, not images of their own", *groupBy, s)
		}
		g, err := countGroups(im, *groupBy, s.String())
		if err != nil {
			return err
		}
		rep.Groups = g
	}
	// A holdout's other side, counted alike: what the figures of every
	// epoch's test pass will be over.
	if s.Holdout > 0 && (s.Split == "" || s.Split == data.Train) && im != nil {
		t := s
		t.Split = data.Test
		held, err := data.LoadFitted(t, im.Fitted())
		if err != nil {
			return fmt.Errorf("the held-out examples: %w", err)
		}
		rep.HeldOut = &dataReport{Data: t.String(), Scheme: t.Scheme, MultiLabel: held.MultiLabel()}
		describeImages(rep.HeldOut, held)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	writeData(stdout, &rep)
	return nil
}

// labelled is what countClasses reads of a dataset: its examples' labels.
type labelled interface {
	Len() int
	Label(i int) int
}

// countClasses fills rep's examples, users and each class's or label's
// counts from d, a dataset of the classes named, with users users.
func countClasses(rep *dataReport, d labelled, classes []string, users int) {
	rep.Examples, rep.Users = d.Len(), users
	k := len(classes)
	rep.Classes = make([]dataClass, k)
	for j, c := range classes {
		rep.Classes[j].Name = c
	}
	if !rep.MultiLabel {
		for i := range d.Len() {
			if y := d.Label(i); y >= 0 && y < k {
				rep.Classes[y].Examples++
			}
		}
		return
	}
	set, ign := make([]uint64, labelset.Words(k)), make([]uint64, labelset.Words(k))
	sets := map[string]bool{} // the distinct sets, by their words' bytes
	key := make([]byte, 8*len(set))
	for i := range d.Len() {
		y := int64(d.Label(i))
		if labelset.Expand(y, k, set) != nil || labelset.Ignored(y, k, ign) != nil {
			continue // the loaders make none such
		}
		none := true
		for j := range k {
			if labelset.Has(set, j) {
				rep.Classes[j].Examples++
				none = false
			}
			if labelset.Has(ign, j) {
				rep.Classes[j].Ignored++
			}
		}
		if none {
			rep.NoLabel++
		}
		for w, x := range set {
			binary.LittleEndian.PutUint64(key[8*w:], x)
		}
		if !sets[string(key)] { // a lookup by the bytes allocates nothing
			sets[string(key)] = true
		}
	}
	rep.LabelSets = len(sets)
}

// describeImages fills rep from images.
func describeImages(rep *dataReport, im *data.Images) {
	rep.MultiLabel, rep.UncertainTargets = im.MultiLabel(), im.UncertainTargets()
	countClasses(rep, im, im.Classes(), im.NumUsers())
	if n := im.NumUsers(); n > 0 {
		per := make([]int, n)
		for i := range im.Len() {
			if u := im.UserOf(i); u >= 0 && u < n {
				per[u]++
			}
		}
		slices.Sort(per)
		rep.UserExamples = &[3]int{per[0], per[n/2], per[n-1]}
	}
	rep.Channels = im.Channels()
	if f := im.Fitted(); f.Height > 0 {
		rep.Fit = f.String()
	}
	var hs, ws []int
	for i := range im.Len() {
		h, w := im.Size(i)
		hs, ws = append(hs, h), append(ws, w)
	}
	slices.Sort(hs)
	slices.Sort(ws)
	if n := len(hs); n > 0 && hs[0] == hs[n-1] && ws[0] == ws[n-1] {
		rep.Height, rep.Width = hs[0], ws[0]
	} else if n > 0 {
		rep.Heights, rep.Widths = &[3]int{hs[0], hs[n/2], hs[n-1]}, &[3]int{ws[0], ws[n/2], ws[n-1]}
	}
	if b, dir := im.PixelsOnDisk(); b > 0 {
		rep.Pixels = fmt.Sprintf("%s mapped from a file in %s", dptrain.FormatBytes(b), dir)
	} else {
		rep.Pixels = fmt.Sprintf("%s in memory", dptrain.FormatBytes(im.Bytes()))
	}
	rep.Kept, rep.Reused = im.PixelsKept()
	rep.LeftOut = im.LeftOut()
	rep.Narrow16, rep.Narrow16First = im.Narrow16()
	rep.Fingerprint = im.Fingerprint()
}

// channelsWord says what c channels are.
func channelsWord(c int) string {
	if c == 1 {
		return "gray (1 channel)"
	}
	return fmt.Sprintf("RGB (%d channels)", c)
}

// writeData prints a dataReport.
func writeData(w io.Writer, rep *dataReport) {
	fmt.Fprintf(w, "data:      %s\n", rep.Data)
	users := ""
	if u := rep.UserExamples; rep.Users > 0 && u != nil {
		users = fmt.Sprintf(" of %d users (%d to %d examples a user, median %d)", rep.Users, u[0], u[2], u[1])
	}
	fmt.Fprintf(w, "examples:  %d%s\n", rep.Examples, users)
	if rep.ClipFrames > 0 {
		fmt.Fprintf(w, "clips:     each example a clip of %d frames of a multi-frame file (the images below are the frames)\n", rep.ClipFrames)
	}
	switch {
	case rep.Heights != nil:
		fmt.Fprintf(w, "images:    %s, heights %d–%d (median %d), widths %d–%d (median %d)\n", channelsWord(rep.Channels),
			rep.Heights[0], rep.Heights[2], rep.Heights[1], rep.Widths[0], rep.Widths[2], rep.Widths[1])
	case rep.Height > 0:
		fmt.Fprintf(w, "images:    %s, %d×%d\n", channelsWord(rep.Channels), rep.Height, rep.Width)
	case rep.Sample != nil:
		fmt.Fprintf(w, "samples:   arrays of shape %v, fed as they are\n", rep.Sample)
	}
	if rep.Fit != "" {
		fmt.Fprintf(w, "fitted:    %s as they loaded (as train fits them for the model)\n", rep.Fit)
	}
	if rep.Sample == nil {
		fmt.Fprintf(w, "pixels:    %s\n", rep.Pixels)
	}
	switch {
	case rep.Kept != "" && rep.Reused:
		fmt.Fprintf(w, "kept:      read from %s (none decoded)\n", rep.Kept)
	case rep.Kept != "":
		fmt.Fprintf(w, "kept:      decoded and kept in %s for later runs\n", rep.Kept)
	}
	if note := data.LeftOutNote(rep.LeftOut); note != "" {
		fmt.Fprintf(w, "left out:  %s\n", note)
	}
	if note := data.Narrow16Note(rep.Narrow16, rep.Narrow16First); note != "" {
		fmt.Fprintf(w, "note:      %s\n", note)
	}
	fmt.Fprintf(w, "SHA-256:   %s (the examples as loaded: what train records and --resume checks)\n", rep.Fingerprint)
	if g := rep.Groups; g != nil {
		what := groupNames[g.By]
		fmt.Fprintf(w, "groups:    %d by %s (%d to %d examples a group, median %d; %d of one)\n", g.Groups, what, g.Sizes[0], g.Sizes[2], g.Sizes[1], g.Single)
		if g.Mixed > 0 {
			fmt.Fprintf(w, "           %d of them hold examples of different labels, which eval --group-by refuses (the first: %s)\n", g.Mixed, g.FirstMixed)
		}
	}
	h := rep.HeldOut
	if h != nil {
		users := ""
		if h.Users > 0 {
			users = fmt.Sprintf(" of %d users", h.Users)
		}
		fmt.Fprintf(w, "held out:  %d examples%s (%s: train's test data by default)\n", h.Examples, users, h.Data)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.AlignRight)
	if rep.MultiLabel {
		fmt.Fprintf(w, "labels:    %d, multi-label: %d distinct label sets, %d examples with no label\n", len(rep.Classes), rep.LabelSets, rep.NoLabel)
		head := "  label\t positives\t ignored\t prevalence\t"
		if h != nil {
			head += " held out: positives\t ignored\t"
		}
		fmt.Fprintln(tw, head)
		for j, c := range rep.Classes {
			prev := "–"
			if known := rep.Examples - c.Ignored; known > 0 {
				prev = fmt.Sprintf("%.2f %%", 100*float64(c.Examples)/float64(known))
			}
			fmt.Fprintf(tw, "  %s\t %d\t %d\t %s\t", c.Name, c.Examples, c.Ignored, prev)
			if h != nil && j < len(h.Classes) {
				fmt.Fprintf(tw, " %d\t %d\t", h.Classes[j].Examples, h.Classes[j].Ignored)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		fmt.Fprintf(w, "  (ignored: uncertain labels, left out of the figures; prevalence among the examples that know the label)\n")
		var soft []string
		for j, u := range rep.UncertainTargets {
			if u > 0 && j < len(rep.Classes) {
				soft = append(soft, fmt.Sprintf("%s=%g", rep.Classes[j].Name, u))
			}
		}
		if soft != nil {
			fmt.Fprintf(w, "  (train's loss takes these labels' uncertain entries against soft targets: %s)\n", strings.Join(soft, ", "))
		}
	} else {
		fmt.Fprintf(w, "classes:   %d\n", len(rep.Classes))
		head := "  class\t examples\t share\t"
		if h != nil {
			head += " held out\t"
		}
		fmt.Fprintln(tw, head)
		for j, c := range rep.Classes {
			share := "–"
			if rep.Examples > 0 {
				share = fmt.Sprintf("%.2f %%", 100*float64(c.Examples)/float64(rep.Examples))
			}
			fmt.Fprintf(tw, "  %s\t %d\t %s\t", c.Name, c.Examples, share)
			if h != nil && j < len(h.Classes) {
				fmt.Fprintf(tw, " %d\t", h.Classes[j].Examples)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "note:      these are figures of the data itself, for its owner: not private outputs\n")
}
