#!/usr/bin/python3
"""Fixtures for Dropout at inference (testdata/dropout/).

Two kinds, all tiny (seeded random init, no pretrained weights):

* Real training-mode exports (``TrainingMode.TRAINING``,
  ``do_constant_folding=False``, opset 14) of reduced-width torchvision
  models whose exports keep a Dropout node with its bool mask output:
  ``mobilenet_v3_small`` (width_mult 0.25), ``efficientnet`` (the b0 block
  table at width 0.25, depth 0.25), ``mnasnet`` (alpha 0.1) and
  ``googlenet`` (every channel count divided by 8, fc 128→10). Input
  (4, 3, 64, 64), the same for all, in ``input.npz`` (``input``);
  ``<name>.npz`` holds ``logits``: PyTorch's
  output of the same model in training mode with Dropout switched off
  (BatchNormalization with training_mode=1 normalizes with the batch's
  statistics, which is what the exported graph says), i.e. what ``predict``
  must print. Stochastic depth (EfficientNet) has no ONNX export in training
  mode (Bernoulli), so its probability is set to 0.

* Hand-written graphs (onnx.helper) covering every form of Dropout the ONNX
  opsets define, each computing ``out = x`` when Dropout is identity and its
  mask keeps everything:
    - ``dropout_v7``: ratio attribute, float mask consumed by Mul(y, mask)
    - ``dropout_v10``: ratio attribute, bool mask consumed by
      Where(mask, y, 0) and also a second graph output
    - ``dropout_v12_train``: ratio and training_mode=true inputs, bool mask
      cast to float and multiplied in
    - ``dropout_v13_eval``: training_mode=false input, no mask output
    - ``dropout_v14_unused``: training_mode=true, mask present but read by
      nothing

Run from the repository root (Debian python3-torch 1.13, torchvision 0.14,
onnx 1.12):

    /usr/bin/python3 testdata/gen/make_dropout.py --out testdata/dropout

Two runs give byte-identical files.
"""

import argparse
import functools
import importlib
import os
import sys
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper
import torch
import torch.nn as nn
import torchvision

# torchvision.models re-exports the builder functions under the module names.
efficientnet = importlib.import_module("torchvision.models.efficientnet")
googlenet = importlib.import_module("torchvision.models.googlenet")
mnasnet = importlib.import_module("torchvision.models.mnasnet")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import save_npz  # noqa: E402

OPSET = 14
SHAPE = (4, 3, 64, 64)


def tiny_efficientnet():
    conf = functools.partial(efficientnet.MBConvConfig, width_mult=0.25, depth_mult=0.25)
    setting = [
        conf(1, 3, 1, 32, 16, 1),
        conf(6, 3, 2, 16, 24, 2),
        conf(6, 5, 2, 24, 40, 2),
        conf(6, 3, 2, 40, 80, 3),
    ]
    return efficientnet.EfficientNet(setting, dropout=0.2, num_classes=10)


def tiny_googlenet():
    def scaled_conv(i, o, **kw):
        return googlenet.BasicConv2d(i if i == 3 else i // 8, o // 8, **kw)

    def scaled_inception(*ch, **kw):
        return googlenet.Inception(*[c // 8 for c in ch], **kw)

    m = googlenet.GoogLeNet(num_classes=10, aux_logits=False, init_weights=True,
                            blocks=[scaled_conv, scaled_inception, googlenet.InceptionAux])
    m.fc = nn.Linear(1024 // 8, 10)
    return m


MODELS = {
    "mobilenet_v3_small": lambda: torchvision.models.mobilenet_v3_small(num_classes=10, width_mult=0.25),
    "efficientnet": tiny_efficientnet,
    "mnasnet": lambda: mnasnet.MNASNet(0.1, num_classes=10),
    "googlenet": tiny_googlenet,
}


def export_real(name, out):
    torch.manual_seed(0)
    m = MODELS[name]()
    for mod in m.modules():
        if type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(1))
    m.train()
    for mod in m.modules():
        if isinstance(mod, nn.Dropout):
            mod.eval()
    with torch.no_grad():
        want = m(x).numpy()
    path = os.path.join(out, name + ".onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (x,), path, opset_version=OPSET, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    om = onnx.load(path)
    drops = [n for n in om.graph.node if n.op_type == "Dropout"]
    assert drops and all(len(n.output) == 2 for n in drops), f"{name}: no Dropout with a mask output"
    save_npz(os.path.join(out, name + ".npz"), {"logits": want})
    return x.numpy()
    print(f"{name}: {os.path.getsize(path)} bytes, {len(om.graph.node)} nodes, {len(drops)} Dropout")


def scalar(name, dtype, value):
    return helper.make_tensor(name, dtype, [], [value])


def handmade(opset):
    """One graph per Dropout form; each maps x (N, 4) to out = x."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 4])
    zero = scalar("zero", TensorProto.FLOAT, 0.0)
    ratio = scalar("ratio", TensorProto.FLOAT, 0.5)
    if opset == 7:
        nodes = [helper.make_node("Dropout", ["x"], ["y", "mask"], name="drop", ratio=0.5),
                 helper.make_node("Mul", ["y", "mask"], ["out"], name="apply")]
        return helper.make_graph(nodes, "dropout_v7", [x], [out])
    if opset == 10:
        mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, ["N", 4])
        nodes = [helper.make_node("Dropout", ["x"], ["y", "mask"], name="drop", ratio=0.25),
                 helper.make_node("Where", ["mask", "y", "zero"], ["out"], name="keep")]
        return helper.make_graph(nodes, "dropout_v10", [x], [out, mask], initializer=[zero])
    if opset == 12:
        train = scalar("train", TensorProto.BOOL, True)
        nodes = [helper.make_node("Dropout", ["x", "ratio", "train"], ["y", "mask"], name="drop"),
                 helper.make_node("Cast", ["mask"], ["maskf"], name="cast", to=TensorProto.FLOAT),
                 helper.make_node("Mul", ["y", "maskf"], ["out"], name="apply")]
        return helper.make_graph(nodes, "dropout_v12_train", [x], [out], initializer=[ratio, train])
    if opset == 13:
        train = scalar("train", TensorProto.BOOL, False)
        nodes = [helper.make_node("Dropout", ["x", "ratio", "train"], ["out"], name="drop")]
        return helper.make_graph(nodes, "dropout_v13_eval", [x], [out], initializer=[ratio, train])
    if opset == 14:
        train = scalar("train", TensorProto.BOOL, True)
        nodes = [helper.make_node("Dropout", ["x", "ratio", "train"], ["out", "mask"], name="drop")]
        return helper.make_graph(nodes, "dropout_v14_unused", [x], [out], initializer=[ratio, train])
    raise ValueError(opset)


def write_handmade(out):
    for opset in (7, 10, 12, 13, 14):
        g = handmade(opset)
        m = helper.make_model(g, producer_name="make_dropout.py", opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 7
        onnx.checker.check_model(m)
        onnx.save(m, os.path.join(out, g.name + ".onnx"))
        print(f"{g.name}: opset {opset}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (testdata/dropout)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in MODELS:
        x = export_real(name, args.out)
    save_npz(os.path.join(args.out, "input.npz"), {"input": x})
    write_handmade(args.out)


if __name__ == "__main__":
    main()
