"""Exports a BiT-style ResNet-18 (weight-standardized convolutions, timm's
StdConv2d, and GroupNorm) and the same model with plain convolutions, 10
classes, 64x64, dynamic batch: the pair bench/ws_resnet.sh times.

    /usr/bin/python3 bench/ws_resnet.py OUTDIR
"""

import os
import sys
import warnings

import torch
import torch.nn as nn
import torchvision


class StdConv2d(nn.Conv2d):
    """The weight standardized per output channel (F.batch_norm of the
    weight in training mode, as timm writes it)."""

    def forward(self, x):
        w = nn.functional.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None, training=True,
                                     momentum=0.0, eps=1e-6).reshape_as(self.weight)
        return nn.functional.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


def convert(m, ws):
    """BatchNorm → GroupNorm(8) everywhere; convolutions standardized if ws."""
    for name, c in m.named_children():
        if isinstance(c, nn.Conv2d) and ws:
            n = StdConv2d(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding, c.dilation, c.groups,
                          c.bias is not None)
            n.weight.data.copy_(c.weight.data)
            setattr(m, name, n)
        elif isinstance(c, nn.BatchNorm2d):
            setattr(m, name, nn.GroupNorm(8, c.num_features))
        else:
            convert(c, ws)
    return m


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for ws in (False, True):
        torch.manual_seed(0)
        m = convert(torchvision.models.resnet18(num_classes=10), ws).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m, (torch.randn(2, 3, 64, 64),), os.path.join(out, "ws.onnx" if ws else "plain.onnx"),
                              opset_version=17, input_names=["input"], output_names=["logits"],
                              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})


if __name__ == "__main__":
    main()
