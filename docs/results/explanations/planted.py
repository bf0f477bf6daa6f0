"""Which part should explain an alert? Planted one-feature anomalies, explained by the network and by the k-NN part.

    python3 docs/results/explanations/planted.py OUT.txt [SEEDS]      # SEEDS: a comma list, default 0,1,2

Alerts explain the default's score by the network's part (``KDSM.explain``: a feature's share of ``||f(x)||^2``,
expected value x + sigma * f(x) by Tweedie's formula), whichever part led. The k-NN part could explain instead: a
feature's share of the squared distance to the mean of the row's k nearest reference rows, expected value that mean.
This measures both where the answer is known. Normal rows (the bundled cardio's rows labelled normal, 21 features;
10-dimensional correlated Gaussian rows) are split in halves; one feature of 5% of the training half and of 10% of the
scoring half is moved by 4-8 standard deviations, up or down: the feature's own (``marginal``), or the residual one
left when the other features predict it linearly (``conditional``: a value that may be ordinary alone and breaks the
features' relation). The default (``KDSM()``, the ``fast`` profile) trains on the contaminated half and explains the
planted rows of the other. Per run: how often each explanation's first feature (top 1) and first three (top 3) hold
the planted one, over all planted rows and by the part that led the row's score; and the median distance, in the
feature's standard deviations, from each expected value to the value before planting.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from offline_train.config import OptimConfig
from offline_train.detector import KDSM

PARTS = ("network", "isolation", "knn")
CARDIO = Path(__file__).resolve().parents[3] / "offline_train" / "bundled" / "cardio.parquet"


def residual_sd(X: np.ndarray) -> np.ndarray:
    """Each feature's standard deviation left when the others predict it by least squares."""
    out = []
    for j in range(X.shape[1]):
        A = np.c_[np.delete(X, j, axis=1), np.ones(len(X))]
        coef = np.linalg.lstsq(A, X[:, j], rcond=None)[0]
        out.append((X[:, j] - A @ coef).std())
    return np.asarray(out) + 1e-9


def plant(X: np.ndarray, share: float, sd: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Copies of a ``share`` of rows with one feature moved by 4-8 ``sd``: (rows, feature moved, value before)."""
    n = int(len(X) * share)
    A = X[rng.choice(len(X), n, replace=False)].copy()
    feat = rng.integers(0, X.shape[1], n)
    before = A[np.arange(n), feat].copy()
    A[np.arange(n), feat] += rng.uniform(4, 8, n) * rng.choice([-1, 1], n) * sd[feat]
    return A, feat, before


def knn_explanation(det: KDSM, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: features by share of the squared distance to the mean of its k nearest reference rows (most first),
    and that mean in original units."""
    Z = det.standardise(X)
    R = det.neighbours_.reference.numpy().astype(np.float64)
    d2 = ((Z[:, None, :] - R[None]) ** 2).sum(-1)
    mean = R[np.argsort(d2, axis=1)[:, :det.neighbours_.k]].mean(axis=1)
    return np.argsort(-(Z - mean) ** 2, axis=1, kind="stable"), det.scaler_.inverse_transform(mean)


def run(name: str, normal: np.ndarray, kind: str, seed: int) -> str:
    rng = np.random.default_rng(seed)
    normal = normal[rng.permutation(len(normal))]
    train, score = normal[: len(normal) // 2], normal[len(normal) // 2:]
    sd = normal.std(axis=0) + 1e-9
    move = residual_sd(normal) if kind == "conditional" else sd
    planted_train = plant(train, 0.05, move, rng)[0]
    A, feat, before = plant(score, 0.10, move, rng)
    t = time.perf_counter()
    det = KDSM(train=OptimConfig(profile="fast", seed=seed)).fit(np.vstack([train, planted_train]))
    fit_s = time.perf_counter() - t
    p = det.score_parts(A)
    lead = np.argmax(det.blend_.z_scores(p.network, p.forest, p.knn), axis=0)
    rows = np.arange(len(A))
    ex = det.explain(A, top_k=3, outputs=p.outputs)
    net_expected = det.scaler_.inverse_transform(det.standardise(A) + det.sigmas_ * p.outputs)[rows, feat]
    knn_order, knn_mean = knn_explanation(det, A)
    led = " ".join(f"{PARTS[j]} {int((lead == j).sum())}" for j in range(3))
    lines = [f"{name} {kind} seed {seed}: {len(A)} planted rows, led by {led}; fit {fit_s:.0f} s"]
    for label, top, expected in (("network", ex.features, net_expected), ("k-NN", knn_order[:, :3], knn_mean[rows, feat])):
        top1, top3 = top[:, 0] == feat, (top[:, :3] == feat[:, None]).any(axis=1)
        by = ", ".join(f"{PARTS[j]} {top1[lead == j].mean():.2f}" for j in range(3) if (lead == j).any())
        err = np.median(np.abs(expected - before) / sd[feat])
        lines.append(f"  {label:8s} top 1 {top1.mean():.3f}  top 3 {top3.mean():.3f}  top 1 by leading part: {by}; "
                     f"expected value off by {err:.2f} sd (median; planted {np.median(np.abs(A[rows, feat] - before) / sd[feat]):.2f})")
    return "\n".join(lines)


def main(argv):
    if len(argv) < 2:
        raise SystemExit("usage: " + __doc__.strip().splitlines()[2].strip())
    seeds = [int(s) for s in argv[2].split(",")] if len(argv) > 2 else [0, 1, 2]
    table = pq.read_table(CARDIO).to_pandas()
    cardio = table[table.label == 0].drop(columns="label").to_numpy(np.float64)
    g = np.random.default_rng(100)
    C = g.normal(size=(10, 10))
    gauss = g.multivariate_normal(np.zeros(10), C @ C.T / 10 + 0.1 * np.eye(10), size=3000)
    out = []
    for seed in seeds:
        for name, normal in (("cardio", cardio), ("gauss10", gauss)):
            for kind in ("marginal", "conditional"):
                out.append(run(name, normal, kind, seed))
                print(out[-1], flush=True)
    Path(argv[1]).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv)
