"""train_report.py -- train_compare.py's results as tables: the training log's lines, the paper's Markdown, the claims' numbers.

Needs neither torch nor a GPU (the paper build runs it on the committed CSVs
data/gpu/train_loss.csv and train_compare.csv); train_compare.py measures and
writes those files and calls these for its printout and for --summary and
--compare-summary. Also the models' sizes (DEFAULTS, MODELS), which the
claims read so that the chapter's numbers are the script's own.
"""
import argparse
import csv
import math

import provenance as prov   # scripts/gpu/, this module's own folder

REF = "sdpa_flash"
LAST = 50    # steps averaged into a run's final loss
FP32 = "fp32_math"   # the reference run of the verdict
# The model and the run, as the paper describes them (paper/gen/claims.py reads
# this table, so that chapters/24-pytorch-op.md's numbers are the script's own).
DEFAULTS = {"steps": 500, "layers": 4, "d_model": 256, "heads": 4, "context": 512, "batch": 16,
            "lr": 1e-3, "seed": 0}
# --models (with --compare): the sizes of each model trained. small is
# DEFAULTS' model; the llama ones have a Llama-style model's attention shapes
# (hidden 1024, grouped key/value heads, 4 sequences of 1024 tokens a step),
# at d 64 and d 128.
MODELS = {"small": dict(layers=4, d_model=256, heads=4, kv_heads=4, context=512, batch=16),
          "llama-d64": dict(layers=4, d_model=1024, heads=16, kv_heads=4, context=1024, batch=4),
          "llama-d128": dict(layers=4, d_model=1024, heads=8, kv_heads=2, context=1024, batch=4)}
PROV_COLS = prov.COLUMNS


def summarize(losses, last=LAST):
    """losses: {run: [loss per step]}. Returns a dict with each run's final
    loss (mean of the last `last` steps), each run's drift from fp32_math,
    the bf16 noise (the largest drift of PyTorch's bf16 runs), the spread
    among PyTorch's bf16 runs (the first rule's noise), and the verdict on
    our runs."""
    n = min(len(v) for v in losses.values())
    k = min(last, n)
    final = {r: sum(v[n - k:n]) / k for r, v in losses.items()}
    torch_runs = [r for r in losses if r.startswith("sdpa_")]
    ours = [r for r in losses if r.startswith("ours")]
    spread = (max(final[r] for r in torch_runs) - min(final[r] for r in torch_runs)) if torch_runs else None
    out = {"steps": n, "last": k, "final": final, "spread": spread,
           "step0": {r: v[0] for r, v in losses.items()}, "verdict": "NONE"}
    if FP32 in final and torch_runs and ours:
        drift = {r: abs(final[r] - final[FP32]) for r in final if r != FP32}
        noise_run = max(torch_runs, key=lambda r: drift[r])
        noise = drift[noise_run]
        worst = max(ours, key=lambda r: drift[r])
        out.update(drift=drift, noise=noise, noise_run=noise_run, worst=worst,
                   ratio=drift[worst] / noise if noise > 0 else math.inf,
                   verdict="PASS" if drift[worst] <= 2 * noise else "FAIL")
    return out


def report_lines(s):
    """The comparison as plain lines (the training log)."""
    lines = [f"final loss = mean of the last {s['last']} of {s['steps']} steps:"]
    for r, f in s["final"].items():
        d = s.get("drift", {}).get(r)
        lines.append(f"  {r:18s} {f:.5f}   (step 0: {s['step0'][r]:.5f})"
                     + ("" if d is None else f"   drift from {FP32}: {d:.5f}"))
    if s["spread"] is not None:
        lines.append(f"spread among PyTorch's bf16 runs (the first rule's noise): {s['spread']:.5f}")
    if s["verdict"] in ("PASS", "FAIL"):
        lines.append(f"bf16 noise: largest drift of PyTorch's bf16 runs = {s['noise']:.5f} ({s['noise_run']})")
        lines.append(f"ours: largest drift {s['drift'][s['worst']]:.5f} ({s['worst']}) = {s['ratio']:.2f} x noise; "
                     f"rule <= 2 x noise: {s['verdict']}")
    else:
        lines.append(f"no verdict: need {FP32}, a PyTorch bf16 run and a run of ours")
    return lines


def read_csv(path):
    """{run: [loss per step]} and the first row's provenance, from our CSV."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(ln for ln in f if not ln.startswith("#")))
    losses = {}
    for row in rows:
        losses.setdefault(row["run"], {})[int(row["step"])] = float(row["loss"])
    return ({r: [v[i] for i in sorted(v)] for r, v in losses.items()},
            {c: rows[0].get(c, "") for c in PROV_COLS} if rows else {})


def write_summary(csv_path, md_path):
    """The paper's table (Markdown) from the CSV, its provenance in the
    table's caption, then both verdicts on every run of ours; removes
    md_path when there is no CSV."""
    if prov.summary_rows("train_compare", csv_path, md_path, "training table") is None:
        return 0
    losses, p = read_csv(csv_path)
    s = summarize(losses)
    rows = ["| run | loss at step 0 | final loss (mean of the last %d steps) | drift from `%s` |"
            % (s["last"], FP32), "|---|---:|---:|---:|"]
    for r, f in s["final"].items():
        d = s.get("drift", {}).get(r)
        rows.append(f"| `{r}` | {s['step0'][r]:.4f} | {f:.4f} | {'' if d is None else f'{d:.4f}'} |")
    text = "\n".join(rows) + "\n\n"
    text += (f": The training runs of the small transformer, {s['steps']} steps each, one initial "
             f"model and one sequence of batches; {run_facts(p)}.\n\n")
    if s["verdict"] in ("PASS", "FAIL"):
        text += (f"The bf16 noise, the largest drift of PyTorch's bf16 runs from `{FP32}`, is "
                 f"{s['noise']:.4f} (`{s['noise_run']}`). The largest drift of our runs is "
                 f"{s['drift'][s['worst']]:.4f} (`{s['worst']}`), {s['ratio']:.2f} times that noise "
                 f"({'within' if s['verdict'] == 'PASS' else 'outside'} the rule of at most twice the noise). ")
    ours = [r for r in s["final"] if r.startswith("ours")]
    if s["spread"] is not None and ours and REF in s["final"] and s["spread"] > 0:
        # the spread taken as the noise, over every run of ours (the worst, as for the drift)
        off = {r: abs(s["final"][r] - s["final"][REF]) for r in ours}
        far = max(ours, key=off.get)
        text += (f"PyTorch's bf16 runs end within {s['spread']:.4f} of each other; taking that spread "
                 f"as the noise instead, our runs end at most {off[far]:.4f} from `{REF}` (`{far}`), "
                 f"{off[far] / s['spread']:.2f} times the spread "
                 f"({'within' if off[far] <= 2 * s['spread'] else 'outside'} twice the spread).")
    return prov.write_summary("train_compare", md_path, csv_path, text.rstrip() + "\n")


def run_facts(p):
    """The provenance of a run as the summaries state it, from a CSV row p."""
    return (f"{p.get('gpu', '?')}, driver {p.get('driver', '?')}, CUDA {p.get('cuda', '?')}, "
            f"torch {p.get('torch', '?')}, commit {p.get('commit', '?')}, {p.get('date', '?')}")


def describe(cfg):
    """The model's sizes in words."""
    return (f"{cfg.layers} layers, d_model {cfg.d_model}, {cfg.heads} query heads of d = {cfg.d_model // cfg.heads} "
            f"on {cfg.kv_heads} key/value heads, context {cfg.context}, batch {cfg.batch}")


def compare_stats(rows):
    """Per (model, run, mode) over the seeds: (seeds, mean ms/step, mean and
    largest drift from fp32_math); and per (model, mode) ours' mean step time
    over the faster SDPA run's (flash or cuDNN) in that mode, with its name."""
    by = {}
    for r in rows:
        by.setdefault((r.get("model") or "small", r["run"], r["mode"]), []).append(r)
    stats = {}
    for key, rs in by.items():
        dr = [r["drift_from_" + FP32] for r in rs]
        stats[key] = (len(rs), sum(r["ms_per_step"] for r in rs) / len(rs), sum(dr) / len(dr), max(dr))
    ratios = {}
    for (model, run, mode), st in stats.items():
        if run != "ours":
            continue
        peers = [(stats[(model, p, mode)][1], p) for p in ("sdpa_flash", "sdpa_cudnn") if (model, p, mode) in stats]
        if peers:
            best_ms, best = min(peers)
            ratios[(model, mode)] = (st[1] / best_ms, best)
    return stats, ratios


def compare_table(rows):
    """compare_stats as plain lines (the run's log)."""
    if not rows:
        return ["no run finished"]
    stats, ratios = compare_stats(rows)
    out = [f"{rows[0]['steps']} steps a run; drift = |final loss - final loss of {FP32}| on the same seed",
           f"{'model':11s} {'run':12s} {'mode':9s} {'seeds':>5s} {'ms/step':>8s} {'drift mean':>11s} {'drift max':>10s}"]
    for (model, run, mode), (n, ms, dm, dx) in stats.items():
        out.append(f"{model:11s} {run:12s} {mode:9s} {n:5d} {ms:8.2f} {dm:11.5f} {dx:10.5f}")
    for (model, mode), (ratio, best) in ratios.items():
        out.append(f"{model} {mode}: ours / the faster SDPA run ({best}) step time {ratio:.3f}x")
    return out


def write_compare_summary(csv_path, md_path):
    """The --compare table (Markdown) from its CSV, for the paper: per model,
    run and mode the mean ms/step and the mean and largest drift over the
    seeds, then ours over the faster SDPA run. Needs no torch; removes
    md_path when there is no CSV."""
    raw = prov.summary_rows("train_compare", csv_path, md_path)
    if raw is None:
        return 0
    rows = [{"model": r.get("model") or "small", "run": r["run"], "mode": r["mode"], "seed": int(r["seed"]),
             "steps": int(r["steps"]), "ms_per_step": float(r["ms_per_step"]),
             "drift_from_" + FP32: float(r["drift_from_" + FP32])} for r in raw]
    stats, ratios = compare_stats(rows)
    out = ["| model | run | mode | seeds | ms per step | drift from `%s`, mean | largest |" % FP32,
           "|------|-----------|--------|---:|------:|------:|------:|"]
    for (model, run, mode), (n, ms, dm, dx) in stats.items():
        out.append(f"| {model} | `{run}` | {mode} | {n} | {ms:.2f} | {dm:.4f} | {dx:.4f} |")
    text = "\n".join(out) + "\n\n"
    if ratios:
        text += "Ours over the faster SDPA run of the same model and mode: " + "; ".join(
            f"{model} {mode} {ratio:.2f} x (`{best}`)" for (model, mode), (ratio, best) in ratios.items()) + ". "
    sizes = "; ".join(f"{m}: {describe(argparse.Namespace(**MODELS[m]))}" for m in dict.fromkeys(r["model"] for r in rows)
                      if m in MODELS)
    p = raw[0] if raw else {}
    text += f"{rows[0]['steps'] if rows else 0} steps a run. {sizes}. {run_facts(p)}.\n"
    return prov.write_summary("train_compare", md_path, csv_path, text)
