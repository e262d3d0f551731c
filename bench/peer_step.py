#!/usr/bin/python3
"""One DP training step of a suite model (torch_models.SUITE) in a PyTorch
DP library, timed, or checked against our clipped gradient. bench/peers.sh
runs it; the libraries come from PYTHONPATH (an installed package or a
directory of its sources, see peers.sh).

    /usr/bin/python3 bench/peer_step.py --lib LIB --model NAME [--threads 2] [--warmup 2] [--steps 5]
    /usr/bin/python3 bench/peer_step.py --lib LIB --model NAME --check OURS.npz --input x.npy --labels y.npy

LIB is one of
  torch           PyTorch without DP (mean loss, zero_grad(set_to_none=True))
  opacus          Opacus GradSampleModule + DPOptimizer, as make_private builds
                  them (ModuleValidator.fix first; flat clipping)
  private_vision  the seed paper's code: PrivacyEngine(ghost_clipping=True,
                  mixed=True), the mixed ghost clipping
  fastdp          fastDP PrivacyEngine(clipping_mode='MixOpt',
                  clipping_fn='Abadi', clipping_style='all-layer'): the hybrid
                  book-keeping of the same paper's authors
  loop            (--check only) per-sample gradients one sample at a time
                  in plain PyTorch, clipped and summed: the textbook definition

Every DP library runs with σ = 1 (σ = 0 with --check), clip norm R = 1,
Adam(lr 1e-3), the expected batch size equal to the physical batch, the
same seeded weights as the ONNX export of torch_models.py (seed 0) and the
same batch. Timing prints one JSON line {model, impl, batch, threads,
step_ms_median, step_ms_min, maxrss_mb, train_peak_mb, trained, untrained};
untrained lists the parameters the library leaves without a private
gradient (it does not train them). A library that fails prints
{model, impl, error} and exits 0, so that the table shows its own error.

--check runs one step with σ = 0 on the samples of x.npy / y.npy with
every Dropout at p = 0 (the ONNX export has none) and compares the
library's summed clipped gradient Σ_i min(1, R/‖g_i‖) g_i (its step's
gradient times the batch size) with OURS.npz, written by
bench/cmd/clipsum from the same weights: one JSON line {model, impl,
max_rel_err, worst, untrained, ok}. max_rel_err is the largest
‖ours − theirs‖ / ‖ours‖ over the parameters the library trains.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import SUITE, Replicate, build  # noqa: E402

LIBS = ("torch", "opacus", "private_vision", "fastdp", "loop")


def version(lib):
    if lib in ("torch", "loop"):
        return "pytorch-" + torch.__version__
    if lib == "opacus":
        import opacus
        return "opacus-" + opacus.__version__
    if lib == "private_vision":
        import private_vision
        return "private_vision-" + getattr(private_vision, "__version__", "src")
    import fastDP
    return "fastDP-" + getattr(fastDP, "__version__", "src")


def unsupported(lib, model, shape):
    """The trainable parameters of model that lib has no per-sample rule
    for, by its own table of supported layers: those not owned directly by
    a module of a supported type (private_vision matches the type's name,
    fastDP the exact type; nn.MultiheadAttention calls its out_proj's
    weights without calling the module, so neither sees it)."""
    if lib == "private_vision":
        from private_vision.supported_layers_grad_samplers import _supported_layers_grad_samplers as table
        ok = lambda mod: type(mod).__name__ in table  # noqa: E731
    elif lib == "fastdp":
        from fastDP.supported_layers_grad_samplers import _supported_layers_norm_sample_AND_clipping as table
        ok = lambda mod: type(mod) in table  # noqa: E731
    else:
        return []
    called = set()
    hooks = [m.register_forward_hook(lambda mod, i, o: called.add(id(mod))) for m in model.modules()]
    with torch.no_grad():
        model(torch.zeros(2, *shape))
    for h in hooks:
        h.remove()
    out = []
    for mname, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            if p.requires_grad and not (ok(mod) and id(mod) in called):
                out.append(mname + "." + pname if mname else pname)
    return out


def freeze_regex(names, model):
    """A regular expression for `dpfinetune --freeze` (and clipsum
    -freeze) that selects the parameters names of the exported model. A
    parameter matches by its own name; where every parameter of a module
    is in names, the module's path matches the nodes that read them, which
    covers the ones the exporter renamed (MultiheadAttention's
    in_proj_weight is read by …/self_attention/MatMul)."""
    import re
    names = set(names)
    every = [n for n, _ in model.named_parameters()]
    pats = []
    for n in sorted(names):
        parts = n.split(".")
        pat = "^" + re.escape(n) + "$"
        for k in range(1, len(parts)):
            prefix = ".".join(parts[:k]) + "."
            if all(o in names for o in every if o.startswith(prefix)):
                pat = "(^|/)" + r"[./]".join(map(re.escape, parts[:k])) + r"[./]"
                break
        pats.append(pat)
    return "|".join(dict.fromkeys(pats))


class Runner:
    """One library's training step on one model: step(x, y) runs forward,
    backward, clipping, noise and Adam; names maps each gradient the step
    leaves in .grad back to the torch_models parameter name (Opacus renames
    the attention weights it replaces)."""

    def __init__(self, lib, model, shape, batch, sigma, clip, lr=1e-3):
        self.lib, self.model = lib, model
        self.unsupported = unsupported(lib, model, shape)
        if lib == "torch":
            self.opt = torch.optim.Adam(model.parameters(), lr=lr)
            self.step = self._torch
        elif lib == "opacus":
            from opacus import GradSampleModule
            from opacus.optimizers import DPOptimizer
            from opacus.validators import ModuleValidator
            self.model = ModuleValidator.fix(model)
            errs = ModuleValidator.validate(self.model, strict=False)
            if errs:
                raise RuntimeError("opacus ModuleValidator: " + "; ".join(str(e) for e in errs))
            self.gsm = GradSampleModule(self.model, batch_first=True, loss_reduction="mean")
            self.opt = DPOptimizer(torch.optim.Adam(self.gsm.parameters(), lr=lr), noise_multiplier=sigma,
                                   max_grad_norm=clip, expected_batch_size=batch, loss_reduction="mean")
            self.step = self._opacus
        elif lib == "private_vision":
            from private_vision import PrivacyEngine
            # private_vision stops on a parameter it has no rule for and asks
            # for it to be frozen: freeze those, as its message says.
            for name, p in model.named_parameters():
                if name in self.unsupported:
                    p.requires_grad_(False)
            self.opt = torch.optim.Adam(model.parameters(), lr=lr)
            self.engine = PrivacyEngine(model, batch_size=batch, sample_size=50000, epochs=1, noise_multiplier=sigma,
                                        max_grad_norm=clip, ghost_clipping=True, mixed=True)
            self.engine.attach(self.opt)
            self.step = self._private_vision
        elif lib == "fastdp":
            from fastDP import PrivacyEngine
            self.opt = torch.optim.Adam(model.parameters(), lr=lr)
            self.engine = PrivacyEngine(model, batch_size=batch, sample_size=50000, epochs=1, noise_multiplier=sigma,
                                        max_grad_norm=clip, clipping_mode="MixOpt", clipping_fn="Abadi",
                                        clipping_style="all-layer", loss_reduction="mean")
            self.engine.attach(self.opt)
            self.step = self._fastdp
        else:
            raise SystemExit("--lib must be one of " + ", ".join(LIBS[:-1]))

    def _torch(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        F.cross_entropy(self.model(x), y).backward()
        self.opt.step()

    def _opacus(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        F.cross_entropy(self.gsm(x), y).backward()
        self.opt.step()

    def _private_vision(self, x, y):
        # The engine runs both backward passes inside step; the optimizer's
        # zero_grad is the engine's (it clears the per-sample state too).
        self.opt.zero_grad()
        self.opt.step(loss=F.cross_entropy(self.model(x), y, reduction="none"))

    def _fastdp(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        F.cross_entropy(self.model(x), y).backward()
        self.opt.step()

    def gradients(self):
        """The gradients the last step handed to Adam, by torch_models name."""
        out = {}
        for name, p in self.model.named_parameters():
            if p.grad is None:
                continue
            name = name.removeprefix("_module.")
            out[name] = p.grad.detach().clone()
        # Opacus's DPMultiheadAttention splits in_proj into q/k/v linears.
        for key in [k for k in out if k.endswith(".qlinear.weight") or k.endswith(".qlinear.bias")]:
            base, kind = key[: -len(".qlinear.weight")] if key.endswith("weight") else key[: -len(".qlinear.bias")], key.rsplit(".", 1)[1]
            parts = [out.pop("%s.%slinear.%s" % (base, c, kind), None) for c in "qkv"]
            if all(p is not None for p in parts):
                out["%s.in_proj_%s" % (base, kind)] = torch.cat(parts, 0)
        return out


def loop_clipped_sum(model, x, y, clip):
    """Σ_i min(1, R/‖g_i‖) g_i one sample at a time (the definition)."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    for i in range(x.shape[0]):
        g = torch.autograd.grad(F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]), params)
        norm = torch.sqrt(sum((t.double() ** 2).sum() for t in g)).item()
        c = min(1.0, clip / (norm + 1e-6))
        for acc, t in zip(total, g):
            acc.add_(t, alpha=c)
    return {n: t for (n, p), t in zip([(n, p) for n, p in model.named_parameters() if p.requires_grad], total)}


def check_model(name):
    """build(name) with every Dropout at p = 0 and every all-zero parameter
    (biases, torchvision ViT's zero-initialised head, which would make
    every other gradient zero) drawn from a seeded N(0, 0.02): the model
    both sides of --check use."""
    m = build(name)
    for mod in m.modules():
        if isinstance(mod, nn.Dropout):
            mod.p = 0.0
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in m.parameters():
            if not p.any():
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
    return m.train()


def export_check(name, path):
    """Exports check_model(name) to ONNX as torch_models.export does."""
    import warnings
    m = check_model(name).eval()
    if name == "vgg11-cifar":
        m.avgpool = Replicate()
    x = torch.randn(2, *SUITE[name][0])
    with warnings.catch_warnings(), torch.enable_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            m, (x,), path, export_params=True, opset_version=14, do_constant_folding=True,
            input_names=["input"], output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})


def check(a):
    import numpy as np
    ours = dict(np.load(a.check))
    x = torch.from_numpy(np.load(a.input))
    y = torch.from_numpy(np.load(a.labels)).long()
    model = check_model(a.model)
    n = x.shape[0]
    cannot = []
    if a.lib == "loop":
        got = loop_clipped_sum(model, x, y, a.clip)
    else:
        r = Runner(a.lib, model, SUITE[a.model][0], n, 0.0, a.clip, lr=0.0)
        r.step(x, y)
        got = {k: v * n for k, v in r.gradients().items()}
        cannot = r.unsupported
    worst, err, untrained = "", 0.0, []
    for name, want in ours.items():
        want = torch.from_numpy(want)
        if name.endswith(".T"):
            name = name[:-2]
        # The exporter stores MultiheadAttention's in_proj_weight (and
        # the Linear weights of 3-D inputs) transposed, named after the
        # module: ours names that one "….self_attention.weight".
        alias = name[: -len("weight")] + "in_proj_weight"
        if name not in got and alias in got:
            name = alias
        g = got.pop(name, None)
        if g is None or not g.any():
            untrained.append(name)
            continue
        if want.dim() == 2 and tuple(want.shape) != tuple(g.shape) and tuple(want.t().shape) == tuple(g.shape):
            want = want.t()
        e = ((g.reshape(want.shape).double() - want.double()).norm() / max(want.double().norm(), 1e-30)).item()
        if e > err:
            err, worst = e, name
    extra = sorted(k for k, v in got.items() if v.any())
    out = {"model": a.model, "impl": version(a.lib), "samples": n, "max_rel_err": err, "worst": worst,
           "untrained": sorted(untrained), "cannot_train": cannot, "ok": err <= a.tol and not untrained}
    if extra:
        out["not_in_ours"] = extra
        out["ok"] = False
    print(json.dumps(out))


def timing(a):
    shape, batch = SUITE[a.model]
    if a.batch:
        batch = a.batch
    model = build(a.model).train()
    names = [n for n, _ in model.named_parameters()]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, *shape, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    if a.channels_last:
        if a.lib != "torch":
            raise SystemExit("--channels-last is for --lib torch (PyTorch's non-DP step at its best)")
        # oneDNN's convolutions on the CPU are fastest on NHWC tensors; a
        # model without 4-D activations ignores the format.
        model = model.to(memory_format=torch.channels_last)
        if x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
    r = Runner(a.lib, model, shape, batch, a.sigma, a.clip)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    for _ in range(a.warmup):
        r.step(x, y)
    have = {k for k, v in r.gradients().items() if v.any()}
    ts = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        r.step(x, y)
        ts.append((time.perf_counter() - t0) * 1e3)
    out = {
        "model": a.model, "impl": version(a.lib), "lib": a.lib, "batch": batch, "threads": a.threads,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "memory_format": "channels_last" if a.channels_last else "contiguous",
        "step_ms_median": round(statistics.median(ts), 2), "step_ms_min": round(min(ts), 2),
        "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "untrained": [n for n in names if n not in have],
    }
    if reset:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    out["train_peak_mb"] = round(float(line.split()[1]) / 1024, 1)
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, choices=LIBS)
    ap.add_argument("--model", required=True, choices=list(SUITE))
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--channels-last", action="store_true",
                    help="--lib torch only: the model and batch in torch.channels_last (NHWC) memory format")
    ap.add_argument("--check", help="our clipped gradient sum (bench/cmd/clipsum -out)")
    ap.add_argument("--input")
    ap.add_argument("--labels")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--print-freeze", action="store_true",
                    help="print a --freeze regular expression for the parameters LIB cannot train, and exit")
    ap.add_argument("--export-check", metavar="PATH", help="export the --check model to this ONNX file, and exit")
    ap.add_argument("--write-batch", metavar="N", type=int,
                    help="write N seeded samples of the model's shape to --input and labels to --labels, and exit")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.print_freeze:
        model = build(a.model)
        print(freeze_regex(unsupported(a.lib, model, SUITE[a.model][0]), model))
        return
    if a.export_check:
        export_check(a.model, a.export_check)
        return
    if a.write_batch:
        import numpy as np
        g = torch.Generator().manual_seed(7)
        np.save(a.input, torch.randn(a.write_batch, *SUITE[a.model][0], generator=g).numpy())
        np.save(a.labels, torch.randint(0, 10, (a.write_batch,), generator=g).numpy().astype(np.int64))
        return
    try:
        if a.check:
            check(a)
        else:
            if a.lib == "loop":
                raise SystemExit("--lib loop is a --check oracle only")
            timing(a)
    except Exception as e:  # the peer's own error goes into the table
        traceback.print_exc(file=sys.stderr)
        print(json.dumps({"model": a.model, "lib": a.lib, "error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")}))


if __name__ == "__main__":
    main()
