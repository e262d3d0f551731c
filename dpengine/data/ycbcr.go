package data

import "image"

// ycbcrToRGB converts a decoded JPEG's or lossy WebP's YCbCr pixels to RGB
// planes as PIL's decoders (libjpeg-turbo, libwebp) do, so that a model
// sees the pixels it saw in PyTorch; it reports false for the chroma
// subsamplings it does not handle (4:4:0, 4:1:1, 4:1:0), which the caller
// converts through the image package.
//
// Go's decoders return the chroma planes as stored, at half resolution in
// 4:2:0 (most photos), and image.YCbCr replicates each chroma sample over
// its 2×2 pixels; libjpeg and libwebp upsample it by a triangle filter —
// each pixel's nearest chroma sample weighted 3/4 along each subsampled
// axis, the neighbour on the pixel's side 1/4 (9/16, 3/16, 3/16, 1/16 in
// 4:2:0) — which on sharp colour edges moves values by tens of levels.
// Then the colour matrix: JPEG's full-range BT.601 in libjpeg's 16-bit
// fixed point; VP8's limited range ("video": Y in [16, 235]) in libwebp's
// 14-bit fixed point — x/image/webp returns VP8's planes as an
// image.YCbCr, whose own conversion assumes the full range
// (golang/go#40173): blacks would come out at 16 and whites at 235.
//
// The rounding is each library's: libjpeg-turbo's 4:2:0 filter rounds
// the left pixel of a pair with +8 and the right with +7 (of 16), its
// 4:2:2 filter +1 and +2 (of 4); libwebp's with +8.
func ycbcrToRGB(im *image.YCbCr, video bool, r, g, b []uint8) bool {
	conv := &fullConv
	if video {
		conv = &videoConv
	}
	return upsampleYCbCr(im, conv, video, r, g, b)
}

// rawJPEGToRGB is ycbcrToRGB for a JPEG whose planes are R, G and B as
// stored (a DICOM frame of Photometric Interpretation RGB,
// dicom.RawJPEG): libjpeg's upsampling, no colour matrix.
func rawJPEGToRGB(im *image.YCbCr, r, g, b []uint8) bool {
	return upsampleYCbCr(im, nil, false, r, g, b)
}

// upsampleYCbCr upsamples im's chroma planes as libjpeg (or, for video,
// libwebp) does and converts each pixel by conv (nil: the planes as they
// are).
func upsampleYCbCr(im *image.YCbCr, conv *ycbcrConv, video bool, r, g, b []uint8) bool {
	var sx, sy int // log2 of the chroma subsampling along x and y
	switch im.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
	case image.YCbCrSubsampleRatio422:
		sx = 1
	case image.YCbCrSubsampleRatio420:
		sx, sy = 1, 1
	default:
		return false
	}
	bounds := im.Rect
	w, h := bounds.Dx(), bounds.Dy()
	x0, y0 := bounds.Min.X>>sx, bounds.Min.Y>>sy
	cw, ch := (bounds.Max.X+1<<sx-1)>>sx-x0, (bounds.Max.Y+1<<sy-1)>>sy-y0
	// Per output row, each chroma column's vertical sum (3·nearest row +
	// the other row: 4:2:0's first pass; the sample itself ×4 otherwise,
	// so that one horizontal pass serves every subsampling), then per
	// pixel the horizontal pass.
	cbs, crs := make([]int32, cw), make([]int32, cw)
	for y := range h {
		py := bounds.Min.Y + y
		cy := py>>sy - y0
		oy := cy
		if sy == 1 {
			oy = cy + 1
			if py&1 == 0 {
				oy = cy - 1
			}
			oy = min(max(oy, 0), ch-1)
		}
		cbC, cbO := im.Cb[cy*im.CStride:cy*im.CStride+cw], im.Cb[oy*im.CStride:oy*im.CStride+cw]
		crC, crO := im.Cr[cy*im.CStride:cy*im.CStride+cw], im.Cr[oy*im.CStride:oy*im.CStride+cw]
		for c := range cbs {
			cbs[c] = 3*int32(cbC[c]) + int32(cbO[c])
			crs[c] = 3*int32(crC[c]) + int32(crO[c])
		}
		yr := im.Y[y*im.YStride : y*im.YStride+w]
		rr, gr, br := r[y*w:(y+1)*w], g[y*w:(y+1)*w], b[y*w:(y+1)*w]
		if sx == 0 { // the column sum is 4× the sample
			for x := range w {
				rr[x], gr[x], br[x] = conv.rgb(int32(yr[x]), cbs[x]>>2, crs[x]>>2)
			}
			continue
		}
		// Pixel px's chroma column is px>>1 − x0, its neighbour the column
		// before for an even px, after for an odd one (itself at an edge).
		shift, evenBias, oddBias := uint(4), int32(8), int32(7) // 4:2:0: 3·(3a + a') + (3b + b') over 16
		if sy == 0 {
			// 4:2:2, libjpeg's h2v1 filter on 4× the samples: (3a + b + bias)/4 = (3·4a + 4b + 4·bias)/16.
			evenBias, oddBias = 4, 8
		} else if video {
			oddBias = 8
		}
		for x := range w {
			px := bounds.Min.X + x
			cx := px>>1 - x0
			ox, bias := cx-1, evenBias
			if px&1 == 1 {
				ox, bias = cx+1, oddBias
			}
			ox = min(max(ox, 0), cw-1)
			u := (3*cbs[cx] + cbs[ox] + bias) >> shift
			v := (3*crs[cx] + crs[ox] + bias) >> shift
			rr[x], gr[x], br[x] = conv.rgb(int32(yr[x]), u, v)
		}
	}
	return true
}

// ycbcrConv is a YCbCr→RGB conversion as tables over each channel's 256
// values: R = y' + r[v], G = y' + (g1[u] + g2[v]) >> shift, B = y' +
// b[u], with y' = ys[y], clamped to [0, 255] after a right shift by
// out — libjpeg's and libwebp's own table forms of their fixed-point
// matrices (fullToRGB, videoToRGB), so the same bits.
type ycbcrConv struct {
	ys, r, g1, g2, b [256]int32
	shift, out       uint
}

// rgb converts one pixel; a nil c passes the samples through.
func (c *ycbcrConv) rgb(y, u, v int32) (uint8, uint8, uint8) {
	if c == nil {
		return uint8(y), uint8(u), uint8(v)
	}
	yy := c.ys[y]
	return clampShift(yy+c.r[v], c.out), clampShift(yy+(c.g1[u]+c.g2[v])>>c.shift, c.out), clampShift(yy+c.b[u], c.out)
}

func clampShift(v int32, s uint) uint8 { return uint8(min(max(v>>s, 0), 255)) }

var fullConv, videoConv ycbcrConv

func init() {
	for i := range int32(256) {
		// libjpeg: R = y + (1.402·cr + ½), G = y + (−0.34414·cb − 0.71414·cr + ½) >> 16, B = y + (1.772·cb + ½).
		fullConv.ys[i] = i
		fullConv.r[i] = (jpegCrR*(i-128) + 1<<15) >> 16
		fullConv.g1[i] = -jpegCbG*(i-128) + 1<<15
		fullConv.g2[i] = -jpegCrG * (i - 128)
		fullConv.b[i] = (jpegCbB*(i-128) + 1<<15) >> 16
		// libwebp: the 14-bit sums of VP8YUVToR/G/B, 6 fraction bits.
		videoConv.ys[i] = i * 19077 >> 8
		videoConv.r[i] = i*26149>>8 - 14234
		videoConv.g1[i] = -(i * 6419 >> 8)
		videoConv.g2[i] = -(i * 13320 >> 8) + 8708
		videoConv.b[i] = i*33050>>8 - 17685
	}
	fullConv.shift, videoConv.out = 16, 6
}

// libjpeg's YCbCr→RGB coefficients, ·2¹⁶ and rounded (jdcolor.c).
const (
	jpegCrR = 91881  // 1.40200
	jpegCbB = 116130 // 1.77200
	jpegCrG = 46802  // 0.71414
	jpegCbG = 22554  // 0.34414
)
