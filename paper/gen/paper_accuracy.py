#!/usr/bin/env python3
"""paper/gen/paper_accuracy.py -- the numbers and the tables of chapters/21-gpu-backward.md's
section on dQ's accuracy when every logit sits far from zero, and of its records
(chapters/91-records.md).

    python3 paper/gen/paper_accuracy.py [--out DIR]   prints "key<TAB>value" lines;
                                                    with --out also writes DIR/dq_accuracy.md
                                                    (the errors in bf16),
                                                    DIR/dq_accuracy_fp16.md (in fp16),
                                                    DIR/dq_accuracy_cost.md and
                                                    DIR/dq_accuracy_pass.md (the costs)

claims.py takes values() into build/paper/values.tsv and calls write_table().
Two files:

  data/cpu/dq_accuracy.csv  build/stage3_accuracy (make sweep): the CPU model,
                            stage 3's fp64 backward with O, dS, P rounded to
                            16 bits, each variant's error beside the model's
                            bracket, over the k-coordinate's size a
  data/cpu/dq_draws.csv     build/stage3_accuracy --draws (make sweep): the
                            same model over many draws of the one shape where
                            the H200's centered dQ misses twice math's
  data/gpu/dq_accuracy.csv  scripts/gpu/dq_accuracy.py on the H200: every
                            backward version (centered and not) beside SDPA's
                            backends, and the centering's cost in time beside
                            the rule's prediction per version (what
                            tests/center_rule.py holds the rule and its rates to)
  data/gpu/studies/dq_pass/dq_pass.csv      the same script in an earlier run, with the dQ pass
                            too (ours_*_full, ms_full): the pass's accuracy and cost
                            only where data/gpu/dq_accuracy.csv lacks them; its
                            repeat of the centering's timings (the records)

The GPU table is written only when its file exists; otherwise the section
says the measurement is pending (acc_gpu_status "absent"). Standard library
only.
"""
import csv
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPU = os.environ.get("PAPER_ACC_CPU", "data/cpu/dq_accuracy.csv")
DRAWS = os.environ.get("PAPER_ACC_DRAWS", "data/cpu/dq_draws.csv")
U = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}   # unit roundoff of the dtype (8 and 11 significant bits)
GPU = os.environ.get("PAPER_ACC_GPU", "data/gpu/dq_accuracy.csv")
PASS = os.environ.get("PAPER_ACC_PASS", "data/gpu/studies/dq_pass/dq_pass.csv")
SEQLENS = (64, 192, 704, 1024)
PEERS = (("sdpa_flash", "SDPA flash"), ("sdpa_cudnn", "cuDNN"), ("sdpa_efficient", "efficient"),
         ("sdpa_math", "math"))


def read(rel):
    p = rel if os.path.isabs(rel) else os.path.join(ROOT, rel)
    if not os.path.exists(p):
        return None
    with open(p, newline="") as f:
        return list(csv.DictReader(ln for ln in f if not ln.startswith("#") and ln.strip()))


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def fmt(x, digits=2):
    if x != x:
        return "NaN"
    if x == 0:
        return "0"
    e = math.floor(math.log10(abs(x)))
    return f"{x:.{max(digits - 1 - e, 0)}f}" if -3 <= e < 4 else f"{x:.{digits - 1}e}"


def fmt_cell(x, digits=2):
    """fmt for a narrow table cell: fixed point down to 1e-6, so that no
    exponent's minus sign gives the PDF's column a place to wrap (4.1e-/04)."""
    if x == x and x != 0 and -6 <= math.floor(math.log10(abs(x))) < -3:
        return f"{x:.{digits - 1 - math.floor(math.log10(abs(x)))}f}"
    return fmt(x, digits)


def cpu_values():
    rows = read(CPU)
    v = {"acc_cpu_status": "absent" if rows is None else "present"}
    if rows is None:
        return v

    def one(dtype, causal, N, a, variant):
        for r in rows:
            if (r["dtype"], r["causal"], r["N"], num(r["a"]), r["variant"]) == (dtype, str(causal), str(N), a, variant):
                return r
        raise KeyError((dtype, causal, N, a, variant))

    N = 192
    v["acc_cpu_N"] = str(N)
    for variant in ("math", "flash", "D_only", "exact_D", "centered", "dq_pass"):
        r = one("bf16", 0, N, 120.0, variant)
        v[f"acc_cpu_{variant}"] = fmt(num(r["err_dQ"]))
        r16 = one("fp16", 0, N, 120.0, variant)
        v[f"acc_cpu16_{variant}"] = fmt(num(r16["err_dQ"]))
    f120 = one("bf16", 0, N, 120.0, "flash")
    v["acc_cpu_flash_lo"], v["acc_cpu_flash_hi"] = fmt(num(f120["model_lo"])), fmt(num(f120["model_hi"]))
    d120 = one("bf16", 0, N, 120.0, "D_only")
    v["acc_cpu_termD"] = fmt(num(d120["term_D"]), 3)
    v["acc_cpu_D_only_exact"] = fmt(num(d120["err_dQ"]), 3)
    v["acc_cpu_maxK"] = fmt(num(f120["max_K"]), 3)
    v["acc_cpu_flash_a0"] = fmt(num(one("bf16", 0, N, 0.0, "flash")["err_dQ"]))
    v["acc_cpu_flash_a240"] = fmt(num(one("bf16", 0, N, 240.0, "flash")["err_dQ"]))
    cen = [num(r["err_dQ"]) for r in rows if r["variant"] == "centered"]
    mth = [num(r["err_dQ"]) for r in rows if r["variant"] == "math"]
    v["acc_cpu_centered_max"] = fmt(max(cen))
    v["acc_cpu_math_max"] = fmt(max(mth))
    ratio = [num(c["err_dQ"]) / num(m["err_dQ"]) for c in rows if c["variant"] == "centered"
             for m in rows if m["variant"] == "math" and (m["dtype"], m["causal"], m["N"], m["a"], m["seed"]) ==
             (c["dtype"], c["causal"], c["N"], c["a"], c["seed"])]
    v["acc_cpu_centered_over_math"] = f"{min(ratio):.2f} to {max(ratio):.2f}"
    inside = sum(num(r["model_lo"]) <= num(r["err_dQ"]) <= num(r["model_hi"]) for r in rows)
    v["acc_cpu_bracketed"] = f"{inside} of {len(rows)}"
    v["acc_cpu_a_list"] = ", ".join(f"{a:g}" for a in sorted({num(r["a"]) for r in rows if r["N"] == str(N)}))
    return v


def draw_values():
    """The CPU model over many draws of N = 192, d = 64, bf16, a = 120: how
    often the centered dQ misses twice math's, with and without mask, and
    what removing each of the two roundings does."""
    rows = read(DRAWS)
    v = {"acc_draws_status": "absent" if rows is None else "present"}
    if rows is None:
        return v
    by = {}
    for r in rows:
        by.setdefault((r["causal"], r["seed"]), {})[r["variant"]] = r
    for causal, tag in (("1", "causal"), ("0", "full")):
        ds = [x for (c, _), x in sorted(by.items()) if c == causal]
        v[f"acc_draws_{tag}_n"] = str(len(ds))
        for variant in ("math", "centered", "centered_exact_dS", "centered_exact_D", "dq_pass"):
            errs = [num(x[variant]["err_dQ"]) for x in ds]
            v[f"acc_draws_{tag}_{variant}_mean"] = fmt(sum(errs) / len(errs))
            if variant != "math":
                over = [x for x in ds if num(x[variant]["err_dQ"]) > 2 * num(x["math"]["err_dQ"])]
                v[f"acc_draws_{tag}_{variant}_over"] = str(len(over))
        ratio = [num(x["centered"]["err_dQ"]) / num(x["math"]["err_dQ"]) for x in ds]
        v[f"acc_draws_{tag}_ratio_max"] = f"{max(ratio):.2f}"
        ratio = [num(x["dq_pass"]["err_dQ"]) / num(x["math"]["err_dQ"]) for x in ds]
        v[f"acc_draws_{tag}_dq_pass_ratio_max"] = f"{max(ratio):.2f}"
        over = [x for x in ds if num(x["centered"]["err_dQ"]) > 2 * num(x["math"]["err_dQ"])]
        v[f"acc_draws_{tag}_over_rows"] = (f"{1 + max(int(x['centered']['worst_row']) for x in over)}"
                                           if over else "none")
    return v


def gpu_rows():
    return read(GPU)


def pass_rows():
    """The rows the dQ pass's accuracy and cost are read from: data/gpu/dq_accuracy.csv
    when it holds them (ours_*_full errors and ms_full times: the file the
    section and the provenance appendix cite), else the pass's own study run
    (PASS); None when neither has them."""
    for rows in (read(GPU), read(PASS)):
        if rows and any(r["impl"].endswith("_full") for r in rows) and \
                any(r.get("ms_full") not in (None, "") for r in rows):
            return rows
    return None


def centered(impl):
    """An ours_* row of the centered mode (neither K as given nor the dQ pass)."""
    return impl.startswith("ours_") and not impl.endswith(("_keep_k", "_full"))


def bwd_flops(r):
    """fa_flops of the backward at a kind=time row's shape (core/fa_gpu.h: 2.5 times 4 B H N^2 d, halved
    causal)."""
    N = int(r["seqlen"])
    return 2.5 * 4 * int(r["B"]) * int(r["H"]) * N * N * int(r["d"]) * (0.5 if r["causal"] == "1" else 1.0)


def center_constants():
    """The centering rule's settings as the sources state them: FA_BWD_CENTER_BW
    and FA_BWD_CENTER_LAUNCH_S (core/fa_gpu.h), and each backward version's
    center_rate (its row in kernels/stage5_bwd_*.cu), in SI units."""
    import glob
    import re
    with open(os.path.join(ROOT, "core", "fa_gpu.h")) as f:
        h = f.read()
    const = {k: float(re.search(r"#define\s+" + k + r"\s+([0-9.eE+-]+)", h).group(1))
             for k in ("FA_BWD_CENTER_BW", "FA_BWD_CENTER_LAUNCH_S", "FA_BWD_CENTER_MAX_COST")}
    rates = {}
    for path in glob.glob(os.path.join(ROOT, "kernels", "stage5_bwd_*.cu")):
        with open(path) as f:
            for mo in re.finditer(r"\.pass = FA_BACKWARD, \.version = (\d+),[^;]*?\.center_rate = ([0-9.eE+]+)",
                                  f.read()):
                rates[f"v{mo.group(1)}"] = float(mo.group(2))
    return const, rates


def rate_band():
    """(low, high): tests/center_rule.py holds each version's center_rate within
    low x and high x the best rate it measured; read from the test itself."""
    import re
    with open(os.path.join(ROOT, "tests", "center_rule.py")) as f:
        mo = re.search(r"if not ([0-9.]+) \* b <= rate <= ([0-9.]+) \* b:", f.read())
    if not mo:
        sys.exit("paper_accuracy.py: tests/center_rule.py's band for center_rate ('if not L * b <= rate <= H * b:') "
                 "is not where rate_band() looks for it")
    return float(mo.group(1)), float(mo.group(2))


def band_words():
    lo, hi = rate_band()
    return f"{(1 - lo) * 100:.0f}% below and {(hi - 1) * 100:.0f}% above"


def center_values(t):
    """What the centering rule's settings are fitted to, from the kind=time rows t
    (tests/center_rule.py checks the same): each version's highest backward
    FLOP/s (fa_flops over the time with K as given), the measured pre-pass
    time over the rule's prediction (the median, its spread, and the
    bandwidth that would match the median), and the measured cost of the
    version-3 points a rule at that bandwidth would center though they cost
    FA_BWD_CENTER_MAX_COST or more."""
    v = {}
    const, rates = center_constants()
    ver = lambda r: r["impl"].split("_")[1]  # noqa: E731
    best = {}
    for r in t:
        best[ver(r)] = max(best.get(ver(r), 0.0), bwd_flops(r) / (num(r["ms_keep_k"]) * 1e-3) / 1e12)
    order = sorted(best, key=lambda k: int(k[1:]))
    v["acc_center_best"] = ", ".join(f"{best[k]:.1f}" for k in order[:-1]) + f" and {best[order[-1]]:.1f}"
    if any(ver(r) not in rates for r in t):
        return v
    launch, bw, bar = const["FA_BWD_CENTER_LAUNCH_S"], const["FA_BWD_CENTER_BW"], const["FA_BWD_CENTER_MAX_COST"]
    pre = {id(r): (num(r["predicted_ratio"]) - 1) * bwd_flops(r) / rates[ver(r)] for r in t}   # the rule's, s
    ratio = sorted((num(r["ms_centered"]) - num(r["ms_keep_k"])) * 1e-3 / pre[id(r)] for r in t)
    med = ratio[len(ratio) // 2] if len(ratio) % 2 else 0.5 * (ratio[len(ratio) // 2 - 1] + ratio[len(ratio) // 2])
    v["acc_center_median"] = f"{med:.2f}"
    v["acc_center_spread"] = f"{ratio[0]:.2f} to {ratio[-1]:.2f}"
    v["acc_center_median_bw"] = f"{bw / med / 1e12:.1f} TB/s"
    # the rule with the bytes' time scaled to the median's bandwidth
    fast = [(num(r["time_ratio"]) - 1, int(ver(r)[1:])) for r in t
            if ((pre[id(r)] - launch) * med + launch) / (bwd_flops(r) / rates[ver(r)]) < bar
            and num(r["time_ratio"]) - 1 >= bar]
    if fast:
        vers = sorted({n for _, n in fast})
        v["acc_center_fast_cost"] = f"{min(fast)[0] * 100:.1f} to {max(fast)[0] * 100:.1f}%"
        v["acc_center_fast_at"] = (f"{len(fast)} measured point{'s' if len(fast) != 1 else ''} of version"
                                   f"{'s' if len(vers) != 1 else ''} " + ", ".join(map(str, vers)))
        v["acc_center_fast_reading"] = (f"The rule at that faster bandwidth would center {v['acc_center_fast_at']} "
                                        f"where the centered backward measured {v['acc_center_fast_cost']} slower, "
                                        "so the rule keeps the slower, cautious value.")
    else:
        v["acc_center_fast_cost"], v["acc_center_fast_at"] = "none", "no measured point"
        v["acc_center_fast_reading"] = (f"At that faster bandwidth the rule would center no measured point that "
                                        f"costs {bar * 100:.0f}% or more here; it keeps the slower value all the "
                                        f"same, as a margin: the ratio spreads from {ratio[0]:.2f} to "
                                        f"{ratio[-1]:.2f} over the points, so one bandwidth models the pre-pass "
                                        "only roughly.")
    return v


def gpu_values():
    rows = gpu_rows()
    v = {"acc_gpu_status": "absent" if rows is None else "present"}
    for k in ("acc_gpu_cost", "acc_gpu_cost_N", "acc_gpu_commit", "acc_gpu_date", "acc_gpu_gpu",
              "acc_gpu_ours_max", "acc_gpu_keep_min", "acc_gpu_math_max", "acc_gpu_cudnn_nan",
              "acc_gpu_keep_min_at", "acc_gpu_keep_min_bf16", "acc_gpu_keep_table_v", "acc_gpu_fused_min_bf16", "acc_gpu_cudnn_nan_by",
              "acc_gpu_flash_min", "acc_gpu_fused_min", "acc_gpu_default", "acc_gpu_over_math", "acc_gpu_within2",
              "acc_gpu_auto_max", "acc_gpu_off_min", "acc_gpu_auto_shapes", "acc_gpu_auto_n",
              "acc_gpu_missed", "acc_gpu_miss", "acc_gpu_miss_by", "acc_gpu_miss_u", "acc_gpu_miss_math_u",
              "acc_gpu_one_rule_counter", "acc_gpu_one_rule_reading", "acc_gpu_rule_commit", "acc_center_best", "acc_center_median",
              "acc_center_spread", "acc_center_median_bw", "acc_center_fast_cost", "acc_center_fast_at",
              "acc_center_fast_reading", "acc_center_band"):
        v[k] = "n/a"
    if rows is None:
        return v
    first = rows[0]
    v["acc_gpu_commit"], v["acc_gpu_date"], v["acc_gpu_gpu"] = first["commit"], first["date"], first["gpu"]
    # the rule's columns: as the run wrote them, or recomputed later (scripts/gpu/dq_accuracy.py --rule-only)
    v["acc_gpu_rule_commit"] = first["commit"]
    with open(GPU if os.path.isabs(GPU) else os.path.join(ROOT, GPU)) as f:
        for ln in f:
            if ln.startswith("# rule:") and " at " in ln:
                v["acc_gpu_rule_commit"] = ln.split(" at ", 1)[1].split(",")[0].strip()
    err = [r for r in rows if r["kind"] == "error"]
    ours = [num(r["err_dQ"]) for r in err if centered(r["impl"]) and r["err_dQ"] != ""]
    keep = [num(r["err_dQ"]) for r in err if r["impl"].endswith("_keep_k") and r["err_dQ"] != ""]
    mth = [num(r["err_dQ"]) for r in err if r["impl"] == "sdpa_math" and r["err_dQ"] != ""]
    fl = [num(r["err_dQ"]) for r in err if r["impl"] == "sdpa_flash" and r["err_dQ"] != ""]
    if ours:
        v["acc_gpu_ours_max"] = fmt(max(ours))
    if keep:
        v["acc_gpu_keep_min"] = fmt(min(keep))
        # which row it is, and the bf16 table's own uncentered column (the version it shows)
        kr = [r for r in err if r["impl"].endswith("_keep_k") and r["err_dQ"] != ""]
        lo = min(kr, key=lambda r: num(r["err_dQ"]))
        v["acc_gpu_keep_min_at"] = (f"version {lo['impl'].split('_')[1][1:]}, {lo['dtype']}, $N$ = {lo['seqlen']}"
                                    f"{' causal' if lo['causal'] == '1' else ' no mask'}")
        order = []   # the table's uncentered column is the last centered version's (error_tables)
        for r in err:
            if centered(r["impl"]) and r["impl"] not in order:
                order.append(r["impl"])
        shown = [num(r["err_dQ"]) for r in kr if r["dtype"] == "bf16" and order and r["impl"] == order[-1] + "_keep_k"]
        v["acc_gpu_keep_table_v"] = order[-1].split("_")[1] if order else "n/a"
        v["acc_gpu_keep_min_bf16"] = fmt(min(shown)) if shown else "n/a"
    if mth:
        v["acc_gpu_math_max"] = fmt(max(mth))
    if fl:
        v["acc_gpu_flash_min"] = fmt(min(fl))
    # every fused SDPA backend (flash, cuDNN, memory-efficient): the smallest error of any
    fused = [num(r["err_dQ"]) for r in err if r["impl"] in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient")
             and r["err_dQ"] != "" and math.isfinite(num(r["err_dQ"]))]
    if fused:
        v["acc_gpu_fused_min"] = fmt(min(fused))
        fb = [num(r["err_dQ"]) for r in err if r["impl"] in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient")
              and r["dtype"] == "bf16" and r["err_dQ"] != "" and math.isfinite(num(r["err_dQ"]))]
        v["acc_gpu_fused_min_bf16"] = fmt(min(fb)) if fb else "n/a"
    math_of = {(r["dtype"], r["seqlen"], r["causal"]): num(r["err_dQ"]) for r in err if r["impl"] == "sdpa_math"}
    pairs = [(num(r["err_dQ"]), math_of[(r["dtype"], r["seqlen"], r["causal"])]) for r in err
             if centered(r["impl"]) and r["err_dQ"] != "" and (r["dtype"], r["seqlen"], r["causal"]) in math_of]
    if pairs:
        v["acc_gpu_over_math"] = f"{max(a / b for a, b in pairs):.2f}"
        v["acc_gpu_within2"] = f"{sum(a <= 2 * b for a, b in pairs)} of {len(pairs)}"
        # where twice math's is missed: the (dtype, seqlen, mask) points and the versions there
        miss = {}
        for r in err:
            key = (r["dtype"], r["seqlen"], r["causal"])
            if (centered(r["impl"]) and r["err_dQ"] != ""
                    and key in math_of and num(r["err_dQ"]) > 2 * math_of[key]):
                miss.setdefault(key, []).append((r["impl"].split("_")[1], num(r["err_dQ"])))
        if miss:
            parts, by, us, mus = [], [], [], []
            for (dt, N, c), vs in sorted(miss.items()):
                e = [x for _, x in vs]
                same = " alike" if max(e) == min(e) else ""
                parts.append(f"{', '.join(n for n, _ in vs)}{same} at N = {N} {'causal' if c == '1' else 'full'}, "
                             f"{dt}: {fmt(max(e))} against math's {fmt(math_of[(dt, N, c)])}, "
                             f"{max(e) / math_of[(dt, N, c)]:.2f} times")
                by.append(f"{(max(e) / (2 * math_of[(dt, N, c)]) - 1) * 100:.1f}%")
                us.append(f"{max(e) / U[dt]:.2f}")
                mus.append(f"{math_of[(dt, N, c)] / U[dt]:.2f}")
            v["acc_gpu_miss"], v["acc_gpu_miss_by"] = "; ".join(parts), ", ".join(by)
            v["acc_gpu_miss_u"], v["acc_gpu_miss_math_u"] = ", ".join(us), ", ".join(mus)
        else:
            v["acc_gpu_miss"] = "nowhere"
    cudnn_nan = [r for r in err if r["impl"] == "sdpa_cudnn" and r["nonfinite"] not in ("", "0")]
    finite_ours = {(r["dtype"], r["seqlen"], r["causal"]) for r in err
                   if r["impl"].startswith("ours_") and r["nonfinite"] == "0"}
    both = [r for r in cudnn_nan if (r["dtype"], r["seqlen"], r["causal"]) in finite_ours]
    v["acc_gpu_cudnn_nan"] = f"{len(both)} of {sum(r['impl'] == 'sdpa_cudnn' for r in err)}"
    dts = sorted({r["dtype"] for r in err if r["impl"] == "sdpa_cudnn"})
    v["acc_gpu_cudnn_nan_by"] = " and ".join(f"{sum(r['dtype'] == dt for r in both)} in {dt}" for dt in dts)
    t = [r for r in rows if r["kind"] == "time"]
    if t:
        ratios = [num(r["time_ratio"]) for r in t]
        lo, hi = min(ratios), max(ratios)
        v["acc_gpu_cost"] = f"{(lo - 1) * 100:+.1f}% to {(hi - 1) * 100:+.1f}%"
        Ns = sorted({int(r["seqlen"]) for r in t})
        ds = sorted({int(r["d"]) for r in t})
        v["acc_gpu_cost_N"] = (f"N = {Ns[0]} to {Ns[-1]}, d = {' and '.join(map(str, ds))}" if len(Ns) > 1
                               else f"N = {t[0]['seqlen']}, d = {t[0]['d']}, {t[0]['note'].split(';')[0]}")
        v["acc_gpu_default"] = "the default" if hi < 1.03 else "not under 3% everywhere"
        if all(r.get("auto") not in (None, "") for r in t):   # rows that carry the auto mode's choice
            on = [num(r["time_ratio"]) - 1 for r in t if r["auto"] == "1"]
            off = [num(r["time_ratio"]) - 1 for r in t if r["auto"] == "0"]
            if on:
                v["acc_gpu_auto_max"] = f"{max(on) * 100:.1f}%"
            if off:
                v["acc_gpu_off_min"] = f"{min(off) * 100:.1f}%"
            v["acc_gpu_auto_n"] = f"{len(on)} of {len(t)}"
            missed = [x for x in off if x < 0.03]
            v["acc_gpu_missed"] = (f"{len(missed)} (measured {min(missed) * 100:.1f}% to {max(missed) * 100:.1f}%)"
                                   if missed else "none")
            # per version and mask, the shortest N the rule centers, per d when the d's differ
            vers = sorted({r["impl"] for r in t}, key=lambda i: int(i.split("_")[1][1:]))
            ds = sorted({int(r["d"]) for r in t})
            out = []
            for impl in vers:
                masks = []
                for c, m in (("0", "no mask"), ("1", "causal")):
                    firsts = [min((int(r["seqlen"]) for r in t if r["impl"] == impl and r["causal"] == c
                                   and int(r["d"]) == d and r["auto"] == "1"), default=None) for d in ds]
                    if all(n is None for n in firsts):
                        masks.append(f"{m} nowhere")
                    elif len(set(firsts)) == 1:
                        masks.append(f"{m} $N \\ge$ {firsts[0]}")
                    else:
                        masks.append(f"{m} " + ", ".join(f"$N \\ge$ {n} at $d$ = {d}" if n else f"nowhere at $d$ = {d}"
                                                         for n, d in zip(firsts, ds)))
                out.append(f"{impl.split('_')[1]}: " + ", ".join(masks))
            v["acc_gpu_auto_shapes"] = "; ".join(out)
        # a shape where one version must be centered (under 1%) and another must not (3% or more)
        shapes = {}
        for r in t:
            shapes.setdefault((int(r["seqlen"]), r["causal"], int(r["d"])), []).append(
                (num(r["time_ratio"]) - 1, r["impl"].split("_")[1]))
        split = [(max(c)[0] - min(c)[0], k, min(c), max(c)) for k, c in shapes.items()
                 if min(c)[0] < 0.01 and max(c)[0] >= 0.03]
        if split:
            _, (N, c, d), lo, hi = max(split)
            v["acc_gpu_one_rule_counter"] = (f"N = {N} {'causal' if c == '1' else 'without a mask'}, d = {d}, "
                                             f"{lo[1]} costs {lo[0] * 100:.1f}% and {hi[1]} {hi[0] * 100:.1f}%")
            v["acc_gpu_one_rule_reading"] = ("A rule that decides alike for every version cannot pass it: at "
                                             + v["acc_gpu_one_rule_counter"] + ".")
        else:
            v["acc_gpu_one_rule_reading"] = ("At these timings a rule that decided alike for every version could "
                                             "pass it too, since no measured shape has one version under 1% and "
                                             "another at 3% or more; the rule is per version because the cost is, "
                                             "the same pre-pass against each version's own rate.")
        if all(r.get("predicted_ratio") not in (None, "") for r in t):
            v.update(center_values(t))
            v["acc_center_band"] = band_words()
    return v


def pass_values():
    """The dQ pass (FA_BWD_DQ_PASS), from its own run (data/gpu/studies/dq_pass/dq_pass.csv,
    data/gpu/studies/dq_pass/dq_pass.sh): every version's dQ with the pass against
    SDPA math's of the same run, the backward's time with the pass over its
    time with K as given, the pass's own rate; and what that run's repeat
    of the centering's timings says of the rule's margins."""
    rows = pass_rows()
    study = read(PASS)
    v = {"acc_pass_status": "absent" if rows is None else "present"}
    for k in ("acc_gpu_full_max", "acc_gpu_full_over_math", "acc_gpu_full_within2", "acc_gpu_full_cost",
              "acc_gpu_full_pass_tflops", "acc_gpu_full_v3_worst", "acc_pass_commit", "acc_pass_date",
              "acc_pass_rerun", "acc_pass_rate_fail", "acc_pass_verdict", "acc_pass_src"):
        v[k] = "n/a"
    if rows is None:
        return v
    v["acc_pass_commit"], v["acc_pass_date"] = rows[0]["commit"], rows[0]["date"]
    v["acc_pass_src"] = GPU if rows is not study else PASS
    err = [r for r in rows if r["kind"] == "error"]
    math_of = {(r["dtype"], r["seqlen"], r["causal"]): num(r["err_dQ"]) for r in err if r["impl"] == "sdpa_math"}
    full = [(num(r["err_dQ"]), math_of[(r["dtype"], r["seqlen"], r["causal"])]) for r in err
            if r["impl"].endswith("_full") and r["err_dQ"] != "" and (r["dtype"], r["seqlen"], r["causal"]) in math_of]
    if full:
        v["acc_gpu_full_max"] = fmt(max(a for a, _ in full))
        v["acc_gpu_full_over_math"] = f"{max(a / b for a, b in full):.2f}"
        v["acc_gpu_full_within2"] = f"{sum(a <= 2 * b for a, b in full)} of {len(full)}"
    tf = [r for r in rows if r["kind"] == "time" and r.get("ms_full") not in (None, "")]
    if tf:
        # the backward with the pass over the backward as given, per version; the pass's own rate (its
        # six products of 2 N^2 d, 1.2 times the backward's FLOPs, over the time it adds)
        parts = []
        for impl in sorted({r["impl"] for r in tf}, key=lambda i: int(i.split("_")[1][1:])):
            q = [num(r["full_ratio"]) for r in tf if r["impl"] == impl]
            parts.append(f"{impl.split('_')[1]} {min(q):.2f} to {max(q):.2f} times")
        v["acc_gpu_full_cost"] = ", ".join(parts)
        rate = [1.2 * bwd_flops(r) / ((num(r["ms_full"]) - num(r["ms_keep_k"])) * 1e-3) / 1e12 for r in tf
                if int(r["seqlen"]) >= 4096]
        v["acc_gpu_full_pass_tflops"] = f"{min(rate):.0f} to {max(rate):.0f}"
        w = max((r for r in tf if r["impl"].startswith("ours_v3")), key=lambda r: num(r["full_ratio"]), default=None)
        if w:
            v["acc_gpu_full_v3_worst"] = (f"{num(w['full_ratio']):.2f} times at N = {w['seqlen']}, d = {w['d']}"
                                          f"{' causal' if w['causal'] == '1' else ''} ({num(w['ms_keep_k']):.2f} ms "
                                          f"as given, {num(w['ms_full']):.2f} ms with the pass)")
        # the pass's own study run (PASS: another run than the centering table's) timed the centering
        # too: its timings against what tests/center_rule.py holds the rule to: the best rate per
        # version (center_rate must be at least it), centered points at 3% or more, points under 1%
        # left uncentered
        tf = [r for r in (study or []) if r["kind"] == "time" and r.get("ms_full") not in (None, "")]
    if tf:
        best = {}
        for r in tf:
            k = r["impl"].split("_")[1]
            best[k] = max(best.get(k, 0.0), bwd_flops(r) / (num(r["ms_keep_k"]) * 1e-3) / 1e12)
        parts = ["versions " + ", ".join(sorted(best, key=lambda k: int(k[1:]))).replace("v", "") + " reached "
                 + ", ".join(f"{best[k]:.1f}" for k in sorted(best, key=lambda k: int(k[1:]))) + " TFLOP/s"]
        over = [r for r in tf if r.get("auto") == "1" and num(r["time_ratio"]) >= 1.03]
        under = [r for r in tf if r.get("auto") == "0" and num(r["time_ratio"]) < 1.01]

        def at(r):
            return (f"{r['impl'].split('_')[1]} at d = {r['d']}, N = {r['seqlen']}{' causal' if r['causal'] == '1' else ''}"
                    f" ({(num(r['time_ratio']) - 1) * 100:.2f}% measured, {(num(r['predicted_ratio']) - 1) * 100:.2f}% "
                    "predicted)")
        parts.append(f"{len(over)} centered point{'s' if len(over) != 1 else ''} cost 3% or more"
                     + (": " + "; ".join(at(r) for r in over) if over else ""))
        parts.append(f"{len(under)} point{'s' if len(under) != 1 else ''} under 1% {'were' if len(under) != 1 else 'was'}"
                     " left uncentered" + (": " + "; ".join(at(r) for r in under) if under else ""))
        v["acc_pass_rerun"] = ", ".join(parts[:-1]) + " and " + parts[-1]
        # the versions whose center_rate tests/center_rule.py's check (within its band around the
        # best rate measured) would refuse against this run's best
        _, rates = center_constants()
        lo, hi = rate_band()
        fail = [int(k[1:]) for k in sorted(best, key=lambda k: int(k[1:]))
                if k in rates and not lo * best[k] <= rates[k] / 1e12 <= hi * best[k]]
        v["acc_pass_rate_fail"] = ("no version" if not fail else
                                   ("version " if len(fail) == 1 else "versions ")
                                   + ", ".join(map(str, fail[:-1])) + (" and " if len(fail) > 1 else "")
                                   + str(fail[-1]))
        verdict = [("would accept every version's rate" if not fail else
                    f"would refuse the rate of {v['acc_pass_rate_fail']}")
                   + f" (each must lie within {band_words()} the best its version reached)"]
        if over:
            verdict.append(f"fail on the centered point{'s' if len(over) != 1 else ''} that cost 3% or more")
        if under:
            verdict.append(f"fail on the point{'s' if len(under) != 1 else ''} under 1% left uncentered")
        if not (over or under):
            verdict.append("pass its check of the measured costs")
        v["acc_pass_verdict"] = ", ".join(verdict[:-1]) + " and " + verdict[-1]
    v.update(pass_ncu_values())
    return v


def pass_ncu_values():
    """Nsight Compute on the pass's two kernels (data/gpu/studies/dq_pass_ncu/,
    data/gpu/studies/dq_pass_ncu/dq_pass_ncu.sh) against fa_bwd_dq_pass_bytes (its
    model.csv): time, L2 reads and DRAM bytes per shape."""
    import paper_gpu
    v = {"acc_pass_ncu": "n/a"}
    model = read("data/gpu/studies/dq_pass_ncu/model.csv")
    if not model:
        return v
    parts = []
    for m in model:
        ks = paper_gpu.ncu_kernels(f"data/gpu/studies/dq_pass_ncu/ncu_d{m['d']}_n{m['seqlen']}_c{m['causal']}.csv")
        if len(ks) != 2:
            continue
        ms = [k["gpu__time_duration.sum"] / 1e6 for k in ks]
        l2 = sum(k["lts__t_sectors_srcunit_tex_op_read.sum"] * 32 for k in ks)
        dram = sum(k["dram__bytes.sum"] for k in ks)
        pipe = [k["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"] for k in ks]
        mb = num(m["model_bytes"])
        parts.append(f"at d = {m['d']}, N = {m['seqlen']}{' causal' if m['causal'] == '1' else ''}, phase 0 took "
                     f"{ms[0]:.2f} ms and phase 1 {ms[1]:.2f} ms (tensor pipe {pipe[0]:.0f}% and {pipe[1]:.0f}%), "
                     f"their L2 reads were {l2 / mb:.2f} times the model's {mb / 1e9:.1f} GB, and DRAM moved "
                     f"{dram / 1e9:.2f} GB")
    if parts:
        v["acc_pass_ncu"] = "; ".join(parts)
    return v


def values():
    v = cpu_values()
    v.update(draw_values())
    v.update(gpu_values())
    v.update(pass_values())
    return v


def shape_rows(t, vers, ds, cell):
    """Table rows over kind=time rows t: one per (mask, N), then cell(row) per version and d ("--" where
    that point was not measured)."""
    out = []
    for causal in ("0", "1"):
        for N in sorted({int(r["seqlen"]) for r in t}):
            at = {(r["impl"], int(r["d"])): r for r in t if r["seqlen"] == str(N) and r["causal"] == causal}
            if not at:
                continue
            row = [f"{N} {'causal' if causal == '1' else 'full'}"]
            row += ["--" if at.get((o, d)) is None else cell(at[(o, d)]) for o in vers for d in ds]
            out.append("| " + " | ".join(row) + " |")
    return out


def write_table(out):
    """DIR/dq_accuracy.md: err dQ by seqlen and mask in bf16 (the chapter);
    DIR/dq_accuracy_fp16.md: the same in fp16, DIR/dq_accuracy_cost.md: the
    centering's cost per version, measured beside predicted, and
    DIR/dq_accuracy_pass.md: the dQ pass's time (the records appendix). A file
    whose data is absent is removed."""
    rows = gpu_rows()
    path = os.path.join(out, "dq_accuracy.md")
    fp16_path = os.path.join(out, "dq_accuracy_fp16.md")
    cost_path = os.path.join(out, "dq_accuracy_cost.md")
    pass_path = os.path.join(out, "dq_accuracy_pass.md")
    if rows is None:
        for p in (path, fp16_path, cost_path, pass_path):
            if os.path.exists(p):
                os.remove(p)
        return
    prows = pass_rows() or []
    os.makedirs(out, exist_ok=True)
    write_lines(path, error_tables(rows, prows, "bf16"))
    write_lines(fp16_path, error_tables(rows, prows, "fp16"))
    t = [r for r in rows if r["kind"] == "time"]
    cost, passes = time_tables(t, prows)
    write_lines(cost_path, cost)
    write_lines(pass_path, passes)


def write_lines(path, lines):
    """lines into path, or path removed when there are none."""
    if not lines:
        if os.path.exists(path):
            os.remove(path)
        return
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def error_tables(rows, prows, dtype):
    """The error of dQ in dtype: our centered versions, the last one
    uncentered and with the dQ pass, beside SDPA's backends ([] where that
    dtype was not measured)."""
    err = [r for r in rows if r["kind"] == "error"]
    full_of = {(r["dtype"], r["seqlen"], r["causal"], r["impl"]): r for r in prows
               if r["kind"] == "error" and r["impl"].endswith("_full")}
    ours = []
    for r in err:
        if centered(r["impl"]) and r["impl"] not in ours:
            ours.append(r["impl"])
    sub = [r for r in err if r["dtype"] == dtype]
    if not sub:
        return []
    lines = []
    last = ours[-1] if ours else None
    head = ["seqlen, mask"] + [o.split("_")[1] for o in ours]
    if last:
        head.append(last.split("_")[1] + " uncentered")
        if full_of:
            head.append(last.split("_")[1] + " + dQ pass")
    head += [name for _, name in PEERS]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for N in SEQLENS:
        for causal in ("1", "0"):
            cell = {r["impl"]: r for r in sub if r["seqlen"] == str(N) and r["causal"] == causal}
            if not cell:
                continue

            def e(impl):
                r = cell.get(impl)
                if r is None or r["err_dQ"] == "":
                    return "--"
                return fmt_cell(num(r["err_dQ"]))
            row = [f"{N} {'causal' if causal == '1' else 'no mask'}"] + [e(o) for o in ours]
            if last:
                row.append(e(last + "_keep_k"))
                if full_of:
                    f = full_of.get((dtype, str(N), causal, last + "_full"))
                    row.append("--" if f is None or f["err_dQ"] == "" else fmt_cell(num(f["err_dQ"])))
            row += [e(impl) for impl, _ in PEERS]
            lines.append("| " + " | ".join(row) + " |")
    src = {r["commit"] for r in sub} | {r["commit"] for r in full_of.values()}
    vs = ", ".join(o.split("_")[1] for o in ours)
    lines += ["", f": Largest error of $\\mathrm{{d}}Q$ in {dtype} over max$|\\mathrm{{d}}Q|$ (rows of kind "
              f"error), by sequence length and mask: our versions {vs} with $K$ centered, "
              + (f"{last.split('_')[1]} also with $K$ as given (uncentered) and with the dQ pass, " if last else "")
              + "and SDPA's backends on the same inputs ($d$ = 64, one head, against an fp64 reference). "
              f"Data: `{GPU}`" + (f" (commit {', '.join(sorted(src))})" if src else "") + ".", ""]
    return lines


def time_tables(t, prows):
    """(cost, passes): the lines of the centering's cost table over kind=time
    rows t, and of the dQ pass's time table from prows ([] where absent)."""
    cost, passes = [], []
    if t and all(r.get("predicted_ratio") not in (None, "") for r in t):
        # the cost in percent of the backward per version and d: measured, then the rule's prediction
        ds = sorted({int(r["d"]) for r in t})
        vers = []
        for r in t:
            if r["impl"] not in vers:
                vers.append(r["impl"])
        head = ["N, mask"] + [f"{o.split('_')[1]} d={d}" for o in vers for d in ds]
        cost.append("Cost of the centering in percent of one backward's time, measured / predicted "
                    f"(bf16, B N = {int(t[0]['B']) * int(t[0]['seqlen'])}, "
                    f"{t[0]['note'].split(';')[1].strip()}; predicted: fa_bwd_center_cost for that "
                    "version; * where the auto mode centers):\n")
        cost.append("| " + " | ".join(head) + " |")
        cost.append("|" + "|".join(["-----"] + ["---:"] * (len(head) - 1)) + "|")

        def pct(x):
            return f"{(x - 1) * 100:.1f}"
        cost += shape_rows(t, vers, ds, lambda r: f"{pct(num(r['time_ratio']))} / {pct(num(r['predicted_ratio']))}"
                           + ("*" if r["auto"] == "1" else ""))
        cost.append("")
        tf = [r for r in prows if r["kind"] == "time" and r.get("ms_full") not in (None, "")]
        if tf:
            passes.append("Time of the backward with the dQ pass (accurate_dq=\"full\") over its time with K as "
                          f"given, and the time with the pass in ms (bf16, the shapes of the centering's cost "
                          f"table; run of commit {tf[0]['commit']}):\n")
            passes.append("| " + " | ".join(head) + " |")
            passes.append("|" + "|".join(["-----"] + ["---:"] * (len(head) - 1)) + "|")
            passes += shape_rows(tf, vers, ds, lambda r: f"{num(r['full_ratio']):.2f} ({num(r['ms_full']):.2f})")
            passes.append("")
    elif t:
        cost.append("Time of one backward with and without the centering (bf16, "
                    f"$N$ = {t[0]['seqlen']}, $d$ = {t[0]['d']}, {t[0]['note'].split(';')[0]}):\n")
        cost.append("| version | mask | centered [ms] | as given [ms] | ratio |")
        cost.append("|---|---|---:|---:|---:|")
        for r in t:
            cost.append(f"| {r['impl'].split('_')[1]} | {'causal' if r['causal'] == '1' else 'full'} | "
                        f"{num(r['ms_centered']):.2f} | {num(r['ms_keep_k']):.2f} | {num(r['time_ratio']):.2f} |")
        cost.append("")
    return cost, passes


def main(argv):
    if "--out" in argv:
        write_table(argv[argv.index("--out") + 1])
    for k, x in sorted(values().items()):
        print(f"{k}\t{x}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
