"""paper/gen/claims_gpu.py -- the claims on the H200 runs (data/gpu/).

Figure 2's FLOPs, the H200's speed and traffic, the fault inputs of stage
5, the PyTorch op and training, version 3, the GPU backward and the ring;
each function is one @claim (see paper/gen/claimlib.py), run after the
CPU's. A missing data file gives a row saying so, never a failure.
"""
import math  # noqa: F401
import os  # noqa: F401
import re  # noqa: F401
import subprocess  # noqa: F401
import sys  # noqa: F401

from claimlib import *  # noqa: F401,F403


# how the speed rows' two sides were called and timed (scripts/gpu/bench_gpu.py's how_called, graph_ms)
CLOCK = "graph-replayed: ours by the library's C entry, SDPA by its Python entry"


def gen_values(t, name):
    """The values of generator paper/gen/<name>.py, each recorded in the
    claims table's value list (t.value), returned as a dict."""
    import importlib
    v = importlib.import_module(name).values()
    for k, x in v.items():
        t.value(k, x)
    return v


# ---------------------------------------------------------------------------
# The FlashAttention paper's Figure 2, and the H200
# ---------------------------------------------------------------------------
@claim
def figure2_flops(t):
    B, H, N, d = 64, 16, 1024, 64        # the figure's setting
    fwd = 4 * B * H * N * N * d
    std = 3 * fwd                        # backward of standard attention: 4 products = 2x forward
    fa = 3.5 * fwd                       # FlashAttention: S recomputed, backward 2.5x forward
    gs, gf, ms = pub("fig2_gflops_std"), pub("fig2_gflops_fa"), pub("fig2_ms_fa")
    for k, v in PUBLISHED.items():
        t.value("pub_" + k, f"{v[0]:g}")
    t.value("fig2_fwd_gflop", f"{fwd / 1e9:.1f}")
    t.value("fig2_std_gflop", f"{std / 1e9:.1f}")
    t.value("fig2_fa_gflop", f"{fa / 1e9:.1f}")
    t.value("fig2_std_factor", f"{std / 1e9 / gs:.1f}")
    t.value("fig2_fa_factor", f"{fa / 1e9 / gf:.1f}")
    t.value("fig2_ratio_paper", f"{gf / gs:.3f}")
    t.value("fig2_ratio_count", f"{fa / std:.3f}")
    t.value("fig2_fa_tflops", f"{fa / (ms * 1e-3) / 1e12:.0f}")
    t.value("fig2_paper_tflops", f"{gf / ms:.1f}")
    t.row("FlashAttention paper, Figure 2: GFLOPs of standard attention and FlashAttention "
          "($B$ = 64, $H$ = 16, $N$ = 1024, $d$ = 64, forward + backward)",
          QUOTES["q_fa1_fig2"].markdown(),
          f"$4BHN^2 d$ = {fwd / 1e9:.1f} GFLOP forward; forward + backward {std / 1e9:.1f} "
          f"(standard, $3\\times$) and {fa / 1e9:.1f} (recomputing, $3.5\\times$)",
          "arithmetic (the matrix products only)",
          f"Erratum (paper): {std / 1e9:.1f} / {gs:g} = {std / 1e9 / gs:.1f} and "
          f"{fa / 1e9:.1f} / {gf:g} = {fa / 1e9 / gf:.1f}: the printed GFLOPs are not the "
          f"matrix-product count; only their ratio ({gf / gs:.3f} against {fa / std:.3f}) is "
          f"close. At face value {gf:g} GFLOP in {ms:g} ms is {gf / ms:.1f} TFLOP/s on an A100")


def l2_bytes():
    """The H200's L2 size as the device reported it to Nsight Compute
    (device__attribute_l2_cache_size in data/gpu/io_fwd_ncu_raw.csv)."""
    full = path("data/gpu/io_fwd_ncu_raw.csv")
    if not os.path.exists(full):
        return None
    with open(full, newline="") as f:
        lines = [ln for ln in f if not ln.startswith("==")]
    for r in csv.DictReader(lines):
        v = (r.get("device__attribute_l2_cache_size") or "").replace(",", "")
        if v.isdigit():
            return int(v)
    return None


@claim
def h200(t):
    """The H200: datasheet rates (quoted), its L2 (as it reported itself) and
    the IO model at Figure 2's shape against Nsight's bytes (data/gpu/io_fwd.csv)."""
    dense = pub("h200_sparse_tflops") / 2
    t.value("h200_peak_tflops", f"{dense:g}")
    t.value("h200_hbm_tbs", f"{pub('h200_hbm_tbs'):g}")
    t.value("h200_ridge", f"{dense / pub('h200_hbm_tbs'):.0f}")
    for dd in (64, 128):
        t.value(f"ai_d{dd}", f"{4 * dd / 8:g}")     # 4 N^2 d FLOP over 8 N^2 bytes (fp16)
    # the softmax alone, per element of S: compare, subtract, exp, add, divide,
    # over one fp16 element read (S) and one written (P)
    ops, nbytes = 5, 2 + 2
    t.value("softmax_ops", str(ops))
    t.value("softmax_bytes", str(nbytes))
    t.value("softmax_ai", f"{ops / nbytes:g}")
    l2 = l2_bytes()
    t.value("l2_bytes", grouped(l2) if l2 else "not recorded")
    t.value("l2_mib", f"{l2 / 2 ** 20:g}" if l2 else "not recorded")
    io = read_csv(paper_gpu.IO) or []
    fig = [r for r in io if (paper_gpu.fnum(r, "B"), paper_gpu.fnum(r, "H"), paper_gpu.fnum(r, "N"),
                             paper_gpu.fnum(r, "d")) == (64.0, 16.0, 1024.0, 64.0)]
    keys = ("h200_tensor_gb", "h200_compulsory_gb", "h200_compulsory_noL_gb", "h200_naive_gb",
            "h200_tiled_gb", "h200_tiled_Br", "h200_kv_head_kib", "v0_dram_over_model_lo",
            "v0_dram_over_model_hi", "v0_sweep_N_lo", "v0_sweep_N_hi", "gap_mat_gb", "gap_tiled_gb",
            "fig2_short_min_mb", "fig2_short_min_name", "fig2_short_max_mb", "fig2_short_max_name")
    for k in keys:
        t.value(k, "n/a")
    by = {paper_gpu.col(r, "impl"): r for r in fig}
    v0, v1 = by.get("ours_v0_materialized"), by.get("ours_v1_tiled")
    claim_text = "The IO model predicts a GPU's DRAM bytes (H200, Figure 2's shape, fp16, forward)"
    if not (v0 and v1):
        t.row(claim_text, "our model (stages 1 and 3)",
              f"not measured in this build: no Figure 2 rows in {paper_gpu.IO}", "data/gpu/")
        return
    B, H, N, d = 64, 16, 1024, 64
    comp = paper_gpu.fnum(v1, "compulsory")
    tensor = B * H * N * d * 2                       # one of Q, K, V, O in fp16
    t.value("h200_tensor_gb", f"{tensor / 1e9:.3f}")
    t.value("h200_compulsory_gb", f"{comp / 1e9:.3f}")
    t.value("h200_compulsory_noL_gb", f"{4 * tensor / 1e9:.3f}")
    t.value("h200_naive_gb", f"{paper_gpu.fnum(v0, 'model') / 1e9:.2f}")
    # The model column must be version 0's count as the source has it, S in
    # fp32 and P in the dtype: B H (4 N^2 + 4 N^2 + 2 es N^2 + 4 es N d + 4 N)
    # (kernels/stage4_fwd_v0.cu, v0_model, with H_kv = H). A file measured on
    # another version 0 would make the text below wrong: stop instead.
    es = 2                                           # fp16
    now = B * H * (8 * N * N + 2 * es * N * N + 4 * es * N * d + 4 * N)
    if paper_gpu.fnum(v0, "model") != now:
        sys.exit(f"claims.py: {paper_gpu.IO}'s version-0 row at Figure 2's shape is not the fp32-S "
                 f"version 0 the text describes (model {paper_gpu.fnum(v0, 'model'):.0f} bytes, not {now}); "
                 f"rewrite the account of it in chapters/20-gpu-forward.md")
    t.value("io_fwd_commit", v0.get("commit") or "?")
    t.value("v0_model_now_gb", f"{now / 1e9:.2f}")
    t.value("h200_tiled_gb", f"{paper_gpu.fnum(v1, 'model') / 1e9:.2f}")
    t.value("h200_tiled_Br", "64")
    t.value("h200_kv_head_kib", f"{2 * N * d * 2 / 1024:.0f}")
    t.value("gap_mat_gb", f"{paper_gpu.dram_of(v0) / 1e9:.2f}")
    t.value("gap_tiled_gb", f"{paper_gpu.dram_of(v1) / 1e9:.2f}")
    # how far below the compulsory bytes each tiled path's DRAM count sits
    short = sorted(((comp - paper_gpu.dram_of(r)) / 1e6, paper_gpu.col(r, "impl"))
                   for r in fig if paper_gpu.col(r, "impl") != "ours_v0_materialized"
                   and paper_gpu.forward_path(paper_gpu.col(r, "impl")))
    t.value("fig2_short_min_mb", f"{short[0][0]:.1f}")
    t.value("fig2_short_min_name", short[0][1])
    t.value("fig2_short_max_mb", f"{short[-1][0]:.1f}")
    t.value("fig2_short_max_name", short[-1][1])
    sweep = [r for r in io if (r.get("label") or "") == "sweep" and
             paper_gpu.col(r, "impl") == "ours_v0_materialized"]
    ratios = sorted((paper_gpu.dram_of(r) / paper_gpu.fnum(r, "model"), int(paper_gpu.fnum(r, "N")))
                    for r in sweep if paper_gpu.fnum(r, "model"))
    if ratios:
        t.value("v0_dram_over_model_lo", f"{ratios[0][0]:.2f}")
        t.value("v0_dram_over_model_hi", f"{ratios[-1][0]:.2f}")
        ns = sorted(n for _, n in ratios)
        t.value("v0_sweep_N_lo", str(ns[0]))
        t.value("v0_sweep_N_hi", str(ns[-1]))
    l2sm = paper_gpu.fnum(v1, "l2_sm")
    t.row(claim_text, "our IO model (stages 1 and 3); " + QUOTES["q_fa1_theorem2"].markdown(),
          f"version 0 ($S$ in fp32): DRAM {paper_gpu.dram_of(v0) / 1e9:.2f} GB, model "
          f"{paper_gpu.fnum(v0, 'model') / 1e9:.2f} GB (DRAM/model {t.values['v0_dram_over_model_lo']} "
          f"to {t.values['v0_dram_over_model_hi']} over $N$ = {t.values['v0_sweep_N_lo']}.."
          f"{t.values['v0_sweep_N_hi']}); version 1: DRAM {paper_gpu.dram_of(v1) / 1e9:.2f} GB = "
          f"compulsory {comp / 1e9:.3f} GB ($Q, K, V$ read, $O, L$ written once), requested from L2 "
          f"{(l2sm or float('nan')) / 1e9:.2f} GB against a model of "
          f"{paper_gpu.fnum(v1, 'model') / 1e9:.2f} GB",
          paper_gpu.IO + "; data/gpu/io_fwd_ncu_raw.csv",
          f"The tiled model's $K, V$ re-reads land in the L2 ({t.values['l2_mib']} MiB, "
          f"{t.values['l2_bytes']} bytes as the device reports it), not in DRAM: for tiled "
          "kernels the model predicts what the SMs request from L2, and DRAM sees the "
          "compulsory bytes, whatever $M$ is")


@claim
def gpu_speed_and_traffic(t):
    """Peers measured in the same run (data/gpu/*.csv), beside what the paper published."""
    for k in ("gpu_shape", "gpu_mat_tflops", "gpu_mat_name", "gpu_mat_how", "gpu_ours_name", "gpu_ours_how",
              "gpu_ours_tflops",
              "gpu_ours_speedup", "gpu_sdpa_flash_tflops", "gpu_sdpa_flash_speedup",
              "gpu_sdpa_cudnn_tflops", "gpu_sdpa_cudnn_speedup",
              "gpu_fig2_mat_gb", "gpu_fig2_best_gb", "gpu_fig2_best"):
        t.value(k, "n/a")
    for impl in ("ours_v0_materialized", "ours_v1_tiled", "ours_v2_mma", "sdpa_flash", "sdpa_cudnn"):
        for q in ("dram", "l2", "l2sm", "model", "ms"):
            t.value(f"fig2_{impl}_{q}", "n/a")
    io = [r for r in (read_csv(paper_gpu.IO) or []) if (r.get("label") or "") == "sweep"]
    bench = read_csv(paper_gpu.BENCH) or []

    def setting(rows, f):
        got = sorted({f(r) for r in rows if None not in (paper_gpu.fnum(r, "B"), paper_gpu.fnum(r, "N"),
                                                         paper_gpu.fnum(r, "H"), paper_gpu.fnum(r, "d"))})
        return ", ".join(grouped(g) for g in got) if got else "n/a"
    t.value("gpu_sweep_tokens", setting(io, lambda r: paper_gpu.fnum(r, "B") * paper_gpu.fnum(r, "N")))
    t.value("gpu_sweep_H", setting(io, lambda r: paper_gpu.fnum(r, "H")))
    t.value("gpu_bench_tokens", setting(bench, lambda r: paper_gpu.fnum(r, "B") * paper_gpu.fnum(r, "N")))
    hidden = sorted({int(paper_gpu.fnum(r, "H") * paper_gpu.fnum(r, "d")) for r in bench
                     if None not in (paper_gpu.fnum(r, "H"), paper_gpu.fnum(r, "d"))})
    t.value("gpu_bench_hidden", ", ".join(str(h) for h in hidden) or "n/a")   # H d, no grouping: H = 2048/d
    summary = paper_gpu.summary()
    if not summary:
        t.value("gpu_status", "absent")
        t.row("FlashAttention is faster on a GPU (H200)", QUOTES["q_fa1_speed"].markdown(),
              "not measured in this build: no usable data/gpu/bench_fwd.csv or io_fwd.csv",
              "data/gpu/", "")
        return
    t.value("gpu_status", "present")
    for k, v in summary["values"].items():
        t.value(k, v)
    v = t.values
    if v["gpu_fig2_best"] != "n/a":
        t.row("Tiling cuts DRAM traffic (H200, Figure 2's shape, forward only, fp16)",
              QUOTES["q_fa1_fig2_hbm"].markdown(),
              f"materialized (version 0) {v['gpu_fig2_mat_gb']} GB; the least, {v['gpu_fig2_best']} "
              f"{v['gpu_fig2_best_gb']} GB; every tiled kernel, ours and PyTorch's, at most "
              f"{v['fig2_short_max_mb']} MB below the compulsory {v['h200_compulsory_gb']} GB",
              paper_gpu.IO,
              "The gap is materialized against compulsory bytes, not the $\\Theta(N^2d^2/M)$ "
              "factor: the tiled kernels' DRAM bytes do not depend on $M$ (their re-reads hit "
              f"the {v['l2_mib']} MiB L2)")
    if v["gpu_shape"] != "n/a":
        t.row(f"Tiled attention beats the materialized path on a GPU (H200, {v['gpu_shape']}, "
              "forward, same run, same tensors; " + CLOCK + ")", QUOTES["q_fa1_speed"].markdown() + " (A100)",
              f"{v['gpu_mat_name']} {v['gpu_mat_tflops']} TFLOP/s; {v['gpu_ours_name']} "
              f"{v['gpu_ours_tflops']} ({v['gpu_ours_speedup']}$\\times$); PyTorch's flash kernel "
              f"{v['gpu_sdpa_flash_tflops']} ({v['gpu_sdpa_flash_speedup']}$\\times$), its cuDNN kernel "
              f"{v['gpu_sdpa_cudnn_tflops']} ({v['gpu_sdpa_cudnn_speedup']}$\\times$)",
              paper_gpu.BENCH,
              "The speed-up belongs to kernels whose products use tensor cores; a tiled kernel "
              "on CUDA cores (version 1) is slower than a materialized one built on cuBLAS")


# ---------------------------------------------------------------------------
# The fault inputs of stage 5's tests (chapters/21-gpu-backward.md): what the rounding of an
# fp32 L does to P there, from the generators' own constants
# ---------------------------------------------------------------------------
def _fp32_half_ulp_log2(x):
    """log2 of half an ulp of an fp32 number of magnitude x (IEEE 754
    binary32: 24-bit significand, so an ulp is 2^(e - 23) for 2^e <= x < 2^(e+1))."""
    return math.floor(math.log2(abs(x))) - 24


@claim
def fault_inputs(t):
    """The arithmetic on two of the fault inputs stage 5 tests (chapters/21-gpu-backward.md):
    Q, K ~ -A U[0,1) and Q, K ~ U[lo, lo + w] (src/gpu/gpu_host.c, GH_IN_NEG900
    and GH_IN_HUGE), at the d of their cases (gh_shared_cases, src/gpu/gpu_host.c,
    which stage 5's suite runs; or its own table in tests/gpu/stage5_tests.c), with the
    default softmax_scale 1/sqrt(d). The typical scaled score is
    tau d E[q] E[k] (entries independent); an fp32 L of that size is rounded
    by up to half an ulp, which enters every exponent of the row: P is off
    by a factor of up to e^(half ulp)."""
    with open(path("src", "gpu", "gpu_host.c")) as f:
        gen = f.read()
    with open(path("tests", "gpu", "stage5_tests.c")) as f:
        cases = f.read()
    neg = re.search(r"in->Q\[i\] = -([\d.e]+) \* rng_uniform", gen)
    huge = re.search(r"in->Q\[i\] = ([\d.e]+) \+ ([\d.e]+) \* rng_uniform", gen)
    dm = re.search(r'\{"fault: [^"]*",(?: *\d+,){5} *(\d+),[^}]*GH_IN_NEG900\}', cases + gen)
    if not (neg and huge and dm):
        sys.exit("claims.py: the fault inputs' generators or their cases (src/gpu/gpu_host.c, "
                 "tests/gpu/stage5_tests.c) are not where fault_inputs() looks for them")
    A, lo, w, d = float(neg.group(1)), float(huge.group(1)), float(huge.group(2)), int(dm.group(1))
    root = math.isqrt(d)
    tau_tex = f"\\tfrac1{{{root}}}" if root * root == d else f"\\tfrac1{{\\sqrt{{{d}}}}}"
    t.value("fault_d", str(d))

    def num_tex(x):          # 900 as 900, 4e4 as 4 \times 10^4, 6.5e4 as 6.5 \times 10^4
        if x == int(x) and abs(x) < 1e4:
            return str(int(x))
        m, e = f"{x:.1e}".split("e")
        return f"{m.rstrip('0').rstrip('.')} \\times 10^{{{int(e)}}}"
    # -A U[0,1): mean entry -A/2, so q.k is about d (A/2)^2
    s_neg = d * (A / 2) ** 2 / math.sqrt(d)
    h_neg = _fp32_half_ulp_log2(s_neg)
    t.value("fault_neg_dist", f"$-{num_tex(A)}\\,U[0,1)$")
    t.value("fault_neg_score", f"${tau_tex} \\cdot {d} \\cdot {num_tex(A / 2)}^2 \\approx "
                               f"{tex_sci(s_neg)[1:-1]}$")
    t.value("fault_neg_half_ulp", f"$2^{{{h_neg}}}$")
    t.value("fault_neg_p_err", f"{100 * math.expm1(2.0 ** h_neg):.0f}\u00a0%")
    # U[lo, lo + w]: mean entry lo + w/2
    s_huge = d * (lo + w / 2) ** 2 / math.sqrt(d)
    t.value("fault_huge_dist", f"$U[{num_tex(lo)}, {num_tex(lo + w)}]$")
    t.value("fault_huge_score", tex_sci(s_huge))
    t.value("fault_huge_half_ulp", f"$2^{{{_fp32_half_ulp_log2(s_huge)}}}$")


# ---------------------------------------------------------------------------
# The PyTorch op (chapters/24-pytorch-op.md) and version 3 (chapters/23-hopper.md): the settings their
# scripts run, and data/gpu/studies/fwd_v3_steps/v3_steps.csv when present
# ---------------------------------------------------------------------------
@claim
def torch_op(t):
    """The training comparison's model and run (scripts/gpu/train_compare.py's
    DEFAULTS), and what the op saves for the backward at that size."""
    import train_report
    c = train_report.DEFAULTS
    B, H, N = c["batch"], c["heads"], c["context"]
    for k in ("steps", "layers", "d_model", "heads", "context", "batch"):
        t.value("train_" + k, str(c[k]))
    t.value("train_head_dim", str(c["d_model"] // c["heads"]))

    def power(n):          # 2^k when n is a power of two, else grouped digits
        return f"$2^{{{n.bit_length() - 1}}}$" if n & (n - 1) == 0 else grouped(n)
    t.value("train_P_elems", power(B * H * N * N))
    t.value("train_L_elems", power(B * H * N))

    # the first training run, judged by the first rule (data/gpu/studies/train_first_rule/train_loss.csv)
    first = path("data", "gpu", "studies", "train_first_rule", "train_loss.csv")
    for k in ("train_first_commit", "train_first_dev", "train_first_spread", "train_first_ratio",
              "train_first_rerun", "train_rerun"):
        t.value(k, "n/a")
    cur = path("data", "gpu", "train_loss.csv")
    if os.path.exists(cur):
        summ = train_report.summarize(train_report.read_csv(cur)[0])
        s = summ["final"]
        if "sdpa_flash_rerun" in s and "sdpa_flash" in s:
            t.value("train_rerun", f"{abs(s['sdpa_flash_rerun'] - s['sdpa_flash']):.4f}")
        if summ["verdict"] in ("PASS", "FAIL"):
            tc = paper_gpu.train_compare_values()
            seeds = (f"; over {tc['tc_models']} models x eager and compiled x {tc['tc_seeds']} seeds "
                     f"(train_compare.csv): within the rule in {tc['tc_rule_all_pass']} of {tc['tc_pairs']} "
                     f"pairs, a cuDNN run setting the noise in {tc['tc_noise_cudnn_n']}; against flash's runs "
                     f"alone {tc['tc_rule_flash_pass']} of {tc['tc_pairs']} (at most {tc['tc_rule_flash_max']} x, "
                     f"{tc['tc_rule_flash_max_pair']}); ours drifts more than flash on average in "
                     f"{tc['tc_ours_worse_n']} of {tc['tc_pairs']}") if tc else "; one draw, not a distribution"
            t.row(f"Training with our op ends where PyTorch's kernels do ({c['steps']} steps, bf16)",
                  "not in the chapter",
                  f"largest drift of our runs from the fp32-attention run {summ['drift'][summ['worst']]:.4f} "
                  f"= {summ['ratio']:.2f} x the largest of PyTorch's bf16 runs: {summ['verdict']} (rule: <= 2 x)"
                  + seeds, "data/gpu/train_loss.csv, train_compare.csv; scripts/gpu/train_compare.py")
    else:
        t.row("Training with our op ends where PyTorch's kernels do", "not in the chapter",
              "not measured in this build: no data/gpu/train_loss.csv", "data/gpu/train_loss.csv")
    if os.path.exists(first):
        losses, pv = train_report.read_csv(first)
        s = train_report.summarize(losses)
        dev = abs(s["final"]["ours"] - s["final"][train_report.REF])
        t.value("train_first_commit", pv.get("commit", "?"))
        t.value("train_first_dev", f"{dev:.4f}")
        t.value("train_first_spread", f"{s['spread']:.4f}")
        t.value("train_first_ratio", f"{dev / s['spread']:.1f}")
        f = s["final"]
        t.value("train_first_rerun", f"{abs(f['sdpa_flash_rerun'] - f['sdpa_flash']):.5f}")


@claim
def op_cost(t):
    """What a call of the op costs beside SDPA's (data/gpu/op_overhead.csv,
    scripts/gpu/bench_op_overhead.py: wall time per call of a loop of calls,
    bf16, d 64, the shapes below 8 x 32 x 1024 where the host's work is the
    cost) and what a training step costs (data/gpu/train_compare.csv: ms per
    step, eager and compiled, mean over the seeds)."""
    keys = ["op_f_ours", "op_f_flash", "op_fb_ours", "op_fb_flash", "op_fb_cudnn", "op_fb_reg",
            "op_small", "op_f_ratio", "op_fb_ratio", "step_eager_ours", "step_eager_flash", "step_eager_ratio",
            "step_comp_ours", "step_comp_flash", "step_comp_ratio", "step_seeds"]
    for k in keys:
        t.value(k, "n/a")
    rows = read_csv("data/gpu/op_overhead.csv") or []
    big = max(((int(r["B"]), int(r["H"]), int(r["N"])) for r in rows if r.get("impl") == "ours"), default=None)
    us = {}
    for r in rows:
        if r.get("us_per_call") and (int(r["B"]), int(r["H"]), int(r["N"])) != big:
            us.setdefault((r["impl"], r["pass"]), {})[(r["B"], r["H"], r["N"])] = float(r["us_per_call"])

    def rng(impl, ps):
        xs = list(us.get((impl, ps), {}).values())
        return f"{min(xs):.0f}-{max(xs):.0f}" if xs else "n/a"
    if ("ours", "fwdbwd") in us and ("sdpa_flash", "fwdbwd") in us:
        t.value("op_small", f"{big[0]} x {big[1]} x {big[2]}")
        for k, impl, ps in (("op_f_ours", "ours", "fwd"), ("op_f_flash", "sdpa_flash", "fwd"),
                            ("op_fb_ours", "ours", "fwdbwd"), ("op_fb_flash", "sdpa_flash", "fwdbwd"),
                            ("op_fb_cudnn", "sdpa_cudnn", "fwdbwd"), ("op_fb_reg", "ours_op", "fwdbwd")):
            t.value(k, rng(impl, ps))
        for k, ps in (("op_f_ratio", "fwd"), ("op_fb_ratio", "fwdbwd")):
            o, f = us.get(("ours", ps), {}), us.get(("sdpa_flash", ps), {})
            rs = [o[s] / f[s] for s in o if s in f]
            if rs:
                t.value(k, f"{min(rs):.1f}-{max(rs):.1f}")
    tc = read_csv("data/gpu/train_compare.csv") or []
    ms = {}
    for r in tc:   # the small model's rows (the CSV also holds the Llama-shaped ones)
        if r.get("ms_per_step") and (r.get("model") or "small") == "small":
            ms.setdefault((r["run"], r["mode"]), []).append(float(r["ms_per_step"]))
    for mode, tag in (("eager", "eager"), ("compiled", "comp")):
        a, b = ms.get(("ours", mode)), ms.get(("sdpa_flash", mode))
        if a and b:
            ma, mb = sum(a) / len(a), sum(b) / len(b)
            t.value(f"step_{tag}_ours", f"{ma:.1f}")
            t.value(f"step_{tag}_flash", f"{mb:.1f}")
            t.value(f"step_{tag}_ratio", f"{ma / mb:.2f}")
            t.value("step_seeds", str(len(a)))
    v = t.values
    if v["op_fb_ours"] != "n/a" and v["step_eager_ratio"] != "n/a":
        t.row("Our op in a training loop against SDPA's flash kernel (H200, bf16, d 64; each side through "
              "its public PyTorch entry, eager and compiled)", "not in the chapter",
              f"per call below {v['op_small']} (B x H x N): forward + backward {v['op_fb_ours']} us, SDPA flash "
              f"{v['op_fb_flash']}, cuDNN {v['op_fb_cudnn']} ({v['op_fb_ratio']} x flash; the registered "
              f"operators {v['op_fb_reg']}); training step of the small transformer {v['step_eager_ratio']} x "
              f"SDPA flash's eager, {v['step_comp_ratio']} x compiled (mean of {v['step_seeds']} seeds)",
              "data/gpu/op_overhead.csv; data/gpu/train_compare.csv")


@claim
def v3_steps(t):
    """The setting of the version-3 step figure: the N figures/v3_steps.gp
    draws, and the tokens and hidden size of data/gpu/studies/fwd_v3_steps/v3_steps.csv's rows there."""
    for k in ("v3_fig_N", "v3_fig_tokens", "v3_fig_hidden"):
        t.value(k, "n/a")
    with open(path("kernels", "stage4_fwd_v3_hopper.h")) as f:
        ds = re.search(r"#define FA_V3_DEFAULT_STEP (\d+)", f.read())
    t.value("v3_default_step", ds.group(1) if ds else "n/a")
    with open(path("figures", "v3_steps.gp")) as f:
        mo = re.search(r"NN = (\d+)", f.read())
    rows = [r for r in (read_csv("data/gpu/studies/fwd_v3_steps/v3_steps.csv") or []) if mo and r.get("N") == mo.group(1)]
    if not rows:
        return
    t.value("v3_fig_N", grouped(rows[0]["N"]))
    t.value("v3_fig_tokens", ", ".join(grouped(x) for x in sorted({int(r["B"]) * int(r["N"]) for r in rows})))
    t.value("v3_fig_hidden", ", ".join(str(x) for x in sorted({int(r["H"]) * int(r["d"]) for r in rows})))


@claim
def v3_measured(t):
    """What the device run of data/gpu/studies/fwd_v3_steps/v3_steps.csv and v3_ncu.txt measured
    (paper/gen/paper_v3.py): the default step against SDPA cuDNN and flash,
    each step's gain, the counters that say what limits it; and the final
    benchmark's forward version 3 against both peers on the fair clock."""
    v = gen_values(t, "paper_v3")
    if v.get("v3b_n", "n/a") != "n/a":
        t.row(f"Forward version 3 (Hopper; H200, bf16, d 64 and 128, causal and not, $N \\ge$ {v['v3b_N_lo']}, "
              f"{v['v3b_n']} shapes; " + CLOCK + ") against cuDNN and SDPA flash",
              "not in the chapter (the project's own comparison)",
              f"{v['v3b_gm_cudnn']} x cuDNN in geometric mean, {v['v3b_cudnn']} per shape, below cuDNN at "
              f"{v['v3b_nbelow']} of {v['v3b_n']}, by more than the clocks' spread ({v['v3b_spread']}: "
              f"graph-replayed against eager time of one kernel, N >= {v['v3b_spread_N']}) at {v['v3b_nbelow_clear']}; "
              f"{v['v3b_flash']} x SDPA flash; below N {v['v3b_N_lo']} "
              f"{v['v3b_short_cudnn']} x cuDNN", "data/gpu/bench_fwd.csv (columns graph_ms, median_ms)")


@claim
def bwd_measured(t):
    """What the final device run measured of the GPU backward (chapters/21-gpu-backward.md,
    paper/gen/paper_bwd.py): ratios to SDPA flash and cuDNN, determinism's
    cost, the bytes beside the IO model."""
    v = gen_values(t, "paper_bwd")
    src = "data/gpu/bench_bwd.csv; data/gpu/io_bwd.csv; data/gpu/studies/bwd_v4_ncu/bwd_opcodes_v4.txt"
    if v["bwd_status"] != "present":
        t.row("The tiled backward on a GPU (stage 5)", "not in the chapter",
              "not measured in this build: no data/gpu/bench_bwd.csv", src)
        return
    t.row(f"The tiled backward on a GPU (stage 5; H200, bf16, $N \\ge$ {v['bwd_N_lo']}, {v['bwd_nshapes']} shapes "
          "captured; " + CLOCK + ")",
          "not in the chapter (its backward is NumPy on the CPU)",
          f"version 4 (mma.sync, 128 keys): {v['bwd_v4_flash']} x SDPA flash (mean {v['bwd_v4_flash_gm']}), "
          f"{v['bwd_v4_cudnn']} x cuDNN; "
          f"version 2: {v['bwd_v2_flash']} x flash; {below_flash(v)}{v['bwd_all_claim']}"
          f"{v['bwd_flash_copies_claim']}. "
          f"Bytes the SMs request from L2 by loads and stores: {v['bwd_io_v4_sm_ratio']} x the IO "
          f"model (version 4), {v['bwd_io_v2_sm_ratio']} x (v2): the model's $\\mathrm{{d}}Q$ accumulation "
          "is done by atomic reductions, which that count leaves out", src)


def below_flash(v):
    """Whether versions 2 and 4 reach SDPA flash's backward at some shape, read
    from their ranges of ratios ('0.49-0.64', or one number)."""
    def top(x):
        try:
            return float(str(x).split("-")[-1])
        except ValueError:
            return None
    tops = [top(v["bwd_v2_flash"]), top(v["bwd_v4_flash"])]
    if None in tops:
        return "n/a"
    if max(tops) < 1:
        return "both below flash's backward at every shape"
    return "one of them at least as fast as flash's backward at some shape"


@claim
def bwd_hopper(t):
    """Backward version 3 on Hopper (chapters/23-hopper.md, paper/gen/paper_bwd3.py):
    what it measured against cuDNN and SDPA flash, over every shape first (the
    capture study while the main file's means leave shapes out), the main
    file's subset second."""
    v = gen_values(t, "paper_bwd3")
    src = "data/gpu/bench_bwd.csv or data/gpu/studies/bwd_v3_steps/bench.csv"
    if v["hb_status"] != "present":
        t.row("Backward version 3 (Hopper) against cuDNN and SDPA flash", "not in the chapter",
              "not measured in this build: no version 3 rows in " + src, src)
        return
    import paper_bwd3   # its capture study's name (beside this file; imported where used, as paper_bwd below)
    data = (f"{paper_bwd3.CAPTURE_STUDY} (commit {v['hb_all_commit']}, {v['hb_all_date']}); " if v["hb_sub_claim"] else "")
    t.row(f"Backward version 3 (Hopper; {v['hb_gpu']}, bf16, d 64 and 128, N {v['hb_Ns']}, causal and not; "
          f"{CLOCK}) against cuDNN's and SDPA flash's backward",
          "not in the chapter",
          f"Over {v['hb_lead_cover']}: {v['hb_lead_cudnn_gm']} x cuDNN in geometric mean, "
          f"{v['hb_lead_cudnn_range']} per shape, below 0.95 x at {v['hb_lead_below95']} of {v['hb_lead_n']} "
          f"(all at d {v['hb_lead_below95_d']}), below cuDNN by more than the clocks' spread "
          f"({v['hb_lead_spread']}) at {v['hb_lead_below_clear']}; {v['hb_lead_flash_gm']} x flash; "
          f"forward + backward {v['hb_lead_fb_cudnn_gm']} x cuDNN{v['hb_sub_claim']}"
          f"; fp16's ratio to cuDNN {v['hb_fp16_vs_bf16']} bf16's over the {v['hb_same_n']} shapes both were "
          f"captured at{paper_bwd_copies()}",
          f"{data}{v['hb_source']} (commit {v['hb_commit']}, {v['hb_date']})")


def paper_bwd_copies():
    """The claims' clause on SDPA flash's stored backward times ("" once re-measured)."""
    import paper_bwd
    return paper_bwd.copies_values()["bwd_flash_copies_claim"]


@claim
def ring(t):
    """Stage 7 (chapters/25-merge-rule.md): exercise 2 by the merge rule, and data/gpu/ring.csv
    when present (paper/gen/paper_ring.py)."""
    import paper_ring
    gen_values(t, "paper_ring")
    t.row(*paper_ring.claim_row())


@claim
def decode_measured(t):
    """Stage 8 on the H200 (chapters/25-merge-rule.md, paper/gen/paper_decode.py):
    ours against cuDNN, each through its public entry, graph-replayed and eager."""
    v = gen_values(t, "paper_decode")
    if v["dec_status"] != "present":
        return
    t.row(f"One decoding step (H200, bf16, $B$ 1, $H$ 32 on $H_{{kv}}$ 8, $d$ 128, seqlen_k {v['dec_Ns']}; "
          "each through its public entry, ours on a paged cache, cuDNN with enable_gqa; "
          "graph-replayed and eager)", "not in the chapter",
          f"ours takes {v['dec_best']} x cuDNN's time, each side at the faster of its two clocks "
          f"({v['dec_graph']} x graph-replayed, {v['dec_eager']} x eager; ours eager "
          f"{v['dec_self']} x its own graph-replayed time); bandwidth at the faster clock "
          f"{v['dec_frac_ours']} of the copy's, cuDNN {v['dec_frac_cudnn']}; at {v['dec_big_shape']}: ours "
          f"{v['dec_big_ours']}, cuDNN {v['dec_big_cudnn']}",
          "data/gpu/decode.csv (columns graph_ms, median_ms)")


@claim
def dq_accuracy(t):
    """The section on dQ when every logit is far from zero (chapters/21-gpu-backward.md)
    (paper/gen/paper_accuracy.py): the CPU model's values, the GPU tables
    (OUT/dq_accuracy.md in bf16, and for chapters/91-records.md the fp16 one in
    OUT/dq_accuracy_fp16.md and the costs in OUT/dq_accuracy_cost.md and
    OUT/dq_accuracy_pass.md, only when data/gpu/dq_accuracy.csv exists) and
    cuDNN's NaN where ours is finite."""
    import paper_accuracy
    v = gen_values(t, "paper_accuracy")
    paper_accuracy.write_table(t.out)
    src = "data/gpu/dq_accuracy.csv"
    if v["acc_gpu_status"] != "present":
        t.row("The backward on logits near -120: cuDNN's dQ against ours", "not in the chapter",
              "not measured in this build: no data/gpu/dq_accuracy.csv", src)
        return
    src += f" (commit {v['acc_gpu_commit']}, {v['acc_gpu_date'][:10]})"   # older than the rest of data/gpu
    t.row("The backward on logits near -120 (q = (1, 0.1 z), k = (-120 sqrt(d), 0.1 z), d = 64; "
          f"{v['acc_gpu_gpu']}): cuDNN's dQ against ours",
          "not in the chapter",
          f"cuDNN's dQ is NaN on {v['acc_gpu_cudnn_nan']} (dtype, seqlen, mask) points where ours is finite; "
          f"every fused SDPA kernel's dQ error (flash, cuDNN, memory-efficient; NaN aside) is at least "
          f"{v['acc_gpu_fused_min']} x max|dQ|, ours "
          f"with K centered at most {v['acc_gpu_ours_max']} ({v['acc_gpu_over_math']} x math's at most)", src)
    if v["acc_gpu_full_within2"] != "n/a":
        t.row("The same inputs with the dQ pass (accurate_dq=\"full\": D = rowsum(P dP), dS in two 16-bit "
              "parts): dQ against SDPA math's", "not in the chapter",
              f"within twice math's error at {v['acc_gpu_full_within2']} (dtype, seqlen, mask, version) points, at "
              f"most {v['acc_gpu_full_over_math']} x math's; the backward then takes {v['acc_gpu_full_cost']} "
              "its time with K as given", src)
