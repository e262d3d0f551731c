#!/usr/bin/env python3
"""The multiply-adds of a DP step beside the non-DP step's, from a plan.

Usage: dpfinetune plan --model M.onnx --input-shape 3,224,224 --batch 32 --json | bench/flop_floor.py [ATTN]

Per sample, for each linear layer of the plan (T rows, D inputs, p outputs,
g groups; the paper's Table 3), the non-DP step takes its forward product
T·D·p·g and, in the backward, the input gradient (not for the first layer)
and the weight gradient, as many each. Book-keeping (bk) adds, per layer,
what its per-sample norm costs beyond that:

  - a ghost layer: the two Grams, T²·(D + p)·g; its weighted sum
    Σ_i C_i g_i is the non-DP weight gradient's product;
  - an instantiated layer whose per-sample gradients bk keeps (D ≤ T):
    nothing, its per-sample gradients (T·D·p·g) replace the weight
    gradient and the weighted sum is a product of the kept gradients;
  - any other instantiated layer: its per-sample gradients, T·D·p·g, on
    top of the weighted sum's weight gradient.

ATTN adds multiply-adds per sample that no parameter reads (a ViT's
attention products, taken three times in a step, as the layers'); the
floor is then the ratio bk/non-DP of the whole step's products, the least
time bk can take beside the non-DP step at the same efficiency. It leaves
out every memory-bound pass (normalizations, activations, the norms' sums).
"""
import json
import sys


def main():
    plan = json.load(sys.stdin)
    attn = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    fwd = dx = dw = extra = 0
    for i, l in enumerate(plan["layers"]):
        T, D, p, g = l["T"], l["D"], l["p"], l["groups"]
        macs = T * D * p * g
        fwd += macs
        dw += macs
        if i > 0:
            dx += macs
        if l["decision"] == "ghost":
            extra += T * T * (D + p) * g
        elif D > T:
            extra += macs
    nondp = fwd + dx + dw + 3 * attn
    print("per sample: non-DP step %.2f GMAC (linear layers' forward %.2f), bk adds %.2f GMAC: bk/non-DP >= %.3f"
          % (nondp / 1e9, fwd / 1e9, extra / 1e9, (nondp + extra) / nondp))


if __name__ == "__main__":
    main()
