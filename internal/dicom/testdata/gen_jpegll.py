#!/usr/bin/python3
"""Regenerates the JPEG lossless fixtures in testdata/jpegll/.

Run from anywhere, with Debian's python3 (pydicom 2.3.1, numpy) and dcmtk
3.6.7 (dcmcjpeg, dcmdjpeg) on PATH:

    /usr/bin/python3 internal/dicom/testdata/gen_jpegll.py

For every case it writes NAME.ljpg, the JPEG byte stream of the single
frame (SOI..EOI, taken from the encapsulated Pixel Data), and NAME.u16,
the expected samples: pixel-major, components interleaved, little-endian
uint16, each (original >> Pt) << Pt. cases.json lists them with width,
height, components, precision, predictor and point transform, all parsed
back out of the stream's SOF3/SOS headers and checked against the request.

Two kinds of case:

* "dcmcjpeg" cases: an uncompressed DICOM file made here with pydicom
  (seeded random + smooth content, odd sizes, a few extreme values so that
  16-bit images hit difference category 16) compressed by dcmcjpeg's true
  lossless codec (+tl, the default): +e1 for SV1 (transfer syntax .70),
  +el +sv N for the other predictors (.57), +pt N for a point transform.
  dcmcjpeg writes one interleaved scan and has no restart-interval option.

* "python" cases, for what dcmcjpeg cannot make: restart intervals,
  non-interleaved scans (one per component, with per-scan predictors and
  Huffman tables redefined between scans), several Huffman tables in one
  scan, fill bytes before markers, APPn/COM segments holding 0xFF bytes,
  precision 2, and explicit difference-category-16 content. They are
  written by the small T.81 Annex H encoder below (encode_lossless), and
  every one of them is then wrapped in a DICOM file (transfer syntax .57)
  and decoded by dcmdjpeg, whose output must equal the expected samples:
  dcmtk, not this encoder, is the oracle for them.

Every dcmcjpeg case is checked the same way (dcmdjpeg round trip), except
u12_pl_sv7: dcmcjpeg's true lossless codec writes 12-bit data as
precision 16, so that one case uses the pseudo-lossless codec (+pl +bt)
to get a dcmtk-made P=12 stream; that codec stores the samples less their
minimum, so its expectation is dcmdjpeg's output rather than the original.

The 512x512 16-bit "bench" case has no .u16 file; its content is the
integer formula bench_value (mirrored in jpegll_test.go), which keeps the
committed fixtures small.
"""

import heapq
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
from pydicom.uid import (ExplicitVRLittleEndian, JPEGLosslessP14,
                         SecondaryCaptureImageStorage, generate_uid)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "jpegll")


def make_dataset(arr, bits, transfer_syntax, pixel_data):
    """A minimal Secondary Capture data set for arr (rows, cols, comps)."""
    rows, cols, comps = arr.shape
    ds = Dataset()
    fm = FileMetaDataset()
    fm.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    fm.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=["jpegll", str(arr.shape), str(bits)])
    fm.TransferSyntaxUID = transfer_syntax
    ds.file_meta = fm
    ds.SOPClassUID = fm.MediaStorageSOPClassUID
    ds.SOPInstanceUID = fm.MediaStorageSOPInstanceUID
    ds.PatientName = "Fixture^JPEG"
    ds.PatientID = "jpegll"
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
    """Seeded mix: a smooth ramp + sine with small noise on the left, uniform
    random samples on the right, and a block of extremes (0, 2^(bits-1),
    max) whose neighbours differ by half the range."""
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
        ext = np.array([0, 1 << (bits - 1), top, 1 << (bits - 1)])
        img[rows // 3:rows // 3 + 3, 2:8] = ext[(x[0:3, 0:6] + y[0:3, 0:6] + c) % 4]
        out[:, :, c] = img
    return out


def bench_value(x, y):
    """The 512x512 benchmark image: a ramp with one bit of hashed noise,
    written in integer arithmetic that Go reproduces exactly."""
    h = ((x * 73856093) ^ (y * 19349663)) & 0xFFFFFFFF
    return (30000 + x + y + ((h >> 13) & 1)) & 0xFFFF


def frame_bytes(path):
    ds = pydicom.dcmread(path)
    return next(generate_pixel_data_frame(ds.PixelData)), str(ds.file_meta.TransferSyntaxUID)


def parse_headers(b):
    """Independent minimal parse of SOF3 and every SOS: (precision, height,
    width, ncomp, [(scan comps, predictor, pt)], restart interval)."""
    assert b[:2] == b"\xff\xd8"
    i, sof, scans, dri = 2, None, [], 0
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
        if m == 0xC3:
            sof = (seg[0], seg[1] << 8 | seg[2], seg[3] << 8 | seg[4], seg[5])
        elif m == 0xDD:
            dri = seg[0] << 8 | seg[1]
        elif m == 0xDA:
            ns = seg[0]
            scans.append((ns, seg[1 + 2 * ns], seg[3 + 2 * ns] & 15))
            # Skip the entropy-coded data to the next non-RST marker.
            while not (b[i] == 0xFF and b[i + 1] not in (0x00, 0xFF) and not 0xD0 <= b[i + 1] <= 0xD7):
                i += 1
    return sof, scans, dri


# ---------------------------------------------------------------------------
# A small T.81 Annex H encoder for the "python" cases.


def category(d):
    """SSSS of Table H.2 for a difference already reduced to -32768..32767;
    -32768 is the difference 32768 of category 16 (H.1.2.2)."""
    if d == -32768:
        return 16
    return abs(d).bit_length()


def huffman_lengths(freq):
    """Code lengths (T.81 K.2 in spirit) for symbols with freq > 0. A dummy
    symbol 256 of the lowest weight takes the all-ones code, which is then
    dropped so that no code is all ones."""
    items = [(f, s) for s, f in freq.items() if f > 0] + [(0.5, 256)]
    heap = [(f, k, [s]) for k, (f, s) in enumerate(items)]
    heapq.heapify(heap)
    length = {s: 0 for _, s in items}
    k = len(heap)
    while len(heap) > 1:
        f1, _, s1 = heapq.heappop(heap)
        f2, _, s2 = heapq.heappop(heap)
        for s in s1 + s2:
            length[s] += 1
        heapq.heappush(heap, (f1 + f2, k, s1 + s2))
        k += 1
    assert max(length.values()) <= 16, length
    # Canonical order: by length, then symbol; the dummy must come last.
    order = sorted(length, key=lambda s: (length[s], s))
    assert order[-1] == 256 or length[order[-1]] < length[256]
    order = [s for s in order if s != 256]
    bits = [0] * 16
    for s in order:
        bits[length[s] - 1] += 1
    codes, code, prev = {}, 0, 1
    for s in order:
        code <<= length[s] - prev
        prev = length[s]
        codes[s] = (code, length[s])
        code += 1
    return bits, order, codes


class BitWriter:
    def __init__(self):
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, v, n):
        for k in range(n - 1, -1, -1):
            self.acc = self.acc << 1 | (v >> k) & 1
            self.n += 1
            if self.n == 8:
                self.out.append(self.acc)
                if self.acc == 0xFF:
                    self.out.append(0)  # B.1.1.5 byte stuffing
                self.acc, self.n = 0, 0

    def flush(self):
        """F.1.2.3: pad the last byte with 1-bits."""
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)


def segment(marker, payload):
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + bytes(payload)


def dht(tables):
    """tables: {Th: (bits, vals)}"""
    p = bytearray()
    for th, (bits, vals) in sorted(tables.items()):
        p.append(th)
        p += bytes(bits) + bytes(vals)
    return segment(0xC4, p)


def scan_diffs(vals, comps, pred, P, pt, rows_per_interval):
    """Differences in MCU order for one scan, per H.1.2.1."""
    rows, cols, _ = vals.shape
    out = []
    for y in range(rows):
        first = y % rows_per_interval == 0
        for x in range(cols):
            for c in comps:
                ra = int(vals[y, x - 1, c]) if x > 0 else 0
                rb = int(vals[y - 1, x, c]) if y > 0 else 0
                rc = int(vals[y - 1, x - 1, c]) if x > 0 and y > 0 else 0
                if x == 0:
                    px = 1 << (P - pt - 1) if first else rb
                elif first:
                    px = ra
                else:
                    px = {1: ra, 2: rb, 3: rc, 4: ra + rb - rc,
                          5: ra + ((rb - rc) >> 1), 6: rb + ((ra - rc) >> 1),
                          7: (ra + rb) >> 1}[pred]
                d = (int(vals[y, x, c]) - px) % 65536
                if d >= 32768:
                    d -= 65536
                out.append((c, d))
    return out


def encode_lossless(img, P, scans, junk=False, fill=False):
    """img: (rows, cols, comps) ints of precision P. scans: list of dicts
    with comps, pred, pt, restart (MCUs, 0 for none) and tables
    ({component: Th}). Writes each scan's DHT (tables built from the
    scan's own statistics) and DRI just before its SOS."""
    rows, cols, ncomp = img.shape
    out = bytearray(b"\xff\xd8")
    if junk:
        out += segment(0xE5, b"APP5 \xff\xd9\xff\x00\xffjunk")
        out += segment(0xFE, b"COM with \xff\xda inside")
    frame = bytearray([P]) + rows.to_bytes(2, "big") + cols.to_bytes(2, "big") + bytes([ncomp])
    for c in range(ncomp):
        frame += bytes([c + 1, 0x11, 0])
    out += segment(0xC3, frame)
    for sc in scans:
        pt, ri = sc["pt"], sc["restart"]
        rpi = ri // cols if ri else rows
        assert ri % cols == 0
        vals = img >> pt
        diffs = scan_diffs(vals, sc["comps"], sc["pred"], P, pt, rpi)
        freq = {}
        for c, d in diffs:
            th = sc["tables"][c]
            freq.setdefault(th, {}).setdefault(category(d), 0)
            freq[th][category(d)] += 1
        codes, tabs = {}, {}
        for th, f in freq.items():
            bits, order, codes[th] = huffman_lengths(f)
            tabs[th] = (bits, order)
        out += dht(tabs)
        out += segment(0xDD, ri.to_bytes(2, "big"))
        sos = bytearray([len(sc["comps"])])
        for c in sc["comps"]:
            sos += bytes([c + 1, sc["tables"][c] << 4])
        sos += bytes([sc["pred"], 0, pt])
        out += segment(0xDA, sos)
        bw = BitWriter()
        per_row = len(sc["comps"]) * cols
        for k, (c, d) in enumerate(diffs):
            if k and k % (per_row * rpi) == 0:
                bw.flush()
                out += bw.out
                bw.out = bytearray()
                if fill:
                    out += b"\xff\xff"
                out += bytes([0xFF, 0xD0 + (k // (per_row * rpi) - 1) % 8])
            s = category(d)
            code, n = codes[sc["tables"][c]][s]
            bw.put(code, n)
            if 0 < s < 16:
                bw.put(d if d >= 0 else d + (1 << s) - 1, s)
        bw.flush()
        out += bw.out
        if fill:
            out += b"\xff"
    out += b"\xff\xd9"
    return bytes(out)


# ---------------------------------------------------------------------------


def decoded_samples(path, shape):
    """The samples of an uncompressed file as (rows, cols, comps), read from
    the raw Pixel Data (pixel_array does not take 2 samples per pixel)."""
    ds = pydicom.dcmread(path)
    rows, cols, comps = shape
    dt = np.uint8 if ds.BitsAllocated == 8 else np.dtype("<u2")
    a = np.frombuffer(ds.PixelData, dtype=dt)[:rows * cols * comps].astype(np.int64)
    if comps > 1 and ds.get("PlanarConfiguration", 0) == 1:
        return a.reshape(comps, rows, cols).transpose(1, 2, 0)
    return a.reshape(rows, cols, comps)


def dcmdjpeg_check(tmp, name, path, expected):
    """dcmdjpeg must decode path to exactly expected (rows, cols, comps)."""
    dec = os.path.join(tmp, name + ".dec.dcm")
    subprocess.run(["dcmdjpeg", path, dec], check=True)
    got = decoded_samples(dec, expected.shape)
    if not np.array_equal(got.astype(np.int64), expected):
        sys.exit("%s: dcmdjpeg disagrees with the expected samples" % name)


def write_case(cases, name, stream, expected, bits, pred, pt, ts, origin, tool, write_u16=True):
    rows, cols, comps = expected.shape
    sof, scans, _ = parse_headers(stream)
    assert sof == (bits, rows, cols, comps), (name, sof)
    assert all(s[1] == pred for s in scans) or isinstance(pred, list), (name, scans)
    with open(os.path.join(OUT, name + ".ljpg"), "wb") as f:
        f.write(stream)
    if write_u16:
        with open(os.path.join(OUT, name + ".u16"), "wb") as f:
            f.write(expected.astype("<u2").tobytes())
    cases.append({
        "name": name, "width": cols, "height": rows, "components": comps,
        "precision": sof[0], "predictor": pred, "point_transform": pt,
        "transfer_syntax": ts, "origin": origin, "tool": tool,
        "scans": len(scans), "expected": "u16" if write_u16 else "bench_value",
    })


def main():
    for tool in ("dcmcjpeg", "dcmdjpeg"):
        if shutil.which(tool) is None:
            sys.exit("needs dcmtk's %s on PATH" % tool)
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    tmp = tempfile.mkdtemp(prefix="gen_jpegll.")
    cases = []

    # name, rows, cols, comps, bits stored, seed, dcmcjpeg options,
    # predictor, Pt, the SOF3 precision dcmcjpeg writes. The true lossless
    # codec takes the precision from Bits Allocated, so 12-bit data go out
    # as P=16; the pseudo-lossless codec (+pl +bt) writes P=12, but it
    # stores the samples less their minimum (it goes through dcmimage's
    # rendering), so for that case dcmdjpeg's output is the expectation.
    dcmtk_cases = [
        ("u16_sv1", 17, 23, 1, 16, 1, ["+e1"], 1, 0, 16),
        ("u16_sv2", 17, 23, 1, 16, 2, ["+el", "+sv", "2"], 2, 0, 16),
        ("u16_sv3", 17, 23, 1, 16, 3, ["+el", "+sv", "3"], 3, 0, 16),
        ("u16_sv4", 17, 23, 1, 16, 4, ["+el", "+sv", "4"], 4, 0, 16),
        ("u16_sv5", 17, 23, 1, 16, 5, ["+el", "+sv", "5"], 5, 0, 16),
        ("u16_sv6", 17, 23, 1, 16, 6, ["+el", "+sv", "6"], 6, 0, 16),
        ("u16_sv7", 17, 23, 1, 16, 7, ["+el", "+sv", "7"], 7, 0, 16),
        ("u16_sv1_pt3", 17, 23, 1, 16, 8, ["+e1", "+pt", "3"], 1, 3, 16),
        ("u12_sv4", 31, 40, 1, 12, 9, ["+el", "+sv", "4"], 4, 0, 16),
        ("u12_sv6_pt2", 31, 40, 1, 12, 10, ["+el", "+sv", "6", "+pt", "2"], 6, 2, 16),
        ("u12_pl_sv7", 17, 23, 1, 12, 15, ["+el", "+sv", "7", "+pl", "+bt"], 7, 0, 12),
        ("u8_sv2", 31, 40, 1, 8, 11, ["+el", "+sv", "2"], 2, 0, 8),
        ("u8_sv7", 17, 23, 1, 8, 12, ["+el", "+sv", "7"], 7, 0, 8),
        ("rgb8_sv1", 17, 23, 3, 8, 13, ["+e1"], 1, 0, 8),
        ("rgb8_sv5_pt1", 17, 23, 3, 8, 14, ["+el", "+sv", "5", "+pt", "1"], 5, 1, 8),
    ]
    for name, rows, cols, comps, bits, seed, opts, pred, pt, prec in dcmtk_cases:
        img = content(rows, cols, comps, bits, seed)
        src = os.path.join(tmp, name + ".dcm")
        make_dataset(img, bits, ExplicitVRLittleEndian, raw_pixels(img, bits)).save_as(src, write_like_original=False)
        dst = os.path.join(tmp, name + ".jpg.dcm")
        subprocess.run(["dcmcjpeg"] + opts + [src, dst], check=True)
        stream, ts = frame_bytes(dst)
        if "+pl" in opts:
            dec = os.path.join(tmp, name + ".dec.dcm")
            subprocess.run(["dcmdjpeg", dst, dec], check=True)
            expected = decoded_samples(dec, img.shape)
            origin = "dcmdjpeg"
        else:
            expected = (img >> pt) << pt
            dcmdjpeg_check(tmp, name, dst, expected)
            origin = "pydicom"
        write_case(cases, name, stream, expected, prec, pred, pt, ts, origin, "dcmcjpeg " + " ".join(opts))

    # The benchmark image.
    y, x = np.mgrid[0:512, 0:512]
    img = bench_value(x.astype(np.int64), y.astype(np.int64)).reshape(512, 512, 1)
    src = os.path.join(tmp, "bench.dcm")
    make_dataset(img, 16, ExplicitVRLittleEndian, raw_pixels(img, 16)).save_as(src, write_like_original=False)
    dst = os.path.join(tmp, "bench.jpg.dcm")
    subprocess.run(["dcmcjpeg", "+e1", src, dst], check=True)
    stream, ts = frame_bytes(dst)
    dcmdjpeg_check(tmp, "bench_u16_512", dst, img)
    write_case(cases, "bench_u16_512", stream, img, 16, 1, 0, ts, "bench_value", "dcmcjpeg +e1", write_u16=False)

    # Python-encoded streams, checked by dcmdjpeg.
    one = lambda n: {c: 0 for c in range(n)}
    py_cases = [
        # name, rows, cols, comps, bits, seed, scans, junk/fill
        ("py_rst_u12_sv5_pt1", 31, 40, 1, 12, 21,
         [{"comps": [0], "pred": 5, "pt": 1, "restart": 80, "tables": one(1)}], True),
        ("py_rst_rgb8_sv7", 17, 23, 3, 8, 22,
         [{"comps": [0, 1, 2], "pred": 7, "pt": 0, "restart": 23, "tables": {0: 0, 1: 1, 2: 1}}], True),
        ("py_planar_rgb8", 17, 23, 3, 8, 23,
         [{"comps": [0], "pred": 1, "pt": 0, "restart": 46, "tables": {0: 2}},
          {"comps": [2], "pred": 6, "pt": 0, "restart": 0, "tables": {2: 0}},
          {"comps": [1], "pred": 4, "pt": 0, "restart": 23, "tables": {1: 3}}], True),
        ("py_planar_u16x2_sv3", 9, 11, 2, 16, 24,
         [{"comps": [1], "pred": 3, "pt": 0, "restart": 0, "tables": {1: 1}},
          {"comps": [0], "pred": 3, "pt": 0, "restart": 11, "tables": {0: 1}}], False),
        ("py_p2_sv7", 17, 23, 1, 2, 25,
         [{"comps": [0], "pred": 7, "pt": 0, "restart": 0, "tables": one(1)}], False),
        ("py_cat16_sv1", 7, 9, 1, 16, 26,
         [{"comps": [0], "pred": 1, "pt": 0, "restart": 9, "tables": one(1)}], True),
    ]
    for name, rows, cols, comps, bits, seed, scans, junk in py_cases:
        img = content(rows, cols, comps, bits, seed)
        if name.startswith("py_cat16"):
            # Every horizontal and vertical step is exactly 32768.
            yy, xx = np.mgrid[0:rows, 0:cols]
            img[:, :, 0] = np.where((xx + yy) % 2 == 0, 0, 32768) + (xx // 3)
        pt = scans[0]["pt"]
        expected = (img >> pt) << pt
        stream = encode_lossless(img, bits, scans, junk=junk, fill=junk)
        path = os.path.join(tmp, name + ".jpg.dcm")
        make_dataset(img, bits, JPEGLosslessP14, encapsulate([stream])).save_as(path, write_like_original=False)
        dcmdjpeg_check(tmp, name, path, expected)
        preds = [s["pred"] for s in scans]
        write_case(cases, name, stream, expected, bits, preds[0] if len(set(preds)) == 1 else preds, pt,
                   str(JPEGLosslessP14), "pydicom", "gen_jpegll.py encode_lossless, verified by dcmdjpeg")

    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")
    shutil.rmtree(tmp)
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print("%d cases, %d bytes in %s" % (len(cases), total, OUT))


if __name__ == "__main__":
    main()
