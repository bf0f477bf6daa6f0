"""Markdown tables and a plot from the benchmark CSV, with the paper's figures beside ours.

Per metric: one row per dataset (mean over seeds), per method our figure,
and where the paper reports that method on that dataset, the paper's figure
and the difference (ours - paper). Then the mean over datasets per method,
with the paper's mean over the same datasets.

>>> rows = [{"dataset": "14_glass", "method": "knn", "status": "ok", "seed": "0", "aucpr": "0.5",
...          "aucroc": "0.9", "f1": "0.4", "fit_s": "0.1", "score_s": "0.1", "fit_cpu_s": "0.1", "error": ""}]
>>> ref = {"aucpr": {"KNN": {"glass": 0.25}}}
>>> md = markdown_tables(rows, ref, ["knn"])
>>> "| glass | 0.500 | 0.250 | +0.250 |" in md
True
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from .runner import short_name

PAPER_LABEL = {"kdsm": "K-DSM", "dsm": "DSM", "kdsm-ema": "K-DSM-EMA", "dsm-ema": "DSM-EMA", "knn": "KNN", "lof": "LOF"}
METRICS = {"aucpr": "AUC-PR", "aucroc": "AUC-ROC", "f1": "F1 at k"}


def find_reference(data_dir: Path) -> Path | None:
    """The ``reference/`` folder of paper figures: beside ``data_dir`` or up to 3 levels above it."""
    d = Path(data_dir).resolve()
    for parent in [d, *list(d.parents)[:3]]:
        cand = parent / "reference"
        if (cand / "semi_aucpr.tsv").exists():
            return cand
    return None


def load_reference(ref_dir: Path | None, setting: str) -> dict[str, dict[str, dict[str, float]]]:
    """{metric: {paper method label: {lower-case dataset name: value}}}; empty without a reference."""
    out: dict = {}
    if ref_dir is None:
        return out
    for metric in METRICS:
        path = Path(ref_dir) / f"{setting}_{metric}.tsv"
        if not path.exists():
            continue
        with open(path, newline="") as f:
            for r in csv.DictReader(f, delimiter="\t"):
                for label, v in r.items():
                    if label != "dataset" and v not in ("", None):
                        out.setdefault(metric, {}).setdefault(label, {})[r["dataset"].lower()] = float(v)
    return out


def _cell(v: float | None, signed: bool = False) -> str:
    if v is None or np.isnan(v):
        return ""
    return f"{v:+.3f}" if signed else f"{v:.3f}"


def _means(rows: list[dict], metric: str) -> dict[str, dict[str, list[float]]]:
    acc: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if r["status"] == "ok":
            acc.setdefault(r["method"], {}).setdefault(r["dataset"], []).append(float(r[metric]))
    return acc


def _paper(ref: dict, metric: str, method: str, dataset: str) -> float | None:
    return ref.get(metric, {}).get(PAPER_LABEL.get(method, ""), {}).get(short_name(dataset).lower())


def markdown_tables(rows: list[dict], ref: dict, methods: list[str], metrics: tuple[str, ...] = ("aucpr",)) -> str:
    """Per-dataset tables (one per metric) and the mean-over-datasets table."""
    datasets = sorted({r["dataset"] for r in rows}, key=lambda d: (int(d.split("_")[0]) if d.split("_")[0].isdigit() else 10**9, d))
    failed = {(r["dataset"], r["method"]): r["error"] for r in rows if r["status"] != "ok"}
    parts = []
    for metric in metrics:
        acc = _means(rows, metric)
        has_ref = [m for m in methods if any(_paper(ref, metric, m, d) is not None for d in datasets)]
        head = ["dataset"]
        for m in methods:
            head += [m] + (["paper", "diff"] if m in has_ref else [])
        lines = [f"### {METRICS[metric]} per dataset (mean over seeds; paper = published figure, diff = ours - paper)", "",
                 "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for d in datasets:
            cells = [short_name(d)]
            for m in methods:
                vals = acc.get(m, {}).get(d)
                ours = float(np.mean(vals)) if vals else None
                cells.append(_cell(ours) if vals else ("failed" if (d, m) in failed else ""))
                if m in has_ref:
                    p = _paper(ref, metric, m, d)
                    cells += [_cell(p), _cell(ours - p, True) if (ours is not None and p is not None) else ""]
            lines.append("| " + " | ".join(cells) + " |")
        cells = ["**mean**"]
        for m in methods:
            per = {d: float(np.mean(v)) for d, v in acc.get(m, {}).items()}
            cells.append(f"**{_cell(np.mean(list(per.values())))}**" if per else "")
            if m in has_ref:
                pairs = [(v, _paper(ref, metric, m, d)) for d, v in per.items() if _paper(ref, metric, m, d) is not None]
                if pairs:
                    o, p = np.mean([a for a, _ in pairs]), np.mean([b for _, b in pairs])
                    cells += [_cell(p), _cell(o - p, True)]
                else:
                    cells += ["", ""]
        lines.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    parts.append(mean_table(rows, ref, methods, datasets))
    if failed:
        fl = ["### Failed runs", "", "| dataset | method | reason |", "|---|---|---|"]
        fl += [f"| {short_name(d)} | {m} | {e} |" for (d, m), e in sorted(failed.items())]
        parts.append("\n".join(fl))
    return "\n\n".join(parts) + "\n"


def mean_table(rows: list[dict], ref: dict, methods: list[str], datasets: list[str]) -> str:
    """Mean over datasets per method; the paper's mean is over the same datasets (those it reports)."""
    head = ["method", "datasets ok", "AUC-PR", "paper AUC-PR", "diff", "AUC-ROC", "F1 at k", "seed std of AUC-PR",
            "fit s (mean)", "fit CPU s (mean)", "score s (mean)"]
    lines = ["### Mean over datasets", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in methods:
        mine = [r for r in rows if r["method"] == m and r["status"] == "ok"]
        if not mine:
            lines.append(f"| {m} | 0 |" + " |" * (len(head) - 2))
            continue
        per = {k: _means(mine, k).get(m, {}) for k in METRICS}
        ds = sorted(per["aucpr"])
        mean = {k: np.mean([np.mean(per[k][d]) for d in ds]) for k in METRICS}
        pairs = [(np.mean(per["aucpr"][d]), _paper(ref, "aucpr", m, d)) for d in ds]
        pairs = [(a, b) for a, b in pairs if b is not None]
        paper = np.mean([b for _, b in pairs]) if pairs else None
        mine_on_paper = np.mean([a for a, _ in pairs]) if pairs else None
        # Seed noise: std over seeds of the dataset-mean AUC-PR.
        seeds = sorted({r["seed"] for r in mine})
        seed_means = [np.mean([float(r["aucpr"]) for r in mine if r["seed"] == s]) for s in seeds]
        seed_std = _cell(float(np.std(seed_means))) if len(seeds) > 1 else ""
        note = "" if (pairs and len(pairs) == len(ds)) else (f" (paper on {len(pairs)})" if pairs else "")
        cells = [m, f"{len(ds)}{note}", _cell(mean["aucpr"]), _cell(paper),
                 _cell(mine_on_paper - paper, True) if paper is not None else "", _cell(mean["aucroc"]), _cell(mean["f1"]),
                 seed_std, f"{np.mean([float(r['fit_s']) for r in mine]):.2f}",
                 f"{np.mean([float(r['fit_cpu_s']) for r in mine]):.2f}", f"{np.mean([float(r['score_s']) for r in mine]):.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], ref: dict, methods: list[str], path: Path, title: str = "") -> Path:
    """Top: per-dataset AUC-PR, methods side by side. Bottom: ours vs the paper, per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = _means(rows, "aucpr")
    datasets = sorted({r["dataset"] for r in rows if r["status"] == "ok"},
                      key=lambda d: (int(d.split("_")[0]) if d.split("_")[0].isdigit() else 10**9, d))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(10, 0.55 * len(datasets) + 4), 10),
                                   gridspec_kw={"height_ratios": [1.2, 1]})
    w = 0.8 / max(1, len(methods))
    x = np.arange(len(datasets))
    for i, m in enumerate(methods):
        vals = [np.mean(acc[m][d]) if d in acc.get(m, {}) else np.nan for d in datasets]
        ax1.bar(x + (i - (len(methods) - 1) / 2) * w, vals, w, label=m)
    ax1.set_xticks(x, [short_name(d) for d in datasets], rotation=60, ha="right")
    ax1.set_ylabel("AUC-PR (ours)")
    ax1.set_ylim(0, 1.02)
    ax1.legend(ncol=min(8, len(methods)), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 1.13))
    ax1.set_title(title, pad=28)
    marker = "o^sDvP"
    for i, m in enumerate([m for m in methods if m in PAPER_LABEL]):
        pts = [(_paper(ref, "aucpr", m, d), np.mean(acc[m][d])) for d in datasets if d in acc.get(m, {})]
        pts = [(p, o) for p, o in pts if p is not None]
        if pts:
            ax2.scatter(*zip(*pts, strict=True), label=m, marker=marker[i % len(marker)], alpha=0.75)
    ax2.plot([0, 1], [0, 1], color="grey", lw=1, ls="--")
    ax2.set_xlabel("paper AUC-PR")
    ax2.set_ylabel("our AUC-PR")
    ax2.set_xlim(0, 1.02)
    ax2.set_ylim(0, 1.02)
    ax2.set_aspect("equal")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def compare_table(rows: list[dict], focus: str) -> str:
    """Means of every method over the datasets all of them finished, and ``focus``'s wins per metric.

    For runs of different configs (several CSVs): a (dataset, seed, method)
    seen more than once keeps its last row. Only datasets every method has
    count, so the means compare like with like.

    >>> rows = [{"dataset": d, "method": m, "status": "ok", "seed": "0", "aucpr": str(v), "aucroc": str(v)}
    ...         for d, m, v in [("1_a", "x", 0.9), ("1_a", "y", 0.5), ("2_b", "x", 0.2), ("2_b", "y", 0.4)]]
    >>> print(compare_table(rows, "x"))
    | method | AUC-PR | AUC-ROC | x ahead on AUC-PR | x ahead on AUC-ROC |
    |---|---|---|---|---|
    | x | 0.550 | 0.550 |  |  |
    | y | 0.450 | 0.450 | 1 of 2 | 1 of 2 |
    """
    last = {(r["dataset"], r["seed"], r["method"]): r for r in rows if r["status"] == "ok"}
    methods = list(dict.fromkeys(m for _, _, m in last))
    if focus not in methods:
        raise ValueError(f"no finished runs of {focus!r}")
    methods = [focus] + [m for m in methods if m != focus]
    acc = {k: _means(list(last.values()), k) for k in ("aucpr", "aucroc")}
    datasets = sorted(set.intersection(*(set(acc["aucpr"].get(m, {})) for m in methods)))
    mean = {(m, k): np.mean([np.mean(acc[k][m][d]) for d in datasets]) for m in methods for k in acc}
    lines = [f"| method | AUC-PR | AUC-ROC | {focus} ahead on AUC-PR | {focus} ahead on AUC-ROC |", "|---|---|---|---|---|"]
    for m in methods:
        wins = ["", ""] if m == focus else [
            f"{sum(np.mean(acc[k][focus][d]) > np.mean(acc[k][m][d]) for d in datasets)} of {len(datasets)}" for k in acc]
        lines.append(f"| {m} | {_cell(mean[(m, 'aucpr')])} | {_cell(mean[(m, 'aucroc')])} | {wins[0]} | {wins[1]} |")
    return "\n".join(lines)
