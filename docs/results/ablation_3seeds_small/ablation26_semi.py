"""The default's settings ablated on clean data (semi setting), clean split, 3 seeds, 26 datasets (labels: report only).

Every row comes from ``kdsm bench adbench`` CSVs: the default's seed 0 from ``../blend_semi_clean/``, its seeds 1-2 from
``../ablation_sigma_base/default_semi_clean_seeds12.csv``; each variant with one setting changed from this folder
(``<variant>_semi_clean*.csv``; ``sigma.base``'s from ``../ablation_sigma_base/``); ``max_drop`` 0.3 was run only where
it binds, i.e. where the default kept fewer than 1 - 0.3 of the training rows (its own ``kept_fraction``, which the
training rows alone decide), and the default's row stands elsewhere; K-DSM and the baselines from ``../semi_clean_fast/``
(seed 0) and ``../baselines_seeds12/semi_clean/`` (seeds 1-2). One row changes two settings: no trimming at all,
the blend on (K-DSM's training, scored like the default). The table has the layout of ``ablation26.py``'s.

    python3 docs/results/ablation_3seeds_small/ablation26_semi.py > docs/results/ablation_3seeds_small/ablation26_semi_clean.md
"""
import csv
import sys

from ablation26 import (
    CAPPED,
    HERE,
    MAX_DROP,
    REFINE_OFF,
    ROUNDS_1,
    SIGMA_1,
    START_KEEP_1,
    TEACHER_OFF,
    THRESHOLD,
    add_variants,
    baseline_rows,
    table,
)

RESULTS = HERE.parent
DEFAULT = [RESULTS / "blend_semi_clean" / "results.csv", RESULTS / "ablation_sigma_base" / "default_semi_clean_seeds12.csv"]
VARIANTS = {"no blend (`KDSM_SCORE__ISOLATION_FOREST=false`)": ["forest_off_semi_clean.csv"],
            REFINE_OFF: ["refine_off_semi_clean.csv"],
            START_KEEP_1: ["startkeep1_semi_clean.csv"],
            ROUNDS_1: ["rounds1_semi_clean_seed0.csv", "rounds1_semi_clean_seeds12.csv"],
            TEACHER_OFF: ["teacher_off_semi_clean.csv"],
            SIGMA_1: ["../ablation_sigma_base/sigma1_semi_clean.csv", "../ablation_sigma_base/sigma1_semi_clean_seeds12.csv"],
            THRESHOLD: ["threshold055_semi_clean.csv"],
            CAPPED: ["maxdrop03_semi_clean.csv"],
            # two settings changed: nothing trims (K-DSM's training), and the score is still the blend
            "no trimming at all (`KDSM_REFINE__ENABLED=false KDSM_EMA__ENABLED=false`)": ["untrimmed_semi_clean.csv"]}
BASELINE_FILES = [RESULTS / "semi_clean_fast" / "results.csv", RESULTS / "baselines_seeds12" / "semi_clean" / "results.csv",
                  RESULTS / "baselines_seeds12" / "semi_clean" / "kdsm.csv"]
BASELINES = {"K-DSM (`configs/clean-history.yaml`)": "kdsm", "KNN": "knn", "LOF": "lof", "IForest": "iforest", "ECOD": "ecod"}


def main() -> None:
    if sys.argv[1:]:
        raise SystemExit(f"usage: {sys.argv[0]} (no arguments: it reads the committed CSVs next to it)")
    runs = {"**default**": baseline_rows(DEFAULT, "default")}
    unbound = {(r["dataset"], int(r["seed"])) for p in DEFAULT for r in csv.DictReader(open(p))
               if r["method"] == "default" and r["status"] == "ok" and float(r["kept_fraction"]) >= 1 - MAX_DROP - 1e-9}
    add_variants(runs, VARIANTS, unbound)
    for name, method in BASELINES.items():
        runs[name] = {k: v for k, v in baseline_rows(BASELINE_FILES, method).items() if k in runs["**default**"]}
    table(runs, "clean data (semi), clean split")


if __name__ == "__main__":
    main()
