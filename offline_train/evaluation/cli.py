"""``kdsm bench adbench``: the paper's ADBench protocol, K-DSM side by side with baselines.

Writes into ``--out``: ``results.csv`` (one row per dataset, seed and
method; resumable), ``report.md`` (per-dataset tables with the paper's
figures, means per method), ``aucpr.png`` and ``run.json`` (command, machine,
settings, wall time). Model settings come from the product config (env
``KDSM_<SECTION>__<KEY>``), so an ablation is e.g. ``KDSM_SIGMA__TRIM=0 kdsm
bench adbench ...``; a changed config gets its own rows (``config`` column).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from .. import storage
from ..argtypes import seed
from ..config import ConfigError, check_remote_out, load_settings
from .methods import METHODS, bench_calibration

DEFAULT_METHODS = {"semi": "default,dsm,knn,iforest,lof,ecod", "unsup": "default,kdsm-ema,kdsm,knn,iforest,lof,ecod"}


def _csv_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def register_bench(sub: argparse._SubParsersAction, settings_cls) -> None:
    p = sub.add_parser("adbench", help="ADBench protocol: K-DSM, DSM and PyOD baselines vs the paper",
                       description="Runs every method on identical splits per dataset and seed; writes "
                                   "results.csv (resumable), report.md, aucpr.png and run.json into --out.")
    p.add_argument("--data-dir", required=True, help="folder of ADBench .npz files (keys X, y; 1 = anomaly)")
    p.add_argument("--datasets", help="comma-separated names, e.g. glass,14_glass (default: every .npz)")
    p.add_argument("--methods", help=f"comma-separated, from {','.join(METHODS)} "
                                     f"(default semi: {DEFAULT_METHODS['semi']}; unsup: {DEFAULT_METHODS['unsup']})")
    p.add_argument("--setting", choices=["semi", "unsup"], default="semi",
                   help="semi = train on normals only; unsup = contaminated training data (default semi)")
    p.add_argument("--split", choices=["paper", "clean"], default="paper",
                   help="paper = published protocol (small data resampled); clean = disjoint train/test (default paper)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    p.add_argument("--profile", choices=["fast", "paper"], help="training profile (default from config: fast)")
    p.add_argument("--config", help="YAML config file, e.g. configs/contaminated-core.yaml (env KDSM_<SECTION>__<KEY> "
                                    "overrides it): the default method trains under it, the published methods under "
                                    "its model, sigma and train sections")
    p.add_argument("--out", required=True, help="output folder (re-running resumes from its results.csv)")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs at once, each in its own process with cores/jobs torch threads unless train.threads "
                        "is set (default 1: one run at a time, torch's default threads)")
    p.set_defaults(func=lambda a: _run(a, settings_cls))

    c = sub.add_parser("compare", help="means and wins of one method against the others, over benchmark CSVs",
                       description="Reads results.csv files of kdsm bench adbench (any configs; a dataset, seed "
                                   "and method seen twice keeps the row of the later file) and prints, for one "
                                   "setting and split, each method's mean AUC-PR and AUC-ROC over the datasets "
                                   "every method finished, and on how many of them --focus is ahead.")
    c.add_argument("csv", nargs="+", help="results.csv files (later files override earlier ones); "
                                          "PATH=LABEL names that file's `default` rows LABEL (an ablation's variant)")
    c.add_argument("--setting", choices=["semi", "unsup"], required=True, help="which setting's rows")
    c.add_argument("--split", choices=["paper", "clean"], default="paper", help="which split's rows (default paper)")
    c.add_argument("--seeds", help="comma-separated seeds to keep (default: all)")
    c.add_argument("--focus", default="default", help="the method whose wins are counted (default: default)")
    c.add_argument("--per-dataset", action="store_true", help="also the per-dataset AUC-PR and AUC-ROC tables")
    c.add_argument("--out", help="also write the table to this Markdown file")
    c.set_defaults(func=lambda a: _compare(a, settings_cls))


def machine_info() -> dict:
    import torch

    from ..model import bf16_supported, resolve_device
    from ..speed import cpu_name

    dev = resolve_device("auto")
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "device": str(dev), "bf16": bf16_supported(dev), "python": platform.python_version(),
            "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


_COMPARED_COLUMNS = ("dataset", "setting", "split", "seed", "method", "status", "aucpr", "aucroc")


def _read_results(path: Path) -> list[dict]:
    """The rows of a results.csv of ``kdsm bench adbench``; anything else is one line naming the file."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            header = reader.fieldnames or []
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not a results.csv of kdsm bench adbench: not UTF-8 text "
                          f"(byte {e.object[e.start]:#04x} at offset {e.start})") from None
    except csv.Error as e:
        raise ConfigError(f"{path} is not a results.csv of kdsm bench adbench: {e}") from None
    missing = [c for c in _COMPARED_COLUMNS if c not in header]
    if missing:
        raise ConfigError(f"{path} is not a results.csv of kdsm bench adbench: no column(s) {', '.join(missing)}")
    return rows


def _compare(a, settings_cls) -> int:
    from .report import compare_table

    if a.out:
        storage.check_output_file(a.out, "Markdown", "compare.md")
        check_remote_out(a.out, settings_cls)
    seeds = set(_csv_list(a.seeds)) if a.seeds else None
    rows = []
    for arg in a.csv:
        path, _, label = arg.partition("=") if not Path(arg).is_file() else (arg, "", "")
        if not Path(path).is_file():
            raise ConfigError(f"no such results file: {path}")
        rows += [{**r, "method": label} if label and r["method"] == "default" else r for r in _read_results(Path(path))
                 if r["setting"] == a.setting and r["split"] == a.split and (seeds is None or r["seed"] in seeds)]
    try:
        table = compare_table(rows, a.focus)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if a.per_dataset:
        from .report import markdown_tables

        last = {(r["dataset"], r["seed"], r["method"]): r for r in rows}
        methods = [a.focus] + [m for m in dict.fromkeys(r["method"] for r in last.values()) if m != a.focus]
        per = markdown_tables(list(last.values()), {}, methods, metrics=("aucpr", "aucroc"))
        table += "\n\n" + per[:per.index("### Mean over datasets")].rstrip()
    print(table)
    if a.out:
        storage.write_bytes(a.out, f"{a.setting}, {a.split} split, from {', '.join(a.csv)}\n\n{table}\n".encode())
    return 0


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the workers of ``--jobs``)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _run(a, settings_cls) -> int:
    from .report import find_reference, load_reference, markdown_tables, plot
    from .runner import BenchSpec, config_id, run_bench

    methods = _csv_list(a.methods or DEFAULT_METHODS[a.setting])
    if not methods:
        raise ConfigError(f"--methods names no method; choose from {', '.join(METHODS)}")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ConfigError(f"unknown method(s) {', '.join(bad)}; choose from {', '.join(METHODS)}")
    try:
        seeds = tuple(seed(s) for s in _csv_list(a.seeds))
    except argparse.ArgumentTypeError:
        raise ConfigError(f"--seeds must be comma-separated seeds in 0..4294967295, got {a.seeds!r}") from None
    settings = load_settings(settings_cls, a.config)
    if a.profile:
        settings.train.profile = a.profile
    spec = BenchSpec(Path(a.data_dir), Path(a.out), _csv_list(a.datasets) if a.datasets else None, tuple(methods),
                     a.setting, a.split, seeds or (0,))
    info = {"command": "kdsm " + " ".join(sys.argv[1:]) if sys.argv and "kdsm" in Path(sys.argv[0]).name else None,
            "argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k.startswith("KDSM_")},
            "machine": machine_info(), "config": config_id(settings), "profile": settings.train.profile,
            # The resolved settings: every section config_id hashes, and calibration as the bench applies it.
            "settings": {**json.loads(settings.model_dump_json(include={"sigma", "model", "ema", "refine", "score", "train",
                                                                        "data"})),
                         "calibration": json.loads(bench_calibration().model_dump_json())},
            "jobs": a.jobs, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    t0, c0 = time.perf_counter(), _cpu_seconds()
    rows = run_bench(spec, settings, progress=sys.stderr.isatty() or bool(os.environ.get("KDSM_BENCH_PROGRESS")),
                     jobs=a.jobs)
    info.update(wall_seconds=round(time.perf_counter() - t0, 1), cpu_seconds=round(_cpu_seconds() - c0, 1),
                loadavg_end=list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    ref = load_reference(find_reference(spec.data_dir), a.setting)
    title = (f"ADBench {a.setting}, {a.split} split, profile {settings.train.profile}, seeds "
             f"{','.join(map(str, spec.seeds))}, config {info['config']}")
    md = markdown_tables(rows, ref, methods, metrics=("aucpr", "aucroc", "f1"))
    ok = [r for r in rows if r["status"] == "ok"]
    fit_total = sum(float(r["fit_s"]) + float(r["score_s"]) for r in ok)
    cpu_total = sum(float(r["fit_cpu_s"]) for r in ok)
    header = (f"# {title}\n\n{len(ok)} runs ok. Fit + score time summed over the runs in the CSV: {fit_total:.0f} s "
              f"(fit CPU time {cpu_total:.0f} s). Wall time of this invocation: {info['wall_seconds']} s "
              f"(CPU {info['cpu_seconds']} s); "
              f"machine: {info['machine']['cpu']}, {info['machine']['cores']} cores, device {info['machine']['device']}, "
              f"bf16 {info['machine']['bf16']}.\n\n")
    (spec.out / "report.md").write_text(header + md)
    png = plot(rows, ref, methods, spec.out / "aucpr.png", title)
    runs = spec.out / "run.json"
    history = json.loads(runs.read_text()) if runs.exists() else []
    runs.write_text(json.dumps((history if isinstance(history, list) else [history]) + [info], indent=1))
    mean = md[md.index("### Mean over datasets"):].split("\n\n### ")[0]
    print(mean)
    print(f"\nwall {info['wall_seconds']} s; wrote {spec.csv_path}, {spec.out / 'report.md'}, {png}, {runs}")
    n_failed = sum(r["status"] != "ok" for r in rows)
    if n_failed:
        print(f"{n_failed} run(s) failed; see the CSV 'error' column")
    if rows and not ok:  # failed runs are rows of the CSV (resumable), but a bench of failures alone is a failure
        print(f"kdsm bench adbench: no run succeeded ({n_failed} failed); see the 'error' column of {spec.csv_path}",
              file=sys.stderr)
        return 1
    return 0
