#!/usr/bin/env python3
"""paper/gen/paper_ring.py -- the numbers chapters/25-merge-rule.md (the ring across GPUs, stage 7) quotes.

    python3 paper/gen/paper_ring.py          prints the values, one "key<TAB>value" a line

claims.py takes values() into build/paper/values.tsv. Two kinds of number:

  - exercise 2's logits [3, 1, 6, 2] cut into two pieces of keys, each
    piece's logsumexp, and their merge by the rule of core/merge.h, set beside
    the logsumexp of the whole row: arithmetic, done here;
  - the measurement of ./stage7 --sweep scale, data/gpu/ring.csv (written on
    the two-GPU machine; absent in CI): the largest N run, the scaling
    efficiency and the share of the communication hidden behind computation
    at that N, and whether every row's bytes sent equal the closed form.
    Without the file every key is "n/a" and ring_status is "absent".
Standard library only.
"""
import csv
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RING = os.environ.get("PAPER_RING_CSV", "data/gpu/ring.csv")


def logsumexp(xs):
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def merge_L(La, Lb):
    """core/merge.h's L: hi + log1p(exp(lo - hi))."""
    hi, lo = max(La, Lb), min(La, Lb)
    return hi + math.log1p(math.exp(lo - hi))


def read_rows(rel):
    full = rel if os.path.isabs(rel) else os.path.join(ROOT, rel)
    if not os.path.exists(full):
        return None
    with open(full, newline="") as f:
        lines = [ln for ln in f if not ln.startswith("#") and ln.strip()]
    rows = list(csv.DictReader(lines))
    return rows or None


def values():
    v = {}
    x = [3.0, 1.0, 6.0, 2.0]
    La, Lb = logsumexp(x[:2]), logsumexp(x[2:])
    L = merge_L(La, Lb)
    v["ring_ex2_La"] = f"{La:.6f}"
    v["ring_ex2_Lb"] = f"{Lb:.6f}"
    v["ring_ex2_wa"] = f"{math.exp(La - L):.6f}"
    v["ring_ex2_wb"] = f"{math.exp(Lb - L):.6f}"
    v["ring_ex2_L"] = f"{L:.7f}"
    v["ring_ex2_L_whole"] = f"{logsumexp(x):.7f}"

    keys = ("gpu", "gpus", "nccl", "shape", "largest_n", "eff_fwd", "eff_bwd", "eff_fwd_causal",
            "eff_bwd_causal", "hidden_fwd", "hidden_bwd", "tflops_fwd", "tflops_fwd_single",
            "bytes_rows", "bytes_ok", "date", "commit", "comm_share_fwd", "comm_share_bwd",
            "hidden_mid_fwd", "hidden_mid_bwd", "mid_n", "kernel")
    for k in keys:
        v["ring_" + k] = "n/a"
    rows = read_rows(RING)
    if not rows:
        v["ring_status"] = "absent"
        return v
    nccl = [r for r in rows if r.get("transport") == "nccl"]
    rows = nccl or rows
    v["ring_status"] = "present"
    first = rows[0]
    v["ring_gpu"] = first["gpu"]
    v["ring_gpus"] = first["gpus"]
    v["ring_nccl"] = first["nccl"]
    v["ring_date"] = first["date"][:10]
    v["ring_commit"] = first["commit"]
    ks = sorted({r.get("kernel", "") for r in rows} - {""})
    v["ring_kernel"] = " and ".join(ks) if ks else "n/a"   # the version number, forward and backward
    v["ring_shape"] = f"B = {first['B']}, H = {first['H']}, d = {first['d']}, {first['dtype']}"
    largest = max(int(r["N"]) for r in rows)
    v["ring_largest_n"] = f"{largest:,}"

    def at(pass_, causal):
        for r in rows:
            if int(r["N"]) == largest and r["pass"] == pass_ and int(r["causal"]) == causal:
                return r
        return None

    for pass_ in ("fwd", "bwd"):
        for causal, suffix in ((0, ""), (1, "_causal")):
            r = at(pass_, causal)
            if r:
                v[f"ring_eff_{pass_}{suffix}"] = f"{float(r['efficiency']):.2f}"
                if not causal:
                    v[f"ring_hidden_{pass_}"] = f"{float(r['hidden_share']):.2f}"
                    # the transfers alone as a share of the ring's time: how much hiding can matter
                    v[f"ring_comm_share_{pass_}"] = f"{100 * float(r['comm_only_ms']) / float(r['ring_ms']):.1f}\u00a0%"
    # where hiding matters more: the smallest N, no mask
    smallest = min(int(r["N"]) for r in rows)
    v["ring_mid_n"] = f"{smallest:,}"
    for r in rows:
        if int(r["N"]) == smallest and int(r["causal"]) == 0 and r["pass"] in ("fwd", "bwd"):
            v[f"ring_hidden_mid_{r['pass']}"] = f"{float(r['hidden_share']):.2f}"
    r = at("fwd", 0)
    if r:
        v["ring_tflops_fwd"] = f"{float(r['ring_tflops']):.0f}"
        v["ring_tflops_fwd_single"] = f"{float(r['single_tflops']):.0f}"
    v["ring_bytes_rows"] = str(len(rows))
    same = sum(1 for r in rows if float(r["bytes_sent_per_gpu"]) == float(r["bytes_formula"]))
    v["ring_bytes_ok"] = f"{same} of {len(rows)}"
    return v


def claim_row():
    """(claim, chapter's value, measured, source, errata) for the claims table."""
    v = values()
    if v["ring_status"] != "present":
        return ("One sequence across GPUs (ring attention, stage 7)", "not in the chapter",
                "not measured in this build: no data/gpu/ring.csv", "data/gpu/ring.csv", "")
    return ("One sequence across GPUs (ring attention, stage 7)", "not in the chapter",
            f"{v['ring_gpus']} x {v['ring_gpu']}, version {v['ring_kernel']}'s kernels in both passes (not the "
            f"library's default version 3), commit {v['ring_commit']}, {v['ring_date']}, not re-measured with the "
            f"rest of data/gpu, N = {v['ring_largest_n']}: efficiency fwd "
            f"{v['ring_eff_fwd']}, bwd {v['ring_eff_bwd']}; communication hidden fwd "
            f"{v['ring_hidden_fwd']}, bwd {v['ring_hidden_bwd']}; bytes = closed form in "
            f"{v['ring_bytes_ok']} rows", "data/gpu/ring.csv; ./stage7 --sweep scale", "")


if __name__ == "__main__":
    for k, val in sorted(values().items()):
        print(f"{k}\t{val}")
    sys.exit(0)
