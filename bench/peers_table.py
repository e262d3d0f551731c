#!/usr/bin/python3
"""Prints the Markdown tables of bench/peers.sh from its JSON lines.

    /usr/bin/python3 bench/peers_table.py OUTDIR

OUTDIR/check.jsonl (bench/peer_step.py --check lines) gives the gradient
check table; OUTDIR/time.jsonl (peer_step.py timing lines and one
`dpfinetune bench` line per round and model) the timing table: per model
and library the best round's median step in ms and its ratio to PyTorch's
non-DP step (the best of its thread policies and memory formats, named). A library whose gradient
check failed is marked †, one that leaves parameters untrained ‡ (the
notes under the table name them); a library that failed shows its error.
"""
import json
import os
import sys

PEERS = [("opacus", "Opacus"), ("private_vision", "private_vision mixed"), ("fastdp", "fastDP BK (MixOpt)")]
IMPL = {"pytorch": "loop", "opacus": "opacus", "private_vision": "private_vision", "fastDP": "fastdp"}


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(s) for s in f if s.startswith("{")]


def lib_of(r):
    if "lib" in r:
        return r["lib"]
    return IMPL.get(r.get("impl", "").split("-")[0], r.get("impl", ""))


def setting(r):
    """PyTorch's thread policy and memory format of a timing line."""
    pol = "PASSIVE" if r.get("omp_wait_policy") == "PASSIVE" else "default OMP"
    return pol + (", NHWC" if r.get("memory_format") == "channels_last" else "")


def brief(names):
    """A short description of a list of parameter names: module and
    parameter name, with a count where several layers repeat one."""
    groups = {}
    for n in names:
        key = ".".join(n.split(".")[-2:])
        groups[key] = groups.get(key, 0) + 1
    return ", ".join("%s (%d)" % (k, v) if v > 1 else k for k, v in groups.items())


def main():
    out = sys.argv[1]
    machine = ""
    if os.path.exists(os.path.join(out, "machine.txt")):
        machine = open(os.path.join(out, "machine.txt")).read().strip()
    checks = lines(os.path.join(out, "check.jsonl"))
    times = lines(os.path.join(out, "time.jsonl"))
    models = list(dict.fromkeys([r["model"] for r in checks] + [r["model"] for r in times]))
    status, notes = {}, []
    if checks:
        print("Gradient check: largest relative error ‖ours − theirs‖ / ‖ours‖ of the summed clipped gradient over the parameters (noise off, R = 1, %s)\n" % machine)
        print("| model (samples) | per-sample loop | " + " | ".join(n for _, n in PEERS) + " |")
        print("|---|---|" + "---|" * len(PEERS))
        for m in models:
            row = {lib_of(r): r for r in checks if r["model"] == m}
            if not row:
                continue
            n = next((r.get("samples") for r in row.values() if "samples" in r), "?")
            cells = []
            for lib in ["loop"] + [p for p, _ in PEERS]:
                r = row.get(lib)
                if r is None:
                    cells.append("–")
                    continue
                if "error" in r:
                    cells.append("error: " + r["error"])
                    status[(m, lib)] = "error"
                    continue
                mark = "ok" if r["ok"] else "**wrong**"
                extra = ""
                if r.get("cannot_train"):
                    extra = ", %d frozen on both sides" % len(r["cannot_train"])
                    notes.append("%s, %s cannot train %d parameters: %s" % (m, dict(PEERS).get(lib, lib), len(r["cannot_train"]), brief(r["cannot_train"])))
                if r.get("untrained"):
                    extra += ", no gradient for %d parameters" % len(r["untrained"])
                    notes.append("%s, %s gives no gradient to %d parameters: %s" % (m, dict(PEERS).get(lib, lib), len(r["untrained"]), brief(r["untrained"])))
                cells.append("%.1e %s%s" % (r["max_rel_err"], mark, extra))
                status[(m, lib)] = "ok" if r["ok"] else "wrong"
                if r.get("cannot_train"):
                    status[(m, lib)] += "-subset"
            print("| %s (%s) | %s |" % (m, n, " | ".join(cells)))
        print()
    if times:
        best = {}
        for r in times:
            m, lib = r["model"], lib_of(r)
            if lib == "dpfinetune":
                for row in r["rows"]:
                    k = (m, "dpfinetune " + row["mode"])
                    best[k] = min(best.get(k, float("inf")), row["step_ms"])
                continue
            if "error" in r:
                best.setdefault((m, lib), r["error"])
                continue
            k = (m, lib)
            if lib == "torch":
                k = (m, "torch", setting(r))
            cur = best.get(k)
            if not isinstance(cur, float) or r["step_ms_median"] < cur:
                best[k] = r["step_ms_median"]
        print("Median ms per step (best of the rounds) and × PyTorch non-DP's step; σ = 1, R = 1, Adam; %s\n" % machine)
        cols = ["PyTorch non-DP"] + [n for _, n in PEERS] + ["dpfinetune nondp", "dpfinetune bk"]
        print("| model (batch) | " + " | ".join(cols) + " |")
        print("|---|" + "---|" * len(cols))
        for m in models:
            b = next((r["batch"] for r in times if r["model"] == m and "batch" in r), "?")
            pols = {k[2]: v for k, v in best.items() if len(k) == 3 and k[0] == m and k[1] == "torch"}
            if not pols:
                continue
            pol = min(pols, key=pols.get)
            base = pols[pol]
            other = " / ".join("%.1f %s" % (v, p) for p, v in sorted(pols.items(), key=lambda kv: kv[1]) if p != pol)
            cells = ["%.1f (%s%s)" % (base, pol, "; " + other if other else "")]
            for lib in [p for p, _ in PEERS] + ["dpfinetune nondp", "dpfinetune bk"]:
                v = best.get((m, lib))
                if v is None:
                    cells.append("–")
                elif isinstance(v, str):
                    cells.append("error: " + v)
                else:
                    st = status.get((m, lib), "")
                    mark = ("†" if st.startswith("wrong") else "") + ("‡" if st.endswith("subset") else "")
                    cells.append("%.1f (%.2f×)%s" % (v, v / base, mark))
            print("| %s (%s) | %s |" % (m, b, " | ".join(cells)))
        print("\n† its clipped gradient differs from the per-sample definition (check table). "
              "‡ trains only the parameters it supports (notes).")
        # Memory: the Python side's peak resident set (whole process) and
        # our live heap after warm-up are different measures: side by side,
        # not as ratios.
        rss, heap = {}, {}
        for r in times:
            m, lib = r["model"], lib_of(r)
            if lib == "dpfinetune":
                for row in r["rows"]:
                    heap[(m, row["mode"])] = max(heap.get((m, row["mode"]), 0), row["heap_bytes"] / 2**20)
            elif "maxrss_mb" in r:
                rss[(m, lib)] = max(rss.get((m, lib), 0), r["maxrss_mb"])
        print("\nMemory: peak resident set of each Python process (MB, interpreter and libtorch included) "
              "and dpfinetune's live Go heap after the warm-up step (MiB, weights and buffers)\n")
        print("| model | PyTorch non-DP | " + " | ".join(n for _, n in PEERS) + " | dpfinetune nondp heap | dpfinetune bk heap |")
        print("|---|---|" + "---|" * len(PEERS) + "---|---|")
        for m in models:
            cells = ["%.0f" % rss[(m, lib)] if (m, lib) in rss else "–" for lib in ["torch"] + [p for p, _ in PEERS]]
            cells += ["%.0f" % heap[(m, mode)] if (m, mode) in heap else "–" for mode in ("nondp", "bk")]
            print("| %s | %s |" % (m, " | ".join(cells)))
    if notes:
        print()
        for n in dict.fromkeys(notes):
            print("- " + n)


if __name__ == "__main__":
    main()
