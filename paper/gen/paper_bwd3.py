#!/usr/bin/env python3
"""paper/gen/paper_bwd3.py -- backward version 3 (Hopper) as its section quotes it.

    python3 paper/gen/paper_bwd3.py              prints the values, one "key<TAB>value" a line
    python3 paper/gen/paper_bwd3.py --out DIR    also writes DIR/bwd_hopper_steps.dat,
                                                 the figure's points (figures/bwd_hopper_steps.gp)

claims.py takes values() into build/paper/values.tsv. The data, each file
one device call of scripts/gpu/bench_gpu.py (same tensors for every path of a
row's shape, peers timed in the same call):

  data/gpu/bench_bwd.csv          the final run's backward table, when it holds
                                  rows of backward version 3 (impl
                                  ours_v3_hopper, pass bwd); else
  data/gpu/studies/bwd_v3_steps/bench.csv   the run at the issue's shapes: bf16 and fp16,
                                  d 64 and 128, N 2048 to 16384, causal and not
  data/gpu/studies/bwd_v3_steps/bench_steps_1_2.csv
                                  the earlier call that timed step 1 beside
                                  step 2: used only for steps the main file
                                  lacks

Rows are named by what ran: ours_v3_hopper is version 3's default step
(BWD_V3_DEFAULT_STEP in kernels/stage5_bwd_v3_hopper.cu), ours_v3_hopper_stepK step
K, ours_v3_hopper_det the deterministic mode, ours_v4_mma8 version 4
(ours_v3_mma8 in files written before the renumbering), sdpa_flash and
sdpa_cudnn PyTorch's backends. Other names are ignored. Every ratio is of two
rows of one file at one shape (dtype, d, causal, N); causal and non-causal
shapes are never pooled into one point, and a geometric mean over both is
given only where the target itself is defined over both.
Without the files every key is "n/a" (hb_status "absent"). Standard library only.
"""
import csv
import math
import os
import re
import sys

import paper_gpu  # print_values, write_dat, ncu_kernels, span
from paper_gpu import span  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FINAL = os.environ.get("PAPER_BWD_CSV", "data/gpu/bench_bwd.csv")
HOPPER = os.environ.get("PAPER_BWD3_CSV", "data/gpu/studies/bwd_v3_steps/bench.csv")
EARLIER = os.environ.get("PAPER_BWD3_STEPS_CSV", "data/gpu/studies/bwd_v3_steps/bench_steps_1_2.csv")
STEP3 = os.environ.get("PAPER_BWD3_STEP3_CSV", "data/gpu/studies/bwd_v3_steps/step3_vs_step2.csv")   # steps 2 and 3 side by side
NCU_DIR = os.environ.get("PAPER_NCU_DIR", "data/gpu/studies/hopper_ncu")          # scripts/gpu/ncu_hopper.sh's files
# the passes around the main kernel after they were rewritten (a study)
SIDE_NCU_DIR = os.environ.get("PAPER_SIDE_NCU_DIR", "data/gpu/studies/bwd_v3_steps/side_passes_ncu")
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def _commit_of(rel):
    """The commit named in a device script's env.txt ('commit: X;'), or n/a."""
    try:
        with open(full(rel)) as f:
            mo = re.search(r"commit: ([0-9a-f]+)", f.read())
    except OSError:
        return "n/a"
    return mo.group(1) if mo else "n/a"


def ncu_values(v):
    """Where backward 3 (step 3) loses to cuDNN's, from Nsight Compute: at
    d 128 N 8192 without a mask and d 64 N 2048 causal, the main kernel's
    time, tensor-pipe use, instructions and shared-memory (MIO) throttle
    stalls beside cuDNN's, and the passes around it before and after they
    were rewritten (SIDE_NCU_DIR's files)."""
    def ncu_kernels(name):
        return paper_gpu.ncu_kernels(os.path.join(NCU_DIR, name))
    T, TP = "gpu__time_duration.sum", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
    for tag, sh in (("128", "bwd_d128_n8192_c0"), ("64c", "bwd_d64_n2048_c1")):
        ours, cud = ncu_kernels(f"ncu_{sh}_step3.csv"), ncu_kernels(f"ncu_{sh}_cudnn.csv")
        if not ours or not cud:
            continue
        mo, mc = max(ours, key=lambda k: k[T]), max(cud, key=lambda k: k[T])
        v[f"hb_ncu_N_{tag}"] = re.search(r"_n(\d+)_", sh).group(1)
        v[f"hb_ncu_main_{tag}"] = f"{mc[T] / mo[T]:.2f}"
        v[f"hb_ncu_tp_{tag}"] = f"{mo[TP]:.0f} %"
        v[f"hb_ncu_tp_cudnn_{tag}"] = f"{mc[TP]:.0f} %"
        v[f"hb_ncu_inst_{tag}"] = f"{mo['smsp__inst_executed.sum'] / mc['smsp__inst_executed.sum']:.2f}"
        mio = STALL.format("mio_throttle")
        if mc.get(mio):
            v[f"hb_ncu_mio_{tag}"] = f"{mo[mio] / mc[mio]:.0f}"
        side = sum(k[T] for k in ours if k is not mo) / 1e3
        v[f"hb_ncu_side_{tag}"] = f"{side:.0f}"
        v[f"hb_ncu_side_cudnn_{tag}"] = f"{sum(k[T] for k in cud if k is not mc) / 1e3:.0f}"
        fin = paper_gpu.ncu_kernels(os.path.join(SIDE_NCU_DIR, f"ncu_{sh}_ours.csv"))
        if fin:
            mf = max(fin, key=lambda k: k[T])
            v[f"hb_ncu_side_final_{tag}"] = f"{sum(k[T] for k in fin if k is not mf) / 1e3:.0f}"
        v["hb_ncu_regs"] = f"{mo['launch__registers_per_thread']:.0f}"
        v["hb_ncu_grid_" + tag] = f"{mo['launch__grid_size']:.0f}"
        v["hb_ncu_grid_cudnn"] = f"{mc['launch__grid_size']:.0f}"
KERNEL = "kernels/stage5_bwd_v3_hopper.cu"
V4_NAMES = ("ours_v4_mma8", "ours_v3_mma8")
FLASH, CUDNN, V3, V3_DET = "sdpa_flash", "sdpa_cudnn", "ours_v3_hopper", "ours_v3_hopper_det"
N_LO, N_HI = 2048, 16384          # the target range
EARLIER_DEFAULT = 2               # BWD_V3_DEFAULT_STEP at the earlier call's commit (a77a339)
TARGET_CUDNN, TARGET_SHAPE_MIN, TARGET_FLASH, TARGET_FP16 = 1.0, 0.95, 1.6, 0.05


def full(rel):
    return rel if os.path.isabs(rel) else os.path.join(ROOT, rel)


def rows(rel):
    if not os.path.exists(full(rel)):
        return []
    with open(full(rel), newline="") as f:
        return [r for r in csv.DictReader(ln for ln in f if not ln.startswith("#") and ln.strip())]


def default_step():
    try:
        with open(full(KERNEL)) as f:
            mo = re.search(r"#define BWD_V3_DEFAULT_STEP (\d+)", f.read())
    except OSError:
        return None
    return int(mo.group(1)) if mo else None


def role(impl, dstep):
    """What a row measured: ('v3', step), ('det', None), ('v4', None),
    ('flash', None), ('cudnn', None), or None for a name this section does
    not show."""
    if impl == V3:
        return ("v3", dstep)
    mo = re.fullmatch(r"ours_v3_hopper_step(\d+)", impl)
    if mo:
        return ("v3", int(mo.group(1)))
    return {V3_DET: ("det", None), FLASH: ("flash", None), CUDNN: ("cudnn", None),
            **{n: ("v4", None) for n in V4_NAMES}}.get(impl)


def table(rs, dstep, ps="bwd"):
    """{(role, step, dtype, d, causal, N): TFLOP/s} of one file's timed rows
    of pass ps; the default step's own row wins over a stepK row of the same step."""
    out = {}
    for r in rs:
        if r.get("pass") != ps or not paper_gpu.fair_tflops(r):
            continue   # graph-replayed TFLOP/s (paper_gpu.fair_tflops); uncaptured rows left out
        who = role(r.get("impl", ""), dstep)
        if who is None:
            continue
        try:
            key = (who[0], who[1], r["dtype"], int(r["d"]), int(r["causal"]), int(r["N"]))
            tf = paper_gpu.fair_tflops(r)
        except (KeyError, ValueError):
            continue
        if key not in out or r["impl"] == V3:
            out[key] = tf
    return out


def has_v3(rs):
    return any(r.get("impl") == V3 and r.get("pass") == "bwd" and r.get("tflops") for r in rs)


def source():
    """(path, rows) of the main file: the final run's when it has version 3."""
    fin = rows(FINAL)
    if has_v3(fin):
        return FINAL, fin
    hop = rows(HOPPER)
    return (HOPPER, hop) if has_v3(hop) else (None, [])


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def shape_name(d, c, N):
    return f"d {d} N {N}{' causal' if c else ''}"


def ratios(t, a, b, dtype, causal=None, step=None, n_lo=N_LO, n_hi=N_HI):
    """{(d, causal, N): a / b} over the shapes where both ran (a, b: (role, step))."""
    out = {}
    for (who, st, dt, d, c, N), tf in t.items():
        if (who, st) != a or dt != dtype or not (n_lo <= N <= n_hi) or (causal is not None and c != causal):
            continue
        other = t.get((b[0], b[1], dt, d, c, N))
        if other:
            out[(d, c, N)] = tf / other
    return out


def steps_of(t):
    return sorted({st for (who, st, *_ ) in t if who == "v3"})


def figure_rows(t, dstep, extra, extra_steps):
    """The figure's points: (curve, d, causal, N, TFLOP/s over cuDNN's of the same
    run and shape, TFLOP/s), bf16 only. Curve names have no spaces (the
    script turns '_' into ' ')."""
    out = []
    curves = [(("v4", None), "version_4", t)]
    for st in steps_of(t):
        curves.append((("v3", st), f"v3_step_{st}" + ("_(default)" if st == dstep else ""), t))
    for st in extra_steps:
        curves.append((("v3", st), f"v3_step_{st}_(earlier_run)", extra))
    curves += [(("det", None), "v3_deterministic", t), (("flash", None), "SDPA_flash", t)]
    for key, name, tab in curves:
        for (d, c, N), x in sorted(ratios(tab, key, ("cudnn", None), "bf16", n_lo=0, n_hi=1 << 30).items()):
            out.append((name, d, c, N, x, tab[(key[0], key[1], "bf16", d, c, N)]))
    return out


def values(out_dir=None):
    keys = ["hb_status", "hb_source", "hb_commit", "hb_date", "hb_gpu", "hb_driver", "hb_cuda", "hb_torch",
            "hb_cudnn_ver", "hb_tokens", "hb_hidden", "hb_Ns", "hb_nshapes", "hb_default_step",
            "hb_target", "hb_target_flash", "hb_target_shape", "hb_fp16_target",
            "hb_early_commit", "hb_early_Ns", "hb_step1_over_v4", "hb_step2_over_step1_64",
            "hb_step2_over_step1_128", "hb_steps_where", "hb_fig_steps_note", "hb_det_nc", "hb_det_c", "hb_det_example", "hb_fp16_vs_bf16",
            "hb_fb_cudnn_gm", "hb_fb_flash_gm", "hb_fb_cudnn_min",
            "hb_step3_over_step2_64", "hb_step3_over_step2_128", "hb_step3_commit", "hb_step3_Ns",
            "hb_ncu_regs", "hb_ncu_grid_cudnn", "hb_ncu_commit", "hb_ncu_final_commit",
            "hb_bf16_uncaptured", "hb_uncaptured_apart", "hb_all_apart", "hb_all_apart_claim", "hb_nrun", "hb_bf16_nf", "hb_vs_peers"]
    for tag in ("128", "64c"):
        keys += [f"hb_ncu_{k}_{tag}" for k in ("N", "main", "tp", "tp_cudnn", "inst", "mio", "side", "side_cudnn",
                                                "side_final", "grid")]
    for dt in ("bf16", "fp16"):
        keys += [f"hb_{dt}_{k}" for k in ("cudnn_gm", "cudnn_min", "cudnn_min_at", "cudnn_range", "flash_gm",
                                           "flash_range", "v4_gm", "v4_range", "below95", "below95_d", "above16",
                                           "cudnn_gm_nc", "cudnn_gm_c", "flash_gm_nc", "flash_gm_c", "n")]
    v = {k: "n/a" for k in keys}
    v["hb_status"] = "absent"
    # clauses that a sentence carries only when there is something to add
    v["hb_uncaptured_apart"] = v["hb_all_apart"] = v["hb_all_apart_claim"] = ""
    v["hb_goal_cudnn"], v["hb_goal_shape"] = f"{TARGET_CUDNN:.1f}", f"{TARGET_SHAPE_MIN:.2f}"
    v["hb_goal_flash"], v["hb_goal_fp16"] = f"{TARGET_FLASH:.1f}", f"{100 * TARGET_FP16:.0f} %"
    dstep = default_step()
    v["hb_default_step"] = str(dstep) if dstep else "n/a"
    src, rs = source()
    if out_dir:
        dat = os.path.join(out_dir, "bwd_hopper_steps.dat")
        if os.path.exists(dat):
            os.remove(dat)
    if not src:
        return v
    t = table(rs, dstep)
    v["hb_status"], v["hb_source"] = "present", src
    first = next(r for r in rs if r.get("impl") == V3 and r.get("pass") == "bwd")
    for k, col in (("hb_commit", "commit"), ("hb_gpu", "gpu"), ("hb_driver", "driver"), ("hb_cuda", "cuda"),
                   ("hb_torch", "torch"), ("hb_cudnn_ver", "cudnn")):
        v[k] = first.get(col) or "n/a"
    v["hb_date"] = (first.get("date") or "n/a")[:10]
    bt = [r for r in rs if r.get("pass") == "bwd" and role(r.get("impl", ""), dstep)]
    v["hb_tokens"] = "/".join(str(x) for x in sorted({int(r["B"]) * int(r["N"]) for r in bt}))
    v["hb_hidden"] = "/".join(str(x) for x in sorted({int(r["H"]) * int(r["d"]) for r in bt}))
    ns = sorted({int(r["N"]) for r in bt if N_LO <= int(r["N"]) <= N_HI})
    v["hb_Ns"] = ", ".join(str(n) for n in ns[:-1]) + (" and " if len(ns) > 1 else "") + str(ns[-1]) if ns else "n/a"
    me, cu, fl, v4 = ("v3", dstep), ("cudnn", None), ("flash", None), ("v4", None)
    for dt in ("bf16", "fp16"):
        rc, rf, r4 = ratios(t, me, cu, dt), ratios(t, me, fl, dt), ratios(t, me, v4, dt)
        if not rc:
            continue
        p = f"hb_{dt}_"
        v[p + "n"] = str(len(rc))
        v[p + "cudnn_gm"], v[p + "cudnn_range"] = f"{gmean(rc.values()):.3f}", span(rc.values())
        lo = min(rc, key=rc.get)
        v[p + "cudnn_min"], v[p + "cudnn_min_at"] = f"{rc[lo]:.3f}", shape_name(*lo)
        v[p + "below95"] = str(sum(x < TARGET_SHAPE_MIN for x in rc.values()))
        dims = sorted({d for (d, c, N), x in rc.items() if x < TARGET_SHAPE_MIN})
        v[p + "below95_d"] = " and ".join(str(d) for d in dims) if dims else "none"
        for c, tag in ((0, "nc"), (1, "c")):
            xs = [x for (d, cc, N), x in rc.items() if cc == c]
            ys = [x for (d, cc, N), x in rf.items() if cc == c]
            v[p + f"cudnn_gm_{tag}"] = f"{gmean(xs):.3f}" if xs else "n/a"
            v[p + f"flash_gm_{tag}"] = f"{gmean(ys):.3f}" if ys else "n/a"
        if rf:
            v[p + "flash_gm"], v[p + "flash_range"] = f"{gmean(rf.values()):.3f}", span(rf.values())
            v[p + "above16"] = str(sum(x >= TARGET_FLASH for x in rf.values()))
        if r4:
            v[p + "v4_gm"], v[p + "v4_range"] = f"{gmean(r4.values()):.2f}", span(r4.values())
    v["hb_nshapes"] = v["hb_bf16_n"]
    # the backward chapter's reading of the two bf16 means (above 1: passes)
    if "n/a" not in (v["hb_bf16_flash_gm"], v["hb_bf16_cudnn_gm"]):
        f, c = float(v["hb_bf16_flash_gm"]) >= 1, float(v["hb_bf16_cudnn_gm"]) >= 1
        v["hb_vs_peers"] = {(True, True): "passes both flash and cuDNN", (True, False): "passes flash but not cuDNN",
                            (False, True): "passes cuDNN but not flash",
                            (False, False): "passes neither flash nor cuDNN"}[(f, c)]
    rf16 = ratios(t, me, fl, "bf16")
    v["hb_bf16_nf"] = str(len(rf16)) if rf16 else "n/a"
    # the bf16 shapes version 3 ran but a peer's CUDA graph did not capture
    # (left out of that peer's ratios above, which use graph-replayed times):
    # each peer's own, since the two columns are over different shapes
    ran = {(int(r["d"]), int(r["causal"]), int(r["N"])) for r in rs
           if r.get("impl") == V3 and r.get("pass") == "bwd" and r.get("dtype") == "bf16"
           and r.get("median_ms") and N_LO <= int(r["N"]) <= N_HI}
    v["hb_nrun"] = str(len(ran)) if ran else "n/a"
    if ran:
        said, got_cudnn = [], ratios(t, me, cu, "bf16")
        for who, got in (("cuDNN", got_cudnn), ("flash", rf16)):
            miss = sorted(ran - set(got))
            if miss:
                said.append(f"{who}'s at {', '.join(shape_name(*sh) for sh in miss)}")
        v["hb_bf16_uncaptured"] = ("every peer's graph was captured" if not said else
                                   "a peer's graph was not captured, " + "; ".join(said))
        miss = sorted(ran - set(got_cudnn))
        if miss:
            apart = ratios(table(rows(CAPTURE_STUDY), dstep), me, cu, "bf16")
            v["hb_uncaptured_apart"], whole = captured_apart(miss, ran, apart)
        else:
            whole = ""
        # the all-shapes mean as a clause of the chapter's sentence and as one of the claims table's
        v["hb_all_apart"] = f"; {whole}" if whole else ""
        v["hb_all_apart_claim"] = f". Backward {whole}" if whole else ""
    # the targets, as the issue states them: bf16, geometric mean over the shapes
    if v["hb_bf16_cudnn_gm"] != "n/a":
        g = float(v["hb_bf16_cudnn_gm"])
        v["hb_target"] = (f"holds ({g:.3f})" if g >= TARGET_CUDNN else
                          f"missed by {100 * (1 - g / TARGET_CUDNN):.1f} % ({g:.3f})")
        m = float(v["hb_bf16_cudnn_min"])
        v["hb_target_shape"] = (f"holds (lowest {m:.3f})" if m >= TARGET_SHAPE_MIN else
                                f"missed: {v['hb_bf16_below95']} of {v['hb_bf16_n']} shapes below "
                                f"{TARGET_SHAPE_MIN}, lowest {m:.3f} ({v['hb_bf16_cudnn_min_at']})")
    if v["hb_bf16_flash_gm"] != "n/a":
        g = float(v["hb_bf16_flash_gm"])
        v["hb_target_flash"] = (f"holds ({g:.3f})" if g >= TARGET_FLASH else
                                f"missed by {100 * (1 - g / TARGET_FLASH):.1f} % ({g:.3f})")
    if "n/a" not in (v["hb_bf16_cudnn_gm"], v["hb_fp16_cudnn_gm"]):
        rel = float(v["hb_fp16_cudnn_gm"]) / float(v["hb_bf16_cudnn_gm"]) - 1
        v["hb_fp16_vs_bf16"] = f"{100 * abs(rel):.1f} % {'below' if rel < 0 else 'above'}"
        v["hb_fp16_target"] = "holds" if abs(rel) <= TARGET_FP16 else "missed"
    # the deterministic mode: its time over the default mode's (TFLOP/s ratio), same shape
    for c, key in ((0, "hb_det_nc"), (1, "hb_det_c")):
        xs = ratios(t, me, ("det", None), "bf16", causal=c)
        v[key] = span(xs.values(), 1) if xs else "n/a"
    ex = ratios(t, me, ("det", None), "bf16", causal=1, n_lo=8192, n_hi=8192)
    if (128, 1, 8192) in ex:
        v["hb_det_example"] = (f"{shape_name(128, 1, 8192)}: {t[('det', None, 'bf16', 128, 1, 8192)]:.0f} TFLOP/s against "
                               f"{t[('v3', dstep, 'bf16', 128, 1, 8192)]:.0f}")
    # forward + backward: forward version 3 with backward version 3 (the row's name when both are 3)
    fb = table(rs, dstep, "fwdbwd")
    fc, ff = ratios(fb, me, cu, "bf16"), ratios(fb, me, fl, "bf16")
    if fc:
        v["hb_fb_cudnn_gm"], v["hb_fb_cudnn_min"] = f"{gmean(fc.values()):.3f}", f"{min(fc.values()):.3f}"
    if ff:
        v["hb_fb_flash_gm"] = f"{gmean(ff.values()):.3f}"
    # the steps: those of the main file, and from the earlier run those it lacks
    extra_rs = rows(EARLIER)
    # the earlier call's unsuffixed row is the step that was the default at
    # its commit (EARLIER_DEFAULT); its stepK rows are step K
    extra = table(extra_rs, EARLIER_DEFAULT) if extra_rs else {}
    extra_steps = [st for st in steps_of(extra) if st not in steps_of(t)]
    extra_fig = {k: x for k, x in extra.items() if k[0] != "v3" or k[1] in extra_steps}
    # step 1 against version 4, and each step against the one before it, from
    # the one run that timed them side by side: the main file when it has
    # step 1, else the earlier call
    if 1 in steps_of(t):
        st_tab, v["hb_steps_where"] = t, "in the same run"
    elif 1 in extra_steps:
        st_tab = extra
        e = next(r for r in extra_rs if r.get("pass") == "bwd")
        v["hb_early_commit"] = e.get("commit") or "n/a"
        v["hb_early_Ns"] = " and ".join(str(n) for n in sorted({k[5] for k in extra_fig if k[0] == "v3"}))
        v["hb_steps_where"] = f"in an earlier call, commit {v['hb_early_commit']}, N = {v['hb_early_Ns']}"
    else:
        st_tab = None
    if st_tab:
        r1 = ratios(st_tab, ("v3", 1), v4, "bf16", n_lo=0, n_hi=1 << 30)
        if r1:
            v["hb_step1_over_v4"] = span(r1.values())
        for d in (64, 128):
            xs = [x for (dd, c, N), x in ratios(st_tab, ("v3", 2), ("v3", 1), "bf16", n_lo=0, n_hi=1 << 30).items()
                  if dd == d]
            if xs:
                v[f"hb_step2_over_step1_{d}"] = span(xs)
        v["hb_fig_steps_note"] = ("step 1 (dQ added from registers) is in the same run" if st_tab is t else
                                  f"step 1 (dQ added from registers) was timed in an earlier call (commit "
                                  f"{v['hb_early_commit']}, N = {v['hb_early_Ns']} only) and is drawn against "
                                  "that call's cuDNN, both timed as called (that call had no graph times)")
    ncu_values(v)
    v["hb_ncu_commit"] = _commit_of(os.path.join(NCU_DIR, "env.txt"))
    v["hb_ncu_final_commit"] = next((r.get("commit") for r in rs if r.get("commit")), "n/a")
    # step 3 against step 2, timed one after the other in one call (bwd_step3.sh)
    s3 = {}
    for r in rows(STEP3):
        if r.get("pass") == "bwd" and r.get("dtype") == "bf16" and r.get("tflops") and r.get("step"):
            s3.setdefault((int(r["d"]), int(r["causal"]), int(r["N"])), {})[int(r["step"])] = float(r["tflops"])
            v["hb_step3_commit"] = r.get("commit") or "n/a"
    for d in (64, 128):
        xs = [x[3] / x[2] for (dd, c, N), x in s3.items() if dd == d and 2 in x and 3 in x]
        if xs:
            v[f"hb_step3_over_step2_{d}"] = span(xs)
    if s3:
        v["hb_step3_Ns"] = " and ".join(str(n) for n in sorted({k[2] for k in s3}))
    if out_dir:
        pts = figure_rows(t, dstep, extra_fig, extra_steps)
        if pts:
            paper_gpu.write_dat(dat, "curve d causal N over_cudnn tflops", src, pts)
    return v


def main(argv):
    out = None
    if "--out" in argv:
        out = argv[argv.index("--out") + 1]
        os.makedirs(out, exist_ok=True)
    v = values(out)
    if out:
        if v["hb_status"] != "present":
            print("paper_bwd3.py: no backward version 3 rows in data/gpu/bench_bwd.csv or "
                  "data/gpu/studies/bwd_v3_steps/bench.csv; figure bwd_hopper_steps skipped")
        return 0
    return paper_gpu.print_values(v)


CAPTURE_STUDY = "data/gpu/studies/graph_capture/bench_bwd.csv"


def captured_apart(miss, ran, rc):
    """The sentence giving cuDNN's ratio at the shapes (d, causal, N) `miss`
    whose cuDNN graph the steps' run lost, and the clause giving the
    geometric mean over every shape of `ran` ("over all n shapes, measured
    apart ..., g", or "" unless rc has them all), from rc, the capture study's
    ratios to cuDNN ({(d, causal, N): ratio}, every graph captured in one
    run); ("", "") where it has none of them. The shapes left out of the
    means are version 3's weakest: the text says so rather than average
    without them."""
    xs = [rc[sh] for sh in miss if sh in rc]
    if not xs:
        return "", ""
    text = (f" Measured apart in one run with every graph captured ({CAPTURE_STUDY}), version 3 runs at "
            f"{span(xs)} times cuDNN at {len(xs)} of those {len(miss)} shapes")
    whole = ""
    if all(sh in rc for sh in ran):
        g = gmean([rc[sh] for sh in ran])
        text += f", and at {g:.3f} in geometric mean over all {len(ran)} shapes"
        whole = f"over all {len(ran)} shapes, measured apart with every graph captured ({CAPTURE_STUDY}), {g:.3f}"
    return text + "; the means below leave them out.", whole

if __name__ == "__main__":
    sys.exit(main(sys.argv))
