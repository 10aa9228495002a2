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
# the same benchmark run with every graph captured, read where FINAL lost some
CAPTURE_STUDY = "data/gpu/studies/graph_capture/bench_bwd.csv"
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


def spread(rs):
    """How far one timing of a kernel moves in the file of rows rs: the
    largest |graph-replayed / eager - 1| of version 3's and the peers' bf16
    backward rows at N >= paper_v3.SPREAD_N (paper_v3.clock_spread)."""
    import paper_v3
    return paper_v3.clock_spread(rs, "bwd", (V3, FLASH, CUDNN))


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
            "hb_step3_over_step2_64", "hb_step3_over_step2_128", "hb_step3_commit", "hb_step3_Ns",
            "hb_ncu_regs", "hb_ncu_grid_cudnn", "hb_ncu_commit", "hb_ncu_final_commit",
            "hb_bf16_uncaptured", "hb_uncaptured_apart",
            "hb_vs_peers", "hb_cover", "hb_all_commit", "hb_all_date", "hb_all_target", "hb_all_target_shape",
            "hb_all_target_flash", "hb_same_n", "hb_same_bf16_gm", "hb_same_fp16_gm"]
    for tag in ("128", "64c"):
        keys += [f"hb_ncu_{k}_{tag}" for k in ("N", "main", "tp", "tp_cudnn", "inst", "mio", "side", "side_cudnn",
                                                "side_final", "grid")]
    for dt in ("bf16", "fp16", "all"):
        keys += [f"hb_{dt}_{k}" for k in ("cudnn_gm", "cudnn_min", "cudnn_min_at", "cudnn_range", "flash_gm",
                                           "flash_range", "v4_gm", "v4_range", "below95", "below95_d", "above16",
                                           "cudnn_gm_nc", "cudnn_gm_c", "flash_gm_nc", "flash_gm_c", "n",
                                           "fb_cudnn_gm", "fb_cudnn_min", "fb_flash_gm", "spread", "below_clear",
                                           "below_clear_d")]
    v = {k: "n/a" for k in keys}
    v["hb_status"] = "absent"
    # clauses that a sentence carries only when there is something to add
    v["hb_uncaptured_apart"] = ""
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
    fb = table(rs, dstep, "fwdbwd")
    every = {}
    for dt in ("bf16", "fp16"):
        # every ratio of one dtype over the same shapes: those where version 3
        # and both peers were timed (their graphs captured)
        every[dt] = set(ratios(t, me, cu, dt)) & set(ratios(t, me, fl, dt))
        if every[dt]:
            peer_stats(v, f"hb_{dt}_", t, fb, dt, dstep, every[dt], spread(rs))
            r4 = ratios(t, me, v4, dt)
            if r4:
                v[f"hb_{dt}_v4_gm"], v[f"hb_{dt}_v4_range"] = f"{gmean(r4.values()):.2f}", span(r4.values())
    v["hb_nshapes"] = v["hb_bf16_n"]
    # the bf16 shapes version 3 ran; the means above cover those of them where
    # every graph was captured, and say which (cover)
    ran = {(int(r["d"]), int(r["causal"]), int(r["N"])) for r in rs
           if r.get("impl") == V3 and r.get("pass") == "bwd" and r.get("dtype") == "bf16"
           and r.get("median_ms") and N_LO <= int(r["N"]) <= N_HI}
    if ran:
        v["hb_cover"] = paper_gpu.cover_words(every["bf16"], ran)
        all_values(v, ran, every["bf16"], dstep)
    # the project's targets (records and claims table only), over the shapes of each mean
    v["hb_target"], v["hb_target_shape"], v["hb_target_flash"] = targets(v, "hb_bf16_")
    # fp16 against bf16, to cuDNN: over the shapes where both dtypes have every graph
    same = every["bf16"] & every["fp16"]
    if same:
        gm = {dt: gmean([ratios(t, me, cu, dt)[sh] for sh in same]) for dt in ("bf16", "fp16")}
        rel = gm["fp16"] / gm["bf16"] - 1
        v["hb_same_n"] = str(len(same))
        v["hb_same_bf16_gm"], v["hb_same_fp16_gm"] = f"{gm['bf16']:.3f}", f"{gm['fp16']:.3f}"
        v["hb_fp16_vs_bf16"] = f"{100 * abs(rel):.1f} % {'below' if rel < 0 else 'above'}"
        v["hb_fp16_target"] = "holds" if abs(rel) <= TARGET_FP16 else "missed"
    # the shapes where a peer's graph was not captured (the records say which)
    if ran:
        said, got_cudnn = [], ratios(t, me, cu, "bf16")
        for who, got in (("cuDNN", got_cudnn), ("flash", ratios(t, me, fl, "bf16"))):
            miss = sorted(ran - set(got))
            if miss:
                said.append(f"{who}'s at {', '.join(shape_name(*sh) for sh in miss)}")
        v["hb_bf16_uncaptured"] = ("every peer's graph was captured" if not said else
                                   "a peer's graph was not captured, " + "; ".join(said))
    # the deterministic mode: its time over the default mode's (TFLOP/s ratio), same shape
    for c, key in ((0, "hb_det_nc"), (1, "hb_det_c")):
        xs = ratios(t, me, ("det", None), "bf16", causal=c)
        v[key] = span(xs.values(), 1) if xs else "n/a"
    ex = ratios(t, me, ("det", None), "bf16", causal=1, n_lo=8192, n_hi=8192)
    if (128, 1, 8192) in ex:
        v["hb_det_example"] = (f"{shape_name(128, 1, 8192)}: {t[('det', None, 'bf16', 128, 1, 8192)]:.0f} TFLOP/s against "
                               f"{t[('v3', dstep, 'bf16', 128, 1, 8192)]:.0f}")
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
    lead_values(v)
    if out_dir:
        with open(os.path.join(out_dir, "bwd_hopper_peers.md"), "w") as f:
            f.write("\n".join(peers_table(v)) + "\n")
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


def peer_stats(v, p, t, fb, dt, dstep, shapes, spread=None):
    """v[p + key]: version 3 (default step) against cuDNN and flash in dtype dt
    over `shapes` only ((d, causal, N) tuples): geometric means (all, no mask,
    causal), per-shape ranges, the lowest, how many below TARGET_SHAPE_MIN of
    cuDNN and at which d, how many at or above TARGET_FLASH of flash; and the
    forward + backward pair's (table fb) over the same shapes. One function
    for the canonical file and for the capture study, so both read alike."""
    me = ("v3", dstep)
    rc = {sh: x for sh, x in ratios(t, me, ("cudnn", None), dt).items() if sh in shapes}
    rf = {sh: x for sh, x in ratios(t, me, ("flash", None), dt).items() if sh in shapes}
    if not rc:
        return
    v[p + "n"] = str(len(rc))
    v[p + "cudnn_gm"], v[p + "cudnn_range"] = f"{gmean(rc.values()):.3f}", span(rc.values())
    lo = min(rc, key=rc.get)
    v[p + "cudnn_min"], v[p + "cudnn_min_at"] = f"{rc[lo]:.3f}", shape_name(*lo)
    v[p + "below95"] = str(sum(x < TARGET_SHAPE_MIN for x in rc.values()))
    dims = sorted({d for (d, c, N), x in rc.items() if x < TARGET_SHAPE_MIN})
    v[p + "below95_d"] = " and ".join(str(d) for d in dims) if dims else "none"
    if spread is not None:
        # below cuDNN by more than one timing of a kernel moves in the same file
        v[p + "spread"] = f"{100 * spread:.1f} %"
        v[p + "below_clear"] = str(sum(x < 1 - spread for x in rc.values()))
        dims = sorted({d for (d, c, N), x in rc.items() if x < 1 - spread})
        v[p + "below_clear_d"] = " and ".join(str(d) for d in dims) if dims else "none"
    for c, tag in ((0, "nc"), (1, "c")):
        xs = [x for (d, cc, N), x in rc.items() if cc == c]
        ys = [x for (d, cc, N), x in rf.items() if cc == c]
        v[p + f"cudnn_gm_{tag}"] = f"{gmean(xs):.3f}" if xs else "n/a"
        v[p + f"flash_gm_{tag}"] = f"{gmean(ys):.3f}" if ys else "n/a"
    if rf:
        v[p + "flash_gm"], v[p + "flash_range"] = f"{gmean(rf.values()):.3f}", span(rf.values())
        v[p + "above16"] = str(sum(x >= TARGET_FLASH for x in rf.values()))
    # forward + backward: forward version 3 with backward version 3 (the row's name when both are 3)
    fc = [x for sh, x in ratios(fb, me, ("cudnn", None), dt).items() if sh in shapes]
    ff = [x for sh, x in ratios(fb, me, ("flash", None), dt).items() if sh in shapes]
    if fc:
        v[p + "fb_cudnn_gm"], v[p + "fb_cudnn_min"] = f"{gmean(fc):.3f}", f"{min(fc):.3f}"
    if ff:
        v[p + "fb_flash_gm"] = f"{gmean(ff):.3f}"


def targets(v, p):
    """The project's targets for version 3 (bf16) as measured over the shapes
    of the means v[p + ...]: (mean against cuDNN, shape by shape, mean against
    flash), each "holds (...)" or "missed ..." ("n/a" without data)."""
    out = ["n/a"] * 3
    if v[p + "cudnn_gm"] != "n/a":
        g, m = float(v[p + "cudnn_gm"]), float(v[p + "cudnn_min"])
        out[0] = (f"holds ({g:.3f})" if g >= TARGET_CUDNN else
                  f"missed by {100 * (1 - g / TARGET_CUDNN):.1f} % ({g:.3f})")
        out[1] = (f"holds (lowest {m:.3f})" if m >= TARGET_SHAPE_MIN else
                  f"missed: {v[p + 'below95']} of {v[p + 'n']} shapes below "
                  f"{TARGET_SHAPE_MIN}, lowest {m:.3f} ({v[p + 'cudnn_min_at']})")
    if v[p + "flash_gm"] != "n/a":
        g = float(v[p + "flash_gm"])
        out[2] = (f"holds ({g:.3f})" if g >= TARGET_FLASH else
                  f"missed by {100 * (1 - g / TARGET_FLASH):.1f} % ({g:.3f})")
    return tuple(out)


def all_values(v, ran, got, dstep):
    """Where the means of the main file cover fewer than the shapes `ran`
    (a peer's graph was lost: `got` is what they cover), the same means over
    every shape of `ran` from the capture study, a run of the same benchmark
    with every graph captured (keys hb_all_*, its commit and date), and the
    clauses the text adds beside its means; every clause "" when the main
    file covers every shape (the study is then not read). The shapes left
    out are version 3's weakest: the text gives both rather than average
    without them."""
    if set(got) >= set(ran):
        return
    rs = rows(CAPTURE_STUDY)
    t, fb = table(rs, dstep), table(rs, dstep, "fwdbwd")
    rc = ratios(t, ("v3", dstep), ("cudnn", None), "bf16")
    miss = sorted(set(ran) - set(got))
    xs = [rc[sh] for sh in miss if sh in rc]
    if xs:
        v["hb_uncaptured_apart"] = (f"measured in one run with every graph captured ({CAPTURE_STUDY}), "
                                    f"version 3 runs at {span(xs)} times cuDNN at "
                                    + (f"all {len(xs)} of those shapes" if len(xs) == len(miss) else
                                       f"{len(xs)} of those {len(miss)} shapes"))
    full_set = set(ratios(t, ("v3", dstep), ("flash", None), "bf16")) & set(rc)
    if not set(ran) <= full_set:
        return
    peer_stats(v, "hb_all_", t, fb, "bf16", dstep, set(ran), spread(rs))
    v["hb_all_target"], v["hb_all_target_shape"], v["hb_all_target_flash"] = targets(v, "hb_all_")
    first = next(r for r in rs if r.get("impl") == V3 and r.get("pass") == "bwd")
    v["hb_all_commit"], v["hb_all_date"] = first.get("commit") or "n/a", (first.get("date") or "n/a")[:10]


LEAD = ("cudnn_gm", "flash_gm", "cudnn_range", "flash_range", "below95", "below95_d", "n", "fb_cudnn_gm",
        "spread", "below_clear", "below_clear_d")


def lead_values(v):
    """What the text leads with: the means over every shape the benchmark
    ran (keys hb_lead_*), from the capture study while the main file's means
    leave shapes out (hb_all_*), else the main file's (hb_bf16_*); and the
    clauses that set the main file's subset second (hb_sub_*, "" when there
    is none), so that the d = 64-heavy subset is never the headline."""
    both = v["hb_all_n"] != "n/a"
    p = "hb_all_" if both else "hb_bf16_"
    for k in LEAD:
        v["hb_lead_" + k] = v.get(p + k, "n/a")
    for k in ("hb_sub_cover", "hb_sub_apart", "hb_sub_cols", "hb_sub_below", "hb_sub_claim"):
        v[k] = ""
    v["hb_lead_cover"] = v["hb_cover"]
    if both:
        v["hb_lead_cover"] = (f"all {v['hb_all_n']} shapes, in a run of the same benchmark with every graph "
                              f"captured ({CAPTURE_STUDY})")
        head, _, tail = v["hb_cover"].partition(": ")
        sub = f"{head} in {v['hb_source']}" + (f" ({tail})" if tail else "")
        v["hb_sub_cover"] = sub
        v["hb_sub_apart"] = f"; over {sub}, {v['hb_bf16_cudnn_gm']} and {v['hb_bf16_flash_gm']}"
        v["hb_sub_cols"] = f"; its columns \"{v['hb_bf16_n']} shapes\" give the same means over {sub}"
        v["hb_sub_below"] = f" ({v['hb_bf16_below95']} of the {v['hb_bf16_n']} in {v['hb_source']})"
        v["hb_sub_claim"] = (f". Over {sub.replace('$', '')}: {v['hb_bf16_cudnn_gm']} x cuDNN "
                             f"(per shape {v['hb_bf16_cudnn_range']}), {v['hb_bf16_flash_gm']} x flash")
    # the sentence that sets the clocks' spread beside the count below cuDNN
    v["hb_spread_sentence"] = ""
    if v["hb_lead_spread"] != "n/a":
        import paper_v3
        n, k = v["hb_lead_n"], v["hb_lead_below_clear"]
        where = (f"Two timings of one kernel in that run, graph-replayed and called eagerly, differ by up to "
                 f"{v['hb_lead_spread']} at $N \\ge$ {paper_v3.SPREAD_N:,}")
        v["hb_spread_sentence"] = (f"{where}, and none of the {n} is below cuDNN by more than that." if k == "0" else
                                   f"{where}; by more than that, version 3 is below cuDNN at {k} of the {n} "
                                   f"shapes, all at $d$ = {v['hb_lead_below_clear_d']}.")
    # the backward chapter's reading of the two means it leads with (above 1: passes)
    if "n/a" not in (v["hb_lead_flash_gm"], v["hb_lead_cudnn_gm"]):
        f, c = float(v["hb_lead_flash_gm"]) >= 1, float(v["hb_lead_cudnn_gm"]) >= 1
        v["hb_vs_peers"] = {(True, True): "passes both flash and cuDNN", (True, False): "passes flash but not cuDNN",
                            (False, True): "passes cuDNN but not flash",
                            (False, False): "passes neither flash nor cuDNN"}[(f, c)]


def peers_table(v):
    """The Markdown table of version 3 against the peers, bf16: one column
    per peer over every shape (the capture study's while the main file's
    means leave shapes out), and beside each, in that case, the same over
    the main file's subset; its caption names both sources, and while the
    stored files were measured by the harness that copied SDPA flash's
    gradients into .grad (paper_bwd.copies_values), says so."""
    import paper_bwd
    import paper_v3
    if v["hb_bf16_cudnn_gm"] == "n/a":
        return []
    both = v["hb_all_n"] != "n/a"
    n = v["hb_bf16_n"]
    head = (["", f"cuDNN, all {v['hb_all_n']}", f"cuDNN, {n} shapes", f"SDPA flash, all {v['hb_all_n']}",
             f"SDPA flash, {n} shapes"]
            if both else ["", "against cuDNN", "against SDPA flash"])
    p = (["hb_all_"] if both else []) + ["hb_bf16_"]

    def cells(fmt):
        return [fmt(q, "cudnn") for q in p] + [fmt(q, "flash") for q in p]
    body = [["all shapes"] + cells(lambda q, w: f"{v[q + w + '_gm']} ({v[q + w + '_range']})"),
            ["no mask"] + cells(lambda q, w: v[q + w + "_gm_nc"]),
            ["causal"] + cells(lambda q, w: v[q + w + "_gm_c"]),
            [f"below {TARGET_SHAPE_MIN} of cuDNN"] + [f"{v[q + 'below95']} of {v[q + 'n']}" for q in p] + [""] * len(p),
            ["below cuDNN beyond the spread"] +
            [f"{v[q + 'below_clear']} of {v[q + 'n']} ({v[q + 'spread']})" for q in p] + [""] * len(p),
            ["forward + backward"] + cells(lambda q, w: v[q + f"fb_{w}_gm"])]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    main = f"`{v['hb_source']}` (commit {v['hb_commit']}, {v['hb_date']})"
    cap = (f": Backward version 3 against SDPA's cuDNN and flash backends, bf16, $N$ = {v['hb_Ns']}, causal and "
           "not: geometric means of the per-shape ratios of TFLOP/s, each call replayed from a CUDA graph "
           "(per-shape range in parentheses); forward + backward pairs forward and backward version 3; the "
           "spread (in parentheses) is the largest difference between the graph-replayed and the eager time of one "
           f"kernel at $N \\ge$ {paper_v3.SPREAD_N:,} in the same file. Data: ")
    if both:
        cap += (f"columns \"all {v['hb_all_n']}\": `{CAPTURE_STUDY}` (commit {v['hb_all_commit']}, "
                f"{v['hb_all_date']}), the benchmark run with every graph captured; columns \"{n} shapes\": "
                f"{main}, over {v['hb_cover']}")
    else:
        cap += f"{main}, over {v['hb_cover']}"
    copies = paper_bwd.copies_values()["bwd_flash_copies_claim"]
    if copies:
        cap += "; " + copies.lstrip("; ").replace(".grad", "`.grad`").replace(" N = ", " $N$ = ")
    return lines + ["", cap + "."]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
