#!/usr/bin/env python3
"""Loads the weights `dpfinetune weights` wrote (a .pt or .safetensors
state dict) into the PyTorch module the model was exported from.

    import torchvision
    from load_state_dict import load_tuned
    model = torchvision.models.resnet18()
    record = load_tuned(model, "tuned.pt")      # model now holds the tuned weights
    model.eval()

What it does besides model.load_state_dict:
  - a module the state dict holds as GroupNorm (train's --bn groupnorm
    replaced the BatchNorm there) is replaced by nn.GroupNorm(groups,
    channels, eps) first, as the file's record lists them;
  - a Linear or Conv2d whose weight has other outputs in the file (train's
    --num-classes replaced the classifier head) is replaced by one of the
    file's shape;
  - it refuses a key the module does not have, and a parameter of the
    module the file does not hold; buffers the export did not carry (a
    BatchNorm's num_batches_tracked, an index table) keep the module's.

It returns the file's record (its "metadata": the run's ε and δ, classes,
preprocessing; its "calibration": a temperature the logits are to be
divided by, which is no part of the module). See docs/SERVING.md.

    python3 docs/load_state_dict.py tuned.pt     # prints the record
"""
import json
import struct
import sys
import zipfile

import torch
import torch.nn as nn


def read(path):
    """Returns (state dict, record) of a file `dpfinetune weights` wrote."""
    if path.endswith(".safetensors"):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        meta = header.pop("__metadata__", {}) or {}
        sd = {}
        for key, e in header.items():
            if e["dtype"] != "F32":
                raise ValueError("%s: %s is %s, want F32" % (path, key, e["dtype"]))
            lo, hi = e["data_offsets"]
            t = torch.frombuffer(bytearray(data[lo:hi]), dtype=torch.float32) if hi > lo else torch.zeros(0)
            sd[key] = t.reshape(e["shape"])
        return sd, json.loads(meta.get("dpfinetune", "{}"))
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # PyTorch before 1.13
        sd = torch.load(path, map_location="cpu")
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith("/extra/dpfinetune.json")]
        record = json.loads(z.read(names[0])) if names else {}
    return sd, record


def _parent(model, name):
    parent, _, leaf = name.rpartition(".")
    return (model.get_submodule(parent) if parent else model), leaf


def load_tuned(model, path):
    """Loads path's weights into model (changed in place) and returns the
    file's record."""
    sd, record = read(path)
    for gn in record.get("groupnorms", []):
        mod = model.get_submodule(gn["module"])
        want = (gn["groups"], gn["channels"], gn["epsilon"])
        if isinstance(mod, nn.GroupNorm) and (mod.num_groups, mod.num_channels, mod.eps) == want:
            continue
        parent, leaf = _parent(model, gn["module"])
        setattr(parent, leaf, nn.GroupNorm(*want[:2], eps=want[2]))
    for key, t in sd.items():
        name, _, kind = key.rpartition(".")
        if kind != "weight" or not name:
            continue
        try:
            mod = model.get_submodule(name)
        except AttributeError:
            continue
        # A new head reads what the old one read: only its outputs differ.
        if not isinstance(mod, (nn.Linear, nn.Conv2d)) or tuple(mod.weight.shape) == tuple(t.shape) \
                or tuple(mod.weight.shape[1:]) != tuple(t.shape[1:]):
            continue
        parent, leaf = _parent(model, name)
        bias = (name + ".bias") in sd
        if isinstance(mod, nn.Linear):
            new = nn.Linear(t.shape[1], t.shape[0], bias=bias)
        else:
            new = nn.Conv2d(t.shape[1] * mod.groups, t.shape[0], mod.kernel_size, mod.stride, mod.padding,
                            mod.dilation, mod.groups, bias=bias, padding_mode=mod.padding_mode)
        setattr(parent, leaf, new)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected:
        raise KeyError("%s: keys the module does not have: %s" % (path, ", ".join(unexpected)))
    params = dict(model.named_parameters())
    lost = [k for k in missing if k in params]
    if lost:
        raise KeyError("%s: parameters the file does not hold: %s" % (path, ", ".join(lost)))
    return record


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    sd, record = read(sys.argv[1])
    print(json.dumps({"tensors": len(sd), "values": sum(t.numel() for t in sd.values()), "record": record}, indent=2))
