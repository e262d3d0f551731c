package cuda

import (
	"fmt"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/noise"
)

// noiseTables is kernels/noise.cu's NoiseTables: the ziggurat's tables as
// noise.Tables gives them, and the AES S-box.
type noiseTables struct {
	k    [256]uint32
	w, f [256]float32
	sbox [256]byte
}

// aesSbox computes the AES S-box from its definition (FIPS-197 §5.1.1):
// the inverse in GF(2⁸), then the affine map.
func aesSbox() (s [256]byte) {
	mul := func(a, b byte) byte {
		var p byte
		for ; b != 0; b >>= 1 {
			if b&1 != 0 {
				p ^= a
			}
			a = a<<1 ^ (a>>7)*0x1b
		}
		return p
	}
	rotl := func(b byte, k uint) byte { return b<<k | b>>(8-k) }
	for x := range 256 {
		inv := byte(0)
		if x != 0 {
			inv = 1
			for range 254 { // x²⁵⁴ = x⁻¹
				inv = mul(inv, byte(x))
			}
		}
		s[x] = inv ^ rotl(inv, 1) ^ rotl(inv, 2) ^ rotl(inv, 3) ^ rotl(inv, 4) ^ 0x63
	}
	return s
}

// uploadNoiseTables copies the tables to the device and allocates the
// round keys' buffer.
func (d *Device) uploadNoiseTables() error {
	t := new(noiseTables)
	t.k, t.w, t.f = noise.Tables()
	t.sbox = aesSbox()
	d.mu.Lock()
	defer d.mu.Unlock()
	var err error
	if d.tables, err = d.alloc(int(unsafe.Sizeof(*t))); err != nil {
		return err
	}
	if err := d.drv.CopyHtoD(d.tables, unsafe.Pointer(t), int(unsafe.Sizeof(*t))); err != nil {
		return fmt.Errorf("cuda: uploading the noise tables: %w", err)
	}
	d.rk, err = d.alloc(176)
	return err
}

// expandKey makes d.rk the round keys of key (d.mu held, args reset).
func (d *Device) expandKey(key runtime.NoiseKey) {
	if d.rkOK && d.rkKey == key {
		return
	}
	d.args.Reset()
	d.args.Bytes(key[:]).Ptr(d.tables).Ptr(d.rk)
	d.launchOne("aes_expand_key")
	d.rkKey, d.rkOK = key, true
}

// PrepareNoise implements runtime.NoiseOps: the AES key schedule of key,
// on the device, kept for the step's AddGaussianNoise calls.
func (d *Device) PrepareNoise(key runtime.NoiseKey, step uint64) runtime.Noise {
	d.begin()
	defer d.end("PrepareNoise")
	d.expandKey(key)
	return runtime.Noise{Key: key, Step: step}
}

// maxNoiseIndex bounds the element indices of a step (noise's 2⁴⁸).
const maxNoiseIndex = 1 << 48

// AddGaussianNoise implements runtime.NoiseOps (kernels/noise.cu): the
// draws of runtime/noise, bit for bit, a thread per four elements (one
// AES block).
func (d *Device) AddGaussianNoise(x []float32, n runtime.Noise, offset uint64, std float64, post float32) {
	if len(x) == 0 {
		return
	}
	if offset >= maxNoiseIndex || uint64(len(x)) > maxNoiseIndex-offset {
		panic(fmt.Sprintf("cuda: noise elements [%d, %d) beyond the 2^48 a step can draw", offset, offset+uint64(len(x))))
	}
	d.begin()
	defer d.end("AddGaussianNoise")
	d.expandKey(n.Key)
	a := d.args
	a.Reset()
	a.Ptr(f32(x, opInOut, d)).I64(int64(len(x))).U64(offset).U64(n.Step).F32(float32(std)).F32(post).Ptr(d.tables).Ptr(d.rk)
	blocks := int64((offset+uint64(len(x))-1)/4 - offset/4 + 1)
	d.launch("add_gaussian_noise", blocks)
}
