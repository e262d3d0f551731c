#!/usr/bin/python3
"""Golden evaluation metrics (testdata/metrics/cases.json, multi-label
multilabel.json, of groups of examples grouped.json, and the ROC curves and
operating points of the two-class and multi-label cases curves.json) for
dptrain.TestEvalMetrics, TestEvalMetricsMultiLabel, TestEvalGrouped and
TestEvalCurves:
seeded logits and labels, and what scikit-learn
(balanced_accuracy_score, f1_score, precision_recall_fscore_support,
top_k_accuracy_score, roc_auc_score) and scipy (the Wilson interval) make
of them; the ECE is computed here from its definition (15 equal-width bins
of the top softmax probability).

Run with /usr/bin/python3 (Debian's python3-sklearn, python3-scipy):
    /usr/bin/python3 testdata/gen/make_metrics.py
"""
import json
import os

import numpy as np
from scipy.special import softmax
from scipy.stats import binomtest, norm
from sklearn.calibration import calibration_curve
from sklearn.metrics import (accuracy_score, average_precision_score, balanced_accuracy_score, f1_score, hamming_loss,
                             label_ranking_average_precision_score, roc_curve,
                             precision_recall_fscore_support, roc_auc_score, top_k_accuracy_score)


def delong_ci(y, score):
    """The 95 % interval of the AUC of score for the positives y by DeLong
    et al. (1988), brute force over every (positive, negative) pair: each
    positive's share of the negatives it beats (ties ½), each negative's
    share of the positives beating it, the variance from their sample
    variances; the AUC ± 1.96 standard errors, clipped to [0, 1]. None
    with fewer than two positives or negatives."""
    y, score = np.asarray(y), np.asarray(score, dtype=np.float64)
    xs, ys = score[y == 1], score[y == 0]
    m, n = len(xs), len(ys)
    if m < 2 or n < 2:
        return None
    psi = (xs[:, None] > ys[None, :]) + 0.5 * (xs[:, None] == ys[None, :])
    a = psi.mean()
    se = np.sqrt(psi.mean(axis=1).var(ddof=1) / m + psi.mean(axis=0).var(ddof=1) / n)
    z = norm.ppf(0.975)
    return [max(0.0, a - z * se), min(1.0, a + z * se)]


def delong_shares(y, score):
    """Each example's share of the AUC's deviation by DeLong's method,
    brute force over the pairs: a positive's share of the negatives it
    beats (ties ½) less the AUC, over sqrt(m(m-1)); a negative's share of
    the positives beating it less the AUC, over sqrt(n(n-1)) — their
    squares summing to delong_ci's variance. None with fewer than two
    positives or negatives."""
    y, score = np.asarray(y), np.asarray(score, dtype=np.float64)
    xs, ys = score[y == 1], score[y == 0]
    m, n = len(xs), len(ys)
    if m < 2 or n < 2:
        return None
    psi = (xs[:, None] > ys[None, :]) + 0.5 * (xs[:, None] == ys[None, :])
    a = psi.mean()
    share = np.zeros(len(y))
    share[y == 1] = (psi.mean(axis=1) - a) / np.sqrt(m * (m - 1))
    share[y == 0] = (psi.mean(axis=0) - a) / np.sqrt(n * (n - 1))
    return share


def mean_auc_ci(parts, n, seed):
    """The 95 % interval of the mean of AUCs on the same n examples, parts
    (y, score, rows) each AUC's positives and scores over the examples
    rows: the variance of the mean from every AUC's DeLong shares summed
    example by example, sum_i (sum_j share_j(i))^2 / L^2 — each AUC's
    DeLong variance and every two's covariance. None where an AUC has
    fewer than two positives or negatives. The standard error is checked
    against a bootstrap's of the examples (within 20 %)."""
    total = np.zeros(n)
    aucs = []
    for y, score, rows in parts:
        sh = delong_shares(y, score)
        if sh is None:
            return None
        total[rows] += sh
        aucs.append(roc_auc_score(y, np.asarray(score, dtype=np.float64)))
    a, se = float(np.mean(aucs)), float(np.sqrt((total ** 2).sum()) / len(parts))
    rng, boot = np.random.default_rng(seed), []
    where = [np.zeros(n, dtype=bool) for _ in parts]
    full = []
    for (y, score, rows), w in zip(parts, where):
        yy, ss = np.full(n, -1), np.zeros(n)
        yy[rows], ss[rows] = y, score
        full.append((yy, ss))
    while len(boot) < 1000:
        pick = rng.integers(0, n, n)
        vals = []
        for yy, ss in full:
            yb, sb = yy[pick], ss[pick]
            keep = yb >= 0
            if len(set(yb[keep].tolist())) < 2:
                break
            vals.append(roc_auc_score(yb[keep], sb[keep]))
        if len(vals) == len(full):
            boot.append(np.mean(vals))
    ratio = np.std(boot, ddof=1) / se
    print(f"  mean of {len(parts)} AUCs on {n} examples: standard error {se:.4f} (DeLong's shares), {se * ratio:.4f} (bootstrap)")
    assert 0.8 < ratio < 1.2, ("bootstrap against DeLong standard error", ratio)
    z = norm.ppf(0.975)
    return [max(0.0, a - z * se), min(1.0, a + z * se)]


def case(name, n, k, seed, absent=None, never=None, ties=False, threshold=None):
    """A classifier's logits and labels; decided by the largest logit, or
    for two classes with threshold where class 1's probability exceeds it
    (z1 - z0 above log(t/(1-t))). The calibration error is the most
    probable class's either way."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    if absent is not None:  # a class the data does not have
        labels[labels == absent] = (absent + 1) % k
    logits = rng.normal(0, 1, (n, k)).astype(np.float32)
    logits[np.arange(n), labels] += 1.2  # a model better than chance
    if never is not None:  # a class the model never predicts
        logits[:, never] = -50
    if ties:  # rows drawn from 6 prototypes: probabilities tied exactly across examples
        protos = rng.normal(0, 1, (6, k)).astype(np.float32)
        logits = protos[rng.integers(0, 6, n)]
    pred = logits.argmax(1)
    top = pred
    if threshold is not None:
        z = logits.astype(np.float64)
        pred = (z[:, 1] - z[:, 0] > np.log(threshold / (1 - threshold))).astype(int)
    prob = softmax(logits.astype(np.float64), axis=1)
    out = {"name": name, "k": k, "labels": labels.tolist(), "logits": logits.tolist()}
    if threshold is not None:
        out["threshold"] = threshold
    out["accuracy"] = float((pred == labels).mean())
    ci = binomtest(int((pred == labels).sum()), n).proportion_ci(confidence_level=0.95, method="wilson")
    out["accuracy_ci95"] = [ci.low, ci.high]
    out["balanced_accuracy"] = balanced_accuracy_score(labels, pred)
    out["macro_f1"] = f1_score(labels, pred, average="macro", zero_division=0)
    p, r, f, s = precision_recall_fscore_support(labels, pred, labels=list(range(k)), zero_division=0)
    out["per_class"] = [{"precision": float(p[c]), "recall": float(r[c]), "f1": float(f[c]), "support": int(s[c])} for c in range(k)]
    if k > 2:  # each class's probability against the rest's, where the class has examples and is not all
        for c in range(k):
            y = (labels == c).astype(int)
            if 0 < y.sum() < n:
                out["per_class"][c]["auc"] = roc_auc_score(y, prob[:, c])
                ci = delong_ci(y, prob[:, c].astype(np.float32))
                if ci is not None:
                    out["per_class"][c]["auc_ci95"] = ci
    if k > 5:
        out["top5_accuracy"] = top_k_accuracy_score(labels, logits, k=5, labels=list(range(k)))
    if k == 2:
        out["auc"] = roc_auc_score(labels, prob[:, 1])
        out["auc_ci95"] = delong_ci(labels, prob[:, 1].astype(np.float32))
    elif len(set(labels.tolist())) == k:
        out["auc"] = roc_auc_score(labels, prob, multi_class="ovr", average="macro", labels=list(range(k)))
        ci = mean_auc_ci([((labels == c).astype(int), prob[:, c].astype(np.float32), np.arange(n)) for c in range(k)], n, seed)
        if ci is not None:
            out["auc_ci95"] = ci
    conf = prob.max(1)
    bins = np.minimum((conf * 15).astype(int), 14)
    ece = 0.0
    for b in range(15):
        m = bins == b
        if m.any():
            ece += abs((top[m] == labels[m]).sum() - conf[m].sum()) / n
    out["ece"] = ece
    return out


cases = [
    case("binary", 200, 2, 1),
    case("three classes", 150, 3, 2),
    case("twelve classes", 300, 12, 3),
    case("a class never predicted", 120, 4, 4, never=2),
    case("a class without examples", 120, 4, 5, absent=3),
    case("ties", 160, 3, 6, ties=True),
    case("a class neither in the data nor predicted", 120, 5, 7, absent=4, never=4),
    case("binary at a threshold of 0.3", 200, 2, 1, threshold=0.3),
    case("binary at a threshold of 0.85", 200, 2, 1, threshold=0.85),
]
path = os.path.join(os.path.dirname(__file__), "..", "metrics", "cases.json")
with open(path, "w") as f:
    json.dump(cases, f, indent=None, separators=(",", ":"))
    f.write("\n")
print("wrote", path)


def label_calibration(yj, qj):
    """A label's calibration error and reliability bins: 15 bins of equal
    width of its probability qj ([b/15, (b+1)/15), 1 in the last), each
    bin's examples, share of positives and mean probability, and the sum
    of the bins' shares of the examples times |share of positives − mean
    probability|. Held to scikit-learn's calibration_curve, whose bins are
    these but for probabilities on an edge (none here)."""
    bins = np.minimum((qj * 15).astype(int), 14)
    rel, ece = [], 0.0
    for b in range(15):
        m = bins == b
        r = {"lo": b / 15, "hi": (b + 1) / 15, "examples": int(m.sum()), "accuracy": 0.0, "confidence": 0.0}
        if m.any():
            r["accuracy"], r["confidence"] = float(yj[m].mean()), float(qj[m].mean())
            ece += abs(float(yj[m].sum()) - float(qj[m].sum())) / len(yj)
        rel.append(r)
    prob_true, prob_pred = calibration_curve(yj, qj, n_bins=15)
    full = [r for r in rel if r["examples"]]
    assert np.allclose(prob_true, [r["accuracy"] for r in full], atol=1e-12) and \
        np.allclose(prob_pred, [r["confidence"] for r in full], atol=1e-12), "a probability on a bin's edge"
    return float(ece), rel


def label_figures(y, pred, score, known, prob):
    """Each label's figures over the examples that know it: precision,
    recall, F1, support, its calibration error and reliability bins of its
    probability prob, and where it has positives and negatives its AUC and
    DeLong interval, where it has positives its average precision; and the
    lists the means take (AUCs, APs, F1s, balanced accuracies, the AUCs'
    (positives, scores, rows) for mean_auc_ci, the calibration errors)."""
    per, aucs, aps, f1s, bals, parts, eces = [], [], [], [], [], [], []
    for j in range(y.shape[1]):
        if not known[:, j].any():
            per.append({"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0})
            continue
        yj, pj, sj = y[known[:, j], j], pred[known[:, j], j], score[known[:, j], j]
        p, r, f, s = precision_recall_fscore_support(yj, pj, average="binary", zero_division=0)
        c = {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(yj.sum())}
        c["ece"], c["reliability"] = label_calibration(yj, prob[known[:, j], j])
        eces.append(c["ece"])
        f1s.append(c["f1"])
        if 0 < yj.sum() < len(yj):
            c["auc"] = roc_auc_score(yj, sj)
            aucs.append(c["auc"])
            parts.append((yj, sj, np.flatnonzero(known[:, j])))
            ci = delong_ci(yj, sj)
            if ci is not None:
                c["auc_ci95"] = ci
        if yj.sum() > 0:
            c["ap"] = average_precision_score(yj, sj)
            aps.append(c["ap"])
        bals.append(balanced_accuracy_score(yj, pj))
        per.append(c)
    return per, aucs, aps, f1s, bals, parts, eces


def multilabel_case(name, n, k, seed, constant=None, thresholds=None, ties=False, ignore=0.0):
    """A multi-label model's logits and label sets (bit j: label j); a
    label decided where its logit is above 0, or with thresholds where its
    sigmoid is above its threshold t (the logit above log(t/(1-t)));
    with ties, logits rounded to halves, many equal. With ignore, that
    share of the labels is ignored ("ignored": bit j of a sample's where
    it ignores label j; uncertain=ignore): every figure is then
    scikit-learn's over the labels known — a label's over the samples
    that know it, the accuracy and exact match over the known decisions,
    the ranking precision of each sample over its known labels (1 where
    it knows none), the macro F1 and balanced accuracy the means over
    the labels some sample knows —, and the loss's sum leaves them out
    (still divided by k)."""
    rng = np.random.default_rng(seed)
    y = (rng.random((n, k)) < 0.3).astype(int)
    if constant is not None:  # a label no sample has: no AUC of its own
        y[:, constant] = 0
    known = np.ones((n, k), dtype=bool)
    if ignore:
        known = rng.random((n, k)) >= ignore
        known[2, :] = False  # a sample that knows no label
        known[:, k - 1] &= y[:, k - 1] == 1  # a label known only where it applies: no AUC
        known[:, k - 2] = False  # a label known nowhere: out of the means
        y = y * known  # an ignored label is not also set
    logits = (rng.normal(0, 1.5, (n, k)) + 2.0 * (y - 0.5)).astype(np.float32)
    if ties:
        logits = (np.round(logits * 2) / 2).astype(np.float32)
    logits[0, 0] = 40  # saturated sigmoids, which the AUC ranks by the logits
    logits[1, 0] = 39
    if thresholds is None:
        pred = (logits > 0).astype(int)
    else:
        t = np.array(thresholds, dtype=np.float64)
        pred = (logits.astype(np.float64) > np.log(t / (1 - t))).astype(int)
    bits = lambda m: [int(sum(int(b) << j for j, b in enumerate(row))) for row in m]
    out = {"name": name, "k": k, "labels": bits(y), "logits": logits.tolist()}
    if ignore:
        out["ignored"] = bits(~known)
    if thresholds is not None:
        out["thresholds"] = list(thresholds)
    if ignore:
        out["accuracy"] = float(np.mean((y == pred)[known]))
        out["exact_match"] = float(np.mean([np.array_equal(y[i][known[i]], pred[i][known[i]]) for i in range(n)]))
    else:
        out["accuracy"] = 1 - hamming_loss(y, pred)
        out["exact_match"] = accuracy_score(y, pred)
    z64 = logits.astype(np.float64)
    per, aucs, aps, f1s, bals, parts, eces = label_figures(y, pred, z64, known, 1 / (1 + np.exp(-z64)))
    out["label_ece"] = float(np.mean(eces))
    ci = mean_auc_ci(parts, n, seed) if parts else None
    if ci is not None:
        out["auc_ci95"] = ci
    out["macro_f1"] = float(np.mean(f1s))
    if not ignore:  # the per-label F1s' mean is scikit-learn's macro F1
        assert abs(out["macro_f1"] - f1_score(y, pred, average="macro", zero_division=0)) < 1e-12
    out["per_class"] = per
    if aucs:
        out["auc"] = float(np.mean(aucs))
    if aps:
        out["map"] = float(np.mean(aps))
    out["balanced_accuracy"] = float(np.mean(bals))
    z = logits.astype(np.float64)
    if ignore:
        out["lrap"] = float(np.mean([label_ranking_average_precision_score(y[i:i + 1, known[i]], z[i:i + 1, known[i]])
                                     if known[i].any() else 1.0 for i in range(n)]))
    else:
        out["lrap"] = float(label_ranking_average_precision_score(y, z))
    out["loss"] = float(np.mean(np.sum((np.logaddexp(0, z) - z * y) * known, axis=1) / k))
    return out


mcases = [multilabel_case("five labels", 200, 5, 11), multilabel_case("a label no sample has", 150, 4, 12, constant=2),
          multilabel_case("five labels at thresholds of their own", 200, 5, 11, thresholds=[0.3, 0.5, 0.7, 0.15, 0.9]),
          multilabel_case("tied scores", 120, 3, 13, ties=True),
          multilabel_case("ignored labels", 200, 5, 14, ignore=0.25)]
path = os.path.join(os.path.dirname(__file__), "..", "metrics", "multilabel.json")
with open(path, "w") as f:
    json.dump(mcases, f, indent=None, separators=(",", ":"))
    f.write("\n")
print("wrote", path)


def grouped_case(name, groups, k, seed, combine, threshold=None, multilabel=False, ignore=0.0):
    """Examples in groups of one to four (a study's views), each group one
    label (multi-label: one label set ignoring the same labels), the
    examples of the groups interleaved; every figure is scikit-learn's of
    the groups, each scored by its examples' probabilities combined —
    "mean" their mean, "max" each class's or label's largest (a
    single-label model's then divided by their sum) — and the loss that
    of the combined probabilities. For dptrain.TestEvalGrouped
    (testdata/metrics/grouped.json)."""
    rng = np.random.default_rng(seed)
    size = rng.integers(1, 5, groups)
    of = rng.permutation(np.repeat(np.arange(groups), size))
    n = len(of)
    out = {"name": name, "k": k, "combine": combine, "groups": of.tolist(), "samples": groups}
    if not multilabel:
        glabel = rng.integers(0, k, groups)
        labels = glabel[of]
        logits = rng.normal(0, 1.5, (n, k)).astype(np.float32)
        logits[np.arange(n), labels] += 1.0
        prob = softmax(logits.astype(np.float64), axis=1)
        gp = np.zeros((groups, k))
        for g in range(groups):
            m = prob[of == g]
            gp[g] = m.mean(0) if combine == "mean" else m.max(0) / m.max(0).sum()
        out.update({"labels": labels.tolist(), "logits": logits.tolist()})
        pred = top = gp.argmax(1)
        if threshold is not None:
            out["threshold"] = threshold
            pred = (gp[:, 1] > threshold).astype(int)
        y = glabel
        out["accuracy"] = float((pred == y).mean())
        ci = binomtest(int((pred == y).sum()), groups).proportion_ci(confidence_level=0.95, method="wilson")
        out["accuracy_ci95"] = [ci.low, ci.high]
        out["balanced_accuracy"] = balanced_accuracy_score(y, pred)
        out["macro_f1"] = f1_score(y, pred, average="macro", zero_division=0)
        p, r, f, s = precision_recall_fscore_support(y, pred, labels=list(range(k)), zero_division=0)
        out["per_class"] = [{"precision": float(p[c]), "recall": float(r[c]), "f1": float(f[c]), "support": int(s[c])} for c in range(k)]
        if k > 2:
            for c in range(k):
                yc = (y == c).astype(int)
                if 0 < yc.sum() < groups:
                    out["per_class"][c]["auc"] = roc_auc_score(yc, gp[:, c])
                    ci = delong_ci(yc, gp[:, c].astype(np.float32))
                    if ci is not None:
                        out["per_class"][c]["auc_ci95"] = ci
            if len(set(y.tolist())) == k:
                out["auc"] = roc_auc_score(y, gp, multi_class="ovr", average="macro", labels=list(range(k)))
                ci = mean_auc_ci([((y == c).astype(int), gp[:, c].astype(np.float32), np.arange(groups)) for c in range(k)], groups, seed)
                if ci is not None:
                    out["auc_ci95"] = ci
        else:
            out["auc"] = roc_auc_score(y, gp[:, 1])
            out["auc_ci95"] = delong_ci(y, gp[:, 1].astype(np.float32))
        if k > 5:
            out["top5_accuracy"] = top_k_accuracy_score(y, gp, k=5, labels=list(range(k)))
        conf = gp.max(1)
        bins = np.minimum((conf * 15).astype(int), 14)
        out["ece"] = float(sum(abs((top[bins == b] == y[bins == b]).sum() - conf[bins == b].sum()) / groups
                               for b in range(15) if (bins == b).any()))
        out["loss"] = float(np.mean(-np.log(gp[np.arange(groups), y])))
        return out
    gy = (rng.random((groups, k)) < 0.35).astype(int)
    known = np.ones((groups, k), dtype=bool)
    if ignore:
        known = rng.random((groups, k)) >= ignore
        known[:, k - 1] = False  # a label known nowhere: out of the means
        gy = gy * known
    y, kn = gy[of], known[of]
    logits = (rng.normal(0, 1.5, (n, k)) + 1.5 * (y - 0.5)).astype(np.float32)
    sig = 1 / (1 + np.exp(-logits.astype(np.float64)))
    gp = np.zeros((groups, k))
    for g in range(groups):
        m = sig[of == g]
        gp[g] = m.mean(0) if combine == "mean" else m.max(0)
    bits = lambda m: [int(sum(int(b) << j for j, b in enumerate(row))) for row in m]
    out.update({"labels": bits(y), "ignored": bits(~kn), "logits": logits.tolist()})
    pred = (gp > 0.5).astype(int)
    out["accuracy"] = float(np.mean((gy == pred)[known]))
    out["exact_match"] = float(np.mean([np.array_equal(gy[g][known[g]], pred[g][known[g]]) for g in range(groups)]))
    per, aucs, aps, f1s, bals, parts, eces = label_figures(gy, pred, gp, known, gp)
    out["label_ece"] = float(np.mean(eces))
    ci = mean_auc_ci(parts, groups, seed)
    if ci is not None:
        out["auc_ci95"] = ci
    out["per_class"] = per
    out["macro_f1"] = float(np.mean(f1s))
    out["balanced_accuracy"] = float(np.mean(bals))
    out["auc"] = float(np.mean(aucs))
    out["map"] = float(np.mean(aps))
    bce = -(gy * np.log(gp) + (1 - gy) * np.log1p(-gp))
    out["loss"] = float(np.mean(np.sum(bce * known, axis=1) / k))
    return out


gcases = [grouped_case("three classes, mean", 70, 3, 21, "mean"), grouped_case("three classes, max", 70, 3, 21, "max"),
          grouped_case("twelve classes, mean", 120, 12, 22, "mean"), grouped_case("twelve classes, max", 120, 12, 22, "max"),
          grouped_case("binary, mean", 90, 2, 23, "mean"), grouped_case("binary, max at a threshold of 0.3", 90, 2, 23, "max", threshold=0.3),
          grouped_case("five labels, mean", 80, 5, 24, "mean", multilabel=True),
          grouped_case("five labels, max", 80, 5, 24, "max", multilabel=True),
          grouped_case("ignored labels, mean", 80, 5, 25, "mean", multilabel=True, ignore=0.25),
          grouped_case("ignored labels, max", 80, 5, 25, "max", multilabel=True, ignore=0.25)]
path = os.path.join(os.path.dirname(__file__), "..", "metrics", "grouped.json")
with open(path, "w") as f:
    json.dump(gcases, f, indent=None, separators=(",", ":"))
    f.write("\n")
print("wrote", path)


def curve(y, score):
    """scikit-learn's ROC curve of score for the positives y, every
    distinct score a point (drop_intermediate=False), as counts, and the
    points three rules choose: the first (highest threshold) whose
    sensitivity reaches 0.9, the last whose specificity stays at 0.8 or
    more, the first of the largest Youden index (argmax of tpr - fpr)."""
    y = np.asarray(y)
    fpr, tpr, _ = roc_curve(y, np.asarray(score, dtype=np.float64), drop_intermediate=False)
    p, n = int(y.sum()), int(len(y) - y.sum())
    tp, fp = np.rint(tpr * p).astype(int), np.rint(fpr * n).astype(int)
    pts = [[int(a), int(b), n - int(b), p - int(a)] for a, b in zip(tp, fp)]
    chosen = {"sensitivity=0.9": pts[int(np.argmax(tpr >= 0.9))],
              "specificity=0.8": pts[int(np.flatnonzero(1 - fpr >= 0.8)[-1])], "youden": pts[int(np.argmax(tpr - fpr))]}

    def wilson(k, m):
        if m == 0:
            return None
        ci = binomtest(k, m).proportion_ci(confidence_level=0.95, method="wilson")
        return [ci.low, ci.high]
    out = {"points": pts}
    for rule, (a, b, c, d) in chosen.items():
        out[rule] = [a, b, c, d]
        # The 95 % Wilson intervals of the sensitivity, specificity, PPV
        # and NPV there.
        out[rule + " ci"] = [wilson(a, a + d), wilson(c, c + b), wilson(a, a + b), wilson(c, c + d)]
    return out


curves = []
for c in cases:
    if c["k"] == 2:
        z = np.array(c["logits"], dtype=np.float32).astype(np.float64)
        curves.append({"file": "cases.json", "name": c["name"], "labels": {"1": curve(np.array(c["labels"]) == 1, z[:, 1] - z[:, 0])}})
for c in mcases:
    z = np.array(c["logits"], dtype=np.float32).astype(np.float64)
    y = np.array([[(v >> j) & 1 for j in range(c["k"])] for v in c["labels"]])
    ign = np.array([[(v >> j) & 1 for j in range(c["k"])] for v in c.get("ignored", [0] * len(c["labels"]))], dtype=bool)
    labels = {}
    for j in range(c["k"]):
        yj = y[~ign[:, j], j]
        if 0 < yj.sum() < len(yj):
            labels[str(j)] = curve(yj, z[~ign[:, j], j])
    curves.append({"file": "multilabel.json", "name": c["name"], "labels": labels})
path = os.path.join(os.path.dirname(__file__), "..", "metrics", "curves.json")
with open(path, "w") as f:
    json.dump(curves, f, indent=None, separators=(",", ":"))
    f.write("\n")
print("wrote", path)


def temperature(z, nll):
    """The temperature minimizing nll(z / T), by scipy's bounded scalar
    search over log T (tolerance far below the 1e-6 the test holds)."""
    from scipy.optimize import minimize_scalar
    r = minimize_scalar(lambda lt: nll(z / np.exp(lt)), bounds=(-6, 6), method="bounded", options={"xatol": 1e-12})
    return float(np.exp(r.x))


def ece_of(z, y):
    prob = softmax(z, axis=1)
    conf, top = prob.max(1), prob.argmax(1)
    bins = np.minimum((conf * 15).astype(int), 14)
    return float(sum(abs((top[bins == b] == y[bins == b]).sum() - conf[bins == b].sum()) / len(y) for b in range(15) if (bins == b).any()))


def label_ece(z, y, known):
    """The mean over the labels some example knows of each label's
    calibration error (label_calibration) of the sigmoids of logits z."""
    q = 1 / (1 + np.exp(-z))
    return float(np.mean([label_calibration(y[known[:, j], j], q[known[:, j], j])[0] for j in range(y.shape[1]) if known[:, j].any()]))


temps = []
for c in cases:
    z, y = np.array(c["logits"], dtype=np.float32).astype(np.float64), np.array(c["labels"])
    nll = lambda s: float(np.mean(np.log(np.exp(s - s.max(1, keepdims=True)).sum(1)) + s.max(1) - s[np.arange(len(y)), y]))
    t = temperature(z, nll)
    temps.append({"file": "cases.json", "name": c["name"], "temperature": t, "loss_before": nll(z), "loss_after": nll(z / t),
                  "ece_before": ece_of(z, y), "ece_after": ece_of(z / t, y)})
for c in mcases:
    z = np.array(c["logits"], dtype=np.float32).astype(np.float64)
    k = c["k"]
    y = np.array([[(v >> j) & 1 for j in range(k)] for v in c["labels"]])
    known = ~np.array([[(v >> j) & 1 for j in range(k)] for v in c.get("ignored", [0] * len(c["labels"]))], dtype=bool)
    bce = lambda s: float(np.mean(np.sum((np.logaddexp(0, s) - s * y) * known, axis=1) / k))
    t = temperature(z, bce)
    temps.append({"file": "multilabel.json", "name": c["name"], "temperature": t, "loss_before": bce(z), "loss_after": bce(z / t),
                  "label_ece_before": label_ece(z, y, known), "label_ece_after": label_ece(z / t, y, known)})
path = os.path.join(os.path.dirname(__file__), "..", "metrics", "temperature.json")
with open(path, "w") as f:
    json.dump(temps, f, indent=1)
    f.write("\n")
print("wrote", path)


def platt(z, y):
    """Platt's logistic regression of y on z against his targets
    ((N+ + 1)/(N+ + 2) for a positive, 1/(N- + 2) for a negative), by
    scipy's BFGS to a tight gradient: the map a*z + b (scikit-learn's
    _sigmoid_calibration's A, B with the signs turned), checked against
    scikit-learn's own fit (to 1e-3)."""
    from scipy.optimize import minimize
    from sklearn.calibration import _sigmoid_calibration
    n1 = int(y.sum())
    n0 = len(y) - n1
    t = np.where(y > 0, (n1 + 1) / (n1 + 2), 1 / (n0 + 2))

    def f(ab):
        u = ab[0] * z + ab[1]
        p = 1 / (1 + np.exp(-u))
        return float(np.sum(np.logaddexp(0, u) - t * u)), np.array([np.sum((p - t) * z), np.sum(p - t)])
    r = minimize(f, np.array([1.0, 0.0]), jac=True, method="BFGS", options={"gtol": 1e-11, "maxiter": 10000})
    A, B = _sigmoid_calibration(z, y)
    assert abs(-A - r.x[0]) < 1e-3 * (1 + abs(A)) and abs(-B - r.x[1]) < 1e-3 * (1 + abs(B)), (r.x, A, B)
    return float(r.x[0]), float(r.x[1])


plats = []
for c in mcases:
    z = np.array(c["logits"], dtype=np.float32).astype(np.float64)
    k = c["k"]
    y = np.array([[(v >> j) & 1 for j in range(k)] for v in c["labels"]])
    known = ~np.array([[(v >> j) & 1 for j in range(k)] for v in c.get("ignored", [0] * len(c["labels"]))], dtype=bool)
    labels, a, b = [], np.ones(k), np.zeros(k)
    for j in range(k):
        yj, zj = y[known[:, j], j], z[known[:, j], j]
        if 0 < yj.sum() < len(yj):
            a[j], b[j] = platt(zj, yj)
            labels.append({"label": j, "scale": a[j], "shift": b[j]})
        else:
            labels.append({"label": j, "left": True})
    bce = lambda s: float(np.mean(np.sum((np.logaddexp(0, s) - s * y) * known, axis=1) / k))
    plats.append({"name": c["name"], "labels": labels, "loss_before": bce(z), "loss_after": bce(z * a + b),
                  "label_ece_before": label_ece(z, y, known), "label_ece_after": label_ece(z * a + b, y, known)})
path = os.path.join(os.path.dirname(__file__), "..", "metrics", "platt.json")
with open(path, "w") as f:
    json.dump(plats, f, indent=1)
    f.write("\n")
print("wrote", path)


def paired_delong(y, sa, sb):
    """DeLong's paired test of two AUCs on the same examples, by the
    classical formula: the covariance matrices of the two models'
    structural components over the positives and over the negatives
    (ddof 1), var(A - B) = (S10_AA + S10_BB - 2 S10_AB)/m + (S01_AA +
    S01_BB - 2 S01_AB)/n; the 95 % interval of the difference and the
    two-sided p-value of z."""
    y = np.asarray(y)
    comps = []
    for s in (np.asarray(sa, dtype=np.float64), np.asarray(sb, dtype=np.float64)):
        xs, ys = s[y == 1], s[y == 0]
        psi = (xs[:, None] > ys[None, :]) + 0.5 * (xs[:, None] == ys[None, :])
        comps.append((psi.mean(), psi.mean(axis=1), psi.mean(axis=0)))
    m, n = int(y.sum()), int(len(y) - y.sum())
    s10 = np.cov(np.vstack([comps[0][1], comps[1][1]]), ddof=1)
    s01 = np.cov(np.vstack([comps[0][2], comps[1][2]]), ddof=1)
    var = (s10[0, 0] + s10[1, 1] - 2 * s10[0, 1]) / m + (s01[0, 0] + s01[1, 1] - 2 * s01[0, 1]) / n
    d, se = comps[0][0] - comps[1][0], np.sqrt(var)
    z = norm.ppf(0.975)
    return {"auc_a": comps[0][0], "auc_b": comps[1][0], "difference": d, "difference_ci95": [max(-1, d - z * se), min(1, d + z * se)],
            "p": float(2 * norm.sf(abs(d / se)))}


def mean_paired(parts, n):
    """The test of two models' mean AUCs over labels: each example's DeLong
    shares of A less B's summed over the labels (delong_shares), the
    variance their squares' sum over L^2."""
    total = np.zeros(n)
    aa, bb = [], []
    for y, sa, sb, rows in parts:
        total[rows] += delong_shares(y, sa) - delong_shares(y, sb)
        aa.append(roc_auc_score(y, sa))
        bb.append(roc_auc_score(y, sb))
    d, se = np.mean(aa) - np.mean(bb), np.sqrt((total ** 2).sum()) / len(parts)
    z = norm.ppf(0.975)
    return {"auc_a": float(np.mean(aa)), "auc_b": float(np.mean(bb)), "difference": float(d),
            "difference_ci95": [max(-1, d - z * se), min(1, d + z * se)], "p": float(2 * norm.sf(abs(d / se)))}


comps = []
rng = np.random.default_rng(31)
for c in cases:
    if c["k"] != 2 or c["name"] != "binary":
        continue
    za = np.array(c["logits"], dtype=np.float32)
    zb = (za + rng.normal(0, 1.0, za.shape)).astype(np.float32)
    y = np.array(c["labels"])
    da, db = za.astype(np.float64), zb.astype(np.float64)
    sa, sb = da[:, 1] - da[:, 0], db[:, 1] - db[:, 0]
    ra, rb = (da.argmax(1) == y), (db.argmax(1) == y)
    a_only, b_only = int((ra & ~rb).sum()), int((rb & ~ra).sum())
    comps.append({"file": "cases.json", "name": c["name"], "b_logits": zb.tolist(), "labels_compared": {"1": paired_delong(y, sa, sb)},
                  "accuracy": {"accuracy_a": float(ra.mean()), "accuracy_b": float(rb.mean()), "a_only": a_only, "b_only": b_only,
                               "p": float(binomtest(min(a_only, b_only), a_only + b_only, 0.5).pvalue) if a_only + b_only else 1.0}})
for c in mcases:
    if c["name"] not in ("five labels", "ignored labels"):
        continue
    k = c["k"]
    za = np.array(c["logits"], dtype=np.float32)
    zb = (za + rng.normal(0, 1.5, za.shape)).astype(np.float32)
    y = np.array([[(v >> j) & 1 for j in range(k)] for v in c["labels"]])
    known = ~np.array([[(v >> j) & 1 for j in range(k)] for v in c.get("ignored", [0] * len(c["labels"]))], dtype=bool)
    per, parts = {}, []
    for j in range(k):
        yj = y[known[:, j], j]
        if yj.sum() >= 2 and len(yj) - yj.sum() >= 2:
            sa, sb = za[known[:, j], j].astype(np.float64), zb[known[:, j], j].astype(np.float64)
            per[str(j)] = paired_delong(yj, sa, sb)
            parts.append((yj, sa, sb, np.flatnonzero(known[:, j])))
    comps.append({"file": "multilabel.json", "name": c["name"], "b_logits": zb.tolist(), "labels_compared": per, "mean": mean_paired(parts, len(y))})
path = os.path.join(os.path.dirname(__file__), "..", "metrics", "compare.json")
with open(path, "w") as f:
    json.dump(comps, f, indent=None, separators=(",", ":"))
    f.write("\n")
print("wrote", path)
