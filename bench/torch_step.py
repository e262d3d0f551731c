#!/usr/bin/python3
"""Times one non-DP PyTorch training step of a suite or zoo model
(torch_models.MODELS; the zoo models with GroupNorm for BatchNorm) the way
PyTorch runs it best: zero_grad(set_to_none=True), forward, mean softmax
cross-entropy, backward, Adam(lr 1e-3) step; with --channels-last the model
and batch in NHWC memory format, which oneDNN's CPU convolutions prefer.
The thread policy (OMP_WAIT_POLICY) is the caller's: run_suite.sh times
both and keeps the better.

    /usr/bin/python3 bench/torch_step.py --model NAME [--threads 2] [--warmup 3] [--steps 20] [--channels-last]

Prints one JSON line {model, batch, threads, step_ms_median, step_ms_min,
maxrss_mb, train_peak_mb}. maxrss_mb is ru_maxrss of this process (run
one model per process); train_peak_mb the peak resident set of the
training loop alone (VmHWM reset through /proc/self/clear_refs after the
model, optimizer and batch are built). stepbench reports the same two
numbers for ours.
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.nn.functional as F

from torch_models import MODELS, build


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.model not in MODELS:
        raise SystemExit("unknown model %r (want one of %s)" % (a.model, ", ".join(MODELS)))
    shape, batch, classes = MODELS[a.model]
    if a.batch:
        batch = a.batch
    m = build(a.model).train()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, *shape, generator=g)
    y = torch.randint(0, classes, (batch,), generator=g)
    if a.channels_last:
        m = m.to(memory_format=torch.channels_last)
        if x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(m(x), y).backward()
        opt.step()

    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    for _ in range(a.warmup):
        step()
    ts = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        ts.append((time.perf_counter() - t0) * 1e3)
    out = {
        "model": a.model, "impl": "pytorch-" + torch.__version__, "batch": batch, "threads": a.threads,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "memory_format": "channels_last" if a.channels_last else "contiguous",
        "step_ms_median": round(statistics.median(ts), 2), "step_ms_min": round(min(ts), 2),
        "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    if reset:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    out["train_peak_mb"] = round(float(line.split()[1]) / 1024, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
