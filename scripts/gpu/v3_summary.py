#!/usr/bin/env python3
"""v3_summary.py -- the step table of one device run, from its CSV
(tests/gpu/v3_check --time and scripts/gpu/v3_peers.py rows, as
scripts/gpu/v3_steps.sh writes them): TFLOP/s of every step of version 3 per
shape beside SDPA cuDNN and flash, the best step's ratio to each, and per
step the geometric mean over the shapes and its ratio to cuDNN's.

Usage: python3 scripts/gpu/v3_summary.py FILE.csv [--best-steps K] [--min-step S]
  --best-steps K  print only the K steps with the highest geometric mean
                  (from --min-step on, default 2), comma-separated, and exit
                  (the device script profiles those with ncu)
"""
import argparse
import csv
import math
import sys


def load(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--best-steps", type=int, default=0)
    ap.add_argument("--min-step", type=int, default=2)
    a = ap.parse_args()
    rows = load(a.csv)
    ours, peer = {}, {}
    for r in rows:
        try:
            key = (int(r["d"]), int(r["causal"]), int(r["N"]))
            tf = float(r["tflops"])
        except (KeyError, ValueError):
            continue
        if r["impl"] == "ours_v3":
            ours.setdefault(int(r["step"]), {})[key] = tf
        else:
            peer.setdefault(r["impl"], {})[key] = tf
    shapes = sorted({k for s in ours.values() for k in s})
    steps = sorted(ours)
    gmean = {}
    for st in steps:
        vals = [ours[st][k] for k in shapes if k in ours[st]]
        if len(vals) == len(shapes) and vals:
            gmean[st] = math.exp(sum(math.log(v) for v in vals) / len(vals))
    if a.best_steps:
        cand = sorted((st for st in gmean if st >= a.min_step), key=lambda st: -gmean[st])
        print(",".join(str(st) for st in cand[: a.best_steps]))
        return 0
    cudnn, flash = peer.get("sdpa_cudnn", {}), peer.get("sdpa_flash", {})
    print("TFLOP/s, bf16, B N = 16384 tokens, H = 2048 / d (" + a.csv + ")")
    print(f"{'d':>4s} {'causal':>6s} {'N':>6s} " + " ".join(f"{'st' + str(s):>6s}" for s in steps)
          + f" {'cuDNN':>6s} {'flash':>6s} {'best':>4s} {'/cuDNN':>6s} {'/flash':>6s}")
    for k in shapes:
        vals = {st: ours[st].get(k) for st in steps}
        best = max((st for st in steps if vals[st] is not None), key=lambda st: vals[st])
        c, fl = cudnn.get(k), flash.get(k)
        cells = " ".join(f"{vals[st]:6.0f}" if vals[st] is not None else f"{'-':>6s}" for st in steps)
        print(f"{k[0]:4d} {k[1]:6d} {k[2]:6d} {cells} {c if c else 0:6.0f} {fl if fl else 0:6.0f} {best:4d} "
              f"{vals[best] / c if c else float('nan'):6.2f} {vals[best] / fl if fl else float('nan'):6.2f}")
    if cudnn and all(k in cudnn for k in shapes):
        gc = math.exp(sum(math.log(cudnn[k]) for k in shapes) / len(shapes))
        print("geometric mean over the shapes, and its ratio to cuDNN's: " +
              ", ".join(f"step {st} {g:.0f} ({g / gc:.2f})" for st, g in sorted(gmean.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
