#!/usr/bin/env python3
"""Times PyTorch's non-DP training step on a GPU: the baseline that
scripts/gpu-check.sh sets beside `dpfinetune bench --device cuda` (issue 14,
paper Tables 4–6). torchvision's resnet50, vgg16 and vit_b_16 (random
weights: no download), or the CIFAR suite models of torch_models; forward,
mean softmax cross-entropy, backward, Adam(1e-3), zero_grad(set_to_none=True),
each step closed by torch.cuda.synchronize().

    python3 bench/torch_gpu_step.py --model resnet50 --batch 32 [--steps 20] [--warmup 5] [--size 224] [--classes 1000] [--tf32 default|off] [--dp none|persample] [--device cuda|cpu] [--profile FILE [--profile-steps N]]

--tf32 default keeps PyTorch's precision defaults: convolutions in TF32 on
the tensor cores (torch.backends.cudnn.allow_tf32), other matrix products
in float32; --tf32 off runs everything in float32, as dpfinetune without
its --tf32 flag. Prints one JSON line {model, batch, device, cudnn_tf32,
matmul_tf32, step_ms_median, step_ms_min, peak_mib} with peak_mib
torch.cuda.max_memory_allocated over the timed steps (the caching
allocator's live tensors, not the process).

--profile FILE writes, after the timed steps, torch.profiler's table of
--profile-steps more steps (default 2) to FILE: the kernels by device time
(on the CPU, the operators by CPU time), to set beside dpfinetune's
operation profile (DPFINETUNE_CUDA_PROFILE) — where our step spends the
time PyTorch's does not.

--dp persample times a DP step by Opacus's method instead — every
parameter's per-sample gradient materialized (torch.func's vmap of grad,
what Opacus's grad_sample hooks hold), each sample clipped to norm 1 over
all of them, the clipped sum plus Gaussian noise (σ = 1) over the batch,
then Adam — for the largest-batch comparison of issue 14 where Opacus
itself is not installed ("impl" says "pytorch-persample"). BatchNorm has
no per-sample gradient: a model with it is refused (the suite's CIFAR
models have GroupNorm). --device cpu runs either step on the CPU (a check
of the script, no timing meant).
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def build(name, classes):
    import torchvision
    if hasattr(torchvision.models, name):
        return getattr(torchvision.models, name)(weights=None, num_classes=classes)
    from torch_models import build as suite_build  # the CIFAR suite
    return suite_build(name)


def setup(a, prog):
    """The device (a.device: cuda, or cpu for a check of the script),
    PyTorch's precision (a.tf32: "off" keeps every product float32) and
    the model a.model of a.classes classes on it, in training mode."""
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("%s: no CUDA device" % prog)
    if a.tf32 == "off":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(a.device)
    return cuda, dev, build(a.model, a.classes).to(dev).train()


def times_ms(f, n, cuda):
    """n calls of f, each timed to its end on the device, in ms."""
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        if cuda:
            torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def persample_step(m, opt, x, y, clip=1.0, sigma=1.0):
    """One DP step by Opacus's method: per-sample gradients of every
    parameter materialized at once, clipped, summed, noised, averaged."""
    try:
        from torch.func import functional_call, grad, vmap
    except ImportError:  # torch 1.13: functorch
        from functorch import grad, vmap
        from torch.nn.utils.stateless import functional_call
    names = [n for n, p in m.named_parameters() if p.requires_grad]
    params = {n: p.detach() for n, p in m.named_parameters() if p.requires_grad}
    buffers = dict(m.named_buffers())

    def loss(ps, xi, yi):
        out = functional_call(m, {**ps, **buffers}, (xi.unsqueeze(0),))
        return F.cross_entropy(out, yi.unsqueeze(0))

    g = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)  # {name: (B, *shape)}
    norms = torch.sqrt(sum(g[n].flatten(1).pow(2).sum(1) for n in names))
    factor = (clip / (norms + 1e-6)).clamp(max=1.0)
    opt.zero_grad(set_to_none=True)
    for n, p in m.named_parameters():
        if n in g:
            s = torch.einsum("b,b...->...", factor, g[n])
            p.grad = (s + sigma * clip * torch.randn_like(s)) / x.shape[0]
    del g
    opt.step()


def write_profile(a, step, cuda):
    """Profiles a.profile_steps steps and writes the table to a.profile."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(a.profile_steps):
            step()
    # PyTorch 2.4 renamed the CUDA columns "device"; 1.13 knows "cuda".
    keys = ["self_device_time_total", "self_cuda_time_total"] if cuda else ["self_cpu_time_total"]
    avg = prof.key_averages()
    for key in keys:
        try:
            table = avg.table(sort_by=key, row_limit=60)
            break
        except (AttributeError, KeyError, ValueError):
            continue
    else:
        table = avg.table(row_limit=60)
        key = "recording order"
    with open(a.profile, "w") as f:
        f.write("PyTorch %s, %s, batch %d, %d steps, tf32 %s, sorted by %s\n\n" % (
            torch.__version__, a.model, a.batch, a.profile_steps, a.tf32, key))
        f.write(table)
        f.write("\n")


def model_args(tf32):
    """The arguments this script and torch_conv_shapes.py share: the
    model, batch, input size, classes, precision (tf32's default) and
    device."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--tf32", choices=["default", "off"], default=tf32)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    return ap


def main():
    ap = model_args("default")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dp", choices=["none", "persample"], default="none")
    ap.add_argument("--profile", default="")
    ap.add_argument("--profile-steps", type=int, default=2)
    a = ap.parse_args()
    cuda, dev, m = setup(a, "torch_gpu_step")
    if a.dp == "persample" and any(isinstance(c, torch.nn.modules.batchnorm._BatchNorm) for c in m.modules()):
        raise SystemExit("torch_gpu_step: %s has BatchNorm, which has no per-sample gradient" % a.model)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(a.batch, 3, a.size, a.size, generator=g).to(dev)
    y = torch.randint(0, a.classes, (a.batch,), generator=g).to(dev)

    def step():
        if a.dp == "persample":
            persample_step(m, opt, x, y)
        else:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(m(x), y).backward()
            opt.step()
        if cuda:
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    ts = times_ms(step, a.steps, cuda)
    if a.profile:
        write_profile(a, step, cuda)
    print(json.dumps({
        "model": a.model, "impl": ("pytorch-persample-" if a.dp == "persample" else "pytorch-") + torch.__version__, "batch": a.batch,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "cudnn_tf32": torch.backends.cudnn.allow_tf32, "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "step_ms_median": round(statistics.median(ts), 2), "step_ms_min": round(min(ts), 2),
        "peak_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
    }))


if __name__ == "__main__":
    main()
