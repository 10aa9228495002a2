#!/usr/bin/env python3
"""paper/gen/paper_v3.py -- the numbers chapters/23-hopper.md (version 3, Hopper) quotes from its device run.

    python3 paper/gen/paper_v3.py          prints the values, one "key<TAB>value" a line

claims.py takes values() into build/paper/values.tsv. Two files, both written
by one call of scripts/gpu/v3_steps.sh on the H200:

  data/gpu/studies/fwd_v3_steps/v3_steps.csv   TFLOP/s of every step of version 3 (rows ours_v3,
                          build/v3_check --time) beside SDPA's cuDNN and flash
                          backends (rows sdpa_cudnn, sdpa_flash,
                          scripts/gpu/v3_peers.py) on the same tensors: bf16,
                          d 64 and 128, three N, causal and not
  data/gpu/studies/fwd_v3_steps/v3_ncu.txt     Nsight Compute's sections and metrics for a few
                          steps at one N (non-causal), d 64 and 128
  data/gpu/studies/fwd_v3_steps/v3_tests.log   build/v3_check --tests (every step against fp64)
  data/gpu/studies/fwd_v3_steps/v3_sanitize.log  compute-sanitizer memcheck, racecheck and
                          synccheck over build/v3_check --small

From them: the run's commit and shapes; per step, the geometric mean over the
shapes and its ratio to cuDNN's (as scripts/gpu/v3_summary.py prints it); for the
default step (FA_V3_DEFAULT_STEP, kernels/stage4_fwd_v3_hopper.h) the ratio to
cuDNN and to flash per shape and in geometric mean, and the shapes where it
is below cuDNN; each step's gain over the one before; the counters (tensor
pipe, XU pipe, issue slots, stall reasons, L2 bytes) of the profiled steps.
Without the files every key is "n/a" (v3_status "absent"). Standard library only.
"""
import csv
import math
import os
import re
import sys

import paper_gpu  # print_values: the one key<TAB>value printer of the chapter generators

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = os.environ.get("PAPER_V3_CSV", "data/gpu/studies/fwd_v3_steps/v3_steps.csv")
NCU = os.environ.get("PAPER_V3_NCU", "data/gpu/studies/fwd_v3_steps/v3_ncu.txt")
TESTS = os.environ.get("PAPER_V3_TESTS", "data/gpu/studies/fwd_v3_steps/v3_tests.log")
SANITIZE = os.environ.get("PAPER_V3_SANITIZE", "data/gpu/studies/fwd_v3_steps/v3_sanitize.log")

# ncu metric -> the key fragment chapters/23-hopper.md uses
NCU_METRICS = {
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active": "xu",
    "Issue Slots Busy": "issue",
    "Memory Throughput": "mem",
    "smsp__warp_issue_stalled_wait_per_warp_active.pct": "wait",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct": "barrier",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct": "longsb",
    "lts__t_bytes.sum": "l2",
}


def full(rel):
    return rel if os.path.isabs(rel) else os.path.join(ROOT, rel)


def default_step():
    with open(full("kernels/stage4_fwd_v3_hopper.h")) as f:
        mo = re.search(r"#define FA_V3_DEFAULT_STEP (\d+)", f.read())
    return int(mo.group(1)) if mo else None


def read_steps(rel=STEPS):
    """({(impl, step, d, causal, N): tflops}, commit) or (None, None)."""
    if not os.path.exists(full(rel)):
        return None, None
    commit = None
    rows = []
    with open(full(rel), newline="") as f:
        for ln in f:
            if ln.startswith("#"):
                mo = re.match(r"# commit: (\w+)", ln)
                commit = commit or (mo.group(1) if mo else None)
            elif ln.strip():
                rows.append(ln)
    table = {}
    for r in csv.DictReader(rows):
        try:
            table[(r["impl"], int(r["step"]), int(r["d"]), int(r["causal"]), int(r["N"]))] = float(r["tflops"])
        except (KeyError, ValueError):
            continue
    return table or None, commit


def read_ncu(rel=NCU):
    """({(d, step): {key: value}}, N, causal) from ncu's text output, or (None, ...)."""
    if not os.path.exists(full(rel)):
        return None, None, None
    got, cur, shapes = {}, None, set()
    with open(full(rel)) as f:
        for ln in f:
            mo = re.match(r"ran step (\d+) at B \d+ H \d+ N (\d+) d (\d+) causal (\d)", ln)
            if mo:
                shapes.add((int(mo.group(2)), int(mo.group(4))))
                continue
            mo = re.match(r"\s+void (?:fwd_)?v3_kernel<[^,]+, (\d+), (\d+)>", ln)
            if mo:
                cur = got.setdefault((int(mo.group(1)), int(mo.group(2))), {})
                continue
            if cur is None:
                continue
            for metric, key in NCU_METRICS.items():
                if ln.strip().startswith(metric + " ") or ln.strip() == metric:
                    cur[key] = float(ln.split()[-1].replace(",", ""))
    if len(shapes) != 1:          # the chapter names one N; several would need more keys
        return None, None, None
    (N, causal), = shapes
    return got or None, N, causal


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def grouped(n):
    return f"{int(n):,}"


def pct(x):
    """A gain as a signed percentage in TeX math, a no-break space before the
    sign: 1.114 -> $+11$ %, 0.997 -> $0$ %."""
    p = round(100 * (x - 1))
    return f"${p:+d}$\u00a0%" if p else "$0$\u00a0%"


def span(xs, fmt):
    lo, hi = min(xs), max(xs)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)} to {fmt(hi)}"


def words(items):
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def values():
    v = {}
    table, commit = read_steps()
    S = default_step()
    keys = ["v3_status", "v3_run_commit", "v3_N_list", "v3_N_lo", "v3_nshapes",
            "v3_gm_cudnn", "v3_gm_flash", "v3_def_cudnn_range", "v3_def_flash_range", "v3_gm_steps",
            "v3_below_cudnn", "v3_nbelow", "v3_s6_causal128", "v3_s6_causal64", "v3_s6_nc64",
            "v3_s6_nc128", "v3_s7_gain64", "v3_s7_gain128", "v3_s8_gain64", "v3_s8_gain128",
            "v3_s8_128_lo", "v3_cudnn_128_lo", "v3_s8c_128_lo", "v3_s7_128_lo", "v3_s7c_128_lo",
            "v3_cudnnc_128_lo", "v3_s8_128_mid", "v3_cudnn_128_mid", "v3_drop_ours", "v3_drop_cudnn",
            "v3_N_mid"]
    for k in keys:
        v[k] = "n/a"
    v["v3_status"] = "absent"
    v.update(ncu_values())
    v.update(check_values())
    v.update(bench_values())
    if table is None or S is None:
        return v
    ours = {k[1:]: x for k, x in table.items() if k[0] == "ours_v3"}
    cudnn = {k[2:]: x for k, x in table.items() if k[0] == "sdpa_cudnn"}
    flash = {k[2:]: x for k, x in table.items() if k[0] == "sdpa_flash"}
    shapes = sorted({k[1:] for k in ours if k[1:] in cudnn and k[1:] in flash})
    steps = sorted({k[0] for k in ours})
    if not shapes or S not in steps or any((S,) + sh not in ours for sh in shapes):
        return v
    v["v3_status"] = "present"
    v["v3_run_commit"] = commit or "n/a"
    Ns = sorted({sh[2] for sh in shapes})
    v["v3_N_list"] = words([grouped(n) for n in Ns])
    v["v3_N_lo"] = grouped(Ns[0])
    v["v3_nshapes"] = str(len(shapes))
    g_cu, g_fl = gmean([cudnn[sh] for sh in shapes]), gmean([flash[sh] for sh in shapes])
    v["v3_gm_cudnn"] = f"{gmean([ours[(S,) + sh] for sh in shapes]) / g_cu:.2f}"
    v["v3_gm_flash"] = f"{gmean([ours[(S,) + sh] for sh in shapes]) / g_fl:.2f}"
    r_cu = {sh: ours[(S,) + sh] / cudnn[sh] for sh in shapes}
    r_fl = {sh: ours[(S,) + sh] / flash[sh] for sh in shapes}
    v["v3_def_cudnn_range"] = span(list(r_cu.values()), lambda x: f"{x:.2f}")
    v["v3_def_flash_range"] = span(list(r_fl.values()), lambda x: f"{x:.1f}")
    per_step = [f"step {st} {gmean([ours[(st,) + sh] for sh in shapes]) / g_cu:.2f}" for st in steps
                if all((st,) + sh in ours for sh in shapes)]
    v["v3_gm_steps"] = ", ".join(per_step)

    def name(sh):
        d, c, N = sh
        return f"$d = {d}$ {'causal' if c else 'non-causal'} at $N$ = {grouped(N)}"
    below = [sh for sh in shapes if r_cu[sh] < 1]
    v["v3_nbelow"] = str(len(below))
    v["v3_below_cudnn"] = words([f"{name(sh)} ({r_cu[sh]:.2f}$\\times$)" for sh in below]) if below else "none"

    def gains(st, d, c):
        return [ours[(st, d, c, N)] / ours[(st - 1, d, c, N)] for N in Ns
                if (st, d, c, N) in ours and (st - 1, d, c, N) in ours]

    def by_n(st, d, c):        # "+6 %, +11 % and +20 %" over the N list
        return words([pct(g) for g in gains(st, d, c)])
    v["v3_s6_causal128"] = by_n(6, 128, 1)
    v["v3_s6_causal64"] = by_n(6, 64, 1)
    v["v3_s6_nc64"] = by_n(6, 64, 0)
    v["v3_s6_nc128"] = by_n(6, 128, 0)
    for st in (7, 8):
        for d in (64, 128):
            v[f"v3_s{st}_gain{d}"] = span(gains(st, d, 0) + gains(st, d, 1), pct)
    lo, mid = Ns[0], Ns[len(Ns) // 2]
    v["v3_N_mid"] = grouped(mid)
    f0 = lambda x: f"{x:.0f}"  # noqa: E731
    v["v3_s8_128_lo"], v["v3_s7_128_lo"] = f0(ours[(S, 128, 0, lo)]), f0(ours[(7, 128, 0, lo)])
    v["v3_cudnn_128_lo"] = f0(cudnn[(128, 0, lo)])
    v["v3_s8c_128_lo"], v["v3_s7c_128_lo"] = f0(ours[(S, 128, 1, lo)]), f0(ours[(7, 128, 1, lo)])
    v["v3_cudnnc_128_lo"] = f0(cudnn[(128, 1, lo)])
    v["v3_s8_128_mid"], v["v3_cudnn_128_mid"] = f0(ours[(S, 128, 0, mid)]), f0(cudnn[(128, 0, mid)])
    v["v3_drop_ours"] = f"{100 * (1 - ours[(S, 128, 0, lo)] / ours[(S, 128, 0, mid)]):.0f}\u00a0%"
    v["v3_drop_cudnn"] = f"{100 * (1 - cudnn[(128, 0, lo)] / cudnn[(128, 0, mid)]):.0f}\u00a0%"

    return v


def ncu_values(profiled=(1, 7, 8)):
    """The counters chapters/23-hopper.md quotes: v3_ncu_<metric>_<d>_<step> for the
    steps v3_steps.sh profiles, "n/a" where the file lacks them."""
    ncu, nN, ncausal = read_ncu()
    v = {"v3_ncu_N": grouped(nN) if ncu else "n/a",
         "v3_ncu_mask": ("causal" if ncausal else "non-causal") if ncu else "n/a"}
    for d in (64, 128):
        for st in profiled:
            for key in NCU_METRICS.values():
                x = (ncu or {}).get((d, st), {}).get(key)
                v[f"v3_ncu_{key}_{d}_{st}"] = "n/a" if x is None else f"{x:.1f}" if key == "l2" else f"{x:.0f}"
    return v


def check_values():
    """The test suite's and the sanitizers' verdicts from the same run."""
    v = {"v3_tests_runs": "n/a", "v3_tests_failed": "n/a", "v3_tests_seed": "n/a",
         "v3_sanitized_steps": "n/a", "v3_sanitize": "n/a"}
    if os.path.exists(full(TESTS)):
        text = open(full(TESTS)).read()
        mo = re.search(r"v3 tests: (\d+) of (\d+) runs failed", text)
        sd = re.search(r"v3 tests: seed (\d+)", text)
        if mo:
            v["v3_tests_failed"], v["v3_tests_runs"] = mo.group(1), mo.group(2)
        if sd:
            v["v3_tests_seed"] = sd.group(1)
    if os.path.exists(full(SANITIZE)):
        text = open(full(SANITIZE)).read()
        runs = text.count("COMPUTE-SANITIZER")
        clean = (len(re.findall(r"ERROR SUMMARY: 0 errors", text)) +
                 len(re.findall(r"RACECHECK SUMMARY: 0 hazards", text)))
        steps = sorted({int(x) for x in re.findall(r"v3-small step (\d+)", text)})
        v["v3_sanitized_steps"] = words([str(x) for x in steps]) if steps else "n/a"
        v["v3_sanitize"] = (f"{clean} of {runs} sanitizer runs clean" if runs else "n/a")
    return v


SPREAD_N = 8192   # from here on a call's host cost is a small part of its time on either clock


def clock_spread(rows, ps, impls, n_lo=SPREAD_N):
    """The run-to-run spread of one file's timings: the largest
    |graph_ms / median_ms - 1| over its bf16 rows of pass ps for the
    implementations impls with N >= n_lo. Both columns time the same kernel
    in the same run, one replayed from a CUDA graph, one called eagerly; at
    these lengths the host's cost of a call is too small to explain their
    difference (and the graph is sometimes the slower), so it is how far one
    timing of a kernel can move (clocks, power). None without such rows."""
    xs = []
    for r in rows:
        try:
            if (r.get("pass") == ps and r.get("impl") in impls and r.get("dtype") == "bf16"
                    and int(r["N"]) >= n_lo and r.get("graph_ms") and r.get("median_ms")):
                xs.append(abs(float(r["graph_ms"]) / float(r["median_ms"]) - 1))
        except (KeyError, ValueError):
            continue
    return max(xs) if xs else None


def bench_values(rel="data/gpu/bench_fwd.csv", n_lo=2048):
    """Version 3 in the final benchmark (bench_gpu.py's grid, one run with
    the peers): ratios to cuDNN and flash, bf16, over N >= n_lo and below,
    and the shapes where it is under cuDNN."""
    keys = ["v3b_commit", "v3b_n", "v3b_gm_cudnn", "v3b_cudnn", "v3b_flash", "v3b_nbelow", "v3b_below",
            "v3b_short_cudnn", "v3b_short_gm", "v3b_short_reading", "v3b_N_lo", "v3b_spread",
            "v3b_nbelow_clear", "v3b_below_sentence", "v3b_spread_N"]
    v = {k: "n/a" for k in keys}
    if not os.path.exists(full(rel)):
        return v
    with open(full(rel), newline="") as f:
        every = list(csv.DictReader(ln for ln in f if not ln.startswith("#")))
    rows = [r for r in every if r["pass"] == "fwd" and r["dtype"] == "bf16" and paper_gpu.fair_tflops(r)]
    spread = clock_spread(every, "fwd", ("ours_v3_hopper", "sdpa_cudnn", "sdpa_flash"))
    # graph-replayed TFLOP/s: no host overhead on either side (paper_gpu.fair_tflops)
    t = {(r["impl"], int(r["d"]), int(r["causal"]), int(r["N"])): paper_gpu.fair_tflops(r) for r in rows}
    shapes = sorted({k[1:] for k in t if k[0] == "ours_v3_hopper" and ("sdpa_cudnn",) + k[1:] in t
                     and ("sdpa_flash",) + k[1:] in t})
    long_ = [sh for sh in shapes if sh[2] >= n_lo]
    short = [sh for sh in shapes if sh[2] < n_lo]
    if not long_:
        return v
    rc = {sh: t[("ours_v3_hopper",) + sh] / t[("sdpa_cudnn",) + sh] for sh in shapes}
    rf = {sh: t[("ours_v3_hopper",) + sh] / t[("sdpa_flash",) + sh] for sh in shapes}
    v["v3b_commit"] = rows[0]["commit"]
    v["v3b_N_lo"] = grouped(n_lo)
    v["v3b_n"] = str(len(long_))
    v["v3b_gm_cudnn"] = f"{gmean([rc[sh] for sh in long_]):.2f}"
    v["v3b_cudnn"] = span([rc[sh] for sh in long_], lambda x: f"{x:.2f}")
    v["v3b_flash"] = span([rf[sh] for sh in long_], lambda x: f"{x:.1f}")
    below = [sh for sh in long_ if rc[sh] < 1]
    v["v3b_nbelow"] = str(len(below))
    name = lambda d, c, N: (f"$d = {d}$ {'causal' if c else 'non-causal'} at $N$ = {grouped(N)} "  # noqa: E731
                            f"({rc[(d, c, N)]:.2f}$\\times$)")
    v["v3b_below"] = words([name(*sh) for sh in below]) if below else "none"
    # below by more than one timing of a kernel moves in this file, and the sentence that says so
    if spread is not None:
        v["v3b_spread"], v["v3b_spread_N"] = f"{100 * spread:.1f} %", grouped(SPREAD_N)
        clear = [sh for sh in below if rc[sh] < 1 - spread]
        v["v3b_nbelow_clear"] = str(len(clear))
        lead = (f"It is below cuDNN at {len(below)} of them" + (f": {v['v3b_below']}" if below else ""))
        where = (f"two timings of one kernel in this file, graph-replayed and called eagerly, differ by up to "
                 f"{v['v3b_spread']} at $N \\ge$ {grouped(SPREAD_N)}, where a call's host cost is a small part "
                 "of its time")
        if not below:
            v["v3b_below_sentence"] = f"It is below cuDNN at none of them; {where}."
        elif not clear:
            v["v3b_below_sentence"] = (f"{lead}. But {where}, and none of the {len(long_)} is below cuDNN by "
                                       "more than that: " + ("that one is" if len(below) == 1 else
                                                             f"those {len(below)} are") +
                                       " within the clocks' spread.")
        else:
            v["v3b_below_sentence"] = (f"{lead}. But {where}; by more than that it is below cuDNN at "
                                       f"{len(clear)}: {words([name(*sh) for sh in clear])}, the rest within "
                                       "the clocks' spread.")
    short_clear = [sh for sh in short if spread is not None and rc[sh] < 1 - spread]
    if short:
        v["v3b_short_cudnn"] = span([rc[sh] for sh in short], lambda x: f"{x:.2f}")
        gs, gl = gmean([rc[sh] for sh in short]), gmean([rc[sh] for sh in long_])
        v["v3b_short_gm"] = f"{gs:.2f}"
        # the reading, from the ratios: weak only when the short shapes' mean sits clearly
        # (by more than the clocks' spread, else 5 %) below the long ones'
        beyond = (f" (by more than the clocks' spread at {len(short_clear)} of the {len(short)})"
                  if spread is not None else "")
        if gs < (1 - (spread if spread is not None else 0.05)) * gl:
            v["v3b_short_reading"] = (f"below cuDNN at every one of these shorter shapes{beyond}, and lower "
                                      "than at the longer ones: short sequences are version 3's weak side"
                                      if max(rc[sh] for sh in short) < 1 else
                                      "lower than at the longer ones: short sequences are version 3's weak side")
        else:
            v["v3b_short_reading"] = "about what it is at the longer ones: short sequences are no weak side of version 3"
    return v


if __name__ == "__main__":
    sys.exit(paper_gpu.print_values(values()))
