"""``kdsm bench train``: training and scoring speed of the score network, printed and written to JSON.

Measures optimiser steps per second at the published configuration (512x6
network, batch 128 x 3 noisy copies, Adam) for fp32 and bf16 autocast, with
and without the EMA teacher, plus eval-forward rows per second. The
``reference`` row is the published code's loop (fp32, torch's nn.Dropout,
plain Adam; 16-17 steps/s on the 2-core dev machine by the guide's
measurement), so the speed-up is measured in the same run.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from . import storage
from .argtypes import positive_int
from .config import check_remote_out
from .model import Dropout, ScoreNet, bf16_supported, resolve_device
from .train import train_score_net


def _reference_net(net: ScoreNet) -> ScoreNet:
    """The published code's network: torch's own nn.Dropout (our Dropout draws masks faster)."""
    for block in net.blocks:
        for i, layer in enumerate(block.body):
            if isinstance(layer, Dropout):
                block.body[i] = torch.nn.Dropout(layer.p)
    return net


def _steps_per_second(d, width, depth, batch, copies, ema, precision, device, steps, warmup,
                      reference: bool = False) -> float:
    """``reference``: the published code's loop (fp32, nn.Dropout, plain Adam) for the 2x comparison."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4096, d))
    sig = np.full(d, 0.5)
    net = ScoreNet(d, width, depth)
    if reference:
        net, precision = _reference_net(net), "fp32"
    kw = dict(batch_size=batch, copies=copies, ema=ema, precision=precision, device=device, fused_adam=not reference)
    train_score_net(X, sig, net, steps=warmup, **kw)
    return train_score_net(X, sig, net, steps=steps, **kw).steps_per_second


@torch.no_grad()
def _forward_rows_per_second(d, width, depth, rows, precision, device, repeats=5) -> float:
    net = ScoreNet(d, width, depth).to(device).eval()
    x = torch.randn(rows, d, device=device)
    use_bf16 = precision == "bf16"
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
        net(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(repeats):
            net(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return rows * repeats / (time.perf_counter() - t)


def run(d=21, width=512, depth=6, batch=128, copies=3, steps=150, warmup=20, rounds=3, device="auto", out=None,
        log=print) -> dict:
    """Configurations are interleaved over ``rounds`` and the median is reported, so a burst of
    load from another process skews one sample, not one configuration."""
    dev = resolve_device(device)
    precisions = ["fp32"] + (["bf16"] if bf16_supported(dev) else [])
    result = {"machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
                          "device": str(dev), "torch": torch.__version__, "load_avg_at_start": os.getloadavg(),
                          "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None},
              "config": {"d": d, "width": width, "depth": depth, "batch": batch, "copies": copies, "steps": steps,
                         "rounds": rounds},
              "train_steps_per_s": {}, "forward_rows_per_s": {}, "samples": {}}
    samples: dict[str, list[float]] = {}
    for r in range(rounds):
        sps = _steps_per_second(d, width, depth, batch, copies, False, "fp32", dev, steps, warmup, reference=True)
        samples.setdefault("train reference", []).append(sps)
        log(f"round {r + 1}/{rounds} train reference  {sps:8.2f} steps/s (fp32, nn.Dropout, plain Adam)")
        for prec in precisions:
            for ema in (False, True):
                key = f"{prec}{'+ema' if ema else ''}"
                sps = _steps_per_second(d, width, depth, batch, copies, ema, prec, dev, steps, warmup)
                samples.setdefault(f"train {key}", []).append(sps)
                log(f"round {r + 1}/{rounds} train {key:10s} {sps:8.2f} steps/s")
            rps = _forward_rows_per_second(d, width, depth, 16384, prec, dev)
            samples.setdefault(f"forward {prec}", []).append(rps)
            log(f"round {r + 1}/{rounds} forward {prec:8s} {rps:10.0f} rows/s")
    for name, vals in samples.items():
        kind, key = name.split(" ")
        median = float(np.median(vals))
        target = result["train_steps_per_s" if kind == "train" else "forward_rows_per_s"]
        target[key] = round(median, 2) if kind == "train" else round(median)
        result["samples"][name] = [round(v, 2) for v in vals]
    result["machine"]["load_avg_at_end"] = os.getloadavg()
    for k, v in result["train_steps_per_s"].items():
        log(f"median train {k:10s} {v:8.2f} steps/s")
    for k, v in result["forward_rows_per_s"].items():
        log(f"median forward {k:8s} {v:10.0f} rows/s")
    t = result["train_steps_per_s"]
    best = max(v for k, v in t.items() if k != "reference")
    result["speedup_best_over_reference"] = round(best / t["reference"], 2)
    log(f"best / reference (the published loop): {result['speedup_best_over_reference']}x")
    if "bf16" in t:
        result["speedup_bf16_over_fp32"] = round(t["bf16"] / t["fp32"], 2)
        result["speedup_bf16_ema_over_fp32_ema"] = round(t["bf16+ema"] / t["fp32+ema"], 2)
        log(f"bf16 / fp32: {result['speedup_bf16_over_fp32']}x (no teacher), "
            f"{result['speedup_bf16_ema_over_fp32_ema']}x (with EMA teacher)")
    if out:
        storage.write_bytes(out, json.dumps(result, indent=2).encode())  # a local file or an object (s3://...)
        log(f"wrote {out}")
    return result


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (benchmarks record the machine they ran on)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def register_bench(sub, settings_cls) -> None:
    p = sub.add_parser("train", help="training steps/s and forward rows/s (fp32 vs bf16, with/without EMA teacher)")
    p.add_argument("--width", type=positive_int, default=512, help="hidden width of the score network")
    p.add_argument("--depth", type=positive_int, default=6, help="residual blocks of the score network")
    p.add_argument("--features", type=positive_int, default=21, help="input features d (cardio has 21)")
    p.add_argument("--steps", type=positive_int, default=150, help="timed steps per configuration")
    p.add_argument("--rounds", type=positive_int, default=3, help="interleaved repetitions; the median is reported")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p.add_argument("--out", default="runs/bench-train.json", help="JSON file the figures are written to")
    p.set_defaults(func=lambda a: _main(a, settings_cls))


def _main(a, settings_cls) -> int:
    storage.check_output_file(a.out, "JSON", "bench-train.json")  # before the minutes of timing, not after
    check_remote_out(a.out, settings_cls)
    resolve_device(a.device)
    run(d=a.features, width=a.width, depth=a.depth, steps=a.steps, rounds=a.rounds, device=a.device, out=a.out)
    return 0
