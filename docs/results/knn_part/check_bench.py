"""Do the library's k-NN part (real bench rows) and refsize.py's reconstruction (per-row files) agree?

For each row of a ``kdsm bench adbench --methods default`` results.csv (three parts), prints its AUC-PR / AUC-ROC
beside refsize.py's ``max3 ref 512`` for the same dataset and seed, and the largest difference.

    python3 docs/results/knn_part/check_bench.py BENCH.csv REFSIZE.json
"""
import csv
import json
import sys

if len(sys.argv) != 3:
    raise SystemExit(f"usage: {sys.argv[0]} BENCH.csv REFSIZE.json")
try:
    with open(sys.argv[1]) as fh:
        rows = [r for r in csv.DictReader(fh) if r["status"] == "ok"]
    with open(sys.argv[2]) as fh:
        perrow = json.load(fh)
except (OSError, ValueError, KeyError) as e:
    raise SystemExit(f"{sys.argv[0]}: cannot read the inputs: {e}") from None
worst = 0.0
for r in rows:
    key = f"{r['dataset']}|{r['seed']}"
    if key not in perrow:
        print(f"{key:28s} no per-row run")
        continue
    bench, rebuilt = (float(r["aucpr"]), float(r["aucroc"])), perrow[key]["max3 ref 512"]
    diff = max(abs(a - b) for a, b in zip(bench, rebuilt, strict=True))
    worst = max(worst, diff)
    print(f"{key:28s} bench {bench[0]:.6f} / {bench[1]:.6f}  per-row {rebuilt[0]:.6f} / {rebuilt[1]:.6f}")
print(f"{len(rows)} bench rows; largest difference {worst:.2e}")
