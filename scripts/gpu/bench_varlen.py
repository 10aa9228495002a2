#!/usr/bin/env python3
"""bench_varlen.py -- packed sequences of different lengths (flash_attn_varlen_func)
against the dense kernels at the same total tokens, and SDPA on padded batches.

    python3 scripts/gpu/bench_varlen.py --csv data/gpu/varlen.csv     (make gpu-data-apps; an H200)
    python3 scripts/gpu/bench_varlen.py --quick                        (a few rows, no CSV)

bf16, H = 16 heads (H_kv = 16), d = 64 and 128, causal and not, B = 16
sequences of --total (16384) tokens in all, forward and backward. Measured in
the same run, on tensors made once:
  ours_dense         flash_attn_func (the op's choice of version: forward 3,
                     backward 3 on Hopper) on B x N, N = total / B, in
                     FlashAttention's (B, N, H, d) layout: the reference the
                     target is stated against
  ours_varlen_equal  the varlen kernels on the same 16 sequences of N tokens,
                     packed (total, H, d): the same work, so the ratio to
                     ours_dense is what the varlen plumbing costs (target:
                     within 5%); max_abs_diff is its O against ours_dense's
                     (0: bitwise)
  ours_varlen_mixed  the varlen kernels on 16 sequences of mixed lengths
                     (a fixed draw, log-uniform in [total/64, total/4],
                     scaled to sum to total; `lengths` lists them)
  ours_padded        the dense kernels on the mixed batch padded to its
                     longest sequence (B x max_len; the padding computed too)
  sdpa_flash_padded  torch's SDPA flash backend on the same padded batch
                     (SDPA's packed form, a nested jagged tensor, is not
                     measured here; without a mask the padding is computed,
                     as a padded batch would be)
  sdpa_flash_dense   SDPA flash on B x N, beside ours_dense
Ours is called through the package's public entries, each in its own
layout (flash_attn_func on (B, S, H, d), flash_attn_varlen_func on the packed
(total, H, d)), SDPA through scaled_dot_product_attention on (B, H, S, d)
contiguous; every input made once before any timing; backward by autograd
for both. Every row: median_ms of --repeats calls (CUDA events around each,
the L2 overwritten before each -- which also keeps the GPU busy while Python
enqueues the call), graph_ms (the same call replayed from a CUDA graph: no
host overhead, for every row alike; empty where it cannot be captured, note
says why), how_called, vs_padded (the packed mixed batch's useful rate over
the padded batch's: the comparison a user who would otherwise pad makes), useful_tflops
(FLOPs of the sequences' own rows, per sequence as the FlashAttention papers
count them: forward 4 len^2 d H, halved when causal; backward 2.5 x, over
median_ms: padding is not useful work), vs_dense (ours_dense's median_ms over
this row's for the equal batch; for the mixed batch useful_tflops over
ours_dense's), and provenance columns (GPU, driver, CUDA, torch, commit,
date, command). The CSV is written to a temporary file and moved into place
at the end: a failed run leaves the old file as it was.
"""
import math
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
import gpu_timing  # noqa: E402  (scripts/)
import provenance  # noqa: E402

COLUMNS = provenance.COLUMNS + ["impl", "pass", "dtype", "d", "H", "causal", "B", "total_tokens", "max_len",
                                "median_ms", "useful_tflops", "vs_dense", "repeats", "max_abs_diff", "lengths", "note",
                                "graph_ms", "how_called", "vs_padded"]


def mixed_lengths(B, total, seed=19):
    rng = random.Random(seed)
    lo, hi = math.log(total / 64), math.log(total / 4)
    raw = [math.exp(rng.uniform(lo, hi)) for _ in range(B)]
    s = sum(raw)
    lens = [max(1, int(round(x * total / s))) for x in raw]
    lens[lens.index(max(lens))] += total - sum(lens)
    return lens


def parse_args(argv):
    """The command line -> the flags, or None after a one-line error (exit 2)."""
    ap = gpu_timing.bench_parser(__doc__, "d 128, causal, forward only, no CSV")
    ap.add_argument("--total", type=int, default=16384)
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args(argv[1:])
    if not gpu_timing.bench_output(a, "bench_varlen.py"):
        return None
    if a.repeats < 1 or a.batch < 1 or a.total < a.batch or a.total % a.batch:
        print("bench_varlen.py: error: --repeats >= 1; --total a multiple of --batch", file=sys.stderr)
        return None
    return a


def flops(lens, d, causal, pass_, H):
    """The useful FLOPs of sequences of lengths lens, H heads of dimension d."""
    f = sum(4.0 * n * n * d * H * (0.5 if causal else 1.0) for n in lens)
    return f if pass_ == "fwd" else 2.5 * f


def make_inputs(torch, dev, bf, B, N, H, d, mixed, L):
    """The equal batch dense (B, N, H, d) and packed (B N, H, d), the mixed
    batch's cu_seqlens and its padded (B, L, H, d) tensors, each made once."""
    total = B * N
    # drawn from a generator of their own: a CUDA graph capture that fails
    # (gpu_timing.graph_ms reports it and goes on) can leave the default
    # generator's capture state behind, and its next draw raises
    g = torch.Generator(device=dev)
    g.manual_seed(B * N * H * d)
    # the equal batch: dense (B, N, H, d) and the same rows packed (B N, H, d)
    q, k, v, do = (torch.randn(B, N, H, d, device=dev, dtype=bf, generator=g) for _ in range(4))
    qp, kp, vp, dop = (t.reshape(B * N, H, d) for t in (q, k, v, do))
    cu_eq = torch.arange(0, total + 1, N, dtype=torch.int32, device=dev)
    # the mixed batch, packed, and padded to its longest
    cu_mx = torch.tensor([0] + [sum(mixed[:i + 1]) for i in range(B)], dtype=torch.int32, device=dev)
    qpad, kpad, vpad, dopad = (torch.randn(B, L, H, d, device=dev, dtype=bf, generator=g) for _ in range(4))

    # our package's public entries, each in its own layout: flash_attn_func on (B, S, H, d),
    # flash_attn_varlen_func on the packed (total, H, d); leaves made once, before any timing
    sets = {"dense": (q, k, v, do), "equal": (qp, kp, vp, dop), "mixed": (qp, kp, vp, dop),
            "padded": (qpad, kpad, vpad, dopad)}
    cu = {"equal": (cu_eq, N), "mixed": (cu_mx, L)}
    return sets, cu


def ours_impls(torch, op_call, sets, cu, shape, pass_, impls):
    """Our entries' calls of one pass into impls: name -> (call, lens, B, S, how)."""
    # the padded row before the mixed one: the mixed row's vs_padded reads it
    for kind, name in (("dense", "ours_dense"), ("equal", "ours_varlen_equal"),
                       ("padded", "ours_padded"), ("mixed", "ours_varlen_mixed")):
        qq, kk, vv, dd = sets[kind]
        how = ("flash_attn_varlen_func(q, k, v (total,H,d), cu_seqlens, max_seqlen, causal=)"
               if kind in cu else "flash_attn_func(q, k, v (B,S,H,d), causal=)")
        if pass_ == "fwd":
            def fn(kind=kind, qq=qq, kk=kk, vv=vv):
                with torch.no_grad():
                    return op_call(kind, qq, kk, vv)
        else:
            qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (qq, kk, vv))
            og = op_call(kind, qg, kg, vg)
            fn = (lambda og=og, dd=dd, qg=qg, kg=kg, vg=vg:
                  torch.autograd.grad(og, (qg, kg, vg), dd, retain_graph=True))
            how += "; backward by autograd"
        impls[name] = (fn, *shape[kind], how)


def sdpa_impls(torch, F, SDPBackend, sdpa_kernel, sets, causal, B, N, mixed, L, pass_, impls):
    """SDPA flash's calls of one pass into impls: name -> (call, lens, B, S, how)."""
    q, k, v, do = sets["dense"]
    qpad, kpad, vpad, dopad = sets["padded"]
    # SDPA flash (no varlen): its (B, H, S, d) layout, contiguous, made once; the padded
    # batch and the equal one
    for nm, (qq, kk, vv, dd, lens, S) in {
            "sdpa_flash_dense": (q, k, v, do, [N] * B, N),
            "sdpa_flash_padded": (qpad, kpad, vpad, dopad, mixed, L)}.items():
        qs, ks, vs = (t.transpose(1, 2).contiguous().requires_grad_(pass_ == "bwd") for t in (qq, kk, vv))
        ds = dd.transpose(1, 2).contiguous()
        how = "scaled_dot_product_attention(q, k, v (B,H,S,d) contiguous, is_causal=) in sdpa_kernel(FLASH)"

        def sd(qs=qs, ks=ks, vs=vs):
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
        if pass_ == "fwd":
            impls[nm] = (sd, lens, B, S, how)
        else:
            os_ = sd()
            impls[nm] = (lambda os_=os_, ds=ds, qs=qs, ks=ks, vs=vs:
                         torch.autograd.grad(os_, (qs, ks, vs), ds, retain_graph=True), lens, B, S,
                         how + "; backward by autograd")


def time_impls(timed, impls, prov, a, d, H, causal, pass_, diff, rows):
    """Times each call of impls and appends its row to rows, printing it."""
    t_dense = tf_dense = tf_padded = float("nan")
    for impl, (fn, lens, bb, S, how) in impls.items():
        try:
            ms, gms, note = timed(fn)
        except Exception as e:  # noqa: BLE001 (a backend that refuses: a row saying so)
            ms, gms, note = float("nan"), None, f"failed: {str(e).splitlines()[0][:100]}"
        tf = flops(lens, d, causal, pass_, H) / (ms * 1e9) if ms == ms else float("nan")
        if impl == "ours_dense":
            t_dense, tf_dense = ms, tf
        if impl == "ours_padded":
            tf_padded = tf
        # equal batches: time against ours_dense's; mixed and padded: useful rate
        vs_d = tf / tf_dense if ("mixed" in impl or "padded" in impl) else t_dense / ms
        rows.append(dict(prov, impl=impl, dtype="bf16", d=d, H=H, causal=int(causal), B=bb,
                         total_tokens=sum(lens), max_len=S, median_ms=f"{ms:.4f}",
                         graph_ms="" if gms is None else f"{gms:.4f}", how_called=how,
                         useful_tflops=f"{tf:.1f}", vs_dense=f"{vs_d:.3f}",
                         vs_padded=(f"{tf / tf_padded:.3f}" if impl == "ours_varlen_mixed" else ""),
                         repeats=a.repeats,
                         max_abs_diff=(f"{diff:.3g}" if impl == "ours_varlen_equal" and pass_ == "fwd"
                                       else ""),
                         lengths=" ".join(map(str, lens)) if "mixed" in impl or "padded" in impl else "",
                         note=note, **{"pass": pass_}))
        r = rows[-1]
        print(f"{impl:18s} {pass_} d{d} causal={int(causal)} {r['median_ms']:>8s} ms "
              f"{r['useful_tflops']:>6s} TFLOP/s vs_dense {r['vs_dense']}", flush=True)


def main(argv):
    a = parse_args(argv)
    if a is None:
        return 2
    torch = gpu_timing.torch_on_gpu("bench_varlen.py: error")
    if torch is None:
        return 2
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from flashattn_stages import flash_attn_func, flash_attn_varlen_func

    dev, bf = "cuda", torch.bfloat16
    H, B, total = 16, a.batch, a.total
    N = total // B
    prov = provenance.record(argv)

    def timed(fn):   # (median ms, graph-replay ms or None, why not): one warm-up, a.repeats calls, the L2 flushed
        ms = gpu_timing.median_ms(torch, fn, a.repeats, warmup=1)[0]
        gms, why = gpu_timing.graph_ms(torch, fn, a.repeats, warmup=1)
        return ms, gms, why

    rows = []
    dims = [128] if a.quick else [64, 128]
    causals = [True] if a.quick else [False, True]
    passes = ["fwd"] if a.quick else ["fwd", "bwd"]
    mixed = mixed_lengths(B, total)
    L = max(mixed)
    t0 = time.time()
    for d in dims:
        for causal in causals:
            sets, cu = make_inputs(torch, dev, bf, B, N, H, d, mixed, L)

            def op_call(kind, qq, kk, vv):
                if kind in cu:
                    c, mx = cu[kind]
                    return flash_attn_varlen_func(qq, kk, vv, c, c, mx, mx, causal=causal)
                return flash_attn_func(qq, kk, vv, causal=causal)

            with torch.no_grad():
                o_d = op_call("dense", *sets["dense"][:3])
                o_v = op_call("equal", *sets["equal"][:3])
            diff = (o_v.float() - o_d.reshape(total, H, d).float()).abs().max().item()
            torch.cuda.synchronize()
            shape = {"dense": ([N] * B, B, N), "equal": ([N] * B, B, N), "mixed": (mixed, B, L), "padded": (mixed, B, L)}
            for pass_ in passes:
                impls = {}
                ours_impls(torch, op_call, sets, cu, shape, pass_, impls)
                sdpa_impls(torch, F, SDPBackend, sdpa_kernel, sets, causal, B, N, mixed, L, pass_, impls)
                time_impls(timed, impls, prov, a, d, H, causal, pass_, diff, rows)
    print(f"# {time.time() - t0:.1f} s; mixed lengths {mixed}")
    if a.csv:
        gpu_timing.write_rows(a.csv, COLUMNS, rows, lambda r, c: str(r.get(c, "")).replace(",", ";"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
