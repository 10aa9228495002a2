#!/usr/bin/env python3
"""Question it answered: how evenly version 3's tile orders (steps 4, 5, 6)
spread causal work over the 132 multiprocessors; the answer: chapter 4c's
section on the persistent grid and data/gpu/studies/fwd_v3_steps/steps.md, steps 5 and 6.

v3_schedule.py -- how evenly three tile orders of version 3 spread causal
work over the multiprocessors: a model, no GPU.

A tile is (query head, query block of 128 rows); under a causal mask with
seqlen_q = seqlen_k = N, query block qb visits qb + 1 key blocks, and the
model takes its time as proportional to that. For the timing shapes of
tests/gpu/v3_check --time (bf16, B N = 16384 tokens, H = 2048 / d) it prints
the finishing time of the last of 132 multiprocessors over the mean
(1.000 = perfectly even) for:

  step 4   one block per tile, launched in natural order (query blocks of a
           head in ascending order, heads one after another); the hardware
           gives the next block to whichever multiprocessor frees first
  step 5   persistent, static: block c takes tiles c, 2*132-1-c, 2*132+c, ...
           of the longest-first order in head groups whose K and V fill half
           the L2 (kernels/stage4_fwd_v3_hopper.cu, v3_tile)
  dynamic  persistent, each block takes the next tile from a counter when it
           frees (steps 6 and later): the same longest-first order, groups of
           balanced size

Usage: python3 data/gpu/studies/fwd_v3_steps/v3_schedule.py [--sms 132] [--l2 62914560]
"""
import argparse
import heapq
import math


def greedy(work, sms):
    """Finishing time of the last multiprocessor when each takes the next tile as it frees."""
    free = [(0.0, c) for c in range(sms)]
    for w in work:
        t, c = heapq.heappop(free)
        heapq.heappush(free, (t + w, c))
    return max(t for t, _ in free)


def static_snake(work, sms):
    load = [0.0] * sms
    for t, w in enumerate(work):
        k, c = divmod(t, sms)
        load[c if k % 2 == 0 else sms - 1 - c] += w
    return max(load)


def longest_first(bh, tq, sizes):
    """Tile lengths in longest-first order within head groups of the given sizes."""
    out = []
    for gs in sizes:
        for qb in range(tq - 1, -1, -1):
            out += [qb + 1] * gs
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--l2", type=float, default=62914560.0, help="L2 bytes (H200: 60 MiB)")
    a = ap.parse_args()
    print(f"causal, {a.sms} multiprocessors, 128-row query blocks: last finisher / mean")
    print(f"{'d':>4s} {'N':>6s} {'B x H':>8s} {'tiles':>6s} {'step 4':>8s} {'step 5':>8s} {'dynamic':>8s}")
    for d in (64, 128):
        for n in (2048, 8192, 16384):
            b, h = max(1, 16384 // n), 2048 // d
            bh, tq = b * h, n // 128
            kv_head = 2.0 * n * d * 2
            hpg = max(1, min(bh, int(0.5 * a.l2 / kv_head)))
            natural = [qb + 1 for _ in range(bh) for qb in range(tq)]
            step5 = longest_first(bh, tq, [min(hpg, bh - g) for g in range(0, bh, hpg)])
            ng = math.ceil(bh / hpg)
            dyn = longest_first(bh, tq, [bh // ng + (1 if i < bh % ng else 0) for i in range(ng)])
            mean = sum(natural) / a.sms
            print(f"{d:4d} {n:6d} {f'{b} x {h}':>8s} {bh * tq:6d} {greedy(natural, a.sms) / mean:8.3f} "
                  f"{static_snake(step5, a.sms) / mean:8.3f} {greedy(dyn, a.sms) / mean:8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
