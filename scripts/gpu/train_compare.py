#!/usr/bin/env python3
"""train_compare.py -- a small causal transformer trained with our attention op and with SDPA.

The real use of python/flashattn_stages/flash_op.py: a byte-level GPT (4 layers, d_model 256,
4 heads of d = 64, context 512) trained on the text this repository ships
(chapters/*.md, then src/*/*.c, src/*/*.h, kernels/*.cu, kernels/*.cuh, each
group in sorted order, concatenated), from ONE initialization and ONE
sequence of batches (both drawn from --seed), once per attention path:

    ours             flash_attention(q, k, v, causal=True): our kernels,
                     forward and backward, the best version the table has
    ours_rerun       the same again (our default backward adds dQ in no
                     fixed order, so a rerun moves the trajectory)
    ours_v2          our versions 2 (forward and backward), FlashAttention-2's
                     schedule, instead of the best the table has
    sdpa_flash       torch's scaled_dot_product_attention, flash backend
    sdpa_flash_rerun the same again (what a rerun of one kernel moves)
    sdpa_cudnn       cuDNN backend            (skipped where it does not run)
    sdpa_efficient   memory-efficient backend (skipped where it does not run)
    fp32_math        the reference: attention in fp32 (SDPA's math backend on
                     q, k, v converted to fp32, autocast off inside), the
                     result rounded back to bf16

Everything but the attention is the same torch code, in bf16 autocast with
fp32 weights and AdamW, so the runs differ only by rounding, which bf16
training amplifies from step to step. The comparison:
    final loss   the mean training loss of the last 50 steps of a run
    drift        |final(run) - final(fp32_math)|: how far a run ends from
                 the run whose attention is not rounded to bf16 inside
    bf16 noise   the largest drift of PyTorch's bf16 runs (sdpa_*): how far
                 kernels that PyTorch ships as correct end from the
                 reference
    verdict      PASS when the drift of every run of ours is <= 2 x noise
                 (twice, as in the gradient checks' error rule)
The first rule (the chapter says why it was replaced) took as noise the
spread among PyTorch's bf16 runs; those round P alike and follow one
trajectory, so their spread measured only the order of dQ's atomic
additions, not what bf16 rounding moves. Both numbers are printed.

Usage (on a GPU machine; make build/libfa_gpu.so first):
    python3 scripts/gpu/train_compare.py --csv data/gpu/train_loss.csv
    python3 scripts/gpu/train_compare.py --steps 50 --csv /tmp/t.csv     # a quick look
    python3 scripts/gpu/train_compare.py --compare --steps 200 --seeds 3 \
        --models small,llama-d64,llama-d128 --csv data/gpu/train_compare.csv
        (eager and torch.compile(fullgraph=True), ours, SDPA flash and cuDNN,
        fp32_math as each seed's reference, per model of MODELS; SDPA runs
        grouped heads through enable_gqa where the backend takes it, else on
        K, V repeated as transformers' repeat_kv does (how_called says which):
        per model, run and seed the final loss, its drift from fp32_math's, ms
        per step; a table with ours over the faster SDPA run. --budget S stops
        adding seeds of a model after S seconds, 150 by default)
    python3 scripts/gpu/train_compare.py --summary build/paper/train_loss.md
        (no GPU and no torch needed: the Markdown table of the comparison
        from the CSV, for the paper; writes nothing when the CSV is absent)
Output: one line per 50 steps per run, then the comparison; the CSV has one
row per (run, step): run, step, loss, loss minus sdpa_flash's loss at that
step, learning rate, and the provenance columns gpu, driver, cuda, torch,
commit, date, command (scripts/gpu/provenance.py). Exit 0 when the verdict is
PASS, 1 when FAIL, 2 on bad usage or when our op cannot run the problem.
Cost on an H200: about 10 s per run of 500 steps, under a minute in all.
"""
import argparse
import contextlib
import csv
import glob
import hashlib
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpu_timing  # noqa: E402  (scripts/, this script's own folder)
import provenance as prov  # noqa: E402
from train_report import (DEFAULTS, FP32, LAST, MODELS, PROV_COLS, REF, compare_table, describe,  # noqa: E402
                          report_lines, summarize, write_compare_summary, write_summary)

RUNS = ["ours", "ours_rerun", "ours_v2", "sdpa_flash", "sdpa_flash_rerun", "sdpa_cudnn", "sdpa_efficient",
        "fp32_math"]
CORPUS = ["chapters/*.md", "src/*/*.c", "src/*/*.h", "kernels/*.cu", "kernels/*.cuh"]
DEVICE = "cuda"


# ---------------------------------------------------------------------------
# The model and the training (torch, on a GPU)
# ---------------------------------------------------------------------------
def corpus_bytes():
    """The training text: CORPUS's files in a fixed order, one blank line apart."""
    parts = []
    for pattern in CORPUS:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            with open(path, "rb") as f:
                parts.append(f.read())
    return b"\n\n".join(parts)


def build(torch, nn, F, cfg):
    """The model class: pre-LayerNorm GPT blocks, attention pluggable."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            D, d = cfg.d_model, cfg.d_model // cfg.heads
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv = nn.Linear(D, D + 2 * cfg.kv_heads * d, bias=False)
            self.proj = nn.Linear(D, D, bias=False)
            self.fc = nn.Linear(D, 4 * D, bias=False)
            self.out = nn.Linear(4 * D, D, bias=False)

        def forward(self, x, attn):
            B, N, D = x.shape
            d, Hk = D // cfg.heads, cfg.kv_heads
            # (B, N, (H + 2 H_kv) d) -> q (B, H, N, d), k, v (B, H_kv, N, d): views, SDPA's layout
            qkv = self.qkv(self.ln1(x)).view(B, N, cfg.heads + 2 * Hk, d).transpose(1, 2)
            q, k, v = qkv[:, :cfg.heads], qkv[:, cfg.heads:cfg.heads + Hk], qkv[:, cfg.heads + Hk:]
            y = attn(q, k, v)
            x = x + self.proj(y.transpose(1, 2).reshape(B, N, D))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(256, cfg.d_model)
            self.pos = nn.Embedding(cfg.context, cfg.d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.ln = nn.LayerNorm(cfg.d_model)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02 / (math.sqrt(2 * cfg.layers) if name.endswith(
                        ("proj.weight", "out.weight")) else 1.0))

        def forward(self, idx, attn):
            x = self.tok(idx) + self.pos.weight[: idx.shape[1]]
            for b in self.blocks:
                x = b(x, attn)
            return self.ln(x) @ self.tok.weight.T   # tied output layer: (B, N, 256)

    return GPT


def gqa_native(torch, F, backend):
    """Whether SDPA's `backend` runs grouped heads itself (enable_gqa=True) on
    a small bf16 causal problem with 4 query heads per key/value head."""
    from torch.nn.attention import sdpa_kernel
    q = torch.randn(1, 8, 64, 64, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    kv = torch.randn(1, 2, 64, 64, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    try:
        with sdpa_kernel([backend]):
            F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True).sum().backward()
        return True
    except RuntimeError:
        return False


def sdpa_attention(torch, F, backend, grouped, enter=True):
    """attn(q, k, v) by SDPA's `backend`, causal (enter: inside each call
    the sdpa_kernel context; else the caller's around the run): with grouped
    heads (H > H_kv) through enable_gqa where the backend runs it, else on
    K, V repeated to H heads as transformers' repeat_kv does. Returns attn
    and how it calls SDPA."""
    from torch.nn.attention import sdpa_kernel
    native = grouped and gqa_native(torch, F, backend)

    def attn(q, k, v):
        if grouped and not native:
            r = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)
        with sdpa_kernel([backend]) if enter else contextlib.nullcontext():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=native)
    how = "no grouped heads" if not grouped else ("enable_gqa=True" if native else "K, V repeated to H heads")
    return attn, how


def attention_paths(torch, F, cfg):
    """name -> attn(q, k, v), causal, q (B, H, N, d), k, v (B, H_kv, N, d) in, (B, H, N, d) out."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flash_op = import_op()
    flash_attention = flash_op.flash_attention
    grouped = cfg.kv_heads != cfg.heads

    def sdpa(backend):
        return sdpa_attention(torch, F, backend, grouped)[0]

    def fp32_math(q, k, v):
        # autocast would send SDPA back to bf16: off, and fp32 in and out
        with torch.autocast(DEVICE, enabled=False), sdpa_kernel([SDPBackend.MATH]):
            return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True,
                                                  enable_gqa=grouped).to(q.dtype)

    return {"ours": lambda q, k, v: flash_attention(q, k, v, causal=True),
            "ours_rerun": lambda q, k, v: flash_attention(q, k, v, causal=True),
            "ours_v2": lambda q, k, v: flash_attention(q, k, v, causal=True, version=2),
            FP32: fp32_math,
            "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
            "sdpa_flash_rerun": sdpa(SDPBackend.FLASH_ATTENTION),
            "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
            "sdpa_efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION)}


def import_op():
    """The op: the package flashattn_stages (installed, or python/ on PYTHONPATH as make sets it)."""
    from flashattn_stages import flash_op
    return flash_op


def lr_at(step, cfg):
    """Linear warm-up over the first 10% of steps, then cosine down to lr / 10."""
    warm = max(1, cfg.steps // 10)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    t = (step - warm) / max(1, cfg.steps - warm)
    return cfg.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * t)))


def train_step(torch, F, fn, model, opt, batches, step, cfg, attn):
    """One optimizer step on batches[step] through fn (the model itself, or its
    torch.compile'd form), bf16 autocast, clipped gradients; the loss, detached."""
    for g in opt.param_groups:
        g["lr"] = lr_at(step, cfg)
    xy = batches[step].long()
    x, y = xy[:, :-1], xy[:, 1:]
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        logits = fn(x, attn)
    loss = F.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def train(torch, F, GPT, init, batches, attn, cfg):
    """One run from `init`; returns the loss of every step (floats) and seconds."""
    model = GPT().to(DEVICE)
    model.load_state_dict(init)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
    losses = torch.empty(cfg.steps, device=DEVICE)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        losses[step] = train_step(torch, F, model, model, opt, batches, step, cfg, attn)
    torch.cuda.synchronize()
    return losses.tolist(), time.perf_counter() - t0


def run_training(args):
    torch = gpu_timing.torch_on_gpu("train_compare")
    if torch is None:
        return 2
    import torch.nn as nn
    import torch.nn.functional as F
    cfg = args
    text = corpus_bytes()
    data = torch.tensor(list(text), dtype=torch.uint8)
    print(f"corpus: {len(text)} bytes ({', '.join(CORPUS)}), sha256 {hashlib.sha256(text).hexdigest()[:16]}")
    print(f"model: {describe(cfg)}, {cfg.steps} steps, AdamW lr {cfg.lr}, bf16 autocast, seed {cfg.seed}")
    # one initialization and one sequence of batches for every run
    torch.manual_seed(cfg.seed)
    GPT = build(torch, nn, F, cfg)
    init = {k: v.detach().clone() for k, v in GPT().state_dict().items()}
    g = torch.Generator().manual_seed(cfg.seed + 1)
    starts = torch.randint(0, len(text) - cfg.context - 1, (cfg.steps, cfg.batch), generator=g)
    batches = data[starts[:, :, None] + torch.arange(cfg.context + 1)].to(DEVICE)   # (steps, batch, context+1)

    paths = attention_paths(torch, F, cfg)
    # our op must run the problem (causal, d, bf16) before anything is trained
    probe = torch.randn(1, cfg.heads, cfg.context, cfg.d_model // cfg.heads, device=DEVICE,
                        dtype=torch.bfloat16, requires_grad=True)
    probe_kv = probe[:, :cfg.kv_heads]
    try:
        paths["ours"](probe, probe_kv, probe_kv).float().sum().backward()
    except ValueError as e:
        print(f"train_compare: our op cannot train this model: {e}", file=sys.stderr)
        return 2
    flash_op = import_op()
    p = flash_op.problem(probe, probe_kv, causal=True)
    dt = flash_op.DTYPE_CODES[torch.bfloat16]
    fv = flash_op.dispatch.choose_version(flash_op.fa.FORWARD, dt, p)
    bv = flash_op.dispatch.choose_version(flash_op.fa.BACKWARD, dt, p)
    print(f"ours: forward v{fv}, backward v{bv} (the best the table has for bf16, causal, d = {p.d})")

    losses, seconds = {}, {}
    for name in [r for r in RUNS if r in args.runs]:
        try:
            losses[name], seconds[name] = train(torch, F, GPT, init, batches, paths[name], cfg)
        except (RuntimeError, ValueError) as e:   # a backend or version that does not run here
            if name == "ours":
                raise
            print(f"{name:18s} skipped: {str(e).strip().splitlines()[0][:120]}")
            continue
        ls = losses[name]
        marks = " ".join(f"{s}:{ls[s]:.3f}" for s in range(0, cfg.steps, max(1, cfg.steps // 10)))
        print(f"{name:18s} {seconds[name]:6.1f} s ({1e3 * seconds[name] / cfg.steps:.1f} ms/step)  "
              f"loss by step {marks} last:{ls[-1]:.3f}", flush=True)
        if not all(math.isfinite(x) for x in ls):
            print(f"{name:18s} has non-finite losses")

    if args.csv:
        pv = prov.record(sys.argv)
        ref = losses.get(REF)
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["run", "step", "loss", "loss_minus_" + REF, "lr"] + PROV_COLS)
            for name, ls in losses.items():
                for s, x in enumerate(ls):
                    w.writerow([name, s, f"{x:.6f}", "" if ref is None else f"{x - ref[s]:.6f}",
                                f"{lr_at(s, cfg):.6g}"] + [pv[c] for c in PROV_COLS])
        print(f"wrote {args.csv} ({sum(len(v) for v in losses.values())} rows)")
    s = summarize(losses)
    for line in report_lines(s):
        print(line)
    return {"PASS": 0, "FAIL": 1}.get(s["verdict"], 1)


# ---------------------------------------------------------------------------
# --compare: eager and torch.compile, our op and SDPA flash, several seeds
# ---------------------------------------------------------------------------
COMPARE_RUNS = [("ours", "eager"), ("ours", "compiled"), ("sdpa_flash", "eager"),
                ("sdpa_flash", "compiled"), ("sdpa_cudnn", "eager"), ("sdpa_cudnn", "compiled"), (FP32, "eager")]
COMPARE_COLS = ["model", "run", "mode", "seed", "steps", "final_loss", "drift_from_" + FP32,
                "ms_per_step", "compile_s", "how_called"]
TIMED_FROM = 10   # step time: steps TIMED_FROM.. (the first ones include compilation)
CHUNK = 10        # steps a run takes in one turn (interleaved_steps)


def compare_training(args):
    """For each model of --models and each seed (a fresh initialization and
    batch sequence): every run of COMPARE_RUNS trained --steps steps from the
    same start. Per run: the final loss (mean of the last LAST steps, or of
    all when fewer), its drift |final - final(fp32_math)| on that seed, the
    time per step from step TIMED_FROM on and the seconds of the first
    TIMED_FROM steps (which hold the compilation). The runs take turns,
    CHUNK steps at a time (interleaved_steps), and a run's time per step is
    the median over its turns. One model object per run
    is compiled once and reloaded for each seed, so a seed does not
    recompile. Seeds stop being added when --budget seconds have passed for
    that model (the table says how many ran)."""
    torch = gpu_timing.torch_on_gpu("train_compare")
    if torch is None:
        return 2
    rows, failed = [], []
    for name in args.models:
        cfg = argparse.Namespace(**vars(args))
        cfg.model = name
        for k, v in MODELS[name].items():
            setattr(cfg, k, v)
        compare_model(torch, cfg, rows, failed)
    lines = compare_table(rows)
    for ln in lines:
        print(ln)
    if args.csv:
        pv = prov.record(sys.argv)
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        with open(args.csv + ".tmp", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COMPARE_COLS + PROV_COLS)
            for r in rows:
                w.writerow([r["model"], r["run"], r["mode"], r["seed"], r["steps"], f"{r['final_loss']:.6f}",
                            f"{r['drift_from_' + FP32]:.6f}", f"{r['ms_per_step']:.4f}",
                            f"{r['compile_s']:.3f}", r["how_called"]] + [pv[c] for c in PROV_COLS])
        os.replace(args.csv + ".tmp", args.csv)
        print(f"wrote {args.csv} ({len(rows)} rows)")
    if failed:
        print(f"train_compare: {len(failed)} run(s) failed: "
              + ", ".join(f"{md} {r} {m} seed {s}" for md, r, m, s in failed))
        return 1
    return 0


def compare_model(torch, cfg, rows, failed):
    """compare_training's runs for one model (cfg: its sizes); appends to rows and failed."""
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flash_op = import_op()
    text = corpus_bytes()
    data = torch.tensor(list(text), dtype=torch.uint8)
    GPT = build(torch, nn, F, cfg)
    grouped = cfg.kv_heads != cfg.heads
    print(f"model {cfg.model}: {describe(cfg)}", flush=True)

    def ours(q, k, v):
        return flash_op.flash_attention(q, k, v, causal=True)

    def fp32_math(q, k, v):
        with torch.autocast(DEVICE, enabled=False):
            return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True,
                                                  enable_gqa=grouped).to(q.dtype)

    backend_of = {"ours": None, "sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
                  FP32: SDPBackend.MATH}
    attn_of = {"ours": ours, FP32: fp32_math}
    how_of = {"ours": "flash_attention(q, k, v, causal=True), k, v with H_kv heads",
              FP32: "SDPA math backend in fp32" + (", enable_gqa=True" if grouped else "")}
    for run in ("sdpa_flash", "sdpa_cudnn"):
        # the backend is chosen around the whole run (sdpa_kernel below)
        attn, how = sdpa_attention(torch, F, backend_of[run], grouped, enter=False)
        attn_of[run] = attn
        how_of[run] = f"F.scaled_dot_product_attention(is_causal=True) under sdpa_kernel({run[5:]}), {how}"
    models, compiled = {}, {}
    for run, mode in COMPARE_RUNS:
        models[(run, mode)] = GPT().to(DEVICE)
        m = models[(run, mode)]
        compiled[(run, mode)] = torch.compile(m, fullgraph=True) if mode == "compiled" else m
    t_start = time.perf_counter()
    for i in range(cfg.seeds):
        if i > 0 and time.perf_counter() - t_start > cfg.budget:
            print(f"--budget {cfg.budget:.0f} s reached: {i} of {cfg.seeds} seeds ran for {cfg.model}")
            break
        seed = cfg.seed + i
        torch.manual_seed(seed)
        init = {k: v.detach().clone() for k, v in GPT().state_dict().items()}
        g = torch.Generator().manual_seed(seed + 1)
        starts = torch.randint(0, len(text) - cfg.context - 1, (cfg.steps, cfg.batch), generator=g)
        batches = data[starts[:, :, None] + torch.arange(cfg.context + 1)].to(DEVICE)
        runs = {}
        for run, mode in COMPARE_RUNS:
            models[(run, mode)].load_state_dict(init)
            be = backend_of[run]
            ctx = (lambda be=be: sdpa_kernel([be])) if be is not None else contextlib.nullcontext
            runs[(run, mode)] = (models[(run, mode)], compiled[(run, mode)], attn_of[run], ctx)
        final, mine = {}, []
        for (run, mode), got in interleaved_steps(torch, F, cfg, runs, batches).items():
            if isinstance(got, Exception):   # one run that fails is one line; the others still ran
                e = got
                print(f"{cfg.model} seed {seed} {run:11s} {mode:8s} FAILED: {type(e).__name__}: "
                      f"{str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}", flush=True)
                failed.append((cfg.model, run, mode, seed))
                continue
            ls, ms, first = got
            k = min(LAST, len(ls))
            final[(run, mode)] = sum(ls[-k:]) / k
            mine.append({"model": cfg.model, "run": run, "mode": mode, "seed": seed, "steps": cfg.steps,
                         "final_loss": final[(run, mode)], "ms_per_step": ms, "compile_s": first,
                         "how_called": how_of[run]})
            print(f"{cfg.model} seed {seed} {run:11s} {mode:8s} final {final[(run, mode)]:.5f}  "
                  f"{ms:7.2f} ms/step  first {TIMED_FROM} steps {first:6.1f} s", flush=True)
        ref = final.get((FP32, "eager"), math.nan)   # NaN drifts when the reference failed
        for r in mine:
            r["drift_from_" + FP32] = abs(r["final_loss"] - ref)
        rows += mine


def interleaved_steps(torch, F, cfg, runs, batches):
    """Every run of `runs` (key -> (model, fn, attn, context): fn the model or
    its compiled form, context() entered around each stretch of its steps)
    trained cfg.steps steps from the model's current weights with a fresh
    AdamW, the runs taking turns: first each run's steps before TIMED_FROM
    (they hold the compilation; their seconds are kept), then stretches of
    CHUNK steps, one per run a round, each round's order rotated by one.
    A drift of the machine's speed during the comparison (clocks, the
    host's load; eager steps of these models are bound by the host) then
    falls on every run alike, not on whichever ran last. Returns key ->
    (losses, median ms per step over the stretches, seconds before
    TIMED_FROM), or the exception that stopped that run (the others go on)."""
    state = {}
    for key, (model, _fn, _attn, _ctx) in runs.items():
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
        state[key] = {"opt": opt, "losses": torch.empty(cfg.steps, device=DEVICE), "ms": [], "first": 0.0}
    first = min(TIMED_FROM, cfg.steps - 1)
    spans = [(0, first)] + [(a, min(a + CHUNK, cfg.steps)) for a in range(first, cfg.steps, CHUNK)]
    keys = list(runs)
    for i, (a, b) in enumerate(spans):
        r = i % len(keys)
        for key in keys[r:] + keys[:r]:
            st = state[key]
            if isinstance(st, Exception):
                continue
            model, fn, attn, ctx = runs[key]
            try:
                with ctx():
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for step in range(a, b):
                        st["losses"][step] = train_step(torch, F, fn, model, st["opt"], batches, step, cfg, attn)
                    torch.cuda.synchronize()
                    dt = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001 (reported by the caller, one line)
                state[key] = e
                continue
            if i == 0:
                st["first"] = dt
            else:
                st["ms"].append(1e3 * dt / (b - a))
    return {key: st if isinstance(st, Exception) else (st["losses"].tolist(), gpu_timing.median(st["ms"]), st["first"])
            for key, st in state.items()}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", help="write every (run, step) loss here")
    ap.add_argument("--summary", metavar="MD", help="only write the Markdown table from --from-csv")
    ap.add_argument("--from-csv", default=os.path.join(ROOT, "data", "gpu", "train_loss.csv"))
    ap.add_argument("--steps", type=int, default=DEFAULTS["steps"])
    ap.add_argument("--layers", type=int, default=DEFAULTS["layers"])
    ap.add_argument("--d-model", type=int, default=DEFAULTS["d_model"])
    ap.add_argument("--heads", type=int, default=DEFAULTS["heads"])
    ap.add_argument("--kv-heads", type=int, default=None,
                    help="key/value heads (grouped-query attention; default: --heads)")
    ap.add_argument("--context", type=int, default=DEFAULTS["context"])
    ap.add_argument("--batch", type=int, default=DEFAULTS["batch"])
    ap.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    ap.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    ap.add_argument("--runs", default=",".join(RUNS), help="comma-separated subset of " + ",".join(RUNS))
    ap.add_argument("--compare", action="store_true",
                    help="eager and compiled, ours and SDPA flash, over --seeds seeds (--csv: "
                    "data/gpu/train_compare.csv)")
    ap.add_argument("--seeds", type=int, default=3, help="with --compare: seeds (default 3)")
    ap.add_argument("--compare-summary", metavar="MD",
                    help="only write the Markdown table of --compare's CSV (--from-csv, default "
                    "data/gpu/train_compare.csv); no torch needed")
    ap.add_argument("--budget", type=float, default=150.0,
                    help="with --compare: no further seed of a model once this many seconds have passed")
    ap.add_argument("--models", default="small",
                    help="with --compare: comma-separated models of " + ", ".join(MODELS)
                    + " (their sizes replace the size flags)")
    args = ap.parse_args(argv)
    if args.kv_heads is None:
        args.kv_heads = args.heads
    if args.summary:
        return write_summary(args.from_csv, args.summary)
    if args.compare_summary:
        src = args.from_csv if "--from-csv" in argv else os.path.join(ROOT, "data", "gpu", "train_compare.csv")
        return write_compare_summary(src, args.compare_summary)
    if args.compare:
        args.models = args.models.split(",")
        unknown = [m for m in args.models if m not in MODELS]
        if unknown or args.steps < 2 or args.seeds < 1:
            print(f"train_compare: bad arguments ({'unknown models ' + ','.join(unknown) if unknown else ''}"
                  f"{'; ' if unknown else ''}--steps >= 2, --seeds >= 1; models: {', '.join(MODELS)})",
                  file=sys.stderr)
            return 2
        return compare_training(args)
    args.runs = args.runs.split(",")
    bad = [r for r in args.runs if r not in RUNS]
    if bad or args.steps < 1 or args.d_model % args.heads or args.layers < 1 or args.context < 2 \
            or args.kv_heads < 1 or args.heads % args.kv_heads:
        print(f"train_compare: bad arguments ({'unknown runs ' + ','.join(bad) if bad else 'sizes'})",
              file=sys.stderr)
        return 2
    return run_training(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
