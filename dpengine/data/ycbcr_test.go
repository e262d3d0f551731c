package data

import (
	"image"
	"math/rand/v2"
	"testing"
)

// ycbcrReference is ycbcrToRGB written pixel by pixel from the libraries'
// formulas: the nearest chroma sample and its neighbour on the pixel's
// side along each subsampled axis, weighted 3:1, then fullToRGB or
// videoToRGB.
func ycbcrReference(im *image.YCbCr, video bool, r, g, b []uint8) {
	var sx, sy int
	switch im.SubsampleRatio {
	case image.YCbCrSubsampleRatio422:
		sx = 1
	case image.YCbCrSubsampleRatio420:
		sx, sy = 1, 1
	}
	bounds := im.Rect
	w := bounds.Dx()
	x0, y0 := bounds.Min.X>>sx, bounds.Min.Y>>sy
	cw, ch := (bounds.Max.X+1<<sx-1)>>sx-x0, (bounds.Max.Y+1<<sy-1)>>sy-y0
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
	for y := range bounds.Dy() {
		py := bounds.Min.Y + y
		cy, oy := side(py, sy, y0, ch)
		for x := range w {
			px := bounds.Min.X + x
			cx, ox := side(px, sx, x0, cw)
			at := func(p []uint8, row, col int) int { return int(p[row*im.CStride+col]) }
			var u, v int
			switch {
			case sx == 0:
				u, v = at(im.Cb, cy, cx), at(im.Cr, cy, cx)
			case sy == 0:
				bias := 1 + px&1
				u = (3*at(im.Cb, cy, cx) + at(im.Cb, cy, ox) + bias) >> 2
				v = (3*at(im.Cr, cy, cx) + at(im.Cr, cy, ox) + bias) >> 2
			default:
				bias := 8
				if !video && px&1 == 1 {
					bias = 7
				}
				u = (9*at(im.Cb, cy, cx) + 3*at(im.Cb, oy, cx) + 3*at(im.Cb, cy, ox) + at(im.Cb, oy, ox) + bias) >> 4
				v = (9*at(im.Cr, cy, cx) + 3*at(im.Cr, oy, cx) + 3*at(im.Cr, cy, ox) + at(im.Cr, oy, ox) + bias) >> 4
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

// TestYCbCrTables: ycbcrToRGB's row sums and tables give the bits of the
// formulas pixel by pixel (ycbcrReference), for JPEG's and WebP's
// matrices, every subsampling it handles, odd sizes and sub-images of odd
// origin, on random planes (every chroma and luma value reached).
func TestYCbCrTables(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, ratio := range []image.YCbCrSubsampleRatio{image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420} {
		for _, size := range [][2]int{{1, 1}, {2, 3}, {17, 9}, {64, 48}} {
			full := image.NewYCbCr(image.Rect(0, 0, size[0]+3, size[1]+3), ratio)
			for _, p := range [][]uint8{full.Y, full.Cb, full.Cr} {
				for i := range p {
					p[i] = uint8(rng.IntN(256))
				}
			}
			for _, im := range []*image.YCbCr{
				full.SubImage(image.Rect(0, 0, size[0], size[1])).(*image.YCbCr),
				full.SubImage(image.Rect(1, 3, size[0]+1, size[1]+3)).(*image.YCbCr),
			} {
				n := im.Rect.Dx() * im.Rect.Dy()
				for _, video := range []bool{false, true} {
					got, want := make([]uint8, 3*n), make([]uint8, 3*n)
					if !ycbcrToRGB(im, video, got[:n], got[n:2*n], got[2*n:]) {
						t.Fatalf("%v: not handled", ratio)
					}
					ycbcrReference(im, video, want[:n], want[n:2*n], want[2*n:])
					for k := range want {
						if got[k] != want[k] {
							t.Fatalf("%v %v video %v: value %d (channel %d) = %d, want %d", ratio, im.Rect, video, k%n, k/n, got[k], want[k])
						}
					}
				}
			}
		}
	}
	if ycbcrToRGB(image.NewYCbCr(image.Rect(0, 0, 4, 4), image.YCbCrSubsampleRatio440), false, nil, nil, nil) {
		t.Error("4:4:0 handled")
	}
}

// BenchmarkYCbCrToRGB: a 12-megapixel 4:2:0 JPEG's planes to RGB, by
// ycbcrToRGB's rows and tables and by the pixel-by-pixel formulas
// (ycbcrReference, the form it replaced).
func BenchmarkYCbCrToRGB(b *testing.B) {
	im := image.NewYCbCr(image.Rect(0, 0, 4000, 3000), image.YCbCrSubsampleRatio420)
	for _, p := range [][]uint8{im.Y, im.Cb, im.Cr} {
		for i := range p {
			p[i] = uint8(i*13 + i/4000)
		}
	}
	n := 4000 * 3000
	out := make([]uint8, 3*n)
	b.Run("rows", func(b *testing.B) {
		for b.Loop() {
			ycbcrToRGB(im, false, out[:n], out[n:2*n], out[2*n:])
		}
	})
	b.Run("per-pixel", func(b *testing.B) {
		for b.Loop() {
			ycbcrReference(im, false, out[:n], out[n:2*n], out[2*n:])
		}
	})
}
