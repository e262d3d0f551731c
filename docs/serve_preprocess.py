#!/usr/bin/env python3
"""Preprocesses images for a model dpfinetune trained, as dpfinetune did:
the input size from the model, the resize, normalisation and channel count
train recorded in its metadata (dpfinetune.resize, dpfinetune.norm), with
PIL and torchvision — the transform to put in front of the model when
serving it with onnxruntime or PyTorch. Writes the batch as a .npy file
(N, C, H, W) float32 and prints the class names train recorded.

    python3 docs/serve_preprocess.py tuned.onnx out.npy image.jpg [image.png ...]

DICOM images (open_image) are read with pydicom as dpfinetune reads them:
the rescale, the window train recorded (dpfinetune.window) or the file's own
window or VOI LUT, else the image's own range, to 8 bits (internal/dicom's
doc); a multi-frame object as the frame or projection train recorded
(dpfinetune.frame), or, recorded as "all", each of its frames a row of the
batch, a file's frames one after another (predict combines a file's rows
into its prediction: the mean of their probabilities); pydicom decodes
compressed frames with the handlers it has (JPEG Lossless needs pylibjpeg
or GDCM).

NIfTI images (.nii, .nii.gz) are read with nibabel, a volume's slices as a
multi-frame object's frames (nifti_images).

A model of clips (input N, C, T, H, W: a Conv3d or video model) reads each
multi-frame DICOM file or NIfTI volume as a clip of T of its frames
(open_clip). A model
trained on DICOM series (dpfinetune.series) takes directories: each
directory of slices under them (series_dirs) its series, split by Series
Instance UID, their slices in order (series_in), read as a multi-frame
object's frames (open_series, open_clip).

See docs/SERVING.md.
"""
import json
import sys
import warnings

import numpy as np
import onnx
import torch
import torchvision.transforms as T
from PIL import Image


def transform(model):
    """The transform of one image (a clip model's: of each frame), as
    dpfinetune's loader and view (dpengine/data) apply it: an image of at
    least the input's pixels is resized by PIL, to 8 bits, as it loads; a
    smaller one is resized after ToTensor, in floating point (bilinear,
    antialiased where an axis shrinks: aten's kernels, as the view's)."""
    meta = {p.key: p.value for p in model.metadata_props}
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    channels, size = dims[1], dims[-2:]
    resize = meta.get("dpfinetune.resize", "stretch")
    if resize.startswith("crop"):
        # The shorter side to S (default 8/7 of the input's longer side,
        # 256 for 224), then the centre: torchvision's Resize + CenterCrop.
        short = int(resize.split("=")[1]) if "=" in resize else round(max(size) * 8 / 7)
        sizing = [T.Resize(short, antialias=True), T.CenterCrop(size)]
    else:
        sizing = [T.Resize(size, antialias=True)]  # each axis to the input's
    if "dpfinetune.norm" not in meta:
        raise SystemExit("serve_preprocess: the model has no dpfinetune.norm in its metadata: it was not written by dpfinetune train")
    norm = []
    if meta["dpfinetune.norm"] != "none":
        mean, std = ([float(v) for v in s.split(",")] for s in meta["dpfinetune.norm"].split("/"))
        if channels == 1 and len(mean) == 3:
            # An RGB normalisation for a gray model: weighted like the luma.
            w = (0.299, 0.587, 0.114)
            mean, std = [sum(a * b for a, b in zip(w, mean))], [sum(a * b for a, b in zip(w, std))]
        norm = [T.Normalize(mean, std)]
    mode = "L" if channels == 1 else "RGB"
    on_pil = T.Compose(sizing + [T.ToTensor()] + norm)  # [0, 1]
    on_tensor = T.Compose([T.ToTensor()] + sizing + norm)

    def tf(im):
        im = im.convert(mode)
        return (on_pil if im.width * im.height >= size[0] * size[1] else on_tensor)(im)

    return tf, json.loads(meta.get("dpfinetune.classes", "[]"))


def frame_groups(ds, k):
    """Frame k's functional groups, in the order they stand for it: its
    Per-frame Functional Groups item, then the Shared Functional Groups
    item (an enhanced object's; none for a classic image)."""
    groups = []
    pf = ds.get("PerFrameFunctionalGroupsSequence")
    if pf is not None and k < len(pf):
        groups.append(pf[k])
    sh = ds.get("SharedFunctionalGroupsSequence")
    if sh is not None and len(sh):
        groups.append(sh[0])
    return groups


def group_item(groups, seq, a, b):
    """The first group's seq item that holds both a and b, or None."""
    for g in groups:
        items = g.get(seq)
        if items is not None and len(items) and items[0].get(a) is not None and items[0].get(b) is not None:
            return items[0]
    return None


def stored(ds, a):
    """A DICOM image's samples as the standard reads them: Bits Stored bits
    at High Bit (PS3.5 8.1.1), sign-extended where Pixel Representation is
    1, as dpfinetune reads them (pydicom keeps the bits around them)."""
    width = 8 * a.dtype.itemsize
    bits = int(ds.BitsStored)
    high = int(ds.get("HighBit", bits - 1))
    if bits == width and high == bits - 1:
        return a
    v = (a.astype(np.int64) & ((1 << width) - 1)) >> (high - bits + 1) & ((1 << bits) - 1)
    if ds.PixelRepresentation == 1:
        v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v


def dicom_image(path, window, frame=""):
    """A DICOM file's image as dpfinetune decodes it: gray, or RGB for a
    colour image or three windows. window: dpfinetune.window's value, "" for
    the file's own; frame: dpfinetune.frame's, the image a multi-frame
    object gives — a frame (first, middle, last, a number from 1) or a
    projection of its frames' rescaled values (max, mean, min), windowed
    as frame 1 is."""
    ims = dicom_images(path, window, frame)
    if len(ims) != 1:
        raise ValueError(f"{path}: {len(ims)} images (frame {frame!r}): read them with dicom_images")
    return ims[0]


def dicom_images(path, window, frame=""):
    """dicom_image's images of a file: one, or with frame "all" each of its
    frames', in order (pydicom decodes the file once)."""
    import pydicom
    from pydicom.pixel_data_handlers.util import (apply_modality_lut,
                                                  convert_color_space)
    ds = pydicom.dcmread(path)
    frames = stored(ds, ds.pixel_array)
    n = int(ds.get("NumberOfFrames") or 1)
    if n == 1:
        frames = frames[None]  # frames first, as a multi-frame object's
    if n > 1 and not frame:
        raise ValueError(f"{path}: a multi-frame image ({n} frames): choose its image (dpfinetune.frame)")
    project = frame if frame in ("max", "mean", "min") else None
    if project and (ds.SamplesPerPixel != 1 or ds.PhotometricInterpretation == "PALETTE COLOR"):
        raise ValueError(f"{path}: a {project} projection of a {ds.PhotometricInterpretation} image")
    if frame == "all":
        ks = range(n)
    elif project:
        ks = [0]  # windowed as frame 1
    else:
        k = {"first": 0, "middle": n // 2, "last": n - 1}.get(frame.lower() or "first")
        k = int(frame) - 1 if k is None else k
        if not 0 <= k < n:
            raise ValueError(f"{path}: frame {k + 1} of an image of {n} frame(s)")
        ks = [k]

    def rescaled(a, k):  # the Modality LUT, a frame's own rescale first
        t = group_item(frame_groups(ds, k), "PixelValueTransformationSequence", "RescaleSlope", "RescaleIntercept")
        if t is not None and "ModalityLUTSequence" not in ds:
            return a.astype(np.float64) * float(t.RescaleSlope) + float(t.RescaleIntercept)
        return apply_modality_lut(a, ds).astype(np.float64)

    def image(k):
        arr = frames[k]
        if ds.PhotometricInterpretation == "PALETTE COLOR":
            return Image.fromarray(palette_rgb(ds, arr), "RGB")
        if ds.SamplesPerPixel == 3:
            # pydicom hands YBR over as it is stored (a JPEG's too; 4:2:2
            # expanded): the colour conversion is the reader's, pydicom's
            # for 8-bit samples (its convert_color_space knows no other),
            # PS3.3 C.7.6.3.1.2's equations for wider ones.
            top = 2 ** ds.BitsStored - 1
            if ds.PhotometricInterpretation in ("YBR_FULL", "YBR_FULL_422") and ds.BitsStored <= 8:
                arr = convert_color_space(arr, "YBR_FULL", "RGB")
            elif ds.PhotometricInterpretation in ("YBR_FULL", "YBR_FULL_422"):
                y, cb, cr = (arr[..., c].astype(np.float64) for c in range(3))
                mid = 2.0 ** (ds.BitsStored - 1)
                cb, cr = cb - mid, cr - mid
                arr = np.clip(np.stack([y + 1.402 * cr,
                                        y - 0.114 * 1.772 / 0.587 * cb - 0.299 * 1.402 / 0.587 * cr,
                                        y + 1.772 * cb], -1), 0, top)
            return Image.fromarray(np.floor(arr * (255 / top) + 0.5).astype(np.uint8), "RGB")
        if project:
            ms = np.stack([rescaled(frames[j], j) for j in range(n)])
            m = {"max": ms.max(0), "mean": ms.mean(0), "min": ms.min(0)}[project]
        else:
            m = rescaled(arr, k)
        return gray_image(ds, m, window, k)

    return [image(k) for k in ks]


def own_range(m):
    """m's values mapped to [0, 1] by their own range (0 where m is one
    value), NaNs left out of the range."""
    lo, hi = np.nanmin(m), np.nanmax(m)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (m - lo) / (hi - lo) if hi > lo else np.zeros_like(m)


def linear_window(v, window):
    """v (float64) through dpfinetune's windows (C,W or three, separated by
    '/'), each as a LINEAR VOI LUT Function (PS3.3 C.11.2.1.2.1), to [0, 1]."""
    ys = []
    for cw in window.split("/"):
        c, w = map(float, cw.split(","))
        c, w = c - 0.5, w - 1
        with np.errstate(divide="ignore", invalid="ignore"):
            y = (v - c) / w + 0.5
        ys.append(np.where(v <= c - w / 2, 0.0, np.where(v > c + w / 2, 1.0, y)))
    return ys


def eight_bits(ys):
    """[0, 1] channels to an 8-bit PIL image (one channel gray, three RGB),
    rounded half up as Go's math.Round rounds these non-negative values."""
    out = [np.floor(np.clip(np.nan_to_num(y), 0, 1) * 255 + 0.5).astype(np.uint8) for y in ys]
    return Image.fromarray(out[0], "L") if len(out) == 1 else Image.fromarray(np.stack(out, -1), "RGB")


def gray16_image(im, window):
    """A 16-bit grayscale photo (PNG, TIFF; PIL's mode I;16 or I) as
    dpfinetune reads it: through the recorded window(s) in its own values,
    or its own range (window "range"), else its high bytes."""
    v = np.asarray(im).astype(np.float64)
    if window == "range":
        return eight_bits([own_range(v)])
    if window:
        return eight_bits(linear_window(v, window))
    return Image.fromarray((np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8), "L")


def gray_image(ds, m, window, k=0):
    """A grayscale image's Modality LUT output m (float64) to 8 bits as
    dpfinetune maps it: through window (dpfinetune.window's value: one
    window, or three for an RGB image), else ds's VOI LUT, frame k's own
    window (an enhanced object's Frame VOI LUT), ds's window, else m's own
    range; MONOCHROME1 inverted."""
    import pydicom
    from pydicom.pixel_data_handlers.util import apply_voi_lut

    def first(v):
        return float(v[0] if isinstance(v, pydicom.multival.MultiValue) else v)

    fw = group_item(frame_groups(ds, k), "FrameVOILUTSequence", "WindowCenter", "WindowWidth")
    fn = (str((fw if fw is not None else ds).get("VOILUTFunction", "")) or "LINEAR").upper()

    def windowed(c, w):  # PS3.3 C.11.2.1.2.1, to [0, 1]
        if fn == "SIGMOID":
            return 1 / (1 + np.exp(-4 * (m - c) / w))
        if fn == "LINEAR":
            c, w = c - 0.5, w - 1
        with np.errstate(divide="ignore", invalid="ignore"):
            y = (m - c) / w + 0.5
        return np.where(m <= c - w / 2, 0.0, np.where(m > c + w / 2, 1.0, y))

    if window == "range":  # each image through its own range, the file's VOI ignored
        ys = [own_range(m)]
    elif window:
        ys = [windowed(*map(float, cw.split(","))) for cw in window.split("/")]
    elif "VOILUTSequence" in ds:
        ys = [apply_voi_lut(m, ds) / (2 ** ds.VOILUTSequence[0].LUTDescriptor[2] - 1)]
    elif fw is not None:
        ys = [windowed(first(fw.WindowCenter), first(fw.WindowWidth))]
    elif ds.get("WindowCenter") is not None and ds.get("WindowWidth") is not None:
        ys = [windowed(first(ds.WindowCenter), first(ds.WindowWidth))]
    else:
        ys = [own_range(m)]
    if ds.PhotometricInterpretation == "MONOCHROME1":
        ys = [1 - y for y in ys]
    return eight_bits(ys)


def is_nifti(path):
    """Whether dpfinetune reads path as a NIfTI image: .nii or .nii.gz."""
    p = path.lower()
    return p.endswith(".nii") or p.endswith(".nii.gz")


def nifti_images(path, window, frame=""):
    """A NIfTI image's images as dpfinetune reads them
    (dpengine/data/nifti.go), with nibabel: a 3-D volume, reoriented to its
    closest canonical orientation (nibabel's as_closest_canonical: RAS+),
    has its slices (planes of constant z) for frames — the one frame picks
    (first, middle, last, a number), a projection of them all (max, mean,
    min; NaNs left out), or each slice (all) —, a slice displayed as viewers
    display it (np.rot90(array[:, :, k])), its scaled values held as float32 and
    mapped to 8 bits through window (dpfinetune.window's value) as a DICOM
    image's are, else the file's cal_min..cal_max where it sets them, else
    the volume's range; NaN black."""
    import nibabel as nib
    img = nib.load(path)
    shape = img.shape + (1,) * (3 - len(img.shape))
    if any(d > 1 for d in shape[3:]):
        raise ValueError(f"{path}: a {len(shape)}-D image of shape {shape}: only 2-D images and 3-D volumes are read")
    rgb = img.get_data_dtype().names is not None
    if not rgb and img.get_data_dtype().kind not in "iuf" or img.get_data_dtype().itemsize > 8:
        raise ValueError(f"{path}: voxels of type {img.get_data_dtype()} are not read")
    if rgb:
        a = np.asanyarray(img.dataobj)
        a = np.stack([a[f] for f in a.dtype.names[:3]], -1).reshape(shape[:3] + (3,)).astype(np.uint8)
    else:
        a = img.get_fdata().reshape(shape[:3]).astype(np.float32).astype(np.float64)
    # The closest canonical orientation (RAS+), as dpfinetune reorients it;
    # an image of one slice as stored.
    if shape[2] > 1:
        a = np.asanyarray(nib.as_closest_canonical(nib.Nifti1Image(a, img.affine)).dataobj)
    n = a.shape[2]
    project = frame if frame in ("max", "mean", "min") else None
    if n > 1 and not frame:
        raise ValueError(f"{path}: a volume of {n} slices: choose its image (dpfinetune.frame)")
    if project and rgb:
        raise ValueError(f"{path}: a {project} projection of an RGB image")
    if frame == "all":
        ks = range(n)
    elif project:
        ks = []
    else:
        k = {"first": 0, "middle": n // 2, "last": n - 1, "": 0}.get(frame.lower())
        k = int(frame) - 1 if k is None else k
        if not 0 <= k < n:
            raise ValueError(f"{path}: slice {k + 1} of a volume of {n}")
        ks = [k]
    if rgb:
        return [Image.fromarray(np.ascontiguousarray(np.rot90(a[:, :, k])), "RGB") for k in ks]
    cal_lo, cal_hi = float(img.header["cal_min"]), float(img.header["cal_max"])
    if window:  # C,W windows, or each image's own range
        lo = hi = None
    elif cal_hi > cal_lo:
        lo, hi = cal_lo, cal_hi
    elif np.isnan(a).all():
        lo = hi = 0.0
    else:
        lo, hi = float(np.nanmin(a)), float(np.nanmax(a))

    def image(m):  # m: a slice's (or projection's) values, (i, j)
        m = np.rot90(m)
        nan = np.isnan(m)
        if window == "range":
            ys = [own_range(m)]
        elif window:
            ys = linear_window(m, window)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                ys = [(m - lo) / (hi - lo) if hi > lo else np.zeros_like(m)]
        return eight_bits([np.where(nan, 0.0, y) for y in ys])

    if project:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN pixels
            m = {"max": np.nanmax, "mean": np.nanmean, "min": np.nanmin}[project](a, axis=2)
        return [image(m.astype(np.float32).astype(np.float64))]
    return [image(a[:, :, k]) for k in ks]


def palette_rgb(ds, arr):
    """A PALETTE COLOR image's RGB as internal/dicom's palette.go makes it:
    pydicom's apply_color_lut, then 8 bits — 8-bit entries as they are,
    16-bit words under a descriptor of 8 bits their low byte, 16-bit entries
    round(v*255/65535). pydicom 2.3.1 reads a big-endian file's 16-bit LUT
    Data in the machine's byte order: they are swapped to it first."""
    from pydicom.pixel_data_handlers.util import apply_color_lut
    desc = ds.RedPaletteColorLookupTableDescriptor
    n = desc[0] or 65536
    if not ds.is_little_endian:
        for kw in ("Red", "Green", "Blue", "Alpha"):
            el = ds.get(f"{kw}PaletteColorLookupTableData")
            if el is not None and len(el) == 2 * n:
                ds[f"{kw}PaletteColorLookupTableData"].value = np.frombuffer(el, ">u2").astype("=u2").tobytes()
    out = apply_color_lut(arr, ds)[..., :3]
    if out.dtype == np.uint8:
        return out
    if desc[2] == 8:
        return (out & 0xFF).astype(np.uint8)  # 8-bit entries in 16-bit words
    return np.floor(out * (255 / 65535) + 0.5).astype(np.uint8)


def open_image(path, model):
    """An image file as dpfinetune reads it: DICOM by its contents, the rest
    by PIL."""
    ims = open_images(path, model)
    if len(ims) != 1:
        raise ValueError(f"{path}: {len(ims)} frames (dpfinetune.frame all): read them with open_images")
    return ims[0]


def open_images(path, model):
    """open_image's images of a file: one, or each frame's of a multi-frame
    DICOM file read with dpfinetune.frame all (predict then combines a
    file's rows)."""
    meta = {p.key: p.value for p in model.metadata_props}
    if is_nifti(path):
        return nifti_images(path, meta.get("dpfinetune.window", ""), meta.get("dpfinetune.frame", ""))
    with open(path, "rb") as f:
        head = f.read(132)
    if head[128:132] == b"DICM":
        return dicom_images(path, meta.get("dpfinetune.window", ""), meta.get("dpfinetune.frame", ""))
    im = Image.open(path)
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        return [gray16_image(im, meta.get("dpfinetune.window", ""))]
    return [im]


IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".pbm", ".pnm", ".dcm", ".dicom", ".ima", ".nii")


def is_image_file(p):
    """Whether dpfinetune reads the file at p as an image (a folder's
    isImageFile): by its extension, or, without one (or a UID's numeric
    last part), by the DICOM prefix; a study's DICOMDIR index is none."""
    import os
    name = os.path.basename(p)
    ext = os.path.splitext(name)[1].lower()
    if ext in IMAGE_EXTS or is_nifti(p):
        return True
    if (ext and not ext[1:].isdigit()) or name.upper() == "DICOMDIR":
        return False
    with open(p, "rb") as f:
        return f.read(132)[128:132] == b"DICM"


def series_dirs(paths):
    """The series directories under paths, as dpfinetune lists them
    (data.SeriesDirs): each directory holding image files of its own, in
    the order a depth-first walk of sorted entries first meets one."""
    import os
    dirs = []

    def walk(d):
        for name in sorted(os.listdir(d)):
            if name.startswith("."):
                continue
            p = os.path.join(d, name)
            if os.path.isdir(p):
                walk(p)
            elif d not in dirs and os.path.isfile(p) and is_image_file(p):
                dirs.append(d)

    for p in paths:
        walk(p)
    return dirs


def series_in(d):
    """A series directory's series as dpfinetune reads them (data/series.go):
    its images grouped by Series Instance UID — (name, slice files) each,
    the name d itself where they are one series, else d#N by Series Number
    (d#UID where the numbers do not tell them apart), in that order —,
    each series' slices along their plane's normal — Image Position
    (Patient) · (row × column of Image Orientation (Patient)) — where every
    slice gives it and they share the plane, else by Instance Number where
    every slice has one, else by name (ties by Instance Number, then
    name); objects without an image left out."""
    import os
    import pydicom
    groups = {}
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if name.startswith(".") or not os.path.isfile(p) or not is_image_file(p):
            continue
        ds = pydicom.dcmread(p)
        if "PixelData" not in ds:
            continue
        pos = inst = num = None
        normal = None
        try:
            ipp = [float(v) for v in ds.ImagePositionPatient]
            r, c = [float(v) for v in ds.ImageOrientationPatient[:3]], [float(v) for v in ds.ImageOrientationPatient[3:]]
            n = (r[1] * c[2] - r[2] * c[1], r[2] * c[0] - r[0] * c[2], r[0] * c[1] - r[1] * c[0])
            if len(ipp) == 3 and len(ds.ImageOrientationPatient) == 6:
                pos, normal = ipp[0] * n[0] + ipp[1] * n[1] + ipp[2] * n[2], n
        except (AttributeError, ValueError, TypeError):
            pass
        try:
            inst = int(str(ds.InstanceNumber).strip())
        except (AttributeError, ValueError):
            pass
        try:
            num = int(str(ds.SeriesNumber).strip())
        except (AttributeError, ValueError):
            pass
        uid = str(ds.get("SeriesInstanceUID", "") or "").strip()
        groups.setdefault(uid, []).append((p, pos, inst, num, normal))
    if "" in groups and len(groups) > 1:
        raise ValueError(f"{d}: slices of several series and some of none")
    nums = [g[0][3] for g in groups.values()]
    numbered = None not in nums and len(set(nums)) == len(nums)
    order = sorted(groups, key=lambda u: groups[u][0][3] if numbered else u)
    out = []
    for uid in order:
        ss = groups[uid]
        n0 = ss[0][4]
        by_pos = all(s[1] is not None and max(abs(a - b) for a, b in zip(s[4], n0)) < 1e-3 for s in ss)
        by_inst = all(s[2] is not None for s in ss)
        paths = [s[0] for s in sorted(ss, key=lambda s: (s[1] if by_pos else 0, s[2] if by_inst else 0, s[0]))]
        name = d if len(groups) == 1 else f"{d}#{ss[0][3] if numbered else uid}"
        out.append((name, paths))
    return out


def open_series(paths, model):
    """A series' images (its slice files, series_in's order) as dpfinetune
    reads them (the model recorded dpfinetune.series): the slice
    dpfinetune.frame picks (first, middle, last, a number), the projection
    it names (max, mean, min: of the slices' rescaled values, windowed as
    the first slice is), or every slice (all)."""
    import pydicom
    from pydicom.pixel_data_handlers.util import apply_modality_lut
    meta = {p.key: p.value for p in model.metadata_props}
    window, frame = meta.get("dpfinetune.window", ""), meta.get("dpfinetune.frame", "")
    n = len(paths)
    if frame in ("max", "mean", "min"):
        dss = [pydicom.dcmread(p) for p in paths]
        ms = np.stack([apply_modality_lut(stored(ds, ds.pixel_array), ds).astype(np.float64) for ds in dss])
        m = {"max": ms.max(0), "mean": ms.mean(0), "min": ms.min(0)}[frame]
        return [gray_image(dss[0], m, window)]
    if frame == "all":
        pick = range(n)
    elif not frame and n > 1:
        raise ValueError(f"{paths[0]}: a series of {n} slices and no slice chosen")
    else:
        k = {"first": 0, "middle": n // 2, "last": n - 1, "": 0}.get(frame)
        k = int(frame) - 1 if k is None else k
        pick = [k]
    return [dicom_image(paths[k], window, "") for k in pick]


def clip_length(model):
    """T of a model of clips, input (N, C, T, H, W); 0 for an image model."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return dims[2].dim_value if len(dims) == 5 else 0


def open_clip(path, model, tf, t):
    """A multi-frame DICOM file — or a series' slice files, a list — as a
    clip model's input (C, T, H, W), as dpfinetune reads it: t of its n
    frames picked evenly from the first to the last — frame
    floor(j(n-1)/(t-1)), torchvision's UniformTemporalSubsample in exact
    arithmetic —, each transformed as an image."""
    meta = {p.key: p.value for p in model.metadata_props}
    if isinstance(path, list):
        window = meta.get("dpfinetune.window", "")
        ims = [dicom_image(p, window, "") for p in path]
    elif is_nifti(path):
        ims = nifti_images(path, meta.get("dpfinetune.window", ""), "all")
    else:
        ims = dicom_images(path, meta.get("dpfinetune.window", ""), "all")
    n = len(ims)
    if n < 2:
        raise ValueError(f"{path}: a single image: a clip is read from a multi-frame DICOM object")
    pick = [j * (n - 1) // (t - 1) for j in range(t)] if t > 1 else [0]
    return torch.stack([tf(ims[k]) for k in pick], 1)


def main():
    model = onnx.load(sys.argv[1], load_external_data=False)
    tf, classes = transform(model)
    t = clip_length(model)
    meta = {p.key: p.value for p in model.metadata_props}
    series = meta.get("dpfinetune.series") == "true"
    units = [ss for d in series_dirs(sys.argv[3:]) for _, ss in series_in(d)] if series else sys.argv[3:]
    if t:
        x = torch.stack([open_clip(p, model, tf, t) for p in units])
    elif series:
        x = torch.stack([tf(im) for ss in units for im in open_series(ss, model)])
    else:
        x = torch.stack([tf(im) for p in units for im in open_images(p, model)])
    np.save(sys.argv[2], x.numpy().astype(np.float32))
    print(json.dumps(classes))


if __name__ == "__main__":
    main()
