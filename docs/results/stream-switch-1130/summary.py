"""Every run of this folder by switch interval and config: the ratio (target 3 for the default config) and p99
event -> alert acknowledged, with their medians.

    python3 docs/results/stream-switch-1130/summary.py
"""
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

runs = defaultdict(list)
for path in sorted(HERE.rglob("*.json")):
    r = json.loads(path.read_text())
    interval = r["machine"].get("switch_interval_ms")
    if interval is None:  # the first A/B ran before the setting (c2555db): the interval is in the file name
        interval = 0.5 if "0.5ms" in path.name else 5.0
    if r["scorer"].startswith("none"):
        config = "--scorer none"
    else:
        config = "low-latency" if "low-latency" in path.name else "default"
    ratio = r.get("ratio_e2e_over_min", r.get("ratio_e2e_over_consume"))
    runs[(config, interval)].append((path.relative_to(HERE).as_posix(), ratio, r["latency"]["to_alert_acked"]["p99_ms"],
                                     r["target_ratio"]))

for (config, interval), rs in sorted(runs.items()):
    ratios = [x[1] for x in rs]
    p99 = [x[2] for x in rs]
    print(f"{config:14s} {interval:4g} ms: {len(rs):2d} runs; ratio median {np.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}, below its target {rs[0][3]}: {sum(x < rs[0][3] for x in ratios)}); "
          f"p99 to alert ack median {np.median(p99):.1f} ms (min {min(p99):.1f}, max {max(p99):.1f})")
    for name, ratio, p, _ in rs:
        print(f"    {name:40s} ratio {ratio:.3f}  p99 {p:.1f} ms")
