#!/usr/bin/env python3
"""Times each convolution shape of a torchvision model in PyTorch, alone:
the other side of dpfinetune's profile table "convolutions by shape"
(DPFINETUNE_CUDA_PROFILE=1), which bench/conv_profile.py sets it beside.

    python3 bench/torch_conv_shapes.py --model resnet50 --batch 32 [--size 224] [--classes 1000] [--tf32 default|off] [--reps 20] [--device cuda|cpu]

The shapes are those a forward pass of the model meets (forward hooks on
every nn.Conv2d, with how many layers share each). Each is then timed as
PyTorch's training step runs it, with its cuDNN settings (benchmark off,
nondeterministic algorithms allowed; --tf32 as torch_gpu_step.py): the
forward product, the input gradient alone and the weight gradient alone
(aten::convolution_backward with one output asked for each), medians of
--reps calls, each closed by torch.cuda.synchronize(). Prints one JSON
line a shape: {key, layers, fwd_ms, dgrad_ms, wgrad_ms}, key in
dpfinetune's form ("n=32 c=64 in=56x56 m=256 k=1x1 s=1x1 p=0,0,0,0 d=1x1
g=1": ONNX's pads, begins then ends). --device cpu checks the script (no
timing meant).
"""
import json
import statistics

import torch
import torch.nn.functional as F

from torch_gpu_step import model_args, setup, times_ms


def key(x, conv):
    n, c, h, w = x.shape
    ph, pw = conv.padding if isinstance(conv.padding, tuple) else (conv.padding, conv.padding)
    kh, kw = conv.kernel_size
    return "n=%d c=%d in=%dx%d m=%d k=%dx%d s=%dx%d p=%d,%d,%d,%d d=%dx%d g=%d" % (
        n, c, h, w, conv.out_channels, kh, kw, conv.stride[0], conv.stride[1], ph, pw, ph, pw,
        conv.dilation[0], conv.dilation[1], conv.groups)


def main():
    ap = model_args("off")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    cuda, dev, m = setup(a, "torch_conv_shapes")
    shapes = {}  # key → [conv, input shape, layers]

    def hook(conv, inputs, _):
        if conv.padding_mode != "zeros" or isinstance(conv.padding, str):
            return
        k = key(inputs[0], conv)
        if k in shapes:
            shapes[k][2] += 1
        else:
            shapes[k] = [conv, tuple(inputs[0].shape), 1]

    hs = [c.register_forward_hook(hook) for c in m.modules() if isinstance(c, torch.nn.Conv2d)]
    with torch.no_grad():
        m(torch.randn(a.batch, 3, a.size, a.size, device=dev))
    for h in hs:
        h.remove()

    def median_ms(f):
        times_ms(f, 3, cuda)  # warm-up
        return round(statistics.median(times_ms(f, a.reps, cuda)), 4)

    g = torch.Generator().manual_seed(1)
    for k, (conv, shape, layers) in shapes.items():
        x = torch.randn(*shape, generator=g).to(dev)
        w = conv.weight.detach()
        y = F.conv2d(x, w, None, conv.stride, conv.padding, conv.dilation, conv.groups)
        dy = torch.randn(*y.shape, generator=g).to(dev)
        args = (dy, x, w, None, list(conv.stride), list(conv.padding), list(conv.dilation), False, [0, 0], conv.groups)
        fwd = median_ms(lambda: F.conv2d(x, w, None, conv.stride, conv.padding, conv.dilation, conv.groups))
        dgrad = median_ms(lambda: torch.ops.aten.convolution_backward(*args, [True, False, False]))
        wgrad = median_ms(lambda: torch.ops.aten.convolution_backward(*args, [False, True, False]))
        print(json.dumps({"model": a.model, "key": k, "layers": layers, "fwd_ms": fwd, "dgrad_ms": dgrad, "wgrad_ms": wgrad,
                          "cudnn_tf32": torch.backends.cudnn.allow_tf32}))


if __name__ == "__main__":
    main()
