#!/usr/bin/env bash
# The wider field against the default: prints and writes the compare-*.md files of this folder from committed CSVs.
# Run from the repository root: bash docs/results/baselines_wide/compare.sh
set -euo pipefail
R=docs/results
W=$R/baselines_wide
# Issue 11's protocol (seed 0 on all 26 datasets, seeds 1-2 on the 11 under 1000 rows); a later file's row wins.
kdsm bench compare $R/unsup_paper_fast/results.csv $R/unsup_paper_small_seeds/results.csv \
    $R/blend_max_unsup_paper/results.csv $R/blend_max_unsup_paper_small_seeds/results.csv $W/unsup_paper.csv \
    --setting unsup --split paper --per-dataset --out $W/compare-unsup_paper.md
kdsm bench compare $R/unsup_clean_default/results.csv $R/blend_max_unsup_clean_seeds/baselines-small-seeds12.csv \
    $R/blend_max_unsup_clean/results.csv $R/blend_max_unsup_clean_seeds/results.csv $W/unsup_clean.csv \
    --setting unsup --split clean --per-dataset --out $W/compare-unsup_clean.md
kdsm bench compare $R/semi_paper_fast/results.csv $R/blend_max_semi_paper/results.csv \
    $R/semi_paper_small_seeds12/results.csv $W/semi_paper.csv \
    --setting semi --split paper --per-dataset --out $W/compare-semi_paper.md
# Clean data's clean split: 3 seeds on all 26 datasets (the form target 3's figures take).
kdsm bench compare $R/semi_clean_fast/results.csv $R/blend_semi_clean/results.csv \
    $R/ablation_sigma_base/default_semi_clean_seeds12.csv $R/baselines_seeds12/semi_clean/results.csv \
    $R/baselines_seeds12/semi_clean/kdsm.csv $W/semi_clean.csv $W/semi_clean_large_seeds12.csv \
    --setting semi --split clean --per-dataset --out $W/compare-semi_clean-3seeds.md
# The contaminated splits over 3 seeds on all 26 datasets: the baselines alone (the default's 3-seed rows are
# per-row files, ../ablation_3seeds_small/ablation26*.md); IForest in focus. kdsm-ema and kdsm ran at seed 0 only, and
# the clean split's seed-0 file holds the default before the blend, labelled so.
kdsm bench compare $R/unsup_paper_fast/results.csv $R/baselines_seeds12/unsup_paper/results.csv \
    $W/unsup_paper.csv $W/unsup_paper_large_seeds12.csv \
    --setting unsup --split paper --focus iforest --out $W/baselines-unsup_paper-3seeds.md
kdsm bench compare $R/unsup_clean_default/results.csv=default_before_blend_seed0 $R/baselines_seeds12/unsup_clean/results.csv \
    $W/unsup_clean.csv $W/unsup_clean_large_seeds12.csv \
    --setting unsup --split clean --focus iforest --out $W/baselines-unsup_clean-3seeds.md
