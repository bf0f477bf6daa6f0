#!/usr/bin/env bash
# Two trees, alternating, so a shared machine's drift falls on both. Usage: compare.sh OLD_TREE NEW_TREE ROUNDS OUT
# [SCRIPT]: SCRIPT (default walk.py here; or docs/results/blend_cost/scorer_only.py) runs with PYTHONPATH at each tree.
set -euo pipefail
old=$1 new=$2 rounds=$3 out=$4
script=${5:-$(cd "$(dirname "$0")" && pwd)/walk.py}
: > "$out"
for r in $(seq "$rounds"); do
  for tree in "$old" "$new"; do
    label="$(git -C "$tree" rev-parse --short HEAD)$(git -C "$tree" diff --quiet || echo +changes)"
    text=$(cd "$tree" && OMP_NUM_THREADS=1 PYTHONPATH="$tree" python3 "$script" "$label")
    echo "round $r $label $(head -n 2 <<< "$text" | tail -n 1)" >> "$out"
  done
done
