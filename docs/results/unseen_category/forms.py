"""Unseen categories against the calibrated thresholds, per form of the score (diagnosis only; "Twenty-eighth pass").

Trains ``tests/test_stream_mixed.py``'s model (its spec, data and budget) and scores its 15 planted events, each with
a category no training row had (merchant_category "crypto", country "KP"), against the model's own thresholds. The
score's form is one of: ``two`` (the network and the forest, the default before the twenty-eighth pass), ``raw`` (with
the k-NN part, ``score.knn``), ``log`` (the k-NN part's distance on the log scale, as the network's score is read) or
``numeric`` (the k-NN part on the columns with more than two values only, i.e. off one-hot columns); ``log`` and
``numeric`` are patched in here, not in the library. ``--unscaled`` restores the scaler from before the pass (a
category column never set in training passes unscaled, 1 unit off) so both sides of the fix come from one script.

    python3 docs/results/unseen_category/forms.py two|raw|log|numeric [--unscaled]
"""
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from test_stream_mixed import SPEC, mixed_table  # noqa: E402

import offline_train.blend as blend  # noqa: E402
import offline_train.features as features  # noqa: E402
import offline_train.neighbours as neighbours  # noqa: E402
from offline_train.detector import KDSM  # noqa: E402
from offline_train.job import train_job  # noqa: E402
from streamer.config import Settings  # noqa: E402


def patch_log_distance():
    fit, z_scores = blend.Blend.fit.__func__, blend.Blend.z_scores
    log = lambda d: None if d is None else np.log(np.asarray(d) + 1e-12)  # noqa: E731
    blend.Blend.fit = classmethod(lambda cls, n, f, k=None: fit(cls, n, f, log(k)))
    blend.Blend.z_scores = lambda self, n, f, k=None: z_scores(self, n, f, log(k))


def patch_numeric_columns():
    from_rows, kth = neighbours.NeighbourScorer.from_rows.__func__, neighbours.NeighbourScorer._kth

    def masked_from_rows(cls, rows, k):
        rows = np.asarray(rows)
        keep = np.array([len(np.unique(rows[:, j])) > 2 for j in range(rows.shape[1])])
        cls.mask = torch.tensor(keep, dtype=torch.float32)  # one model per run: a class attribute is enough
        return from_rows(cls, rows * keep, k)

    neighbours.NeighbourScorer.from_rows = classmethod(masked_from_rows)
    neighbours.NeighbourScorer._kth = lambda self, Z, ranks: kth(self, Z.float() * self.mask, ranks)


def main(form: str, unscaled: bool) -> None:
    if form not in ("two", "raw", "log", "numeric"):
        raise SystemExit(__doc__.strip().splitlines()[-1].strip())
    if unscaled:
        features.FittedFeatures.category_columns = property(lambda self: np.zeros(len(self.columns), bool))
    {"log": patch_log_distance, "numeric": patch_numeric_columns}.get(form, lambda: None)()
    work = Path(tempfile.mkdtemp())
    pq.write_table(mixed_table(1500, seed=3), work / "train.parquet")
    s = Settings()
    s.model.width, s.model.depth, s.train.steps, s.features, s.score.knn = 64, 2, 400, SPEC, form != "two"
    train_job(s, work / "train.parquet", work / "m", progress=False, log=lambda m: None)
    det = KDSM.load(work / "m", device="cpu")
    rows = mixed_table(300, seed=9).to_pylist()
    planted = [dict(r, merchant_category="crypto", geo={"country": "KP", "distance_km": 2.0}) for r in rows[:15]]
    p = det.score_parts(det.features_.encode_records(planted).X)
    th = det.thresholds_
    print(f"form {form}{' (unscaled)' if unscaled else ''}: warning {th['warning']:.4g}, critical {th['critical']:.4g}; "
          f"planted scores {p.scores.min():.4g} - {p.scores.max():.4g}; "
          f"{int((p.scores >= th['warning']).sum())} of 15 at or above warning, "
          f"{int((p.scores >= th['critical']).sum())} at or above critical")
    # Each part's z-score: the planted events' median against fresh events of the training distribution.
    fresh = det.features_.encode_records(mixed_table(3000, seed=11).to_pylist()).X
    q = det.score_parts(fresh)
    names = ["network", "forest", "k-NN"]
    for name, zp, zq in zip(names, det.blend_.z_scores(p.network, p.forest, p.knn),
                            det.blend_.z_scores(q.network, q.forest, q.knn), strict=False):
        print(f"  {name} z: planted median {np.median(zp):.3g}, fresh 99th / 99.9th percentile "
              f"{np.quantile(zq, 0.99):.3g} / {np.quantile(zq, 0.999):.3g}")
    if q.knn is not None:  # what the k-NN part's tail is made of: the fresh rows farthest from the reference
        top = np.argsort(q.knn)[-30:]
        col = det.feature_names_.index("distance_km")
        print(f"  the 30 fresh rows with the largest k-NN distance: distance_km standardised, median "
              f"{np.median(det.standardise(fresh[top])[:, col]):.3g} (all fresh rows: "
              f"{np.median(det.standardise(fresh)[:, col]):.3g})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "", "--unscaled" in sys.argv[2:])
