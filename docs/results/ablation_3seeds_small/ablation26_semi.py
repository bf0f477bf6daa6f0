"""The default's settings ablated on clean data (semi setting), 26 datasets (labels: report only).

Every row comes from ``kdsm bench adbench`` CSVs. Clean split (the default), 3 seeds: the default's seed 0 from
``../blend_semi_clean/``, its seeds 1-2 from ``../ablation_sigma_base/default_semi_clean_seeds12.csv``; each variant with
one setting changed from this folder (``<variant>_semi_clean*.csv``; ``sigma.base``'s from ``../ablation_sigma_base/``);
K-DSM and the baselines from ``../semi_clean_fast/`` (seed 0) and ``../baselines_seeds12/semi_clean/`` (seeds 1-2).
Paper split (``--split paper``), the issue's protocol (seed 0 on all 26 datasets, seeds 1-2 on the 11 under 1000 rows):
the default's seed 0 from ``../blend_max_semi_paper/``, its seeds 1-2 and every baseline's from
``../semi_paper_small_seeds12/``, the baselines' seed 0 from ``../semi_paper_fast/``; each variant from this folder
(``<variant>_semi_paper*.csv``; the teacher's and ``sigma.base``'s seed 0 from their own folders). On both splits
``max_drop`` 0.3 was run only where it binds, i.e. where the default kept fewer than 1 - 0.3 of the training rows (its own
``kept_fraction``, which the training rows alone decide), and the default's row stands elsewhere. One row changes two
settings: no trimming at all, the blend on (K-DSM's training, scored like the default). The table has the layout of
``ablation26.py``'s.

    python3 docs/results/ablation_3seeds_small/ablation26_semi.py > docs/results/ablation_3seeds_small/ablation26_semi_clean.md
    python3 docs/results/ablation_3seeds_small/ablation26_semi.py --split paper > docs/results/ablation_3seeds_small/ablation26_semi_paper.md
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
NO_BLEND = "no blend (`KDSM_SCORE__ISOLATION_FOREST=false`)"
# two settings changed: nothing trims (K-DSM's training), and the score is still the blend
UNTRIMMED = "no trimming at all (`KDSM_REFINE__ENABLED=false KDSM_EMA__ENABLED=false`)"
DEFAULT = {"clean": [RESULTS / "blend_semi_clean" / "results.csv", RESULTS / "ablation_sigma_base" / "default_semi_clean_seeds12.csv"],
           "paper": [RESULTS / "blend_max_semi_paper" / "results.csv", RESULTS / "semi_paper_small_seeds12" / "results.csv"]}
VARIANTS = {"clean": {NO_BLEND: ["forest_off_semi_clean.csv"],
                      REFINE_OFF: ["refine_off_semi_clean.csv"],
                      START_KEEP_1: ["startkeep1_semi_clean.csv"],
                      ROUNDS_1: ["rounds1_semi_clean_seed0.csv", "rounds1_semi_clean_seeds12.csv"],
                      TEACHER_OFF: ["teacher_off_semi_clean.csv"],
                      SIGMA_1: ["../ablation_sigma_base/sigma1_semi_clean.csv", "../ablation_sigma_base/sigma1_semi_clean_seeds12.csv"],
                      THRESHOLD: ["threshold055_semi_clean.csv"],
                      CAPPED: ["maxdrop03_semi_clean.csv"],
                      UNTRIMMED: ["untrimmed_semi_clean.csv"]},
            "paper": {NO_BLEND: ["forest_off_semi_paper_seed0.csv", "forest_off_semi_paper_seeds12.csv"],
                      REFINE_OFF: ["refine_off_semi_paper_seed0.csv", "refine_off_semi_paper_seeds12.csv"],
                      START_KEEP_1: ["startkeep1_semi_paper_seed0.csv", "startkeep1_semi_paper_seeds12.csv"],
                      ROUNDS_1: ["rounds1_semi_paper_seed0.csv", "rounds1_semi_paper_seeds12.csv"],
                      TEACHER_OFF: ["../ablation_teacher_off/teacher_off_semi_paper_seed0.csv", "teacher_off_semi_paper_seeds12.csv"],
                      SIGMA_1: ["../ablation_sigma_base/sigma1_semi_paper.csv", "sigma1_semi_paper_seeds12.csv"],
                      THRESHOLD: ["threshold055_semi_paper_seed0.csv", "threshold055_semi_paper_seeds12.csv"],
                      CAPPED: ["maxdrop03_semi_paper.csv"],
                      UNTRIMMED: ["untrimmed_semi_paper_seed0.csv", "untrimmed_semi_paper_seeds12.csv"]}}
BASELINE_FILES = {"clean": [RESULTS / "semi_clean_fast" / "results.csv", RESULTS / "baselines_seeds12" / "semi_clean" / "results.csv",
                            RESULTS / "baselines_seeds12" / "semi_clean" / "kdsm.csv"],
                  "paper": [RESULTS / "semi_paper_fast" / "results.csv", RESULTS / "semi_paper_small_seeds12" / "results.csv"]}
BASELINES = {"K-DSM (`configs/clean-history.yaml`)": "kdsm", "KNN": "knn", "LOF": "lof", "IForest": "iforest", "ECOD": "ecod"}
TITLE = {"clean": "clean data (semi), clean split",
         "paper": "clean data (semi), paper split, the issue's protocol (seed 0 on all 26, seeds 1-2 on the 11 under 1000 rows)"}


def main(args: list[str]) -> None:
    split = "clean"
    if args[:1] == ["--split"]:
        split, args = (args[1] if len(args) > 1 else ""), args[2:]
    if split not in VARIANTS or args:
        raise SystemExit(f"usage: {sys.argv[0]} [--split clean|paper] (it reads the committed CSVs next to it)")
    runs = {"**default**": baseline_rows(DEFAULT[split], "default")}
    unbound = {(r["dataset"], int(r["seed"])) for p in DEFAULT[split] for r in csv.DictReader(open(p))
               if r["method"] == "default" and r["status"] == "ok" and float(r["kept_fraction"]) >= 1 - MAX_DROP - 1e-9}
    add_variants(runs, VARIANTS[split], unbound)
    for name, method in BASELINES.items():
        runs[name] = {k: v for k, v in baseline_rows(BASELINE_FILES[split], method).items() if k in runs["**default**"]}
    table(runs, TITLE[split])


if __name__ == "__main__":
    main(sys.argv[1:])
