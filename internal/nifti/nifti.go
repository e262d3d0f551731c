package nifti

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// Header is what the reader keeps of a NIfTI header.
type Header struct {
	// Version is 1 (a 348-byte header) or 2 (540 bytes).
	Version int
	// Width, Height and Slices are the volume's size along the axes of
	// its closest canonical orientation (RAS+: orient.go) — a slice's
	// columns (x, to the patient's right) and rows (y, to the front),
	// and the slices (z, upwards; 1 for a 2-D image): dim[1], dim[2] and
	// dim[3] permuted.
	Width, Height, Slices int
	// Datatype is the voxels' NIfTI type code (2 uint8, 4 int16, 16
	// float32, 128 RGB24, …).
	Datatype int
	// Slope and Intercept scale the stored values (scl_slope, scl_inter),
	// 1 and 0 where the file gives no scaling (a slope of 0 or not finite,
	// as nibabel reads it).
	Slope, Intercept float64
	// CalMin and CalMax are the display range the file suggests (cal_min,
	// cal_max; equal where it suggests none).
	CalMin, CalMax float64

	order     binary.ByteOrder
	voxOffset int64
	bytesPer  int // a voxel's stored bytes
	// stored are dim[1..3] (1 where absent); axes map the canonical axes
	// to them (orient.go).
	stored [3]int
	axes   [3]axis
}

// RGB reports whether the voxels are colours (RGB24, or RGBA32 whose
// alpha is dropped).
func (h Header) RGB() bool { return h.Datatype == dtRGB24 || h.Datatype == dtRGBA32 }

// Voxels is Width·Height·Slices.
func (h Header) Voxels() int64 { return int64(h.Width) * int64(h.Height) * int64(h.Slices) }

// Bytes is what Decode holds of the voxels: Voxels() times a voxel's
// stored bytes. A caller holds it to the memory available before
// decoding (a gzip-compressed file's few bytes may claim gigabytes).
func (h Header) Bytes() int64 { return h.Voxels() * int64(h.bytesPer) }

// The datatype codes read (NIfTI-1's nifti1.h).
const (
	dtUint8   = 2
	dtInt16   = 4
	dtInt32   = 8
	dtFloat32 = 16
	dtFloat64 = 64
	dtRGB24   = 128
	dtInt8    = 256
	dtUint16  = 512
	dtUint32  = 768
	dtInt64   = 1024
	dtUint64  = 1280
	dtRGBA32  = 2304
)

// voxelBytes are the stored bytes of a voxel of each datatype read.
var voxelBytes = map[int]int{
	dtUint8: 1, dtInt8: 1, dtInt16: 2, dtUint16: 2, dtInt32: 4, dtUint32: 4, dtFloat32: 4,
	dtInt64: 8, dtUint64: 8, dtFloat64: 8, dtRGB24: 3, dtRGBA32: 4,
}

// unread names the datatypes refused.
var unread = map[int]string{
	1: "bit (DT_BINARY)", 32: "complex64", 1536: "float128", 1792: "complex128", 2048: "complex256",
}

// A layout is where a header version keeps the fields read (nifti1.h,
// nifti2.h): their offsets, and the bytes of its floating-point fields,
// of a dimension and of a form code.
type layout struct {
	float, dimSize, codeSize int
	dims, datatype           int
	voxOffset                int // a float in NIfTI-1, an int64 in NIfTI-2
	slope                    int // scl_slope, scl_inter after it
	cal                      int // cal_max, cal_min after it
	codes                    int // qform_code, sform_code after it
	quat                     int // quatern_b, _c, _d
	pixdim                   int // pixdim[0] (qfac), then pixdim[1..7]
	srow                     int // srow_x, srow_y, srow_z of 4 each
}

// layouts are NIfTI-1's and NIfTI-2's.
var layouts = [2]layout{
	{float: 4, dimSize: 2, codeSize: 2, dims: 40, datatype: 70, voxOffset: 108, slope: 112, cal: 124, codes: 252, quat: 256, pixdim: 76, srow: 280},
	{float: 8, dimSize: 8, codeSize: 4, dims: 16, datatype: 12, voxOffset: 168, slope: 176, cal: 192, codes: 344, quat: 352, pixdim: 104, srow: 400},
}

// MaxVoxels bounds an image: 2³¹ voxels (a 2048×2048×512 volume) is more
// than any scan a classifier reads.
const MaxVoxels = 1 << 31

// ErrNotNIfTI is returned (wrapped) for data that is no NIfTI image.
var ErrNotNIfTI = errors.New("not a NIfTI-1 or NIfTI-2 file")

func wrap(err error) error { return fmt.Errorf("nifti: %w", err) }

// open returns r's contents, gunzipped where they are gzip's.
func open(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	if p, err := br.Peek(2); err == nil && p[0] == 0x1f && p[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		return bufio.NewReader(zr), nil
	}
	return br, nil
}

// DecodeHeader reads the header of the NIfTI image in r (a .nii file's
// contents, gzip-compressed or not).
func DecodeHeader(r io.Reader) (Header, error) {
	src, err := open(r)
	if err != nil {
		return Header{}, wrap(fmt.Errorf("gzip: %v", err))
	}
	h, _, err := readHeader(src)
	if err != nil {
		return Header{}, wrap(err)
	}
	return h, nil
}

// readHeader reads and checks a header from src, returning it and the
// bytes of src read.
func readHeader(src io.Reader) (Header, int64, error) {
	var b [540]byte
	if _, err := io.ReadFull(src, b[:4]); err != nil {
		return Header{}, 0, fmt.Errorf("%w: %d bytes", ErrNotNIfTI, 0)
	}
	var h Header
	switch {
	case binary.LittleEndian.Uint32(b[:4]) == 348:
		h.Version, h.order = 1, binary.LittleEndian
	case binary.BigEndian.Uint32(b[:4]) == 348:
		h.Version, h.order = 1, binary.BigEndian
	case binary.LittleEndian.Uint32(b[:4]) == 540:
		h.Version, h.order = 2, binary.LittleEndian
	case binary.BigEndian.Uint32(b[:4]) == 540:
		h.Version, h.order = 2, binary.BigEndian
	default:
		return Header{}, 0, fmt.Errorf("%w: its first word (sizeof_hdr) is neither 348 nor 540", ErrNotNIfTI)
	}
	n := 348
	if h.Version == 2 {
		n = 540
	}
	if _, err := io.ReadFull(src, b[4:n]); err != nil {
		return Header{}, 0, fmt.Errorf("a header of %d bytes cut short", n)
	}
	o := h.order
	var dims [8]int64
	var offset float64
	var g geometry
	var slope, inter float64
	if h.Version == 1 {
		switch m := string(b[344:348]); m {
		case "n+1\x00":
		case "ni1\x00":
			return Header{}, 0, errors.New("a NIfTI-1 header of a .hdr/.img pair (magic \"ni1\"): not read; convert it to one .nii file (nibabel, fslchfiletype)")
		default:
			return Header{}, 0, fmt.Errorf("%w: NIfTI-1 magic %q (an Analyze 7.5 header?)", ErrNotNIfTI, m)
		}
	} else {
		switch m := string(b[4:12]); m {
		case "n+2\x00\r\n\x1a\n":
		case "ni2\x00\r\n\x1a\n":
			return Header{}, 0, errors.New("a NIfTI-2 header of a .hdr/.img pair (magic \"ni2\"): not read; convert it to one .nii file")
		default:
			return Header{}, 0, fmt.Errorf("%w: NIfTI-2 magic %q", ErrNotNIfTI, m)
		}
	}
	L := layouts[h.Version-1]
	fl := func(at int) float64 {
		if L.float == 4 {
			return float64(math.Float32frombits(o.Uint32(b[at:])))
		}
		return math.Float64frombits(o.Uint64(b[at:]))
	}
	in := func(at, size int) int64 {
		switch size {
		case 2:
			return int64(int16(o.Uint16(b[at:])))
		case 4:
			return int64(int32(o.Uint32(b[at:])))
		}
		return int64(o.Uint64(b[at:]))
	}
	for i := range dims {
		dims[i] = in(L.dims+L.dimSize*i, L.dimSize)
	}
	h.Datatype = int(in(L.datatype, 2))
	if h.Version == 1 {
		offset = fl(L.voxOffset)
	} else {
		offset = float64(in(L.voxOffset, 8))
	}
	slope, inter = fl(L.slope), fl(L.slope+L.float)
	h.CalMax, h.CalMin = fl(L.cal), fl(L.cal+L.float)
	g.qcode, g.scode = int(in(L.codes, L.codeSize)), int(in(L.codes+L.codeSize, L.codeSize))
	g.qfac = fl(L.pixdim)
	for i := range 3 {
		g.quat[i] = fl(L.quat + L.float*i)
		g.pixdim[i] = fl(L.pixdim + L.float*(i+1))
		for j := range 3 {
			g.srow[i][j] = fl(L.srow + 4*L.float*i + L.float*j)
		}
	}
	if dims[0] < 1 || dims[0] > 7 {
		return Header{}, 0, fmt.Errorf("dim[0] = %d: want 1 to 7 dimensions", dims[0])
	}
	for i := int64(1); i <= dims[0]; i++ {
		if dims[i] < 1 || dims[i] > MaxVoxels {
			return Header{}, 0, fmt.Errorf("dim[%d] = %d: want 1 to 2^31", i, dims[i])
		}
	}
	for i := int64(4); i <= dims[0]; i++ {
		if dims[i] > 1 {
			return Header{}, 0, fmt.Errorf("a %d-D image of dimensions %v: dimension %d holds %d (volumes of a time series?); only 2-D images and 3-D volumes are read — split it into volumes first (fslsplit, nibabel)", dims[0], dims[1:dims[0]+1], i, dims[i])
		}
	}
	h.stored = [3]int{int(dims[1]), 1, 1}
	if dims[0] >= 2 {
		h.stored[1] = int(dims[2])
	}
	if dims[0] >= 3 {
		h.stored[2] = int(dims[3])
	}
	h.axes = g.canonical()
	if h.stored[2] == 1 {
		// One slice (a 2-D image, a single plane of a scan): read as
		// stored, its plane kept whatever the world axes it lies along —
		// reoriented, a coronal image would become a stack of 1-pixel rows.
		h.axes = [3]axis{{0, false}, {1, false}, {2, false}}
	}
	h.Width, h.Height, h.Slices = h.stored[h.axes[0].stored], h.stored[h.axes[1].stored], h.stored[h.axes[2].stored]
	if v := h.Voxels(); v > MaxVoxels || int64(h.Width)*int64(h.Height) > MaxVoxels {
		return Header{}, 0, fmt.Errorf("an image of %d×%d×%d voxels, over the limit of 2^31", h.Width, h.Height, h.Slices)
	}
	if name, ok := unread[h.Datatype]; ok {
		return Header{}, 0, fmt.Errorf("voxels of type %s (datatype %d) are not read", name, h.Datatype)
	}
	bp, ok := voxelBytes[h.Datatype]
	if !ok {
		return Header{}, 0, fmt.Errorf("datatype %d is no NIfTI voxel type", h.Datatype)
	}
	h.bytesPer = bp
	if !(offset >= float64(n+4)) || offset > 1<<40 {
		return Header{}, 0, fmt.Errorf("vox_offset %g: the voxels start after the %d-byte header and its 4-byte extension flag", offset, n)
	}
	h.voxOffset = int64(offset)
	// nibabel's get_slope_inter: a slope of 0 or not finite is no scaling;
	// a finite slope with an intercept that is not, an error.
	h.Slope, h.Intercept = 1, 0
	if slope != 0 && !math.IsNaN(slope) && !math.IsInf(slope, 0) && !h.RGB() {
		if math.IsNaN(inter) || math.IsInf(inter, 0) {
			return Header{}, 0, fmt.Errorf("scl_slope %g with scl_inter %g: an intercept that is no number", slope, inter)
		}
		h.Slope, h.Intercept = slope, inter
	}
	if math.IsNaN(h.CalMin) || math.IsNaN(h.CalMax) || math.IsInf(h.CalMin, 0) || math.IsInf(h.CalMax, 0) {
		h.CalMin, h.CalMax = 0, 0
	}
	return h, int64(n), nil
}

// A Volume is a NIfTI image's voxels as stored: slice after slice (k),
// each row after row (j), each row's columns (i) in order.
type Volume struct {
	Header
	// raw are the stored voxels in segments of segVoxels voxels (the last
	// shorter): read as they arrive, none grown and copied.
	raw [][]byte
}

// segVoxels is the voxels of a segment of Volume.raw: 4–32 MiB.
const segVoxels = 1 << 22

// voxel returns voxel i's stored bytes (and those after it in its
// segment).
func (v *Volume) voxel(i int) []byte {
	return v.raw[i/segVoxels][(i%segVoxels)*v.bytesPer:]
}

// Slice returns slice k of a grayscale image in its canonical orientation
// — Height rows (y) of Width values (x), Slope·stored + Intercept (NaN
// where a floating-point file stores NaN) — in dst, grown where it is
// short.
func (v *Volume) Slice(k int, dst []float32) []float32 {
	dst = slices.Grow(dst[:0], v.Width*v.Height)[:v.Width*v.Height]
	read, sl, in := v.reader(), v.Slope, v.Intercept
	v.walk(k, func(j, i int) { dst[j] = float32(read(v.voxel(i))*sl + in) })
	return dst
}

// RGBSlice returns slice k of a colour image, as Slice orients it, three
// bytes (R, G, B) a voxel, in dst, grown where it is short.
func (v *Volume) RGBSlice(k int, dst []uint8) []uint8 {
	n := v.Width * v.Height
	dst = slices.Grow(dst[:0], 3*n)[:3*n]
	v.walk(k, func(j, i int) { copy(dst[3*j:3*j+3], v.voxel(i)) })
	return dst
}

// walk calls f for each voxel of canonical slice k, row after row: its
// place j in the slice and i in the stored voxels.
func (v *Volume) walk(k int, f func(j, i int)) {
	var stride [3]int // of the stored axes
	stride[0], stride[1], stride[2] = 1, v.stored[0], v.stored[0]*v.stored[1]
	// The stored index of canonical (x, y, k): base + x·sx + y·sy.
	step := func(a int) (first, s int) {
		ax := v.axes[a]
		s = stride[ax.stored]
		if ax.flip {
			return (v.stored[ax.stored] - 1) * s, -s
		}
		return 0, s
	}
	x0, sx := step(0)
	y0, sy := step(1)
	z0, sz := step(2)
	base := x0 + y0 + z0 + k*sz
	for y := range v.Height {
		row := base + y*sy
		for x := range v.Width {
			f(y*v.Width+x, row+x*sx)
		}
	}
}

// Range returns the least and the greatest of a grayscale image's scaled
// values, NaNs left out (0, 0 where all are NaN).
func (v *Volume) Range() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	var buf [4096]float32
	n := int(v.Voxels())
	for at := 0; at < n; at += len(buf) {
		b := buf[:min(len(buf), n-at)]
		v.values(at, b)
		for _, x := range b {
			if x == x { // not NaN
				lo, hi = min(lo, float64(x)), max(hi, float64(x))
			}
		}
	}
	if lo > hi {
		return 0, 0
	}
	return lo, hi
}

// values sets dst to the scaled values of the stored voxels from the
// at'th.
func (v *Volume) values(at int, dst []float32) {
	read, sl, in := v.reader(), v.Slope, v.Intercept
	for j := range dst {
		dst[j] = float32(read(v.voxel(at+j))*sl + in)
	}
}

// reader returns the function that reads a stored value of the volume's
// datatype, chosen once for a slice's voxels.
func (v *Volume) reader() func(b []byte) float64 {
	o := v.order
	switch v.Datatype {
	case dtUint8:
		return func(b []byte) float64 { return float64(b[0]) }
	case dtInt8:
		return func(b []byte) float64 { return float64(int8(b[0])) }
	case dtInt16:
		return func(b []byte) float64 { return float64(int16(o.Uint16(b))) }
	case dtUint16:
		return func(b []byte) float64 { return float64(o.Uint16(b)) }
	case dtInt32:
		return func(b []byte) float64 { return float64(int32(o.Uint32(b))) }
	case dtUint32:
		return func(b []byte) float64 { return float64(o.Uint32(b)) }
	case dtFloat32:
		return func(b []byte) float64 { return float64(math.Float32frombits(o.Uint32(b))) }
	case dtInt64:
		return func(b []byte) float64 { return float64(int64(o.Uint64(b))) }
	case dtUint64:
		return func(b []byte) float64 { return float64(o.Uint64(b)) }
	}
	return func(b []byte) float64 { return math.Float64frombits(o.Uint64(b)) }
}

// Decode reads the NIfTI image in r (a .nii file's contents, gzip-
// compressed or not).
func Decode(r io.Reader) (*Volume, error) {
	src, err := open(r)
	if err != nil {
		return nil, wrap(fmt.Errorf("gzip: %v", err))
	}
	h, read, err := readHeader(src)
	if err != nil {
		return nil, wrap(err)
	}
	// Extensions (and whatever else) up to the voxels, skipped.
	if _, err := io.CopyN(io.Discard, src, h.voxOffset-read); err != nil {
		return nil, wrap(fmt.Errorf("the file ends before vox_offset %d", h.voxOffset))
	}
	// Read a segment at a time, each allocated as its bytes are about to
	// arrive: a header that claims more than the file holds allocates at
	// most a segment more than the file.
	v := &Volume{Header: h}
	want, got := h.Bytes(), int64(0)
	for got < want {
		seg := make([]byte, min(want-got, int64(segVoxels*h.bytesPer)))
		n, err := io.ReadFull(src, seg)
		got += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, wrap(fmt.Errorf("%d×%d×%d voxels of %d bytes take %d bytes; the file holds %d after vox_offset", h.Width, h.Height, h.Slices, h.bytesPer, want, got))
		}
		if err != nil {
			return nil, wrap(fmt.Errorf("reading the voxels: %v", err))
		}
		v.raw = append(v.raw, seg)
	}
	return v, nil
}
