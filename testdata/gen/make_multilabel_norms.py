#!/usr/bin/python3
"""Golden per-sample gradient norms of the multi-label loss
(testdata/golden/cnn_multilabel.npz) for cmd/dpfinetune's
TestNormsMultiLabel: the fixture CNN's weights read from
testdata/models/cnn.onnx into PyTorch's TramerBonehCNN, six seeded inputs
with multi-hot label sets of its ten logits, and each sample's gradient
norm — total and per parameter — of its own loss,
BCEWithLogitsLoss(logits, targets) (the mean over the labels), by one
backward pass a sample; and the same with each label's positive term
weighed, BCEWithLogitsLoss(pos_weight=POS_WEIGHT)
(testdata/golden/cnn_multilabel_posweight.npz, the weights in its
"pos_weight"); and with labels ignored (-1 in the labels: uncertain=ignore,
U-Ignore), BCEWithLogitsLoss(reduction="none") times the 0/1 mask of the
labels known, summed and divided by all ten (testdata/golden/
cnn_multilabel_ignored.npz: a sample ignoring three labels, one ignoring
every label — no gradient —, the others as before).

    /usr/bin/python3 testdata/gen/make_multilabel_norms.py
"""
import os

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from make_fixtures import TramerBonehCNN, save_npz

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..")
model = TramerBonehCNN()
weights = {i.name: numpy_helper.to_array(i) for i in onnx.load(os.path.join(root, "models", "cnn.onnx")).graph.initializer}
state = model.state_dict()
for k in state:
    state[k] = torch.from_numpy(weights[k].copy())
model.load_state_dict(state)
model.eval()

g = torch.Generator().manual_seed(11)
x = torch.randn(6, 1, 28, 28, generator=g)
y = (torch.rand(6, 10, generator=g) < 0.3).long()
y[0] = 0  # no label applies
POS_WEIGHT = [4.0, 0.5, 1.0, 1.0, 2.0, 1.0, 1.0, 0.0, 3.0, 1.0]


def norms(loss_fn, name, extra, labels=None):
    labels = y if labels is None else labels
    out = {"input": x.numpy().astype(np.float32), "labels": labels.numpy().astype(np.int64)}
    out.update(extra)
    totals = []
    per = {n: [] for n, _ in model.named_parameters()}
    for i in range(len(x)):
        model.zero_grad()
        loss_fn(model(x[i:i + 1]), labels[i:i + 1]).backward()
        sq = 0.0
        for n, p in model.named_parameters():
            v = float(p.grad.double().pow(2).sum())
            per[n].append(np.sqrt(v))
            sq += v
        totals.append(np.sqrt(sq))
    out["norm_total"] = np.array(totals)
    for n, v in per.items():
        out["norm/" + n] = np.array(v)
    save_npz(os.path.join(root, "golden", name), out)
    print("wrote", name, totals)


def plain(loss_fn):
    return lambda z, t: loss_fn(z, t.float())


norms(plain(torch.nn.BCEWithLogitsLoss()), "cnn_multilabel.npz", {})
norms(plain(torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(POS_WEIGHT))), "cnn_multilabel_posweight.npz",
      {"pos_weight": np.array(POS_WEIGHT, dtype=np.float64)})


def ignoring(z, t):
    known = (t >= 0).float()
    terms = torch.nn.functional.binary_cross_entropy_with_logits(z, t.clamp(min=0).float(), reduction="none")
    return (terms * known).sum() / z.shape[1]


yi = y.clone()
yi[1, [0, 4, 9]] = -1  # three labels ignored (one of them may apply: ignored wins the file's -1)
yi[3, 2] = -1
yi[5, :] = -1  # every label ignored: no gradient
norms(ignoring, "cnn_multilabel_ignored.npz", {}, yi)
