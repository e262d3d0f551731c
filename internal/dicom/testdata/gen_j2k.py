#!/usr/bin/python3
"""Regenerates the JPEG 2000 fixtures in testdata/j2k/.

Run from anywhere, with Debian's python3 (numpy, Pillow with OpenJPEG,
pydicom 2.3.1) and OpenJPEG's tools (opj_compress, opj_decompress, from
libopenjp2-tools) on PATH:

    /usr/bin/python3 internal/dicom/testdata/gen_j2k.py

It is deterministic: every image comes from a seeded generator and
opj_compress writes no time stamp, so two runs write byte-identical files.

For every case it writes NAME.j2k (a raw codestream, or a JP2 file for
the "jp2" cases) and NAME.u16, the expected samples: pixel-major,
components interleaved, little-endian uint16, a signed component's value
as its two's complement in its precision's bits. cases.json lists them
with their size, precision, the encoder and its options, and where the
expectation comes from:

* "original": a lossless case; the image encoded. opj_decompress (and
  Pillow, where it can read the case) must decode the stream to it, or
  the script fails.
* "opj_decompress": a lossy case; OpenJPEG's decoding (its 9/7 float
  lifting, rounded to nearest and clamped), which the Go decoder must
  match within one level (the count of differing samples is reported).
* "pillow": a codestream taken from one of pydicom's test files, decoded
  by Pillow (OpenJPEG); lossless ones are also checked against the DICOM
  twin where one exists.

The benchmark fixture bench_u16_512 has no .u16 file: its samples are
bench_value(x, y) below, mirrored by j2kBenchValue in jpeg2000_test.go.
Two more benchmark streams, not in cases.json (the tests do not decode
them), model 12-bit radiographs: bench_u12_1024.j2k, lossless 5/3, whose
samples are radiograph(1024, 1024, 3) (mirrored by j2kRadiograph), which
BenchmarkJPEG2000Lossless tiles 2×2 into a 2048×2048 codestream; and
bench_u12_2048_97.j2k, 2048×2048 9/7 at 30:1. Whole 2048×2048 lossless
noisy images would be megabytes.
"""

import gzip
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "j2k")
PYDICOM_FILES = "/usr/lib/python3/dist-packages/pydicom/data/test_files"


def image(w, h, c, prec, signed, seed):
    """Seeded content: a smooth gradient, a few edges, and noise."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w]
    out = np.zeros((h, w, c), dtype=np.int64)
    lo, hi = (-(1 << (prec - 1)), (1 << (prec - 1)) - 1) if signed else (0, (1 << prec) - 1)
    span = hi - lo
    for k in range(c):
        base = lo + span * (0.2 + 0.6 * ((x * (k + 1) + 2 * y) / (3.0 * (w + h))))
        edge = np.where((x // 7 + y // 5 + k) % 3 == 0, span // 8, 0)
        noise = rng.randint(-(span // 150 + 1), span // 150 + 2, size=(h, w))
        v = base + edge + noise
        # A few extreme samples.
        v[0, 0], v[h - 1, w - 1] = lo, hi
        out[:, :, k] = np.clip(v, lo, hi).astype(np.int64)
    return out


def bench_value(x, y):
    h = ((x * 73856093) & 0xFFFFFFFF) ^ ((y * 19349663) & 0xFFFFFFFF)
    return 20000 + 3 * x + 2 * y + ((h >> 13) & 1)


def radiograph(w, h, noise_bits):
    """A 12-bit radiograph's outline: a gradient, an elliptical body with
    a dome of density and bands of bone, and noise_bits of hashed noise."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.int64)
    hh = ((xx * 73856093) & 0xFFFFFFFF) ^ ((yy * 19349663) & 0xFFFFFFFF)
    v = 300 + (xx + 2 * yy) // 8
    dx, dy = xx - w // 2, yy - h // 2
    r2 = dx * dx + 2 * dy * dy
    big = (w * 7 // 16) ** 2
    inside = r2 < big
    v = v + np.where(inside, (big - r2) // (big // 1500 + 1), 0)
    v = v + np.where(inside & (((xx + yy // 2) % 300) < 40), 900, 0)
    v = v + ((hh >> 11) & ((1 << noise_bits) - 1))
    return np.clip(v, 0, 4095)


def to_u16(img, prec):
    """Pixel-major interleaved little-endian bit patterns."""
    mask = (1 << prec) - 1
    return (img.astype(np.int64) & mask).astype("<u2").tobytes()


def run(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def opj_encode(tmp, img, prec, signed, opts):
    h, w, c = img.shape
    raw = os.path.join(tmp, "in.rawl")
    planar = np.transpose(img, (2, 0, 1)).astype(np.int64)
    dt = "<i2" if signed else "<u2"
    if prec <= 8:
        dt = "i1" if signed else "u1"
    out = os.path.join(tmp, "out.j2k")
    if os.path.exists(out):
        os.remove(out)
    if prec < 8:
        # opj_compress reads raw files of 8 or more bits only: a PGX
        # file (one component, big-endian) carries the rest.
        assert c == 1
        raw = os.path.join(tmp, "in.pgx")
        with open(raw, "wb") as f:
            f.write(b"PG ML %s %d %d %d\n" % (b"-" if signed else b"+", prec, w, h))
            f.write(planar.astype("i1" if signed else "u1").tobytes())
        run("opj_compress", "-i", raw, "-o", out, *opts)
    else:
        planar.astype(dt).tofile(raw)
        fmt = "%d,%d,%d,%d,%s" % (w, h, c, prec, "s" if signed else "u")
        run("opj_compress", "-i", raw, "-o", out, "-F", fmt, *opts)
    with open(out, "rb") as f:
        return f.read()


def opj_decode(tmp, data, w, h, c, prec, signed):
    src = os.path.join(tmp, "dec.jp2" if data[:4] == b"\0\0\0\x0c" else "dec.j2k")
    with open(src, "wb") as f:
        f.write(data)
    out = os.path.join(tmp, "dec.rawl")
    if os.path.exists(out):
        os.remove(out)
    run("opj_decompress", "-i", src, "-o", out)
    dt = "<i2" if signed else "<u2"
    if prec <= 8:
        dt = "i1" if signed else "u1"
    a = np.fromfile(out, dtype=dt).astype(np.int64)
    if a.size != w * h * c:
        sys.exit("opj_decompress gave %d samples, want %d" % (a.size, w * h * c))
    if prec < 8:
        # opj_decompress's raw output scales samples of fewer than 8
        # bits up to 8.
        a >>= 8 - prec
    if signed:
        # opj_decompress writes a signed component's bit pattern in its
        # precision's bits, not sign-extended.
        a &= (1 << prec) - 1
        a = np.where(a >= 1 << (prec - 1), a - (1 << prec), a)
    return np.transpose(a.reshape(c, h, w), (1, 2, 0))


def pillow_decode(data):
    import io

    from PIL import Image

    im = Image.open(io.BytesIO(data))
    im.load()
    a = np.array(im).astype(np.int64)
    if a.ndim == 2:
        a = a[:, :, None]
    return a


cases = []


def write_case(name, data, expected, prec, signed, tool, origin, lossy, ext="j2k"):
    h, w, c = expected.shape
    with open(os.path.join(OUT, name + ".j2k"), "wb") as f:
        f.write(data)
    raw = to_u16(expected, prec)
    kind = "u16"
    if len(raw) > 1024:
        # Large expectations are stored gzipped (no name, mtime 0, so
        # the bytes are deterministic).
        kind = "u16.gz"
        with open(os.path.join(OUT, name + ".u16.gz"), "wb") as f:
            with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as z:
                z.write(raw)
    else:
        with open(os.path.join(OUT, name + ".u16"), "wb") as f:
            f.write(raw)
    cases.append(
        {
            "name": name,
            "width": w,
            "height": h,
            "components": c,
            "precision": prec,
            "signed": signed,
            "lossy": lossy,
            "tool": tool,
            "origin": origin,
            "expected": kind,
        }
    )


def opj_case(tmp, name, w, h, c, prec, signed, seed, opts, lossy=False):
    img = image(w, h, c, prec, signed, seed)
    data = opj_encode(tmp, img, prec, signed, opts)
    dec = opj_decode(tmp, data, w, h, c, prec, signed)
    tool = "opj_compress " + " ".join(opts)
    if lossy == "opj":
        # Lossless coding whose stream lacks packets: the expectation is
        # OpenJPEG's decoding, held exactly.
        write_case(name, data, dec, prec, signed, tool, "opj_decompress", False)
    elif lossy:
        if np.array_equal(dec, img):
            sys.exit("%s: meant lossy, decodes losslessly" % name)
        write_case(name, data, dec, prec, signed, tool, "opj_decompress", True)
    else:
        if not np.array_equal(dec, img):
            sys.exit("%s: opj_decompress does not give the original back" % name)
        if not signed:
            try:
                p = pillow_decode(data)
            except Exception:
                p = None
            if p is not None and p.shape == img.shape and (prec == 8 or (prec == 16 and c == 1)) and not np.array_equal(p, img):
                sys.exit("%s: Pillow does not give the original back" % name)
        write_case(name, data, img, prec, signed, tool, "original", False)


def narrow_case(tmp, name, w, h, c, prec, signed, seed, opts):
    """A precision below 8, which opj_compress never writes (it gives
    any input of fewer bits precision 8): an 8-bit image whose samples all
    lie within 2^(prec-1) of 128 is encoded losslessly, and its SIZ then
    says precision prec (and signed, if asked). The wavelet coefficients
    of the two images are the same (they differ only by the DC level
    shift, G.1.2), so the stream is a valid one of the narrow image: the
    8-bit one shifted by 2^(prec-1) - 128 (unsigned) or by -128 (signed)."""
    rng = np.random.RandomState(seed)
    half = 1 << (prec - 1)
    y, x = np.mgrid[0:h, 0:w]
    img8 = np.zeros((h, w, c), dtype=np.int64)
    for k in range(c):
        v = ((x + 2 * y + 3 * k) // 3) % (2 * half) - half + rng.randint(0, 2, size=(h, w))
        img8[:, :, k] = 128 + np.clip(v, -half, half - 1)
    data = bytearray(opj_encode(tmp, img8, 8, False, opts))
    if not np.array_equal(opj_decode(tmp, bytes(data), w, h, c, 8, False), img8):
        sys.exit("%s: opj_decompress does not give the 8-bit original back" % name)
    i = data.find(b"\xff\x51")
    for k in range(c):
        assert data[i + 40 + 3 * k] == 7
        data[i + 40 + 3 * k] = (prec - 1) | (0x80 if signed else 0)
    want = img8 - 128 + (0 if signed else half)
    write_case(name, bytes(data), want, prec, signed,
               "opj_compress " + " ".join(opts) + " (8-bit, SIZ set to precision %d%s)" % (prec, " signed" if signed else ""),
               "original", False)


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    with tempfile.TemporaryDirectory() as tmp:
        g8 = (23, 17, 1, 8, False)
        # Lossless 5/3: decomposition levels, precisions, signedness.
        opj_case(tmp, "u8_l0", *g8, 1, ["-n", "1"])
        opj_case(tmp, "u8_l1", *g8, 2, ["-n", "2"])
        opj_case(tmp, "u8_l3", *g8, 3, ["-n", "4"])
        opj_case(tmp, "u12_l5", 40, 33, 1, 12, False, 4, ["-n", "6"])
        opj_case(tmp, "u16_l2", 23, 17, 1, 16, False, 5, ["-n", "3"])
        opj_case(tmp, "s16_l2", 23, 17, 1, 16, True, 6, ["-n", "3"])
        opj_case(tmp, "s12_l3", 40, 31, 1, 12, True, 7, ["-n", "4"])
        # opj_compress writes precision 8 for any PGX or raw input of
        # fewer bits, so precisions below 8 have no case.
        opj_case(tmp, "u10_l1", 23, 17, 1, 10, False, 8, ["-n", "2"])
        opj_case(tmp, "s8_l2", 23, 17, 1, 8, True, 9, ["-n", "3"])
        narrow_case(tmp, "u1_narrow", 23, 17, 1, 1, False, 70, ["-n", "2"])
        narrow_case(tmp, "u3_narrow", 23, 17, 1, 3, False, 71, ["-n", "3"])
        narrow_case(tmp, "s4_narrow", 23, 17, 1, 4, True, 72, ["-n", "2"])
        narrow_case(tmp, "rgb5_narrow_rct", 23, 17, 3, 5, False, 73, ["-n", "2", "-mct", "1"])
        # Colour: RCT and none.
        opj_case(tmp, "rgb8_rct", 23, 17, 3, 8, False, 10, ["-n", "3", "-mct", "1"])
        opj_case(tmp, "rgb8_nomct", 23, 17, 3, 8, False, 11, ["-n", "3", "-mct", "0"])
        opj_case(tmp, "rgb16_rct", 23, 17, 3, 16, False, 12, ["-n", "4", "-mct", "1"])
        # Odd image and tile offsets, tiles.
        opj_case(tmp, "u8_offset", 23, 17, 1, 8, False, 13, ["-n", "3", "-d", "3,5"])
        opj_case(tmp, "u8_tiles", 40, 31, 1, 8, False, 14, ["-n", "2", "-t", "16,12"])
        opj_case(tmp, "rgb8_tiles_offset", 40, 31, 3, 8, False, 15, ["-n", "2", "-t", "13,11", "-d", "5,3", "-T", "2,1"])
        opj_case(tmp, "u8_tileparts", 40, 31, 1, 8, False, 16, ["-n", "3", "-t", "24,24", "-TP", "R"])
        # Progression orders with precincts and layers.
        for i, order in enumerate(["LRCP", "RLCP", "RPCL", "PCRL", "CPRL"]):
            opj_case(tmp, "rgb8_" + order.lower(), 29, 23, 3, 8, False, 20 + i,
                     ["-n", "4", "-p", order, "-c", "[16,16],[8,8],[4,4]", "-r", "20,8,1", "-d", "1,3"])
        opj_case(tmp, "u12_pcrl_tiles", 40, 31, 1, 12, False, 26,
                 ["-n", "3", "-p", "PCRL", "-c", "[8,8]", "-t", "20,16", "-T", "1,1", "-d", "3,2"])
        opj_case(tmp, "rgb8_rpcl_tiles", 23, 17, 3, 8, False, 28,
                 ["-n", "3", "-p", "RPCL", "-c", "[8,8],[4,4]", "-t", "12,10", "-T", "1,2", "-d", "2,3", "-r", "5,1"])
        opj_case(tmp, "rgb8_cprl_tiles", 23, 17, 3, 8, False, 29,
                 ["-n", "3", "-p", "CPRL", "-c", "[16,8],[8,4]", "-b", "8,4", "-t", "13,9", "-T", "3,1", "-d", "4,1"])
        opj_case(tmp, "u8_plt_tp_layers", 23, 17, 1, 8, False, 34, ["-n", "3", "-PLT", "-TP", "L", "-r", "8,2,1"])
        opj_case(tmp, "rgb8_tp_components", 23, 17, 3, 8, False, 35, ["-n", "2", "-TP", "C", "-p", "CPRL"])
        # Progression order changes (POC in the tile-part header).
        # OpenJPEG 2.5 round-trips only progressions that do not overlap
        # (with overlapping ones its own decoding differs from the
        # original), so these do not.
        opj_case(tmp, "rgb8_poc_res", 23, 17, 3, 8, False, 36,
                 ["-n", "3", "-r", "4,2,1", "-t", "23,17", "-POC", "T1=0,0,3,2,3,RLCP/T1=2,0,3,4,3,LRCP"])
        opj_case(tmp, "rgb8_poc_comp", 23, 17, 3, 8, False, 37,
                 ["-n", "3", "-r", "4,2,1", "-t", "23,17", "-c", "[8,8]", "-POC", "T1=0,0,3,4,1,LRCP/T1=0,1,3,4,3,RPCL"])
        opj_case(tmp, "u8_layers", 40, 31, 1, 8, False, 27, ["-n", "3", "-r", "40,20,10,5,1"])
        # Code-block sizes.
        opj_case(tmp, "u8_cb4", 40, 31, 1, 8, False, 30, ["-n", "2", "-b", "4,4"])
        opj_case(tmp, "u8_cb16x4", 40, 31, 1, 8, False, 31, ["-n", "3", "-b", "16,4"])
        opj_case(tmp, "u8_cb64", 66, 65, 1, 8, False, 32, ["-n", "3", "-b", "64,64"])
        # SOP, EPH.
        opj_case(tmp, "u8_sop_eph", 40, 31, 1, 8, False, 33, ["-n", "3", "-SOP", "-EPH", "-r", "10,1"])
        # Code-block styles.
        for m in [1, 2, 4, 8, 16, 32, 63]:
            opj_case(tmp, "u8_style%d" % m, 40, 31, 1, 8, False, 40 + m, ["-n", "3", "-M", str(m), "-r", "10,3,1"])
        opj_case(tmp, "u16_style63", 23, 17, 1, 16, False, 104, ["-n", "2", "-M", "63"])
        # Lossy 9/7.
        opj_case(tmp, "u8_97", 40, 31, 1, 8, False, 50, ["-n", "3", "-I", "-r", "6"], lossy=True)
        opj_case(tmp, "u12_97_offset", 40, 31, 1, 12, False, 51, ["-n", "4", "-I", "-r", "5", "-d", "3,1"], lossy=True)
        opj_case(tmp, "s16_97", 23, 17, 1, 16, True, 52, ["-n", "2", "-I", "-r", "4"], lossy=True)
        opj_case(tmp, "rgb8_ict", 40, 31, 3, 8, False, 53, ["-n", "3", "-I", "-r", "8"], lossy=True)
        opj_case(tmp, "rgb8_ict_layers_rpcl", 40, 31, 3, 8, False, 54,
                 ["-n", "3", "-I", "-r", "30,10,4", "-p", "RPCL", "-c", "[16,16],[8,8]", "-M", "5"], lossy=True)
        opj_case(tmp, "u8_97_l0", 23, 17, 1, 8, False, 55, ["-n", "1", "-I", "-r", "3"], lossy=True)
        opj_case(tmp, "u8_53_truncated", 40, 31, 1, 8, False, 56, ["-n", "3", "-r", "8"], lossy=True)

        # A JP2 file (Pillow writes one unless no_jp2).
        from PIL import Image
        import io

        img = image(23, 17, 3, 8, False, 60)
        buf = io.BytesIO()
        Image.fromarray(img.astype(np.uint8), "RGB").save(buf, "JPEG2000", irreversible=False, num_resolutions=3)
        data = buf.getvalue()
        if not np.array_equal(pillow_decode(data), img):
            sys.exit("jp2: Pillow does not give the original back")
        write_case("rgb8_jp2", data, img, 8, False, "Pillow JPEG2000 (JP2 file)", "original", False)

        # Benchmark: 512×512 16-bit lossless.
        yy, xx = np.mgrid[0:512, 0:512]
        h = ((xx * 73856093) & 0xFFFFFFFF) ^ ((yy * 19349663) & 0xFFFFFFFF)
        bench = (20000 + 3 * xx + 2 * yy + ((h >> 13) & 1)).astype(np.int64)[:, :, None]
        data = opj_encode(tmp, bench, 16, False, ["-n", "6"])
        if not np.array_equal(opj_decode(tmp, data, 512, 512, 1, 16, False), bench):
            sys.exit("bench: opj_decompress does not give the original back")
        with open(os.path.join(OUT, "bench_u16_512.j2k"), "wb") as f:
            f.write(data)
        cases.append({"name": "bench_u16_512", "width": 512, "height": 512, "components": 1,
                      "precision": 16, "signed": False, "lossy": False,
                      "tool": "opj_compress -n 6", "origin": "original", "expected": "bench_value"})

        # Benchmarks: 12-bit radiographs, lossless (1024×1024, which the
        # benchmark tiles) and 9/7 (2048×2048).
        rad = radiograph(1024, 1024, 3)[:, :, None]
        data = opj_encode(tmp, rad, 12, False, [])
        if not np.array_equal(opj_decode(tmp, data, 1024, 1024, 1, 12, False), rad):
            sys.exit("bench_u12_1024: opj_decompress does not give the original back")
        with open(os.path.join(OUT, "bench_u12_1024.j2k"), "wb") as f:
            f.write(data)
        rad = radiograph(2048, 2048, 6)[:, :, None]
        data = opj_encode(tmp, rad, 12, False, ["-I", "-r", "30"])
        with open(os.path.join(OUT, "bench_u12_2048_97.j2k"), "wb") as f:
            f.write(data)

        # pydicom's test files: the first frame's codestream, decoded by
        # Pillow.
        import pydicom
        from pydicom.encaps import generate_pixel_data_frame

        # Left out, to keep the fixtures under 250 KB: 693_J2KI.dcm (its
        # noisy 512×512 expectation is 250 KB even gzipped),
        # J2K_pixelrep_mismatch.dcm (130 KB of codestream) and
        # GDCMJ2K_TextGBR.dcm (35 KB); jpeg2000_test.go decodes them
        # straight from pydicom's directory where it exists. Where Pillow cannot decode a file ("broken data
        # stream"), opj_decompress is the reference.
        for fn, name in [("JPEG2000.dcm", "pydicom_jpeg2000"),
                         ("MR_small_jp2klossless.dcm", "pydicom_mr_small"),
                         ("SC_rgb_gdcm_KY.dcm", "pydicom_sc_rgb_ky")]:
            ds = pydicom.dcmread(os.path.join(PYDICOM_FILES, fn))
            frame = next(generate_pixel_data_frame(ds.PixelData))
            while frame.endswith(b"\x00") and not frame.endswith(b"\xff\xd9"):
                frame = frame[:-1]
            # The codestream's own precision and sign (SIZ).
            cs = frame[frame.find(b"\xff\x4f\xff\x51"):]
            ssiz = cs[42]
            prec, signed = (ssiz & 0x7F) + 1, bool(ssiz & 0x80)
            oracle = "pillow"
            try:
                dec = pillow_decode(frame)
                if signed:
                    # Pillow offsets a signed component by 2^(precision-1).
                    dec = dec - (1 << (prec - 1))
            except OSError:
                oracle = "opj_decompress"
                dec = opj_decode(tmp, frame, int(ds.Columns), int(ds.Rows), int(ds.SamplesPerPixel), prec, signed)
            lossless = "lossless" in fn or fn == "SC_rgb_gdcm_KY.dcm"
            if fn == "MR_small_jp2klossless.dcm":
                twin = pydicom.dcmread(os.path.join(PYDICOM_FILES, "MR_small.dcm")).pixel_array.astype(np.int64)
                if not np.array_equal(dec[:, :, 0], twin):
                    sys.exit("MR_small: Pillow's decoding differs from MR_small.dcm")
            write_case(name, frame, dec, prec, signed, "pydicom " + fn, oracle, not lossless)

    with open(os.path.join(OUT, "cases.json"), "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(c) for c in cases) + "\n]\n")
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print("%d cases, %d bytes" % (len(cases), total))


if __name__ == "__main__":
    main()
