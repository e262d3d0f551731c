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
	// The chroma sample nearest pixel p along an axis subsampled by s, and
	// the neighbour the filter mixes in (itself at an edge).
	side := func(p, s, lo, n int) (int, int) {
		c := p>>s - lo
		if s == 0 {
			return c, c
		}
		o := c + 1
		if p&1 == 0 {
			o = c - 1
		}
		return c, min(max(o, 0), n-1)
	}
	for y := range h {
		py := bounds.Min.Y + y
		cy, oy := side(py, sy, y0, ch)
		rowC, rowO := cy*im.CStride, oy*im.CStride
		for x := range w {
			px := bounds.Min.X + x
			cx, ox := side(px, sx, x0, cw)
			var u, v int
			switch {
			case sx == 0:
				u, v = int(im.Cb[rowC+cx]), int(im.Cr[rowC+cx])
			case sy == 0: // 4:2:2, libjpeg's h2v1 filter
				bias := 1 + px&1
				u = (3*int(im.Cb[rowC+cx]) + int(im.Cb[rowC+ox]) + bias) >> 2
				v = (3*int(im.Cr[rowC+cx]) + int(im.Cr[rowC+ox]) + bias) >> 2
			default: // 4:2:0: the column sums along y, then along x
				bias := 8
				if !video && px&1 == 1 {
					bias = 7
				}
				u = (3*(3*int(im.Cb[rowC+cx])+int(im.Cb[rowO+cx])) + 3*int(im.Cb[rowC+ox]) + int(im.Cb[rowO+ox]) + bias) >> 4
				v = (3*(3*int(im.Cr[rowC+cx])+int(im.Cr[rowO+cx])) + 3*int(im.Cr[rowC+ox]) + int(im.Cr[rowO+ox]) + bias) >> 4
			}
			yv := int(im.Y[im.YOffset(px, py)])
			k := y*w + x
			if video {
				r[k], g[k], b[k] = videoToRGB(yv, u, v)
			} else {
				r[k], g[k], b[k] = fullToRGB(yv, u, v)
			}
		}
	}
	return true
}

// fullToRGB is libjpeg's YCbCr→RGB (jdcolor.c): the BT.601 full-range
// matrix with coefficients scaled by 2¹⁶ and rounded, the products
// rounded half up.
func fullToRGB(y, cb, cr int) (uint8, uint8, uint8) {
	const (
		half = 1 << 15
		crR  = 91881  // 1.40200·2¹⁶
		cbB  = 116130 // 1.77200·2¹⁶
		crG  = 46802  // 0.71414·2¹⁶
		cbG  = 22554  // 0.34414·2¹⁶
	)
	cb, cr = cb-128, cr-128
	return clamp8(y + (crR*cr+half)>>16), clamp8(y + (-cbG*cb-crG*cr+half)>>16), clamp8(y + (cbB*cb+half)>>16)
}

// videoToRGB is libwebp's YUV→RGB (dsp/yuv.h): the BT.601 limited-range
// matrix (1.164, 1.596, 0.391, 0.813, 2.018) in 14-bit fixed point, the
// offsets folded into one constant per channel.
func videoToRGB(y, u, v int) (uint8, uint8, uint8) {
	yy := y * 19077 >> 8
	return clip14(yy + v*26149>>8 - 14234), clip14(yy - u*6419>>8 - v*13320>>8 + 8708), clip14(yy + u*33050>>8 - 17685)
}

func clamp8(v int) uint8 { return uint8(min(max(v, 0), 255)) }

// clip14 takes a 14-bit fixed-point value (6 fraction bits) to [0, 255].
func clip14(v int) uint8 { return clamp8(v >> 6) }
