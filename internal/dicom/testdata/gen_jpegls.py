#!/usr/bin/python3
"""Regenerates the JPEG-LS fixtures in testdata/jpegls/.

Run from anywhere, with Debian's python3 (pydicom 2.3.1, numpy) and dcmtk
3.6.7 (dcmcjpls, dcmdjpls) on PATH:

    /usr/bin/python3 internal/dicom/testdata/gen_jpegls.py

It is deterministic: every random image comes from a seeded generator,
every UID from fixed entropy, dcmcjpls runs with +un (never assign a new
SOP Instance UID), and nothing written depends on the time, so two runs
write byte-identical files.

For every case it writes NAME.jls, the JPEG-LS byte stream of the single
frame (SOI..EOI, taken from the encapsulated Pixel Data), and NAME.u16,
the expected samples: pixel-major, components interleaved, little-endian
uint16. cases.json lists them with width, height, components, precision,
NEAR and interleave mode, all parsed back out of the stream's SOF55/SOS
headers and checked against the request, and with the tool that made the
stream and where the expectation comes from.

Two kinds of case:

* "dcmcjpls" cases: an uncompressed DICOM file made here with pydicom
  (seeded random + smooth + flat content at odd sizes) compressed by
  dcmcjpls: lossless (+el, the default) or near-lossless (+en +md NEAR),
  line (+il), sample (+is) or no (+in) interleave for RGB, custom
  thresholds (+t1 +t2 +t3 +rs). Each is decoded back with dcmdjpls. For a
  lossless case the expectation is the original image, which dcmdjpls's
  output must equal; for a near-lossless one it is dcmdjpls's output (the
  decoding of a near-lossless stream is deterministic), which must lie
  within NEAR of the original. dcmcjpls's raw mode writes 12-bit data as
  precision 16 (with an LSE segment); the cooked mode (+pc) writes
  precision 12, and is used for the 12-bit lossless case. Each of these
  streams must also be what the encoder below (JLSEncoder) writes for the
  same image and parameters, byte for byte, and its reconstruction the
  expectation.

* "python" cases, for what dcmcjpls cannot make: restart intervals (DRI,
  RSTm, with 2-, 3- and 4-byte Ri), fill bytes before markers, APPn and
  COM segments holding 0xFF bytes, an HP "mrfx" APP8 segment of transform
  0 (none), LSE segments with MAXVAL below 2^P-1, custom thresholds, RESET
  as low as 3 and values left 0 (default), precision 2, two and four
  components, and runs long enough to reach high run orders. They are
  written by JLSEncoder, a small T.87 encoder written from the
  Recommendation, and each stream that dcmdjpls can decode is wrapped in a
  DICOM file and decoded by it, whose output must equal the encoder's
  reconstruction (the original image, for NEAR = 0): origin "dcmdjpls".
  dcmtk 3.6.7's decoder (CharLS 1.0 inside) refuses restart markers,
  APPn/COM segments and fill bytes before an LSE segment, misdecodes
  streams whose LSE sets MAXVAL below 2^P-1 (or sets RESET but leaves
  MAXVAL 0, the default), and fails on sample-interleaved streams with a
  RESET other than 64 (dcmcjpls +is +rs 7 even aborts). For such a case
  the control stream, the same image coded by the same encoder without
  those features (no restart, APPn/COM, fill bytes or LSE MAXVAL; for ILV
  2 no custom RESET), is decoded by dcmdjpls instead: origin "encoder;
  control stream checked by dcmdjpls". The two- and four-component
  streams have no DICOM photometric interpretation that dcmdjpls takes,
  and it refuses precision 2: for those (origin "encoder") the only check
  is the Go decoder agreeing with this encoder, which dcmcjpls and
  dcmdjpls have checked on all the others.

In sample-interleaved mode (ILV 2) dcmcjpls codes each component of a run
interruption pixel with the prediction Rb in the run interruption context
of RItype 0, whatever |Ra-Rb| is; the encoder below does the same, and so
matches dcmcjpls's ILV 2 streams.

The 512x512 16-bit "bench" case has no .u16 file; its content is the
integer formula bench_value (mirrored in jpegls_test.go), which keeps the
committed fixtures small.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pydicom
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.encaps import encapsulate, generate_pixel_data_frame
from pydicom.uid import (ExplicitVRLittleEndian, JPEGLSLossless, JPEGLSNearLossless,
                         SecondaryCaptureImageStorage, generate_uid)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "jpegls")


def make_dataset(arr, bits, transfer_syntax, pixel_data):
    """A minimal Secondary Capture data set for arr (rows, cols, comps)."""
    rows, cols, comps = arr.shape
    ds = Dataset()
    fm = FileMetaDataset()
    fm.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    fm.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=["jpegls", str(arr.shape), str(bits)])
    fm.TransferSyntaxUID = transfer_syntax
    ds.file_meta = fm
    ds.SOPClassUID = fm.MediaStorageSOPClassUID
    ds.SOPInstanceUID = fm.MediaStorageSOPInstanceUID
    ds.PatientName = "Fixture^JPEGLS"
    ds.PatientID = "jpegls"
    ds.Modality = "OT"
    ds.Rows, ds.Columns = rows, cols
    ds.SamplesPerPixel = comps
    ds.PhotometricInterpretation = "RGB" if comps == 3 else "MONOCHROME2"
    if comps > 1:
        ds.PlanarConfiguration = 0
    ds.BitsAllocated = 8 if bits <= 8 else 16
    ds.BitsStored = bits
    ds.HighBit = bits - 1
    ds.PixelRepresentation = 0
    ds.PixelData = pixel_data
    ds.is_little_endian = True
    ds.is_implicit_VR = False
    return ds


def raw_pixels(arr, bits):
    dt = np.uint8 if bits <= 8 else np.dtype("<u2")
    return arr.astype(dt).tobytes()


def content(rows, cols, comps, bits, seed):
    """Seeded mix, per component: a smooth sine ramp with small noise on the
    left, uniform random samples on the right, a flat band across the image
    (the same in every component, so that sample-interleaved runs happen
    too), a band flat in component 0 only, and a few extreme values."""
    rng = np.random.default_rng(seed)
    top = (1 << bits) - 1
    y, x = np.mgrid[0:rows, 0:cols]
    out = np.empty((rows, cols, comps), dtype=np.int64)
    for c in range(comps):
        smooth = top * (0.3 + 0.25 * np.sin((x + 2 * c) / 5.0) + 0.2 * y / rows)
        smooth = smooth + rng.integers(-3, 4, size=(rows, cols))
        img = np.clip(np.rint(smooth), 0, top).astype(np.int64)
        half = cols // 2
        img[:, half:] = rng.integers(0, top + 1, size=(rows, cols - half))
        img[rows // 3:rows // 3 + 4, :] = top // 3
        img[rows // 3 + 2, cols // 4] = top // 3 + 1  # interrupts a run
        img[0:2, 0:cols // 2] = 5 % (top + 1)
        if c == 0:
            img[rows - 3:rows - 1, :] = top // 2
        img[rows - 1, 0:4] = [0, top, 0, top]
        out[:, :, c] = img
    return out


def bench_value(x, y):
    """The 512x512 benchmark image: a ramp with one bit of hashed noise,
    written in integer arithmetic that Go reproduces exactly. The noise
    keeps every sample in the regular mode; it is 35 KB coded."""
    h = ((x * 73856093) ^ (y * 19349663)) & 0xFFFFFFFF
    return (20000 + 3 * x + 2 * y + ((h >> 13) & 1)) & 0xFFFF


def frame_bytes(path):
    ds = pydicom.dcmread(path)
    return next(generate_pixel_data_frame(ds.PixelData))


def parse_headers(b):
    """Independent minimal parse of SOF55, LSE and every SOS: (precision,
    height, width, ncomp), [(ns, near, ilv)], LSE payloads, restart."""
    assert b[:2] == b"\xff\xd8"
    i, sof, scans, lse, dri = 2, None, [], [], 0
    while i < len(b):
        assert b[i] == 0xFF, (i, b[i])
        while b[i] == 0xFF:
            i += 1
        m = b[i]
        i += 1
        if m == 0xD9:
            break
        if 0xD0 <= m <= 0xD7:
            continue
        n = b[i] << 8 | b[i + 1]
        seg = b[i + 2:i + n]
        i += n
        if m == 0xF7:
            sof = (seg[0], seg[1] << 8 | seg[2], seg[3] << 8 | seg[4], seg[5])
        elif m == 0xF8:
            lse.append(bytes(seg))
        elif m == 0xDD:
            dri = int.from_bytes(seg, "big")
        elif m == 0xDA:
            ns = seg[0]
            scans.append((ns, seg[1 + 2 * ns], seg[2 + 2 * ns]))
            # Skip the entropy-coded data to the next non-RST marker.
            while not (b[i] == 0xFF and b[i + 1] >= 0x80 and b[i + 1] != 0xFF and not 0xD0 <= b[i + 1] <= 0xD7):
                i += 1
    return sof, scans, lse, dri


# ---------------------------------------------------------------------------
# A small T.87 encoder for the "python" cases.

J = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
     4, 4, 5, 5, 6, 6, 7, 7, 8, 9, 10, 11, 12, 13, 14, 15]


def default_thresholds(maxval, near):
    """C.2.4.1.1."""
    def clamp(i, j):
        return j if i > maxval or i < j else i
    if maxval >= 128:
        f = (min(maxval, 4095) + 128) // 256
        t1 = clamp(f * (3 - 2) + 2 + 3 * near, near + 1)
        t2 = clamp(f * (7 - 3) + 3 + 5 * near, t1)
        t3 = clamp(f * (21 - 4) + 4 + 7 * near, t2)
    else:
        f = 256 // (maxval + 1)
        t1 = clamp(max(2, 3 // f + 3 * near), near + 1)
        t2 = clamp(max(3, 7 // f + 5 * near), t1)
        t3 = clamp(max(4, 21 // f + 7 * near), t2)
    return t1, t2, t3


class BitWriter:
    """MSB-first writer with the JPEG-LS rule of T.87 9.1: after a 0xFF
    byte, the next byte's high bit is a stuffed 0."""

    def __init__(self):
        self.out = bytearray()
        self.acc = 0
        self.n = 0
        self.cap = 8

    def put(self, v, n):
        for k in range(n - 1, -1, -1):
            self.acc = self.acc << 1 | (v >> k) & 1
            self.n += 1
            if self.n == self.cap:
                self.out.append(self.acc)
                self.cap = 7 if self.acc == 0xFF else 8
                self.acc, self.n = 0, 0

    def flush(self):
        """Pads the last byte with 0 bits; a final 0xFF gets a byte of
        padding after it, so that no marker follows it directly."""
        if self.n:
            self.put(0, self.cap - self.n)
        if self.cap == 7:
            self.out.append(0)
            self.cap = 8
        out, self.out = bytes(self.out), bytearray()
        return out


class JLSEncoder:
    """Encodes scans of an image (rows, cols, comps) of ints <= maxval."""

    def __init__(self, maxval, near, t=None, reset=64):
        self.maxval, self.near, self.reset = maxval, near, reset
        self.t1, self.t2, self.t3 = t or default_thresholds(maxval, near)
        self.step = 2 * near + 1
        self.range = (maxval + 2 * near) // self.step + 1
        self.qbpp = (self.range - 1).bit_length()
        bpp = max(2, maxval.bit_length())
        self.limit = 2 * (bpp + max(8, bpp))

    def reset_contexts(self):
        a = max(2, (self.range + 32) // 64)
        self.A = [a] * 367
        self.B = [0] * 365
        self.C = [0] * 365
        self.N = [1] * 367
        self.Nn = [0, 0]

    def quant(self, d):
        t1, t2, t3, near = self.t1, self.t2, self.t3, self.near
        if d <= -t3: return -4
        if d <= -t2: return -3
        if d <= -t1: return -2
        if d < -near: return -1
        if d <= near: return 0
        if d < t1: return 1
        if d < t2: return 2
        if d < t3: return 3
        return 4

    def golomb(self, bw, m, k, limit):
        q = m >> k
        if q < limit - self.qbpp - 1:
            bw.put(1, q + 1)
            bw.put(m & ((1 << k) - 1), k)
        else:
            bw.put(1, limit - self.qbpp)
            bw.put(m - 1, self.qbpp)

    def quantize_error(self, e):
        """A.4.4: the error in units of 2*NEAR+1."""
        if self.near == 0:
            return e
        if e > 0:
            return (e + self.near) // self.step
        return -((self.near - e) // self.step)

    def reduce(self, e):
        """A.4.5: modulo RANGE."""
        if e < 0:
            e += self.range
        if e >= (self.range + 1) // 2:
            e -= self.range
        return e

    def clamp(self, v):
        return min(max(v, 0), self.maxval)

    def regular(self, bw, ix, ra, rb, rc, rd):
        q1, q2, q3 = self.quant(rd - rb), self.quant(rb - rc), self.quant(rc - ra)
        sign = 1
        if q1 < 0 or (q1 == 0 and (q2 < 0 or (q2 == 0 and q3 < 0))):
            sign, q1, q2, q3 = -1, -q1, -q2, -q3
        q = 81 * q1 + 9 * q2 + q3
        if rc >= max(ra, rb):
            px = min(ra, rb)
        elif rc <= min(ra, rb):
            px = max(ra, rb)
        else:
            px = ra + rb - rc
        px = self.clamp(px + sign * self.C[q])
        e = self.quantize_error(sign * (ix - px))
        rx = self.clamp(px + sign * e * self.step)
        e = self.reduce(e)
        A, B, C, N = self.A, self.B, self.C, self.N
        k = 0
        while (N[q] << k) < A[q]:
            k += 1
        if self.near == 0 and k == 0 and 2 * B[q] <= -N[q]:
            m = 2 * e + 1 if e >= 0 else -2 * (e + 1)
        else:
            m = 2 * e if e >= 0 else -2 * e - 1
        self.golomb(bw, m, k, self.limit)
        B[q] += e * self.step
        A[q] += abs(e)
        if N[q] == self.reset:
            A[q] >>= 1
            B[q] = B[q] >> 1 if B[q] >= 0 else -((1 - B[q]) >> 1)
            N[q] >>= 1
        N[q] += 1
        if B[q] <= -N[q]:
            B[q] += N[q]
            if C[q] > -128:
                C[q] -= 1
            if B[q] <= -N[q]:
                B[q] = -N[q] + 1
        elif B[q] > 0:
            B[q] -= N[q]
            if C[q] < 127:
                C[q] += 1
            if B[q] > 0:
                B[q] = 0
        return rx

    def interruption(self, bw, ix, ra, rb, j, sample_interleaved):
        """A.7.2; in sample-interleaved mode RItype is always 0."""
        near = self.near
        ritype = 0 if sample_interleaved or abs(ra - rb) > near else 1
        px = ra if ritype else rb
        sign = -1 if ritype == 0 and ra > rb else 1
        e = self.quantize_error(sign * (ix - px))
        rx = self.clamp(px + sign * e * self.step)
        e = self.reduce(e)
        q = 365 + ritype
        A, N, Nn = self.A, self.N, self.Nn
        temp = A[q] + (N[q] >> 1 if ritype else 0)
        k = 0
        while (N[q] << k) < temp:
            k += 1
        mp = 1 if ((k == 0 and e > 0 and 2 * Nn[ritype] < N[q]) or
                   (e < 0 and 2 * Nn[ritype] >= N[q]) or (e < 0 and k != 0)) else 0
        em = 2 * abs(e) - ritype - mp
        self.golomb(bw, em, k, self.limit - j - 1)
        if e < 0:
            Nn[ritype] += 1
        A[q] += (em + 1 - ritype) >> 1
        if N[q] == self.reset:
            A[q] >>= 1
            N[q] >>= 1
            Nn[ritype] >>= 1
        N[q] += 1
        return rx

    def encode_run(self, bw, runcnt, eol, ri):
        """A.7.1.2; returns the new RUNindex."""
        while runcnt >= 1 << J[ri]:
            bw.put(1, 1)
            runcnt -= 1 << J[ri]
            ri = min(ri + 1, 31)
        if eol:
            if runcnt > 0:
                bw.put(1, 1)
        else:
            bw.put(0, 1)
            bw.put(runcnt, J[ri])
        return ri

    def line(self, bw, src, cur, prev, ri):
        """One line of one component (ILV 0, 1). cur/prev have the edge
        samples at 0 and w+1; src is the line's original samples."""
        w, near = len(src), self.near
        cur[0] = prev[1]
        prev[w + 1] = prev[w]
        x = 1
        while x <= w:
            ra, rb, rc, rd = cur[x - 1], prev[x], prev[x - 1], prev[x + 1]
            if abs(rd - rb) <= near and abs(rb - rc) <= near and abs(rc - ra) <= near:
                runval, cnt = ra, 0
                while x <= w and abs(src[x - 1] - runval) <= near:
                    cur[x] = runval
                    cnt += 1
                    x += 1
                ri = self.encode_run(bw, cnt, x > w, ri)
                if x <= w:
                    # The code's limit takes J[RUNindex] after the
                    # run's 1 bits, before the decrement (A.7.2).
                    cur[x] = self.interruption(bw, src[x - 1], runval, prev[x], J[ri], False)
                    ri = max(ri - 1, 0)
                    x += 1
                continue
            cur[x] = self.regular(bw, src[x - 1], ra, rb, rc, rd)
            x += 1
        return ri

    def pixel_line(self, bw, src, cur, prev, ri):
        """One line of a sample-interleaved scan (ILV 2); src[c] per
        component."""
        ns, w, near = len(src), len(src[0]), self.near
        for c in range(ns):
            cur[c][0] = prev[c][1]
            prev[c][w + 1] = prev[c][w]
        x = 1
        while x <= w:
            if all(abs(prev[c][x + 1] - prev[c][x]) <= near and abs(prev[c][x] - prev[c][x - 1]) <= near
                   and abs(prev[c][x - 1] - cur[c][x - 1]) <= near for c in range(ns)):
                runval = [cur[c][x - 1] for c in range(ns)]
                cnt = 0
                while x <= w and all(abs(src[c][x - 1] - runval[c]) <= near for c in range(ns)):
                    for c in range(ns):
                        cur[c][x] = runval[c]
                    cnt += 1
                    x += 1
                ri = self.encode_run(bw, cnt, x > w, ri)
                if x <= w:
                    j = J[ri]
                    for c in range(ns):
                        cur[c][x] = self.interruption(bw, src[c][x - 1], runval[c], prev[c][x], j, True)
                    ri = max(ri - 1, 0)
                    x += 1
                continue
            for c in range(ns):
                cur[c][x] = self.regular(bw, src[c][x - 1], cur[c][x - 1], prev[c][x], prev[c][x - 1], prev[c][x + 1])
            x += 1
        return ri

    def scan(self, img, comps, ilv, restart, out, fill):
        """Appends the entropy-coded data of one scan to out and returns
        the reconstructed samples of its components."""
        rows, cols, _ = img.shape
        ns = len(comps)
        rec = np.zeros((rows, cols, ns), dtype=np.int64)
        bw = BitWriter()
        prev = [[0] * (cols + 2) for _ in comps]
        cur = [[0] * (cols + 2) for _ in comps]
        ris = [0] * ns
        self.reset_contexts()
        for y in range(rows):
            if restart and y and y % restart == 0:
                out += bw.flush()
                if fill:
                    out += b"\xff\xff"
                out += bytes([0xFF, 0xD0 + (y // restart - 1) % 8])
                self.reset_contexts()
                prev = [[0] * (cols + 2) for _ in comps]
                cur = [[0] * (cols + 2) for _ in comps]
                ris = [0] * ns
            prev, cur = cur, prev
            if ilv == 2:
                src = [[int(v) for v in img[y, :, c]] for c in comps]
                ris[0] = self.pixel_line(bw, src, cur, prev, ris[0])
            else:
                for i, c in enumerate(comps):
                    ris[i] = self.line(bw, [int(v) for v in img[y, :, c]], cur[i], prev[i], ris[i])
            for i in range(ns):
                rec[y, :, i] = cur[i][1:cols + 1]
        out += bw.flush()
        return rec


def segment(marker, payload):
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + bytes(payload)


def encode_jpegls(img, P, near, ilv, restart=0, maxval=None, t=None, reset=None,
                  junk=False, fill=False, mrfx=False, restart_bytes=2, explicit=False):
    """img: (rows, cols, comps) ints. Writes one scan per component for
    ILV 0, else one scan of all components. An LSE segment is written when
    maxval, t or reset is given (or explicit), with 0 for each value not
    given unless explicit, which writes every value as it is in effect.
    Returns (stream, reconstruction)."""
    rows, cols, ncomp = img.shape
    out = bytearray(b"\xff\xd8")
    if junk:
        out += segment(0xE5, b"APP5 \xff\xd9\xff\x00\xffjunk")
        out += segment(0xFE, b"COM with \xff\xda inside")
    if mrfx:
        out += segment(0xE8, b"mrfx\x00")
    frame = bytearray([P]) + rows.to_bytes(2, "big") + cols.to_bytes(2, "big") + bytes([ncomp])
    for c in range(ncomp):
        frame += bytes([c + 1, 0x11, 0])
    out += segment(0xF7, frame)
    mv = maxval if maxval is not None else (1 << P) - 1
    if explicit:
        maxval, t, reset = mv, t or default_thresholds(mv, near), reset or 64
    if maxval is not None or t is not None or reset is not None:
        tt = t or (0, 0, 0)
        p = [1] + [b for v in (maxval or 0, tt[0], tt[1], tt[2], reset or 0) for b in v.to_bytes(2, "big")]
        if fill:
            out += b"\xff"
        out += segment(0xF8, p)
    if restart:
        out += segment(0xDD, restart.to_bytes(restart_bytes, "big"))
    enc = JLSEncoder(mv, near, t=t, reset=reset or 64)
    rec = np.zeros_like(img)
    groups = [[c] for c in range(ncomp)] if ilv == 0 else [list(range(ncomp))]
    for comps in groups:
        sos = bytearray([len(comps)])
        for c in comps:
            sos += bytes([c + 1, 0])
        sos += bytes([near, ilv, 0])
        out += segment(0xDA, sos)
        r = enc.scan(img, comps, ilv, restart, out, fill)
        for i, c in enumerate(comps):
            rec[:, :, c] = r[:, :, i]
        if fill:
            out += b"\xff"
    out += b"\xff\xd9"
    return bytes(out), rec


# ---------------------------------------------------------------------------


def decoded_samples(path, shape):
    """The samples of an uncompressed file as (rows, cols, comps), read from
    the raw Pixel Data."""
    ds = pydicom.dcmread(path)
    rows, cols, comps = shape
    dt = np.uint8 if ds.BitsAllocated == 8 else np.dtype("<u2")
    a = np.frombuffer(ds.PixelData, dtype=dt)[:rows * cols * comps].astype(np.int64)
    if comps > 1 and ds.get("PlanarConfiguration", 0) == 1:
        return a.reshape(comps, rows, cols).transpose(1, 2, 0)
    return a.reshape(rows, cols, comps)


def jls_unpad(b):
    """A stream without the padding of an odd-length fragment: dcmcjpls
    (+ps, the default) writes a fill byte before EOI, pydicom a 0 after."""
    if len(b) % 2 == 0 and b.endswith(b"\xff\xd9\x00"):
        b = b[:-1]
    if b.endswith(b"\xff\xff\xd9"):
        b = b[:-3] + b"\xff\xd9"
    return b


def dcmdjpls(tmp, name, path, shape):
    dec = os.path.join(tmp, name + ".dec.dcm")
    subprocess.run(["dcmdjpls", path, dec], check=True)
    return decoded_samples(dec, shape)


def write_case(cases, name, stream, expected, bits, near, ilv, origin, tool, write_u16=True):
    rows, cols, comps = expected.shape
    sof, scans, _, _ = parse_headers(stream)
    assert sof == (bits, rows, cols, comps), (name, sof)
    assert all(s[1] == near for s in scans), (name, scans)
    assert all(s[2] == ilv for s in scans), (name, scans)
    with open(os.path.join(OUT, name + ".jls"), "wb") as f:
        f.write(stream)
    if write_u16:
        with open(os.path.join(OUT, name + ".u16"), "wb") as f:
            f.write(expected.astype("<u2").tobytes())
    cases.append({
        "name": name, "width": cols, "height": rows, "components": comps,
        "precision": sof[0], "near": near, "ilv": ilv, "scans": len(scans),
        "origin": origin, "tool": tool,
        "expected": "u16" if write_u16 else "bench_value",
    })


def main():
    for tool in ("dcmcjpls", "dcmdjpls"):
        if shutil.which(tool) is None:
            sys.exit("needs dcmtk's %s on PATH" % tool)
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    tmp = tempfile.mkdtemp(prefix="gen_jpegls.")
    cases = []

    # name, rows, cols, comps, bits stored, seed, dcmcjpls options, NEAR,
    # ILV, the SOF55 precision dcmcjpls writes.
    dcmtk_cases = [
        ("u16", 17, 23, 1, 16, 1, [], 0, 0, 16),
        ("u16_near1", 17, 23, 1, 16, 2, ["+en", "+md", "1"], 1, 0, 16),
        ("u16_near3", 17, 23, 1, 16, 3, ["+en", "+md", "3"], 3, 0, 16),
        ("u12_raw", 17, 23, 1, 12, 4, [], 0, 0, 16),
        ("u12", 31, 40, 1, 12, 5, ["+pc"], 0, 0, 12),
        ("u12_near2", 31, 40, 1, 12, 6, ["+en", "+md", "2"], 2, 0, 12),
        ("u8", 31, 40, 1, 8, 7, [], 0, 0, 8),
        ("u8_near1", 17, 23, 1, 8, 8, ["+en", "+md", "1"], 1, 0, 8),
        ("u8_near3", 17, 23, 1, 8, 9, ["+en", "+md", "3"], 3, 0, 8),
        ("u8_thresh", 31, 40, 1, 8, 10, ["+t1", "5", "+t2", "9", "+t3", "30", "+rs", "24"], 0, 0, 8),
        ("u8_near2_thresh", 31, 40, 1, 8, 11, ["+en", "+md", "2", "+t1", "4", "+t2", "12", "+t3", "40", "+rs", "100"], 2, 0, 8),
        ("rgb8_ilv1", 17, 23, 3, 8, 12, ["+il"], 0, 1, 8),
        ("rgb8_ilv2", 17, 23, 3, 8, 13, ["+is"], 0, 2, 8),
        ("rgb8_ilv0", 17, 23, 3, 8, 14, ["+in"], 0, 0, 8),
        ("rgb8_ilv1_near2", 17, 23, 3, 8, 15, ["+il", "+en", "+md", "2"], 2, 1, 8),
        ("rgb8_ilv2_near1", 17, 23, 3, 8, 16, ["+is", "+en", "+md", "1"], 1, 2, 8),
        ("rgb8_ilv0_near3", 17, 23, 3, 8, 17, ["+in", "+en", "+md", "3"], 3, 0, 8),
    ]
    for name, rows, cols, comps, bits, seed, opts, near, ilv, prec in dcmtk_cases:
        img = content(rows, cols, comps, bits, seed)
        src = os.path.join(tmp, name + ".dcm")
        make_dataset(img, bits, ExplicitVRLittleEndian, raw_pixels(img, bits)).save_as(src, write_like_original=False)
        dst = os.path.join(tmp, name + ".jls.dcm")
        opts = opts + ["+un"]
        subprocess.run(["dcmcjpls"] + opts + [src, dst], check=True)
        stream = frame_bytes(dst)
        got = dcmdjpls(tmp, name, dst, img.shape)
        if near == 0:
            if not np.array_equal(got, img):
                sys.exit("%s: dcmdjpls does not give back the original" % name)
            expected, origin = img, "original"
        else:
            if np.abs(got - img).max() > near:
                sys.exit("%s: dcmdjpls output is not within NEAR of the original" % name)
            expected, origin = got, "dcmdjpls"
        # The encoder below, given the same image and parameters, must
        # write the same stream as dcmcjpls, bit for bit: the check of the
        # encoder that the "python" cases rest on.
        _, _, lse, _ = parse_headers(stream)
        kw = {}
        if lse:
            v = [int.from_bytes(lse[0][i:i + 2], "big") for i in range(1, 11, 2)]
            kw = dict(maxval=v[0], t=tuple(v[1:4]), reset=v[4])
        mine, rec = encode_jpegls(img, prec, near, ilv, **kw)
        if jls_unpad(stream) != mine or not np.array_equal(rec, expected):
            sys.exit("%s: the encoder's stream differs from dcmcjpls's" % name)
        write_case(cases, name, stream, expected, prec, near, ilv, origin, "dcmcjpls " + " ".join(opts))

    # The benchmark image.
    y, x = np.mgrid[0:512, 0:512]
    img = bench_value(x.astype(np.int64), y.astype(np.int64)).reshape(512, 512, 1)
    src = os.path.join(tmp, "bench.dcm")
    make_dataset(img, 16, ExplicitVRLittleEndian, raw_pixels(img, 16)).save_as(src, write_like_original=False)
    dst = os.path.join(tmp, "bench.jls.dcm")
    subprocess.run(["dcmcjpls", "+un", src, dst], check=True)
    stream = frame_bytes(dst)
    if not np.array_equal(dcmdjpls(tmp, "bench", dst, img.shape), img):
        sys.exit("bench: dcmdjpls does not give back the original")
    write_case(cases, "bench_u16_512", stream, img, 16, 0, 0, "bench_value", "dcmcjpls +un", write_u16=False)

    # Python-encoded streams. The last field says whether dcmdjpls can
    # decode the stream itself: dcmtk's decoder refuses restart markers and
    # APPn/COM segments, and with an LSE MAXVAL below 2^P-1 (or with a RESET
    # other than 64 but MAXVAL left 0, the default) it computes RANGE from
    # 2^P-1 rather than MAXVAL. For those the "control" stream, the same
    # image coded by the same encoder without the feature dcmdjpls lacks
    # (restart, APPn/COM, LSE MAXVAL), must decode in dcmdjpls to what
    # the encoder reconstructed.
    py_cases = [
        # name, rows, cols, comps, bits, seed, NEAR, ILV, options, oracle:
        # "self" (dcmdjpls decodes the stream), "control" (it decodes
        # the control stream) or "none"
        ("py_rst_u8", 31, 40, 1, 8, 21, 0, 0, dict(restart=5, junk=True, fill=True), "control"),
        ("py_rst_u16_near2", 17, 23, 1, 16, 22, 2, 0, dict(restart=1, restart_bytes=3), "control"),
        ("py_rst_rgb8_ilv1", 17, 23, 3, 8, 23, 0, 1, dict(restart=4, fill=True), "control"),
        ("py_rst_rgb8_ilv2_near1", 17, 23, 3, 8, 24, 1, 2, dict(restart=6, junk=True), "control"),
        ("py_rst_rgb8_ilv0", 17, 23, 3, 8, 25, 0, 0, dict(restart=8, restart_bytes=4), "control"),
        ("py_lse_u12", 31, 40, 1, 12, 26, 0, 0, dict(maxval=3000, t=(10, 40, 200), reset=5, fill=True), "control"),
        ("py_lse_u12_near4", 17, 23, 1, 12, 27, 4, 0, dict(maxval=3000, reset=9), "control"),
        ("py_reset3_u8", 31, 40, 1, 8, 35, 0, 0, dict(reset=3, explicit=True), "self"),
        ("py_p2_mrfx", 17, 23, 1, 2, 28, 0, 0, dict(mrfx=True), "none"),
        ("py_p2_near1", 17, 23, 1, 2, 29, 1, 0, dict(), "none"),
        ("py_rgb8_ilv2_reset7", 17, 23, 3, 8, 30, 0, 2, dict(reset=7, explicit=True), "control"),
        ("py_longrun_u8", 2, 1100, 1, 8, 31, 0, 0, dict(), "self"),
        ("py_2c_ilv1", 17, 23, 2, 8, 32, 0, 1, dict(restart=7), "none"),
        ("py_4c_ilv2", 17, 23, 4, 10, 33, 0, 2, dict(), "none"),
        ("py_4c_ilv1_near2", 17, 23, 4, 10, 34, 2, 1, dict(), "none"),
    ]
    for name, rows, cols, comps, bits, seed, near, ilv, opt, oracle in py_cases:
        if name.startswith("py_longrun"):
            # Long flat runs, each broken once near its end, so that
            # RUNindex climbs to long run segments.
            img = np.full((rows, cols, comps), 100, dtype=np.int64)
            img[0, cols - 7, 0] = 101
            img[1, cols - 100:, 0] = 90
            img[1, 700, 0] = 3
        else:
            img = content(rows, cols, comps, bits, seed)
        if "maxval" in opt:
            img = np.minimum(img, opt["maxval"])
        stream, rec = encode_jpegls(img, bits, near, ilv, **opt)
        if np.abs(rec - img).max() > near:
            sys.exit("%s: the encoder's reconstruction is not within NEAR" % name)
        ts = JPEGLSLossless if near == 0 else JPEGLSNearLossless
        if oracle == "none":
            origin = "encoder"
        else:
            check, check_rec = stream, rec
            origin = "dcmdjpls"
            if oracle == "control":
                drop = ("restart", "restart_bytes", "junk", "fill", "maxval") + (("reset",) if ilv == 2 else ())
                control = {k: v for k, v in opt.items() if k not in drop}
                if "maxval" in opt:
                    control["explicit"] = True
                check, check_rec = encode_jpegls(img, bits, near, ilv, **control)
                origin = "encoder; control stream checked by dcmdjpls"
            path = os.path.join(tmp, name + ".jls.dcm")
            make_dataset(img, bits, ts, encapsulate([check])).save_as(path, write_like_original=False)
            if not np.array_equal(dcmdjpls(tmp, name, path, img.shape), check_rec):
                sys.exit("%s: dcmdjpls disagrees with the encoder" % name)
        if near == 0 and not np.array_equal(rec, img):
            sys.exit("%s: lossless reconstruction differs from the original" % name)
        write_case(cases, name, stream, rec, bits, near, ilv, origin,
                   "gen_jpegls.py JLSEncoder " + ", ".join("%s=%s" % kv for kv in sorted(opt.items())))

    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")
    shutil.rmtree(tmp)
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print("%d cases, %d bytes in %s" % (len(cases), total, OUT))


if __name__ == "__main__":
    main()
