package reference

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The Gaussian noise (runtime.NoiseOps), written from the specification
// in runtime/noise/doc.go with crypto/aes and nothing of package
// runtime/noise: element i of step t's noise is a 256-layer ziggurat draw
// from word i of AES-128 in counter mode under the step's key, with
// auxiliary blocks per element for the draws that leave their layer's
// rectangle. The CPU's generator (runtime/noise) draws the same bits; the
// tests hold the two together and hold this one to the values
// scripts/noise/reference.py, another reimplementation of the text, wrote.

// The ziggurat's constants (doc.go): r, the tail's start; v, each layer's
// area; 2²³, the scale of a 23-bit magnitude.
const (
	zigR     = 3.6541528853610088
	zigV     = 0.00492867323399
	zigScale = 1 << 23
	zigInvR  = 0.27366123732975828 // 1/r as doc.go writes it
)

// zigK, zigW and zigF are the ziggurat's tables K, W and F (doc.go,
// "Tables"), computed here from their definition in float64 and rounded
// to float32.
var zigK, zigW, zigF = zigTables()

// zigTables computes the tables: f(x) = exp(−x²/2), x₂₅₅ = r,
// x_{j−1} = √(−2·ln(v/x_j + f(x_j))) for j = 255 … 2, q = v/f(r);
// K[0] = ⌊r/q·2²³⌋, K[1] = 0, K[j] = ⌊x_{j−1}/x_j·2²³⌋; W[0] = q/2²³,
// W[j] = x_j/2²³; F[0] = 1, F[j] = f(x_j).
func zigTables() (k [256]uint32, w, f [256]float32) {
	fx := func(x float64) float64 { return math.Exp(-0.5 * x * x) }
	var x [256]float64
	x[255] = zigR
	for j := 255; j >= 2; j-- {
		x[j-1] = math.Sqrt(-2 * math.Log(zigV/x[j]+fx(x[j])))
	}
	q := zigV / fx(zigR)
	k[0] = uint32(zigR / q * zigScale)
	w[0] = float32(q / zigScale)
	f[0] = 1
	for j := 1; j < 256; j++ {
		if j >= 2 {
			k[j] = uint32(x[j-1] / x[j] * zigScale)
		}
		w[j] = float32(x[j] / zigScale)
		f[j] = float32(fx(x[j]))
	}
	return k, w, f
}

// PrepareNoise implements runtime.NoiseOps: the reference backend keeps
// nothing between calls but the key and the step.
func (Device) PrepareNoise(key runtime.NoiseKey, step uint64) runtime.Noise {
	return runtime.Noise{Key: key, Step: step}
}

// AddGaussianNoise implements runtime.NoiseOps: x[k] ← (x[k] +
// σ·z_{offset+k})·post, each operation rounded to float32, one element at
// a time.
func (Device) AddGaussianNoise(x []float32, n runtime.Noise, offset uint64, std float64, post float32) {
	if len(x) == 0 {
		return
	}
	if offset > 1<<48 || uint64(len(x)) > 1<<48-offset {
		panic(fmt.Sprintf("reference: noise elements %d to %d beyond 2⁴⁸", offset, offset+uint64(len(x))))
	}
	blk, err := aes.NewCipher(n.Key[:])
	if err != nil {
		panic(fmt.Sprintf("reference: noise cipher: %v", err))
	}
	sd := float32(std)
	var ks [16]byte
	have := false
	var cur uint64
	for j := range x {
		i := offset + uint64(j)
		if !have || i/4 != cur {
			cur, have = i/4, true
			ks = counterBlock(n.Step, 0, cur)
			blk.Encrypt(ks[:], ks[:])
		}
		u := binary.LittleEndian.Uint32(ks[4*(i%4):])
		layer, m := u&255, u>>9
		var a float32
		if m < zigK[layer] {
			a = mul32(float32(m), zigW[layer])
		} else {
			a = zigSlow(&auxWords{blk: blk, step: n.Step, index: i}, layer, m)
		}
		z := math.Float32frombits(math.Float32bits(a) ^ (u>>8&1)<<31)
		x[j] = mul32(add32(x[j], mul32(sd, z)), post)
	}
}

// counterBlock is the counter block C(t, d, n): t big-endian in bytes
// 0–7, the domain d in bytes 8–9 and the index n in bytes 10–15.
func counterBlock(t uint64, d uint16, n uint64) [16]byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:], t)
	binary.BigEndian.PutUint16(b[8:], d)
	b[10], b[11], b[12], b[13], b[14], b[15] = byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return b
}

// auxWords is the stream of an element's auxiliary words: words 0 to 3 of
// E(C(t, 1, i)), then of E(C(t, 2, i)), … up to domain 65535, then zeros.
type auxWords struct {
	blk         cipher.Block
	step, index uint64
	domain      int // the domain of b; 0 before the first
	b           [16]byte
	k           int // words of b already read
}

func (a *auxWords) next() uint32 {
	if a.domain == 0 || a.k == 4 {
		a.domain++
		a.k = 0
		if a.domain > 65535 {
			a.b = [16]byte{}
		} else {
			a.b = counterBlock(a.step, uint16(a.domain), a.index)
			a.blk.Encrypt(a.b[:], a.b[:])
		}
	}
	w := binary.LittleEndian.Uint32(a.b[4*a.k:])
	a.k++
	return w
}

// uniform is ((hi·2³² + lo) >> 11)·2⁻⁵³ from the next two words.
func (a *auxWords) uniform() float64 {
	hi := uint64(a.next())
	lo := uint64(a.next())
	return float64((hi<<32|lo)>>11) * (1.0 / (1 << 53))
}

// zigSlow is the slow path of a draw (doc.go): the tail beyond r for
// layer 0, the wedge test y < exp(−x²/2) for the others, and on rejection
// a fresh draw from the next auxiliary word. It returns |z|.
func zigSlow(a *auxWords, layer, m uint32) float32 {
	for {
		if layer == 0 {
			for {
				x := float64(-lnRef(1-a.uniform()) * zigInvR)
				y := -lnRef(1 - a.uniform())
				if float64(2*y) >= float64(x*x) {
					return float32(zigR + x)
				}
			}
		}
		x := mul32(float32(m), zigW[layer])
		v := float32(a.next()>>8) * (1.0 / (1 << 24))
		y := add32(zigF[layer], mul32(v, sub32(zigF[layer-1], zigF[layer])))
		if y < expfRef(mul32(mul32(-0.5, x), x)) {
			return x
		}
		w := a.next()
		layer, m = w&255, w>>9
		if m < zigK[layer] {
			return mul32(float32(m), zigW[layer])
		}
	}
}

// expfRef is e^x in float32 by the steps doc.go prescribes (Cephes expf,
// every operation rounded to float32): n = ⌊x·log₂e + ½⌋, r = (x − n·c₁)
// − n·c₂ with ln 2 = c₁ − c₂ in two parts, a degree-5 polynomial p(r), y =
// (p·r)·r + r + 1, and y·2ⁿ. 0 below −87.33654, +Inf above 88.72283.
func expfRef(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.72283:
		return float32(math.Inf(1))
	case x < -87.33654:
		return 0
	}
	fn := add32(mul32(x, 1.44269504088896341), 0.5)
	n := int32(math.Floor(float64(fn)))
	nf := float32(n)
	r := sub32(sub32(x, mul32(nf, 0.693359375)), mul32(nf, -2.12194440e-4))
	p := float32(1.9875691500e-4)
	for _, c := range [...]float32{1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1} {
		p = add32(mul32(p, r), c)
	}
	y := add32(add32(mul32(mul32(p, r), r), r), 1)
	return float32(float64(y) * math.Ldexp(1, int(n)))
}

// lnRef is ln x for x ∈ (0, 1] by the steps doc.go prescribes, every
// float64 product rounded on its own: x = m·2^e with m ∈ [√½, √2), s =
// (m−1)/(m+1), ln m = 2s·(1 + s²/3 + … + s²²/23) in Horner form, plus
// e·ln 2 in two parts.
func lnRef(x float64) float64 {
	switch {
	case x == 0:
		return math.Inf(-1)
	case !(x > 0):
		return math.NaN()
	}
	const (
		ln2Hi = 6.93147180369123816490e-01
		ln2Lo = 1.90821492927058770002e-10
	)
	m, e := math.Frexp(x)
	if m < math.Sqrt2/2 {
		m *= 2
		e--
	}
	s := (m - 1) / (m + 1)
	s2 := float64(s * s)
	p := 1.0 / 23
	for k := 21; k >= 1; k -= 2 {
		p = float64(p*s2) + 1/float64(k)
	}
	fe := float64(e)
	return float64(fe*ln2Hi) + (float64(float64(2*s)*p) + float64(fe*ln2Lo))
}
