package noise

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
)

// Key is the 128-bit AES key of one logical batch's noise.
type Key [16]byte

// block is one 16-byte AES block.
type block [16]byte

// Counter block fields (doc.go): step big-endian in bytes 0–7, the domain
// in bytes 8–9, the index in bytes 10–15.
const (
	// maxIndex bounds the element index: it has 48 bits in the counter
	// block (2⁴⁸ float32 elements are 1 PiB).
	maxIndex = 1 << 48
	// maxDomain is the last auxiliary domain of an element.
	maxDomain = 1<<16 - 1
)

// counter returns the counter block of (step, domain, index).
func counter(step uint64, domain uint16, index uint64) block {
	var b block
	binary.BigEndian.PutUint64(b[0:], step)
	binary.BigEndian.PutUint64(b[8:], uint64(domain)<<48|index)
	return b
}

// cipherPair is one key's AES-128 twice: crypto/aes for the bulk counter
// mode of domain 0 (Go's AES-NI code, eight blocks at a time) and the
// expanded round keys for encryptBlocks, which encrypts the scattered
// auxiliary blocks in bulk (crypto/aes only offers them one call each,
// ~50 ns here, more than the whole draw of the ~15 elements per 1024 that
// need one).
type cipherPair struct {
	block cipher.Block
	rk    roundKeys
}

func newCipherPair(key Key) cipherPair {
	b, err := aes.NewCipher(key[:])
	if err != nil {
		panic(fmt.Sprintf("noise: AES-128: %v", err)) // a 16-byte key cannot fail
	}
	return cipherPair{block: b, rk: expandKey(key)}
}

// roundKeys is the AES-128 key schedule, the eleven round keys in the byte
// order of FIPS-197 (and of AES-NI).
type roundKeys [176]byte

// sbox is the AES S-box, computed from its definition (FIPS-197 §5.1.1:
// the inverse in GF(2⁸) followed by the affine map) rather than typed in.
var sbox = func() (s [256]byte) {
	mul := func(a, b byte) byte {
		var p byte
		for b != 0 {
			if b&1 != 0 {
				p ^= a
			}
			hi := a & 0x80
			a <<= 1
			if hi != 0 {
				a ^= 0x1b
			}
			b >>= 1
		}
		return p
	}
	rotl := func(b byte, k uint) byte { return b<<k | b>>(8-k) }
	for x := range 256 {
		inv := byte(0)
		if x != 0 {
			// x²⁵⁴ = x⁻¹ in GF(2⁸).
			inv = 1
			for range 254 {
				inv = mul(inv, byte(x))
			}
		}
		s[x] = inv ^ rotl(inv, 1) ^ rotl(inv, 2) ^ rotl(inv, 3) ^ rotl(inv, 4) ^ 0x63
	}
	return s
}()

// expandKey is the AES-128 key expansion (FIPS-197 §5.2).
func expandKey(key Key) roundKeys {
	var rk roundKeys
	copy(rk[:16], key[:])
	rcon := byte(1)
	for i := 16; i < len(rk); i += 4 {
		t := [4]byte(rk[i-4 : i])
		if i%16 == 0 {
			t = [4]byte{sbox[t[1]] ^ rcon, sbox[t[2]], sbox[t[3]], sbox[t[0]]}
			rcon = rcon<<1 ^ (rcon>>7)*0x1b
		}
		for k := range 4 {
			rk[i+k] = rk[i-16+k] ^ t[k]
		}
	}
	return rk
}

// encryptBlocks encrypts each block of bs in place under c's key, with
// AES-NI eight blocks at a time where the CPU has it, else one crypto/aes
// call each.
func (c *cipherPair) encryptBlocks(bs []block) {
	if len(bs) == 0 {
		return
	}
	if haveAESNI {
		encryptBlocksAESNI(&c.rk, &bs[0], len(bs))
		return
	}
	for i := range bs {
		c.block.Encrypt(bs[i][:], bs[i][:])
	}
}
