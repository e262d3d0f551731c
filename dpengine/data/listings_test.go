package data

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// celebAAttributes are CelebA's 40 attribute columns, in its order.
var celebAAttributes = strings.Fields(`5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs
	Big_Lips Big_Nose Black_Hair Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses
	Goatee Gray_Hair Heavy_Makeup High_Cheekbones Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard
	Oval_Face Pale_Skin Pointy_Nose Receding_Hairline Rosy_Cheeks Sideburns Smiling Straight_Hair Wavy_Hair
	Wearing_Earrings Wearing_Hat Wearing_Lipstick Wearing_Necklace Wearing_Necktie Young`)

// pixelLabels maps each sample's first pixel (which identifies its image)
// to its label set.
func pixelLabels(m *Images) map[uint8]int {
	got := map[uint8]int{}
	for i := range m.Len() {
		got[m.Pixels(i)[0]] = m.Label(i)
	}
	return got
}

// TestCSVCelebA: CelebA's attribute listing as it ships — an image_id
// column, 40 attribute columns of 1 and -1, the images in a folder of
// their own — reads with labels=* (every column but the path), -1 as
// absent (uncertain=zero) and root=: 40 labels named as the header names
// them, a label set of 40 bits (beyond the 31 an int32 held).
func TestCSVCelebA(t *testing.T) {
	dir := t.TempDir()
	imgDir := filepath.Join(dir, "img_align_celeba", "img_align_celeba")
	imgs := csvImages(t, imgDir, "", 20, 5)
	var b strings.Builder
	b.WriteString("image_id," + strings.Join(celebAAttributes, ",") + "\n")
	want := map[uint8]int{}
	for k, p := range imgs {
		b.WriteString(p)
		set := 0
		for j := range celebAAttributes {
			if (k+j)%3 == 0 || j == 39 && k == 4 {
				b.WriteString(",1")
				set |= 1 << j
			} else {
				b.WriteString(",-1")
			}
		}
		b.WriteString("\n")
		want[uint8(20+k)] = set
	}
	listing := filepath.Join(dir, "list_attr_celeba.csv")
	writeFile(t, listing, []byte(b.String()))

	spec := "csv:" + listing + ":labels=*:uncertain=zero:root=" + imgDir
	m := mustLoad(t, spec)
	if !m.MultiLabel() || m.NumClasses() != 40 || strings.Join(m.Classes(), " ") != strings.Join(celebAAttributes, " ") || m.Len() != 5 {
		t.Fatalf("%s: multi-label %v, %d labels %q, %d samples", spec, m.MultiLabel(), m.NumClasses(), m.Classes(), m.Len())
	}
	for px, set := range pixelLabels(m) {
		if set != want[px] {
			t.Errorf("image %d: label set %040b, want %040b", px, set, want[px])
		}
	}
	if want[24]>>39&1 != 1 {
		t.Fatal("the test lost its label beyond bit 31")
	}
	// A range gives the same labels; the spec reads back.
	r := mustLoad(t, "csv:"+listing+":labels=5_o_Clock_Shadow..Young:uncertain=zero:root="+imgDir)
	if fmt.Sprint(pixelLabels(r)) != fmt.Sprint(pixelLabels(m)) || r.NumClasses() != 40 {
		t.Errorf("labels=5_o_Clock_Shadow..Young: %v, want %v", pixelLabels(r), pixelLabels(m))
	}
	sp, err := ParseSpec(spec + ":holdout=0.4")
	if err != nil {
		t.Fatal(err)
	}
	if back, err := ParseSpec(sp.String()); err != nil || back.String() != sp.String() || back.Root != imgDir || strings.Join(back.Labels, ",") != "*" {
		t.Errorf("%q reads back as %+v (%v)", sp.String(), back, err)
	}
	// Without root= the paths are the listing directory's: not found.
	_, err = LoadString("csv:" + listing + ":labels=*:uncertain=zero")
	wantErr(t, err, "line 2", "no such file")
	// Without uncertain=, CelebA's -1 is refused, naming the row.
	_, err = LoadString("csv:" + listing + ":labels=*:root=" + imgDir)
	wantErr(t, err, "line 2", `"Arched_Eyebrows" is -1`, "uncertain=zero")
}

// TestCSVCheXpert: CheXpert's train.csv as it ships — its paths begin
// with the folder the listing is in, the patient is in the path, and the
// findings are the columns from "No Finding" to "Support Devices" after
// Sex, Age and the view — reads with root= the folder's parent, users=
// from the paths and a range of label columns; holding out splits by
// patient.
func TestCSVCheXpert(t *testing.T) {
	dir := t.TempDir()
	findings := []string{"No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
		"Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other", "Fracture", "Support Devices"}
	patients := []int{1, 1, 2, 3, 3, 4}
	var b strings.Builder
	b.WriteString("Path,Sex,Age,Frontal/Lateral,AP/PA," + strings.Join(findings, ",") + "\n")
	want := map[uint8]int{}
	for k, p := range patients {
		rel := fmt.Sprintf("CheXpert-v1.0-small/train/patient%05d/study1/view%d_frontal.png", p, k)
		writePNG(t, filepath.Join(dir, rel), grayImage(2, 2, func(x, y int) uint8 { return uint8(40 + k) }))
		fmt.Fprintf(&b, "%s,Female,%d,Frontal,AP", rel, 50+k)
		set := 0
		for j := range findings {
			switch (k + j) % 4 {
			case 0:
				b.WriteString(",1.0")
				set |= 1 << j
			case 1:
				b.WriteString(",0.0")
			case 2:
				b.WriteString(",-1.0") // uncertain=one: present
				set |= 1 << j
			case 3:
				b.WriteString(",")
			}
		}
		b.WriteString("\n")
		want[uint8(40+k)] = set
	}
	listing := filepath.Join(dir, "CheXpert-v1.0-small", "train.csv")
	writeFile(t, listing, []byte(b.String()))

	base := "csv:" + listing + ":labels=No Finding..Support Devices:uncertain=one:root=" + dir + `:users=/(patient\d+)/`
	m := mustLoad(t, base)
	if m.NumClasses() != 14 || strings.Join(m.Classes(), ",") != strings.Join(findings, ",") || m.NumUsers() != 4 {
		t.Fatalf("%d labels %q, %d users", m.NumClasses(), m.Classes(), m.NumUsers())
	}
	if got := pixelLabels(m); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("label sets %v, want %v", got, want)
	}
	for i := range m.Len() {
		px := int(m.Pixels(i)[0]) - 40
		if u := m.UserName(m.UserOf(i)); u != fmt.Sprintf("patient%05d", patients[px]) {
			t.Errorf("image %d: user %q", px, u)
		}
	}
	train, test := mustLoad(t, base+":holdout=0.5"), mustLoad(t, base+":holdout=0.5:test")
	if train.Len()+test.Len() != 6 || test.Len() == 0 || train.Len() == 0 {
		t.Fatalf("holdout: %d train, %d test", train.Len(), test.Len())
	}
	held := map[string]bool{}
	for i := range test.Len() {
		held[test.UserName(test.UserOf(i))] = true
	}
	for i := range train.Len() {
		if u := train.UserName(train.UserOf(i)); held[u] {
			t.Errorf("patient %s on both sides of the holdout", u)
		}
	}
	// labels=* takes Sex, Age and the view too: refused, naming them.
	_, err := LoadString("csv:" + listing + ":labels=*:uncertain=one:root=" + dir)
	wantErr(t, err, "line 2", `"Sex" is "Female"`)

	// A lateral view, whose findings column is garbage: where= reads the
	// frontal views alone, and never looks at it.
	lateral := "CheXpert-v1.0-small/train/patient00009/study1/view1_lateral.png"
	writePNG(t, filepath.Join(dir, lateral), grayImage(2, 2, func(x, y int) uint8 { return 99 }))
	raw := b.String() + lateral + ",Male,70,Lateral,," + strings.Repeat("?,", len(findings)-1) + "?\n"
	writeFile(t, listing, []byte(raw))
	if _, err := LoadString(base); err == nil {
		t.Fatal("the lateral row's findings were accepted")
	}
	frontal := mustLoad(t, base+":where=Frontal/Lateral=Frontal")
	if fmt.Sprint(pixelLabels(frontal)) != fmt.Sprint(want) || frontal.NumUsers() != 4 {
		t.Errorf("where=Frontal/Lateral=Frontal: %v, %d users; want the frontal views %v", pixelLabels(frontal), frontal.NumUsers(), want)
	}
	if either := mustLoad(t, base+":where=Frontal/Lateral=Oblique|Frontal"); either.Len() != 6 {
		t.Errorf("where= of two values: %d images, want the 6 frontal ones", either.Len())
	}
	for _, tc := range []struct {
		opt  string
		want []string
	}{
		{":where=View=Frontal", []string{`where=View=…: no such column`}},
		{":where=Frontal/Lateral=Oblique", []string{`no row's "Frontal/Lateral" is Oblique`}},
	} {
		_, err := LoadString(base + tc.opt)
		wantErr(t, err, tc.want...)
	}
	for _, tc := range []struct{ spec, want string }{
		{"csv:x.csv:where=Frontal", "want COL=VALUE"},
		{"csv:x.csv:where==a", "want COL=VALUE"},
		{"folder:x:where=a=b", "where= applies to the csv scheme only"},
	} {
		_, err := ParseSpec(tc.spec)
		wantErr(t, err, tc.want)
	}
	if sp, err := ParseSpec(base + ":where=Frontal/Lateral=Frontal|Lateral"); err != nil || sp.Where != "Frontal/Lateral=Frontal|Lateral" {
		t.Errorf("where=: %+v %v", sp, err)
	} else if back, err := ParseSpec(sp.String()); err != nil || back.String() != sp.String() {
		t.Errorf("%q reads back as %+v (%v)", sp.String(), back, err)
	}
}

// TestCSVColumnsNamed: path=, label= and user= name the columns of a
// listing whose names are not the usual ones (HAM10000's lesion_id,
// image_id and dx), and the errors say what is missing or wrong.
func TestCSVColumnsNamed(t *testing.T) {
	dir := t.TempDir()
	imgs := csvImages(t, dir, "HAM", 60, 4)
	listing := filepath.Join(dir, "HAM10000_metadata.csv")
	writeFile(t, listing, []byte("lesion_id,where,dx,dx_type\n"+
		"HAM_1,"+imgs[0]+",bkl,histo\n"+
		"HAM_1,"+imgs[1]+",bkl,histo\n"+
		"HAM_2,"+imgs[2]+",mel,histo\n"+
		"HAM_3,"+imgs[3]+",nv,follow_up\n"))
	m := mustLoad(t, "csv:"+listing+":path=WHERE:label=dx:user=lesion_id")
	// HAM10000 as it ships: image_id names the image without its
	// extension; ext= adds it, root= says where the images are.
	ham := filepath.Join(dir, "HAM10000_shipped.csv")
	writeFile(t, ham, []byte("lesion_id,image_id,dx,dx_type\n"+
		"HAM_1,00,bkl,histo\nHAM_1,01,bkl,histo\nHAM_2,02,mel,histo\nHAM_3,03.png,nv,follow_up\n"))
	h := mustLoad(t, "csv:"+ham+":label=dx:user=lesion_id:ext=.png:root="+filepath.Join(dir, "HAM"))
	if fmt.Sprint(pixelLabels(h)) != fmt.Sprint(pixelLabels(m)) || h.NumUsers() != 3 {
		t.Errorf("ext=.png: labels %v, want %v; %d users", pixelLabels(h), pixelLabels(m), h.NumUsers())
	}
	if sp, err := ParseSpec("csv:" + ham + ":ext=.png:root=/x"); err != nil || sp.Ext != ".png" || !strings.Contains(sp.String(), ":root=/x:ext=.png") {
		t.Errorf("ext=.png: %+v %v", sp, err)
	}
	for _, bad := range []string{"ext=png", "ext=.", "ext=.a/b", "ext=.tar.gz"} {
		_, err := ParseSpec("csv:" + ham + ":" + bad)
		wantErr(t, err, bad, "want an extension such as .jpg")
	}
	if strings.Join(m.Classes(), ",") != "bkl,mel,nv" || m.NumUsers() != 3 || m.Len() != 4 {
		t.Fatalf("classes %q, %d users, %d samples", m.Classes(), m.NumUsers(), m.Len())
	}
	for i := range m.Len() {
		px := m.Pixels(i)[0]
		if want := map[uint8]int{60: 0, 61: 0, 62: 1, 63: 2}[px]; m.Label(i) != want {
			t.Errorf("image %d: label %d, want %d", px, m.Label(i), want)
		}
	}
	// A user column found by its usual name is not read where users=
	// reads the paths instead.
	users := filepath.Join(dir, "users.csv")
	writeFile(t, users, []byte("image,label,patient_id\n"+imgs[0]+",a,P1\n"+imgs[1]+",b,P1\n"+imgs[2]+",a,P2\n"))
	if u := mustLoad(t, "csv:"+users).NumUsers(); u != 2 {
		t.Errorf("patient_id: %d users, want 2", u)
	}
	if u := mustLoad(t, "csv:"+users+`:users=/(\d+)\.png$`).NumUsers(); u != 3 {
		t.Errorf("users= from the paths: %d users, want 3 (one an image)", u)
	}

	attrs := filepath.Join(dir, "attrs.csv")
	writeFile(t, attrs, []byte("who,image,A,B,C\nx,"+imgs[0]+",1,0,1\n"))
	for _, tc := range []struct {
		opts string
		want []string
	}{
		{":path=file", []string{"path=file", "no such column", "lesion_id,where,dx,dx_type"}},
		{":path=where", []string{"no label column", ":label=COL"}},
		{":path=where:label=diagnosis", []string{"label=diagnosis", "no such column"}},
		{":path=where:label=dx:user=patient", []string{"user=patient", "no such column"}},
		{":label=dx", []string{"no image path column", ":path=COL"}},
		{":path=where:label=dx:users=^(P)", []string{"line 2", "does not match users=^(P)", "every image must name its user"}},
		{":path=where:label=dx:root=" + filepath.Join(dir, "nowhere"), []string{"root=", "not a directory"}},
		{":path=where:label=where", []string{`"where" is the label column and the image path or user column`}},
	} {
		_, err := LoadString("csv:" + listing + tc.opts)
		wantErr(t, err, tc.want...)
	}
	for _, tc := range []struct {
		opts string
		want []string
	}{
		{":labels=C..A", []string{`"A" comes before "C"`}},
		{":labels=A..D", []string{`no column "D"`}},
		{":labels=A,A..C", []string{`column "A" twice`}},
		{":labels=image..B", []string{`the image path column "image"`}},
		{":labels=A..C:user=who:path=who", []string{`"who" is both the image path and the user column`}},
		{":labels=who..C:user=who", []string{`the user column "who"`}},
	} {
		_, err := LoadString("csv:" + attrs + tc.opts)
		wantErr(t, err, tc.want...)
	}
	twice := filepath.Join(dir, "twice.csv")
	writeFile(t, twice, []byte("image,A,B,A\n"+imgs[0]+",1,0,1\n"))
	_, err := LoadString("csv:" + twice + ":labels=*")
	wantErr(t, err, "two columns of the header", `named "A"`)
	// More label columns than a label set holds.
	var b strings.Builder
	b.WriteString("image")
	for j := range MaxLabels + 1 {
		fmt.Fprintf(&b, ",L%d", j)
	}
	b.WriteString("\n" + imgs[0] + strings.Repeat(",0", MaxLabels+1) + "\n")
	wide := filepath.Join(dir, "wide.csv")
	writeFile(t, wide, []byte(b.String()))
	_, err = LoadString("csv:" + wide + ":labels=*")
	wantErr(t, err, fmt.Sprintf("names %d columns, at most %d", MaxLabels+1, MaxLabels))
	if m := mustLoad(t, "csv:"+wide+":labels=L1..L62"); m.NumClasses() != 62 {
		t.Errorf("labels=L1..L62: %d labels", m.NumClasses())
	}
}

// TestWideLabelSets: listings and arrays of more labels than a label's
// bits hold (COCO's 80 categories) give each sample an interned set
// (internal/labelset) whose words are its labels — by names (multilabel),
// by columns (labels=*) and multi-hot arrays alike —, take the sets
// round-robin in the order of the numbers their bits write, and
// fingerprint the sets' words, not the process's handles.
func TestWideLabelSets(t *testing.T) {
	const k = 80
	dir := t.TempDir()
	imgs := csvImages(t, dir, "coco", 30, 4)
	names := make([]string, k)
	for j := range names {
		names[j] = fmt.Sprintf("c%02d", j) // sorted as numbered
	}
	sets := [][]int{{0, 79}, {64}, {}, {3, 40, 70}}
	var byName, byCol strings.Builder
	byName.WriteString("file_name,labels\n")
	byCol.WriteString("file_name," + strings.Join(names, ",") + "\n")
	for i, p := range imgs {
		var on []string
		row := make([]string, k)
		for j := range row {
			row[j] = "0"
		}
		for _, j := range sets[i] {
			on = append(on, names[j])
			row[j] = "1"
		}
		fmt.Fprintf(&byName, "%s,%s\n", p, strings.Join(on, "|"))
		fmt.Fprintf(&byCol, "%s,%s\n", p, strings.Join(row, ","))
	}
	// Every name appears in some row of the name listing (its labels are
	// the names it holds): the last row names them all.
	all := filepath.Join(dir, "all.png")
	writePNG(t, all, grayImage(2, 2, func(x, y int) uint8 { return 34 }))
	fmt.Fprintf(&byName, "all.png,%s\n", strings.Join(names, "|"))
	fmt.Fprintf(&byCol, "all.png,%s\n", strings.Repeat("1,", k-1)+"1")
	sets = append(sets, nil)
	for j := range k {
		sets[4] = append(sets[4], j)
	}
	nameList, colList := filepath.Join(dir, "names.csv"), filepath.Join(dir, "cols.csv")
	writeFile(t, nameList, []byte(byName.String()))
	writeFile(t, colList, []byte(byCol.String()))

	check := func(what string, d interface {
		Len() int
		NumClasses() int
		Label(int) int
	}, pixel func(i int) uint8) {
		t.Helper()
		if d.Len() != 5 || d.NumClasses() != k {
			t.Fatalf("%s: %d samples, %d labels", what, d.Len(), d.NumClasses())
		}
		w := make([]uint64, labelset.Words(k))
		for i := range d.Len() {
			s := sets[pixel(i)-30]
			if err := labelset.Expand(int64(d.Label(i)), k, w); err != nil {
				t.Fatalf("%s: sample %d: %v", what, i, err)
			}
			for j := range k {
				if labelset.Has(w, j) != slices.Contains(s, j) {
					t.Errorf("%s: image %d, label %d: %v", what, pixel(i), j, labelset.Has(w, j))
				}
			}
		}
	}
	m := mustLoad(t, "csv:"+nameList+":multilabel")
	check("multilabel", m, func(i int) uint8 { return m.Pixels(i)[0] })
	c := mustLoad(t, "csv:"+colList+":labels=*")
	check("labels=*", c, func(i int) uint8 { return c.Pixels(i)[0] })
	// Round-robin in the order of the numbers the sets' bits write: {},
	// {64}, {3, 40, 70}, {0, 79} (bit 79 the largest), then all 80.
	var order []uint8
	for i := range m.Len() {
		order = append(order, m.Pixels(i)[0])
	}
	if fmt.Sprint(order) != "[32 31 33 30 34]" {
		t.Errorf("sample order %v, want the sets in increasing order of their bits", order)
	}
	if m.Fingerprint() != c.Fingerprint() {
		t.Error("the same images and sets read two ways fingerprint apart")
	}

	// Multi-hot arrays of 80 labels.
	x := &npy.Array{DType: npy.Uint8, Shape: []int{5, 2, 2}, U8: make([]uint8, 20)}
	y := npy.NewFloat32(make([]float32, 5*k), 5, k)
	for i, s := range sets {
		for p := range 4 {
			x.U8[i*4+p] = uint8(30 + i)
		}
		for _, j := range s {
			y.F32[i*k+j] = 1
		}
	}
	path := filepath.Join(dir, "coco.npz")
	if err := npy.WriteNPZ(path, map[string]*npy.Array{"x": x, "y": y}); err != nil {
		t.Fatal(err)
	}
	a, err := LoadArrays(mustSpec(t, "npy:"+path))
	if err != nil {
		t.Fatal(err)
	}
	check("multi-hot", a, func(i int) uint8 { return a.u8[i*4] })

	// The fingerprint holds the sets' words.
	var got []int64
	hashLabels(func(v int64) { got = append(got, v) }, []int64{int64(m.Label(m.Len() - 1))}, true, k)
	if want := []int64{-1, 1<<(k-64) - 1}; !slices.Equal(got, want) {
		t.Errorf("hashLabels of the set of all 80 labels: %#x, want its words %#x", got, want)
	}
}
