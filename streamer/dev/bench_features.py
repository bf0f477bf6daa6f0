"""``kdsm bench features-speed`` and ``kdsm bench features-quality``: what the feature spec costs and gains.

**features-speed**: the decoder alone, per event, in batches of
``stream.max_batch``, best of ``--repeats`` passes:

- a *mixed* event (10 numeric, 5 categorical, 2 optional fields absent
  in 30 % of events, one nested object holding one numeric and one
  categorical field) through ``SpecDecoder`` (orjson parse, id/ts checks,
  ``FittedFeatures.encode_records``), with the parse alone and the encode
  alone beside it;
- today's numeric fast path (``Decoder``, 6 flat floats, the events of
  ``kdsm bench stream``), and the same numeric events through
  ``SpecDecoder`` (what the fast path saves);
- with ``--compare-tree DIR`` (a checkout of the code before the spec,
  e.g. the main branch): ``kdsm bench stream``'s decode micro-benchmark
  (``bench_stream.decode_bench``) run alternately in a subprocess on DIR
  and on this tree, ``--rounds`` times each: the numeric path before and after.

**features-quality**: Solar Flare (``offline_train.evaluation.solar_flare``:
real, labelled by a documented rule, bundled in river's wheel), the
unsupervised protocol of ``kdsm bench adbench`` (fit on every row, score
every row, labels only for the metrics; seeds 0..N-1): K-DSM (the shipped
default, ``KDSM.from_settings``) on the spec's encoding (categorical fields
one-hot) against PyOD IForest and KNN on the same one-hot rows (standardised
as the ADBench protocol does), and K-DSM on the numeric codes alone (the
categorical fields left out: what they add).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from offline_train import storage
from offline_train.argtypes import positive_int
from offline_train.config import ConfigError
from offline_train.speed import cpu_name

N_NUMERIC, N_CATEGORICAL = 10, 5


def mixed_spec():
    """10 numeric (one nested), 5 categorical (one nested), 2 optional (imputed): the event the issue names."""
    from offline_train.config import FeatureSpec

    specs = [FeatureSpec(name=f"n{j}", type="numeric") for j in range(N_NUMERIC - 1)]
    specs.append(FeatureSpec(name="device.battery", path="device.battery", type="numeric"))
    specs += [FeatureSpec(name=f"c{j}", type="categorical") for j in range(N_CATEGORICAL - 1)]
    specs.append(FeatureSpec(name="device.os", path="device.os", type="categorical"))
    specs += [FeatureSpec(name="opt_amount", type="numeric", missing="impute"),
              FeatureSpec(name="opt_channel", type="categorical", missing="impute")]
    return specs


def mixed_events(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    cats = [[f"v{k}" for k in range(m)] for m in (3, 5, 8, 12)]
    out = []
    for i in range(n):
        e = {"id": i, "ts": 1700000000.0 + i}
        e.update({f"n{j}": float(v) for j, v in enumerate(rng.normal(size=N_NUMERIC - 1).round(6))})
        e.update({f"c{j}": cats[j][int(rng.integers(len(cats[j])))] for j in range(N_CATEGORICAL - 1)})
        e["device"] = {"battery": round(float(rng.random()), 4), "os": ["ios", "android", "web"][int(rng.integers(3))]}
        if rng.random() >= 0.3:
            e["opt_amount"] = round(float(rng.lognormal(3, 1)), 2)
        if rng.random() >= 0.3:
            e["opt_channel"] = ["app", "pos", "web", "phone"][int(rng.integers(4))]
        out.append(e)
    return out


def _fit(specs, records: list[dict]):
    """The spec fitted on records as the offline job would fit it on their Parquet rows."""
    import pyarrow as pa

    from offline_train.features import FittedFeatures, profile

    table = pa.Table.from_pylist(records)
    return FittedFeatures.fit(specs, profile(table.to_batches(), specs))


def _fast_us(decode_result: dict) -> float:
    """The fast path's us/event of a decode_bench result (named ``fast_orjson_us`` before the msgspec path)."""
    return decode_result.get("fast_us", decode_result.get("fast_orjson_us"))


_COMPARED = ("streamer/dev/bench_stream.py", "streamer/dev/bench_fixtures.py")  # what _numeric_decode_json imports


def _numeric_decode_json(tree: str) -> dict:
    """``bench_stream.decode_bench`` (numeric, 6 flat floats) run in a subprocess on the code at ``tree``."""
    code = ("import json, numpy as np\n"
            "from streamer.dev.bench_stream import decode_bench\n"
            "from streamer.dev.bench_fixtures import events_json\n"
            "names = [f'f{j}' for j in range(6)]\n"
            "X = np.random.default_rng(1).normal(size=(20000, 6))\n"
            "class M: feature_names_ = names; schema_hash_ = 'h'\n"
            "print(json.dumps(decode_bench(M, events_json(X, names), 2000)))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False, cwd=tree)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        raise ConfigError(f"the decode bench failed on the code in {tree}: {last}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_compare_tree(tree: str) -> None:
    """``--compare-tree``: a folder holding this project's code (what the before/after runs import); anything else
    would time the installed code twice and call it before and after."""
    path = Path(tree)
    if not path.is_dir():
        raise ConfigError(f"--compare-tree {tree}: " + ("not a folder" if path.exists() else "no such folder"))
    missing = [m for m in _COMPARED if not (path / m).is_file()]
    if missing:
        raise ConfigError(f"--compare-tree {tree} is not a checkout of kdsm-stream with the decode bench (no "
                          f"{' or '.join(missing)} in it): name the root of the checkout to compare with")


def run_speed(settings, events: int = 20000, repeats: int = 5, compare_tree: str | None = None, rounds: int = 3,
              out: str | None = "docs/results/features/speed.json", log=print) -> dict:
    import orjson

    from streamer.dev.bench_fixtures import events_json
    from streamer.dev.bench_stream import _per_event_us
    from streamer.pipeline.decode import Decoder
    from streamer.pipeline.decode_spec import SpecDecoder

    batch = settings.stream.max_batch
    records = mixed_events(events)
    spec = _fit(mixed_spec(), mixed_events(5000, seed=1))
    values = [orjson.dumps(r) for r in records]
    dec = SpecDecoder(spec, schema_hash=spec.spec_hash())
    got = dec.decode(values[:batch])
    assert not got.rejects and got.X.shape == (min(batch, events), len(spec.columns))
    mixed = _per_event_us(dec.decode, values, batch, repeats)
    parse = _per_event_us(lambda b: list(map(orjson.loads, b)), values, batch, repeats)
    parsed = [orjson.loads(v) for v in values]
    encode = _per_event_us(spec.encode_records, parsed, batch, repeats)
    log(f"mixed event ({len(spec.features)} features -> {len(spec.columns)} columns, "
        f"{round(sum(map(len, values)) / len(values))} bytes): {mixed:.2f} us/event through SpecDecoder "
        f"(orjson parse alone {parse:.2f} us, encode alone {encode:.2f} us)")

    names = [f"f{j}" for j in range(6)]
    X = np.random.default_rng(1).normal(size=(events, 6))
    num_values = events_json(X, names)
    num_fast = _per_event_us(Decoder(names, schema_hash="h").decode, num_values, batch, repeats)
    num_spec = _fit_numeric_spec(names, X)
    num_via_spec = _per_event_us(SpecDecoder(num_spec, schema_hash="h").decode, num_values, batch, repeats)
    log(f"numeric event (6 flat floats): fast path {num_fast:.2f} us/event; through SpecDecoder {num_via_spec:.2f} us/event")

    result = {
        "command": " ".join(["kdsm", *sys.argv[1:]]),
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "load_avg_before": list(os.getloadavg())},
        "batch": batch, "events": events, "repeats": repeats,
        "mixed_event": {"features": len(spec.features), "encoded_columns": len(spec.columns),
                        "shape": "10 numeric (1 nested), 5 categorical (1 nested), 2 optional (imputed, absent in 30%), "
                                 "one nested object",
                        "event_bytes": round(sum(map(len, values)) / len(values)),
                        "spec_decoder_us": round(mixed, 3), "orjson_parse_only_us": round(parse, 3),
                        "encode_only_us": round(encode, 3)},
        "numeric_event": {"features": 6, "fast_path_us": round(num_fast, 3), "via_spec_decoder_us": round(num_via_spec, 3)},
    }
    if compare_tree:
        before, after = [], []
        for _ in range(rounds):  # alternate, so load drift hits both alike
            before.append(_fast_us(_numeric_decode_json(compare_tree)))
            after.append(_fast_us(_numeric_decode_json(str(Path(__file__).resolve().parents[2]))))
        result["numeric_fast_path_before_after"] = {
            "what": "bench_stream.decode_bench (kdsm bench stream's decode micro-benchmark), 6 flat floats, batch 2000, "
                    "fast_us per round, alternating", "before_tree": str(Path(compare_tree).resolve()),
            "before_us": before, "after_us": after, "before_best_us": min(before), "after_best_us": min(after)}
        log(f"numeric fast path before/after (kdsm bench stream decode, best of {rounds}): "
            f"{min(before):.3f} us -> {min(after):.3f} us per event")
    result["machine"]["load_avg_after"] = list(os.getloadavg())
    _write(out, result, log)
    return result


def _fit_numeric_spec(names, X):
    """The same 6 numeric columns as a spec (forces the spec path on numeric events: the comparison)."""
    from offline_train.config import FeatureSpec

    specs = [FeatureSpec(name=n, type="numeric", clip=(None, 1e300)) for n in names]
    return _fit(specs, [dict(zip(names, r, strict=True)) for r in X[:2000].tolist()])


def run_quality(settings, seeds: int = 3, out: str | None = "docs/results/features/quality.json", log=print) -> dict:
    from offline_train.evaluation.methods import fit_score
    from offline_train.evaluation.solar_flare import CODES, HISTORY, SPEC, build_table
    from offline_train.features import FittedFeatures, profile
    from offline_train.job import label_metrics
    from offline_train.scaler import Scaler

    table = build_table()
    y = np.asarray(table.column("label").to_pylist())
    spec = FittedFeatures.fit(SPEC, profile(table.to_batches(), SPEC))
    enc = spec.encode_arrow(table)
    assert not enc.reasons
    X = enc.X
    numeric_cols = [j for j, c in enumerate(spec.columns) if c in CODES.values() or c.startswith("history.")]
    assert len(numeric_cols) == len(CODES) + len(HISTORY)
    rows = []
    runs = [("K-DSM (default) on the spec's encoding", "default", X),
            ("IForest on one-hot", "iforest", X), ("KNN on one-hot", "knn", X),
            ("K-DSM (default) on the numeric codes only", "default", X[:, numeric_cols])]
    for label, method, data in runs:
        per_seed = []
        for seed in range(seeds):
            t0 = time.perf_counter()
            r = fit_score(method, data, data, Scaler.fit(data), settings, seed=seed)
            m = label_metrics(y, r.scores)
            per_seed.append({"seed": seed, "auc_pr": round(m["auc_pr"], 4), "auc_roc": round(m["auc_roc"], 4),
                             "seconds": round(time.perf_counter() - t0, 1)})
            log(f"{label:<45} seed {seed}: AUC-PR {m['auc_pr']:.3f}  AUC-ROC {m['auc_roc']:.3f}")
        rows.append({"method": label, "columns": int(data.shape[1]),
                     "auc_pr_mean": round(float(np.mean([p["auc_pr"] for p in per_seed])), 4),
                     "auc_roc_mean": round(float(np.mean([p["auc_roc"] for p in per_seed])), 4), "seeds": per_seed})
    result = {"command": " ".join(["kdsm", *sys.argv[1:]]),
              "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "load_avg": list(os.getloadavg())},
              "data": {"name": "Solar Flare (UCI) via river.datasets.SolarFlare (bundled in the river wheel)",
                       "rows": int(len(y)), "anomalies": int(y.sum()),
                       "label_rule": "anomaly = at least one M- or X-class flare in the next 24 h",
                       "features": [s.model_dump(exclude_defaults=True) for s in SPEC],
                       "encoded_columns": spec.columns},
              "protocol": "unsupervised: fit on every row, score every row, labels only for AUC-PR / AUC-ROC; "
                          "rows standardised as in kdsm bench adbench ({0,1} columns pass through)",
              "results": rows}
    _write(out, result, log)
    return result


def _write(out, result, log) -> None:
    if out:
        storage.write_bytes(out, (json.dumps(result, indent=2) + "\n").encode())  # a local file or an object-store URI
        log(f"wrote {out}")


def register_bench(sub, settings_cls) -> None:
    p = sub.add_parser("features-speed", help="per-event decode cost of mixed events vs the numeric fast path",
                       description="The decoder alone, per event: a mixed event (10 numeric, 5 categorical, 2 optional, "
                                   "one nested object) through the spec decoder, the numeric fast path, and with "
                                   "--compare-tree the numeric path before/after (kdsm bench stream's decode bench).")
    p.add_argument("--events", type=positive_int, default=20000, help="events per pass")
    p.add_argument("--repeats", type=positive_int, default=5, help="passes; the best counts")
    p.add_argument("--compare-tree", help="a checkout of the code before the feature spec (e.g. the main branch)")
    p.add_argument("--rounds", type=positive_int, default=3, help="alternating before/after rounds with --compare-tree")
    p.add_argument("--config", help="YAML config file (stream.max_batch)")
    p.add_argument("--out", default="docs/results/features/speed.json", help="JSON file the figures are written to, or an object-store URI")
    p.set_defaults(func=lambda a: _speed(a, settings_cls))
    q = sub.add_parser("features-quality", help="K-DSM with the feature spec vs IForest and KNN on one-hot (Solar Flare)",
                       description="Solar Flare (real, bundled in river; anomaly = an M- or X-class flare): K-DSM on the "
                                   "spec's encoding vs PyOD IForest and KNN on one-hot, unsupervised, seeds 0..N-1.")
    q.add_argument("--seeds", type=positive_int, default=3, help="seeds 0..N-1")
    q.add_argument("--config", help="YAML config file (training settings; default: what kdsm train ships)")
    q.add_argument("--out", default="docs/results/features/quality.json", help="JSON file the figures are written to, or an object-store URI")
    q.set_defaults(func=lambda a: _quality(a, settings_cls))


def _speed(a, settings_cls) -> int:
    from offline_train.config import load_settings

    storage.check_output_file(a.out, "JSON", "speed.json")
    if a.compare_tree:
        check_compare_tree(a.compare_tree)
    s = load_settings(settings_cls, a.config)
    storage.check_bucket(a.out)  # an object-store --out: its bucket now, not after the benchmark
    run_speed(s, a.events, a.repeats, a.compare_tree, a.rounds, a.out)
    return 0


def _quality(a, settings_cls) -> int:
    from offline_train.config import load_settings

    storage.check_output_file(a.out, "JSON", "quality.json")
    s = load_settings(settings_cls, a.config)
    storage.check_bucket(a.out)  # an object-store --out: its bucket now, not after the benchmark
    run_quality(s, a.seeds, a.out)
    return 0
