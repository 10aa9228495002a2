#!/usr/bin/env python3
"""paper/gen/paper_gpu.py -- read the H200 measurements for the paper, if any.

    python3 paper/gen/paper_gpu.py [--out build/paper]

data/gpu/bench_fwd.csv and data/gpu/io_fwd.csv are written on the GPU machine
(make gpu-data-bench-fwd). They may be absent (CI has no GPU): then this script writes
nothing, prints one line saying so, and exits 0, and the paper says the data
is absent. When present, it writes two small tables for gnuplot:

    OUT/gpu_fig2.dat    one line per path at the FlashAttention paper's
                        Figure 2 shape: name, DRAM GB, L2 GB, model GB, ms
    OUT/gpu_speed.dat   one line per (path, N, d, causal): TFLOP/s

and claims.py takes summary() (the values the text quotes) for the claims
table, whose rows it writes itself. Column names are matched
loosely (listed in ALIASES) so that a renamed column does not break the
build; a file whose columns cannot be matched is reported and skipped.
"""
import csv
import functools
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (the environment can point elsewhere, for the paper's own tests)
BENCH = os.environ.get("PAPER_GPU_BENCH", "data/gpu/bench_fwd.csv")
IO = os.environ.get("PAPER_GPU_IO", "data/gpu/io_fwd.csv")

ALIASES = {
    "impl": ["impl", "kernel", "path", "name", "algorithm", "method", "variant", "backend"],
    "N": ["N", "n", "seqlen", "seq_len"],
    "d": ["d", "headdim", "head_dim"],
    "B": ["B", "batch"],
    "H": ["H", "heads"],
    "causal": ["causal", "is_causal"],
    "ms": ["ms", "time_ms", "median_ms", "kernel_time_ms", "mean_ms", "wall_ms", "min_ms"],
    "dtype": ["dtype"],
    "s": ["time_s", "wall_s", "seconds", "median_s"],
    "tflops": ["tflops", "TFLOPs", "tflop_s", "TFLOP/s", "tflops_s"],
    "dram": ["dram_bytes", "dram_rw_bytes", "bytes_dram", "dram_total_bytes"],
    "dram_r": ["dram_read_bytes", "dram_bytes_read", "dram__bytes_read.sum"],
    "dram_w": ["dram_write_bytes", "dram_bytes_write", "dram__bytes_write.sum"],
    "l2": ["l2_bytes", "lts_bytes", "l2_total_bytes"],   # all L2 traffic (lts__t_bytes)
    "l2_sm": ["l2_from_sm_bytes"],
    "model": ["model_bytes", "modeled_bytes", "formula_bytes", "io_model_bytes"],
    "compulsory": ["compulsory_bytes", "min_bytes"],
}


def read(rel):
    full = os.path.join(ROOT, rel)
    if not os.path.exists(full):
        return None
    with open(full, newline="") as f:
        lines = [ln for ln in f if not ln.startswith("#") and ln.strip()]
    return list(csv.DictReader(lines))


@functools.lru_cache(maxsize=None)
def measured_code_has(rel, path, needle):
    """Whether the code that measured data file `rel` (the commit of its
    provenance column) held `needle` in `path`: True or False from git, None
    where that cannot be told (no commit column, no git, a commit this
    clone lacks). For text that must say how a stored file was measured
    when the code has changed since (the file is re-measured later). Asked
    once per (rel, path, needle) a run: several generators ask the same."""
    import subprocess
    rows = read(rel) or []
    commit = next((r.get("commit") for r in rows if r.get("commit")), None)
    if not commit or not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        return None
    try:
        got = subprocess.run(["git", "-C", ROOT, "show", f"{commit}:{path}"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return needle in got.stdout if got.returncode == 0 else None


def span(xs, digits=2):
    """'lo-hi' of the values at the digits given, one number where both read alike."""
    lo, hi = min(xs), max(xs)
    a, b = f"{lo:.{digits}f}", f"{hi:.{digits}f}"
    return a if a == b else f"{a}-{b}"


def cover_words(got, ran):
    """Which of the shapes `ran` ((d, causal, N) tuples) a mean over `got`
    covers, in words: "all 16 shapes", or "the 9 of the 16 shapes at which
    every graph was captured: all 8 at d 64, 1 of the 8 at d 128" (per head
    dimension, so that a mean that leaves one d out says so)."""
    got, ran = set(got) & set(ran), set(ran)
    if got == ran:
        return f"all {len(ran)} shapes"
    parts = []
    for d in sorted({sh[0] for sh in ran}):
        k, n = sum(sh[0] == d for sh in got), sum(sh[0] == d for sh in ran)
        parts.append(f"all {n} at $d$ = {d}" if k == n else f"{k} of the {n} at $d$ = {d}")
    return (f"the {len(got)} of the {len(ran)} shapes at which every graph was captured: "
            + ", ".join(parts))


def ncu_kernels(rel):
    """The kernels of one Nsight Compute raw-page CSV (ncu --csv --page raw,
    the program's own output lines before the header skipped): a list of
    {metric: value}, a row per kernel, numbers as floats where they parse
    (ncu groups digits with commas); [] when the file is absent or holds no
    kernel."""
    full = os.path.join(ROOT, rel)
    try:
        with open(full) as f:
            txt = f.read()
    except OSError:
        return []
    at = txt.find('"ID"')
    out = []
    for r in csv.DictReader(txt[at:].splitlines()) if at >= 0 else []:
        if not r.get("ID", "").isdigit():
            continue   # the units row
        k = {}
        for key, x in r.items():
            try:
                k[key] = float(x.replace(",", ""))
            except (AttributeError, ValueError):
                k[key] = x
        out.append(k)
    return out


def fair_tflops(row):
    """A bench row's TFLOP/s on the fair clock: each call replayed from a CUDA
    graph (graph_ms), which takes the host's cost of a call out for every
    side alike (our rows call the library's C entry with preallocated
    outputs, SDPA's go through torch's Python entry in eager mode, so
    median_ms charges SDPA a host overhead ours hardly pays). A file with a
    graph_ms column gives None for a row whose graph was not captured (that
    shape is left out of every comparison); an older file without the column
    gives its tflops."""
    try:
        tf = float(row["tflops"])
    except (KeyError, TypeError, ValueError):
        return None
    if "graph_ms" not in row:
        return tf
    try:
        return tf * float(row["median_ms"]) / float(row["graph_ms"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def col(row, key):
    for name in ALIASES[key]:
        if name in row and row[name] not in ("", None):
            return row[name]
    return None


def fnum(row, key):
    v = col(row, key)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def ms_of(row):
    ms = fnum(row, "ms")
    if ms is None and fnum(row, "s") is not None:
        ms = 1e3 * fnum(row, "s")
    return ms


def dram_of(row):
    b = fnum(row, "dram")
    if b is None and fnum(row, "dram_r") is not None and fnum(row, "dram_w") is not None:
        b = fnum(row, "dram_r") + fnum(row, "dram_w")
    return b


def kind(name):
    n = name.lower()
    if "cudnn" in n:
        return "sdpa-cudnn"
    if "sdpa" in n or "torch" in n and "flash" in n:
        return "sdpa-flash"
    if "material" in n or "naive" in n or "matmul" in n or "standard" in n:
        return "materialized"
    if n == "ours_op":
        # our public entry flash_attn_func on (B, N, H, d): version 3's kernel
        # again, in another layout, so never pooled with the C entry's rows
        return "ours-op"
    return "ours"


def forward_versions():
    """The forward versions in the library's table (core/versions.def's
    FA_ROW(fwd_vN) lines)."""
    try:
        with open(os.path.join(ROOT, "core", "versions.def")) as f:
            return {int(n) for n in re.findall(r"^FA_ROW\(fwd_v(\d+)\)", f.read(), re.M)}
    except OSError:
        return set()


def forward_path(name):
    """Whether an impl name of io_fwd.csv is a forward path: a peer, our op,
    or ours_vN_* with N a forward version. A deterministic row (*_det) or a
    backward-only version (ours_v4_mma8) is a backward path; the profiler
    ran the forward of another version under its name, and a forward figure
    that showed it would name a kernel that did not run."""
    if name.endswith("_det"):
        return False
    mo = re.match(r"ours_v(\d+)_", name)
    return mo is None or int(mo.group(1)) in forward_versions()


def fig2_rows():
    rows = read(IO)
    if not rows:
        return None, f"{IO} absent"
    shape = [r for r in rows if (fnum(r, "B"), fnum(r, "H"), fnum(r, "N"), fnum(r, "d"))
             == (64.0, 16.0, 1024.0, 64.0)]
    out = []
    for r in shape or rows:
        name, dram, ms = col(r, "impl"), dram_of(r), ms_of(r)
        if name is None or dram is None or not forward_path(name):
            continue
        if col(r, "dtype"):
            name = f"{name} ({col(r, 'dtype')})"
        l2, model, l2_sm = fnum(r, "l2"), fnum(r, "model"), fnum(r, "l2_sm")
        out.append((name, dram / 1e9, (l2 or float("nan")) / 1e9, (model or float("nan")) / 1e9,
                    ms if ms is not None else float("nan"), (l2_sm or float("nan")) / 1e9))
    if not out:
        return None, f"{IO}: no columns matched ({', '.join(rows[0].keys())})"
    return out, None


def sweep_rows():
    """io_fwd.csv rows of one (dtype, d) over N (label 'sweep' when labelled)."""
    rows = read(IO)
    if not rows:
        return None
    sweep = [r for r in rows if (r.get("label") or "") == "sweep"] or rows
    out = []
    for r in sweep:
        name, N, dram = col(r, "impl"), fnum(r, "N"), dram_of(r)
        if None in (name, N, dram) or not forward_path(name):
            continue
        comp = fnum(r, "compulsory")
        out.append((name, int(N), dram / 1e9, (fnum(r, "l2") or float("nan")) / 1e9,
                    (fnum(r, "model") or float("nan")) / 1e9,
                    (comp or float("nan")) / 1e9, (fnum(r, "l2_sm") or float("nan")) / 1e9))
    return sorted(out, key=lambda x: (x[0], x[1])) or None


def speed_rows():
    rows = read(BENCH)
    if not rows:
        return None, f"{BENCH} absent"
    out = []
    for r in rows:
        name, N, d = col(r, "impl"), fnum(r, "N"), fnum(r, "d")
        tf = fair_tflops(r) if "graph_ms" in r else fnum(r, "tflops")
        if "graph_ms" in r and tf is None:
            continue   # not timed, or its graph not captured
        causal = col(r, "causal") or "0"
        dtype = col(r, "dtype") or "-"
        if tf is None:
            ms, B, H = ms_of(r), fnum(r, "B"), fnum(r, "H")
            if None not in (ms, B, H, N, d) and ms > 0:
                flops = 4 * B * H * N * N * d / (2 if causal in ("1", "yes", "true", "True") else 1)
                tf = flops / (ms * 1e-3) / 1e12
        if None in (name, N, d, tf):
            continue
        out.append((name, int(N), int(d), causal, dtype, tf))
    if not out:
        return None, f"{BENCH}: no columns matched ({', '.join(rows[0].keys())})"
    return out, None


def how_called_words(impl):
    """How bench_gpu.py calls a forward path, in the chapter's words."""
    if impl == "ours_op":
        return "our op through `flash_attn_func` on $(B, N, H, d)$ tensors"
    if impl.startswith("ours_"):
        return "the library's C entry on $(B, H, N, d)$ tensors"
    if impl == "torch_materialized":
        return "three PyTorch operations on $(B, H, N, d)$ tensors"
    if impl.startswith("sdpa_"):
        return "`scaled_dot_product_attention` on $(B, H, N, d)$ tensors"
    return impl


TRAIN_COMPARE = os.environ.get("PAPER_TRAIN_COMPARE", "data/gpu/train_compare.csv")


def train_compare_values():
    """The multi-seed training comparison (scripts/gpu/train_compare.py
    --compare: each model, mode and seed a run per path, drift = distance of
    its final loss from the fp32 reference of its own seed), summed up for
    chapters/24-pytorch-op.md from train_report.compare_stats (the per-run
    mean and largest drift over the seeds, as its own table gives them): {}
    when the file is absent. Per (model, mode): our op's mean and largest
    drift beside SDPA flash's, and the first rule (every run of ours within
    twice the largest drift of PyTorch's bf16 runs of the same model and
    mode) judged against all of PyTorch's runs and against flash's alone."""
    rows = read(TRAIN_COMPARE)
    if not rows:
        return {}
    sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
    import train_report
    runs = []
    for r in rows:
        try:
            runs.append({"model": r["model"], "run": r["run"], "mode": r["mode"], "seed": r["seed"],
                         "ms_per_step": float(r["ms_per_step"]),
                         "drift_from_" + train_report.FP32: float(r["drift_from_" + train_report.FP32])})
        except (KeyError, ValueError):
            continue
    stats, _ = train_report.compare_stats(runs)
    mean = {k: st[2] for k, st in stats.items()}   # (model, run, mode) -> mean drift
    top = {k: st[3] for k, st in stats.items()}    # -> largest drift
    pairs = sorted({(m, mo) for m, run, mo in stats if run == "ours" and (m, "sdpa_flash", mo) in stats})
    if not pairs:
        return {}
    v = {"tc_models": str(len({m for m, _ in pairs})),
         "tc_seeds": str(len({r["seed"] for r in runs})),
         "tc_steps": ", ".join(sorted({r["steps"] for r in rows})),
         "tc_pairs": str(len(pairs))}
    v["tc_ours_worse_n"] = str(sum(mean[(m, "ours", mo)] > mean[(m, "sdpa_flash", mo)] for m, mo in pairs))
    # the pair where ours drifts most beyond flash, in mean
    m, mo = max(pairs, key=lambda p: mean[(p[0], "ours", p[1])] / max(mean[(p[0], "sdpa_flash", p[1])], 1e-12))
    v["tc_worst_pair"] = f"{m}, {mo}"
    v["tc_worst_ours_mean"] = f"{mean[(m, 'ours', mo)]:.4f}"
    v["tc_worst_ours_max"] = f"{top[(m, 'ours', mo)]:.4f}"
    v["tc_worst_flash_mean"] = f"{mean[(m, 'sdpa_flash', mo)]:.4f}"
    v["tc_worst_flash_max"] = f"{top[(m, 'sdpa_flash', mo)]:.4f}"
    # the rule, with PyTorch's runs (every sdpa_* path) and with flash's alone
    r_all, r_flash, setter = [], [], []
    for m, mo in pairs:
        ours = top[(m, "ours", mo)]
        peak, run = max((x, run) for (m2, run, mo2), x in top.items()
                        if (m2, mo2) == (m, mo) and run.startswith("sdpa_"))
        r_all.append((ours / peak, (m, mo)))
        setter.append(run)
        r_flash.append((ours / top[(m, "sdpa_flash", mo)], (m, mo)))
    v["tc_noise_cudnn_n"] = str(setter.count("sdpa_cudnn"))
    v["tc_rule_all_pass"] = str(sum(1 for x, _ in r_all if x <= 2))
    v["tc_rule_all_max"] = f"{max(r_all)[0]:.2f}"
    v["tc_rule_flash_pass"] = str(sum(1 for x, _ in r_flash if x <= 2))
    v["tc_rule_flash_max"] = f"{max(r_flash)[0]:.2f}"
    v["tc_rule_flash_max_pair"] = ", ".join(max(r_flash)[1])
    return v


def summary():
    """{'values': {...}} or None when nothing usable exists."""
    fig2, _ = fig2_rows()
    speed, _ = speed_rows()
    if not fig2 and not speed:
        return None
    values = {}
    if fig2:
        by = {}
        for name, dram, l2, model, ms, l2_sm in fig2:
            by.setdefault(kind(name), []).append((name, dram, l2, model, ms))
        mat = min(by.get("materialized", []), key=lambda x: x[4], default=None)
        best = min([x for k in ("ours", "ours-op", "sdpa-flash", "sdpa-cudnn") for x in by.get(k, [])],
                   key=lambda x: x[1], default=None)
        for name, dram, l2, model, ms, l2_sm in fig2:
            key = name.split(" (")[0]
            values[f"fig2_{key}_l2sm"] = f"{l2_sm:.2f}"
            values[f"fig2_{key}_dram"] = f"{dram:.2f}"
            values[f"fig2_{key}_l2"] = f"{l2:.2f}"
            values[f"fig2_{key}_model"] = f"{model:.2f}"
            values[f"fig2_{key}_ms"] = f"{ms:.2f}"
        if mat and best:
            values["gpu_fig2_mat_gb"] = f"{mat[1]:.2f}"
            values["gpu_fig2_best_gb"] = f"{best[1]:.2f}"
            values["gpu_fig2_best"] = best[0]
    if speed:
        # per shape: the best of each kind; headline at the largest N of the largest d
        shapes = {}
        for name, N, d, causal, dtype, tf in speed:
            shapes.setdefault((d, N, causal, dtype), {}).setdefault(kind(name), []).append((tf, name))
        usable = [k for k, v in shapes.items() if "materialized" in v and len(v) > 1]
        if usable:
            key = max(usable, key=lambda k: (k[3] != "fp32", k[0], k[1]))
            d, N, causal, dtype = key
            by = shapes[key]
            mat_tf, mat_name = max(by["materialized"])
            parts = []
            for k in ("ours", "sdpa-flash", "sdpa-cudnn"):
                if k in by:
                    tf, name = max(by[k])
                    parts.append(f"{name} {tf:.3g} TFLOP/s ({tf / mat_tf:.2g}x)")
                    values[f"gpu_{k.replace('-', '_')}_tflops"] = f"{tf:.3g}"
                    values[f"gpu_{k.replace('-', '_')}_name"] = name
                    values[f"gpu_{k.replace('-', '_')}_speedup"] = f"{tf / mat_tf:.2g}"
            # our public entry, one measurement of its own: the kernel of the
            # C entry's version 3 on FlashAttention's layout (B, N, H, d)
            if "ours-op" in by:
                tf, name = max(by["ours-op"])
                values["gpu_op_tflops"] = f"{tf:.3g}"
                values["gpu_op_speedup"] = f"{tf / mat_tf:.2g}"
                values["gpu_op_how"] = how_called_words(name)
            values["gpu_mat_tflops"] = f"{mat_tf:.1f}"
            values["gpu_mat_name"] = mat_name
            # how each named path was called (bench_gpu.py's how_called, in words)
            for k, name in (("mat", mat_name), ("ours", values.get("gpu_ours_name"))):
                if name:
                    values[f"gpu_{k}_how"] = how_called_words(name)
            values["gpu_shape"] = f"N = {N}, d = {d}, {dtype}"
        # the same kernel through two entries: ours_op over ours_v3_hopper, shape
        # by shape (bf16, both with a graph time), so the text can say how far
        # the entry and the layout alone move one kernel's number
        t = {(name, N, d, causal): tf for name, N, d, causal, dtype, tf in speed if dtype == "bf16"}
        r = [t[k] / t[("ours_v3_hopper",) + k[1:]] for k in t
             if k[0] == "ours_op" and ("ours_v3_hopper",) + k[1:] in t]
        if r:
            values["gpu_op_over_v3"] = span(r)
            values["gpu_op_over_v3_n"] = str(len(r))
    values.update(train_compare_values())
    if not values:
        return None
    return {"values": values}


def dash_notes(dt):
    """Why a cell of the speed table is '-': the bench file's own notes on
    the rows it did not time (bench_gpu.py: "skipped: slow path, N >
    --slow-max-n X"), as {note: sorted impl names}, for the dtype dt."""
    out = {}
    for r in read(BENCH) or []:
        note = (r.get("note") or "").strip()
        if (col(r, "dtype") or "-") == dt and note.startswith("skipped"):
            out.setdefault(note, set()).add(col(r, "impl"))
    return {k: sorted(v) for k, v in out.items()}


def table_order(name):
    """Rows of the speed table: our versions through the C entry, then our
    public entry, then PyTorch's paths."""
    return (0 if name.startswith("ours_v") else 1 if name == "ours_op" else 2, name)


def write_speed_table(speed, path):
    """A Markdown table of forward TFLOP/s: one row per path, one column per
    (d, N) at the smallest and largest N of each d, in the dtype with the most
    rows (bf16 in the project's runs). The caption says how each row was
    called and why a cell is '-'."""
    dtypes = {}
    for r in speed:
        dtypes[r[4]] = dtypes.get(r[4], 0) + 1
    dt = max(dtypes, key=dtypes.get)
    rows = [r for r in speed if r[4] == dt and r[3] in ("0", "no", "false", "False")] or \
        [r for r in speed if r[4] == dt]
    cols = []
    for d in sorted({r[2] for r in rows}):
        ns = sorted({r[1] for r in rows if r[2] == d})
        cols += [(d, ns[0])] + ([(d, ns[-1])] if ns[-1] != ns[0] else [])
    names = sorted({r[0] for r in rows}, key=table_order)
    val = {(r[0], r[2], r[1]): r[5] for r in rows}
    dashes = [(note, impls) for note, impls in dash_notes(dt).items()
              if any((i, d, n) not in val for i in impls for d, n in cols)]
    why = "; ".join(f"{', '.join(f'`{i}`' for i in impls)}: {note.replace('--', '`--')}"
                    for note, impls in dashes)
    # the option name in code type: "--slow-max-n 4096" -> "`--slow-max-n` 4096"
    why = re.sub(r"`--([a-z-]+)", r"`--\1`", why)
    with open(path, "w") as f:
        f.write("| path | " + " | ".join(f"d = {d}, N = {n}" for d, n in cols) + " |\n")
        # the first column wider (relative widths follow the dashes), so that
        # a path's name stays on one line
        f.write("|:" + "-" * 24 + "|" + ("-" * 14 + ":|") * len(cols) + "\n")
        for name in names:
            cells = [f"{val[(name, d, n)]:.1f}" if (name, d, n) in val else "-" for d, n in cols]
            f.write(f"| `{name}` | " + " | ".join(cells) + " |\n")
        f.write(f"\n: Forward throughput on the H200 in TFLOP/s ({dt}, not causal, "
                f"$B \\cdot N = 16384$ tokens, $H = 2048/d$), each call replayed from a CUDA graph. "
                f"How each row was called: `ours_vN_...`, our version $N$ through the library's C entry on "
                f"$(B, H, N, d)$ tensors, SDPA's layout; `ours_op`, the kernel of `ours_v3_hopper` through "
                f"our public entry `flash_attn_func` on $(B, N, H, d)$ tensors, FlashAttention's layout, "
                f"so that it differs from `ours_v3_hopper` only in the entry and the layout; `sdpa_...`, "
                f"PyTorch's public entry `scaled_dot_product_attention` on $(B, H, N, d)$ tensors; "
                f"`torch_materialized`, three PyTorch operations on the same. "
                + (f"A '-' is a run the benchmark did not make ({why}): the slow paths are "
                   f"timed only at the shorter sequences. " if why else "")
                + f"Data: `{BENCH}` (column `graph_ms`). {{#tbl:gpu-speed}}\n")


RATIO_PATHS = ("ours_v2_mma", "ours_v3_hopper", "ours_op", "sdpa_flash")


def ratio_rows(speed):
    """The fast paths over sdpa_cudnn at the same (N, d), bf16, no mask:
    (name, N, d, ratio) for gpu_speed_ratio.dat; a shape without both rows
    is left out."""
    t = {(name, N, d): tf for name, N, d, causal, dtype, tf in speed
         if dtype == "bf16" and causal in ("0", "no", "false", "False")}
    return [(name, N, d, tf / t[("sdpa_cudnn", N, d)]) for (name, N, d), tf in sorted(t.items())
            if name in RATIO_PATHS and ("sdpa_cudnn", N, d) in t]


def print_values(values):
    """Print a chapter generator's values (paper_bwd.py, paper_v3.py run on
    their own), one "key<TAB>value" a line in key order; returns the exit
    status 0."""
    for k, x in sorted(values.items()):
        print(f"{k}\t{x}")
    return 0



def write_dat(path, columns, source, rows):
    """A gnuplot table: a header naming the columns and the CSV they come
    from, then one row per tuple, the name quoted, floats to 6 digits."""
    cell = lambda x: f"{x:.6g}" if isinstance(x, float) else str(x)  # noqa: E731
    with open(path, "w") as f:
        f.write(f"# {columns}   (from {source})\n")
        for name, *rest in rows:
            f.write(" ".join([f'"{name}"'] + [cell(x) for x in rest]) + "\n")

def main(argv):
    out = os.path.join(ROOT, "build", "paper")
    if "--out" in argv:
        out = argv[argv.index("--out") + 1]
    os.makedirs(out, exist_ok=True)
    fig2, why2 = fig2_rows()
    speed, whys = speed_rows()
    sweep = sweep_rows()
    for name in ("gpu_fig2.dat", "gpu_speed.dat", "gpu_speed_ratio.dat", "gpu_io_sweep.dat"):
        p = os.path.join(out, name)
        if os.path.exists(p):
            os.remove(p)
    if fig2:
        write_dat(os.path.join(out, "gpu_fig2.dat"), "name dram_GB l2_GB model_GB ms l2_from_sm_GB", IO, fig2)
    else:
        print(f"paper_gpu.py: skipped the Figure 2 data: {why2}")
    if sweep and len({x[1] for x in sweep}) > 1:
        write_dat(os.path.join(out, "gpu_io_sweep.dat"),
                  "name N dram_GB l2_GB model_GB compulsory_GB l2_from_sm_GB", IO, sweep)
    md = os.path.join(out, "gpu_speed.md")
    if os.path.exists(md):
        os.remove(md)
    if speed:
        write_speed_table(speed, md)
        write_dat(os.path.join(out, "gpu_speed.dat"), "name N d causal dtype tflops", BENCH, speed)
        ratio = ratio_rows(speed)
        if ratio:
            write_dat(os.path.join(out, "gpu_speed_ratio.dat"), "name N d over_sdpa_cudnn", BENCH, ratio)
    else:
        print(f"paper_gpu.py: skipped the speed data: {whys}")


if __name__ == "__main__":
    main(sys.argv)
