#!/usr/bin/env python3
"""Independent reimplementation of runtime/noise from the specification in
runtime/noise/doc.go alone (AES from the `cryptography` package, float32
arithmetic through struct rounding), to check that the text specifies the
noise completely and to produce the golden values TestPythonReference
compares against.

    python3 scripts/noise/reference.py > runtime/noise/testdata/reference_py.json

It draws the 1 000 003 elements of TestAddGaussianGolden's case (key =
uint64 42 little-endian, step 9, offset 5, std 0.7, post 1/3, x[k] = k % 7 - 3)
and writes their SHA-256 and the first 4096 values' bits, with the SHA-256
of the ziggurat tables it computed (TestTablesGolden's). Runs in about a
minute; the float32 rounding of a product or sum of two float32 values
computed in float64 is the float32 operation's (53 >= 2*24 + 2).
"""
import hashlib
import json
import math
import struct
import sys

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


def f32(x):
    """Rounds a Python float to float32 (nearest, ties to even)."""
    return struct.unpack('<f', struct.pack('<f', x))[0]


def f32bits(x):
    return struct.unpack('<I', struct.pack('<f', x))[0]


# --- Tables (doc.go, "Tables") ---
R = 3.6541528853610088
V = 0.00492867323399
SCALE = float(1 << 23)


def tables():
    f = lambda x: math.exp(-0.5 * x * x)
    K = [0] * 256
    W = [0.0] * 256
    F = [0.0] * 256
    dn = tn = R
    q = V / f(dn)
    K[0] = int(dn / q * SCALE)
    K[1] = 0
    W[0] = f32(q / SCALE)
    W[255] = f32(dn / SCALE)
    F[0] = 1.0
    F[255] = f32(f(dn))
    for i in range(254, 0, -1):
        dn = math.sqrt(-2 * math.log(V / dn + f(dn)))
        K[i + 1] = int(dn / tn * SCALE)
        tn = dn
        F[i] = f32(f(dn))
        W[i] = f32(dn / SCALE)
    return K, W, F


K, W, F = tables()


# --- expf and ln (doc.go; mathf.go's steps) ---
def expf(x):
    if x != x:
        return x
    if x > f32(88.72283):
        return math.inf
    if x < f32(-87.33654):
        return 0.0
    log2e, c1, c2 = f32(1.44269504088896341), f32(0.693359375), f32(-2.12194440e-4)
    fn = f32(f32(x * log2e) + 0.5)
    n = int(fn)  # toward zero
    if fn < 0 and float(n) != fn:
        n -= 1
    r = f32(f32(x - f32(n * c1)) - f32(n * c2))
    p = f32(1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = f32(f32(p * r) + f32(c))
    y = f32(f32(f32(f32(p * r) * r) + r) + 1)
    return f32(y * 2.0 ** n)


def ln(x):
    if x == 0:
        return -math.inf
    ln2hi, ln2lo = 6.93147180369123816490e-01, 1.90821492927058770002e-10
    m, e = math.frexp(x)
    if m < math.sqrt(2) / 2:
        m *= 2
        e -= 1
    s = (m - 1) / (m + 1)
    s2 = s * s
    p = 1.0 / 23
    for k in range(21, 0, -2):
        p = p * s2 + 1 / float(k)
    fe = float(e)
    return fe * ln2hi + ((2 * s) * p + fe * ln2lo)


# --- Counter blocks and words (doc.go, "Specification") ---
def counter(t, d, n):
    return struct.pack('>QQ', t, d << 48 | n)


class Aux:
    """An element's auxiliary words: domains 1, 2, ... then zeros."""

    def __init__(self, enc, t, i):
        self.enc, self.t, self.i = enc, t, i
        self.d, self.words = 0, []

    def next(self):
        if not self.words:
            self.d += 1
            if self.d > 65535:
                self.words = [0] * 4
            else:
                self.words = list(struct.unpack('<4I', self.enc(counter(self.t, self.d, self.i))))
        return self.words.pop(0)

    def uniform(self):
        hi = self.next()
        lo = self.next()
        return ((hi << 32 | lo) >> 11) * 2.0 ** -53


def slow(a, L, m):
    while True:
        if L == 0:
            while True:
                x = -ln(1 - a.uniform()) * (1.0 / R)
                y = -ln(1 - a.uniform())
                if 2 * y >= x * x:
                    return f32(R + x)
        x = f32(m * W[L])
        v = f32((a.next() >> 8) * 2.0 ** -24)
        y = f32(F[L] + f32(v * f32(F[L - 1] - F[L])))
        if y < expf(f32(f32(-0.5 * x) * x)):
            return x
        w = a.next()
        L, m = w & 255, w >> 9
        if m < K[L]:
            return f32(m * W[L])


def draw(key, t, offset, xs, std, post):
    ecb = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    enc = lambda b: ecb.update(b)
    std = f32(std)
    post = f32(post)
    n = len(xs)
    first, last = offset // 4, (offset + n - 1) // 4
    ks = enc(b''.join(counter(t, 0, b) for b in range(first, last + 1)))
    words = struct.unpack('<%dI' % (len(ks) // 4), ks)
    out = []
    for k, x in enumerate(xs):
        i = offset + k
        u = words[i - 4 * first]
        L, m, s = u & 255, u >> 9, (u >> 8) & 1
        if m < K[L]:
            a = f32(m * W[L])
        else:
            a = slow(Aux(enc, t, i), L, m)
        z = -a if s else a
        out.append(f32(f32(x + f32(std * z)) * post))
    return out


def main():
    h = hashlib.sha256()
    for i in range(256):
        h.update(struct.pack('<III', K[i], f32bits(W[i]), f32bits(F[i])))
    table_hash = h.hexdigest()
    key = struct.pack('<Q', 42) + bytes(8)
    n = 1000003
    xs = [float(k % 7 - 3) for k in range(n)]
    out = draw(key, 9, 5, xs, 0.7, 1.0 / 3)
    h = hashlib.sha256()
    for v in out:
        h.update(struct.pack('<I', f32bits(v)))
    json.dump({
        'comment': 'generated by scripts/noise/reference.py from the specification in runtime/noise/doc.go',
        'key_hex': key.hex(), 'step': 9, 'offset': 5, 'std': 0.7, 'post': '1/3',
        'input': 'x[k] = k % 7 - 3', 'n': n,
        'table_sha256': table_hash,
        'sha256': h.hexdigest(),
        'first_bits': ['%08x' % f32bits(v) for v in out[:4096]],
    }, sys.stdout, indent=0)
    sys.stdout.write('\n')


if __name__ == '__main__':
    main()
