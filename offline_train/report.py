"""Training report: a JSON summary and PNG plots written beside the artifact."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: the job runs on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def write_report(out_dir: Path, summary: dict, det) -> dict[str, str]:
    """Write ``report.json`` and three plots into ``out_dir``; returns the file paths.

    Feature and severity names are drawn as they are: matplotlib would read text between two ``$`` as maths (a column
    named ``cost_$_per_$_unit`` raised a mathtext error after training and the model was never written). A plot that
    still fails is left out, and ``report.json`` says why (``plots_failed``): the model never waits on its pictures.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {"summary": str(out_dir / "report.json")}
    failed = {}
    for name, draw in (("sigmas", _sigmas), ("loss", _loss), ("calibration", _calibration)):
        try:
            with plt.rc_context({"text.parse_math": False, "text.usetex": False}):
                files[name] = _save(draw(det), out_dir / f"{name}.png")
        except Exception as e:  # noqa: BLE001 - any plotting failure: the artifact is what matters
            plt.close("all")
            failed[name] = f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]
    report = {**summary, "files": files, **({"plots_failed": failed} if failed else {})}
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, default=_jsonable))
    return files


def _sigmas(det):
    fig, ax = plt.subplots(figsize=(max(6, 0.25 * len(det.sigmas_)), 3.5))
    ax.bar(range(len(det.sigmas_)), det.sigmas_, color="tab:blue")
    ax.axhline(det.sigma_config.base, color="grey", ls="--", lw=1, label=f"sigma_base={det.sigma_config.base}")
    ax.set_xticks(range(len(det.sigmas_)), det.feature_names_, rotation=90, fontsize=7)
    ax.set_ylabel("sigma (standardised units)")
    ax.set_title("Per-feature noise scale from kurtosis")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _loss(det):
    curve = np.asarray(det.train_summary_.loss_curve, dtype=float)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if len(curve):
        ax.plot(curve[:, 0], curve[:, 1])
    ax.set_xlabel("step")
    ax.set_ylabel("DSM loss")
    ax.set_title(f"Training loss ({det.train_summary_.precision}, {det.train_summary_.steps} steps)")
    fig.tight_layout()
    return fig


def _calibration(det):
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(det.calibration_.scores, bins=60, color="tab:grey")
    colors = ("tab:orange", "tab:red", "tab:purple", "tab:brown", "black")
    for (name, t), color in zip(sorted(det.thresholds_.items(), key=lambda kv: kv[1]), colors, strict=False):
        ax.axvline(t, color=color, label=f"{name} = {t:.3g} (q{det.calibration_.quantiles[name]})")
    ax.set_xlabel("anomaly score")
    ax.set_ylabel("calibration rows")
    ax.set_title(f"Calibration scores ({det.calibration_source_}, n={len(det.calibration_.scores)})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _save(fig, path: Path) -> str:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def _jsonable(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o)}")
