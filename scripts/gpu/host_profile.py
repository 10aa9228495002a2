#!/usr/bin/env python3
"""host_profile.py -- where a call of the op spends its host time, beside SDPA's; and which kernel version is fastest at small shapes.

    python3 scripts/gpu/host_profile.py --out DIR        (make study-host-path; an H200)

The question: a training step through flash_attention, and a decoding step
through flash_attn_with_kvcache, cost more than SDPA's although our kernels
are as fast or faster; which part of a call -- Python, autograd, ctypes, the
library's host code, each launch, a synchronization -- takes the time, and
which kernel version should the op choose at small and medium shapes?

Writes into DIR (each file opening with a `# provenance:` line or the
provenance columns):
  host_profile.csv  for each case and entry: host_us, the host's time per
                    call with the GPU kept busy by a long sleep kernel (a
                    call that waits for the GPU shows as the sleep's length:
                    syncs = 1); loop_us, calls back to back with one
                    synchronization at the end (what a training loop sees);
                    graph_us, the same call replayed from a CUDA graph (the
                    device's time); torch_syncs, synchronizations torch's
                    sync debug mode reports in one call.
  host_profile.txt  cProfile (by own time) and torch.profiler (CPU events,
                    CUDA runtime calls included) of 200 calls of our entries
  version_times.csv every forward and backward version's graph-replayed time
                    at B*H 16 and 64, N 512-4096, d 64 and 128, causal and
                    not, bf16, beside the version the op's chooser takes

Entries: training shapes B 1, H 16, d 64, causal, bf16, N 512 and 2048:
  fwd     o = f(q, k, v) with q, k, v requiring gradients
  bwd     o.backward(dO, retain_graph=True) on one saved forward
  fwdbwd  both
  fwd_nograd  the forward under torch.no_grad (inference)
  bwd_impl (ours) flash_op._bwd_impl: the implementation without autograd
  bwd_c   (ours) fa_backward through ctypes with the pointers filled: the
          library's host code and its launches alone
  py_identity  the backward of a Python autograd.Function that returns its
          gradient: what the engine charges any operator with a Python backward
for ours (flash_attention; ours_op: the registered operator
flashattn_stages::fwd that torch.compile calls) and SDPA (F.scaled_dot_product_attention, flash
and cuDNN backends, each in its sdpa_kernel context entered once).
Decoding: one query row, B 1, H 32, H_kv 8, d 128, seqlen_k 8192 and 32768,
bf16, the dense cache (B, seqlen_k, H_kv, d), cache_seqlens an int32 tensor:
ours through flash_attn_with_kvcache's defaults (ours_paged: the same
cache as pages of 64 keys with a block table); SDPA cuDNN and flash on
q (B, H, 1, d), K, V (B, H_kv, seqlen_k, d) with enable_gqa.
Cost: about two minutes.
"""
import argparse
import cProfile
import contextlib
import ctypes
import io
import math
import os
import pstats
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gpu_timing  # noqa: E402  (scripts/gpu/)
import provenance as prov  # noqa: E402

SLEEP_CYCLES = 400_000_000   # ~0.2 s at the H200's clock: longer than any timed loop's host work
CALLS = 40


def host_us(torch, fn, calls=CALLS):
    """(microseconds of host time per call, 1 when the calls waited for the GPU)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = time.perf_counter() - t0
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    e.synchronize()
    us = t / calls * 1e6
    return us, int(t > 0.05)   # the sleep is ~0.2 s: a loop that long waited for it


def loop_us(torch, fn, calls=100, repeats=5):
    """Median over repeats of (wall time of `calls` calls, one sync at the end) / calls."""
    fn()
    torch.cuda.synchronize()
    xs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        xs.append((time.perf_counter() - t0) / calls * 1e6)
    return gpu_timing.median(xs)


def torch_syncs(torch, fn):
    """Synchronizations torch's sync debug mode warns of in one call."""
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fn()
        return sum("synchroniz" in str(x.message) for x in w)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def profiles(torch, name, fn, out):
    """cProfile and torch.profiler tables of 200 calls of fn, appended to out."""
    fn()
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
    out.append(f"\n==== {name}: cProfile, 200 calls, by own time ====\n" + s.getvalue())
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
    out.append(f"\n==== {name}: torch.profiler, 200 calls, by self CPU time ====\n"
               + p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def sdpa_backend(backend):
    """SDPA's sdpa_kernel(backend) context, or none for ours (backend None)."""
    from torch.nn.attention import sdpa_kernel
    return contextlib.nullcontext() if backend is None else sdpa_kernel(backend)


def identity_function(torch):
    """A Python autograd.Function whose forward returns a view of its input
    and whose backward returns its gradient as is: no work, only what the
    autograd engine charges an operator with a Python backward."""
    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            return g
    return Identity


def identity_backward(torch, like):
    """The backward of identity_function on a tensor like `like`, on one kept
    graph: what any operator with a Python backward pays the autograd engine
    per call, the floor of ours."""
    Identity = identity_function(torch)
    x = like.detach().clone().requires_grad_()
    y = Identity.apply(x)
    g = torch.ones_like(y)
    return lambda: y.backward(g, retain_graph=True)


def training_cases(torch, F, fo, fa, rows, text):
    from torch.nn.attention import SDPBackend
    for N in (512, 2048):
        B, H, d = 1, 16, 64
        g = torch.Generator(device="cuda").manual_seed(N)
        q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
                   for _ in range(3))
        dO = torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g)
        impls = {"ours": (lambda: fo.flash_attention(q, k, v, causal=True), None),
                 "ours_op": (lambda: fo.flash_fwd(q, k, v, 1.0 / math.sqrt(d), -1, 0, False, -1, -1, True, False,
                                                  fo.center_flag(None))[0], None),
                 "sdpa_flash": (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), SDPBackend.FLASH_ATTENTION),
                 "sdpa_cudnn": (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                SDPBackend.CUDNN_ATTENTION)}
        for impl, (f, backend) in impls.items():
            with sdpa_backend(backend):
                o = f()
                entries = {"fwd": f,
                           "bwd": lambda: o.backward(dO, retain_graph=True),
                           "fwdbwd": lambda: f().backward(dO)}
                if impl != "ours_op":
                    def fwd_nograd(f=f):
                        with torch.no_grad():
                            return f()
                    entries["fwd_nograd"] = fwd_nograd
                if impl == "ours":
                    scale = 1.0 / math.sqrt(d)
                    with torch.no_grad():
                        o2, lse = fo._fwd_impl(q.detach(), k.detach(), v.detach(), scale, -1, 0, False, -1, -1,
                                               False, False)
                    qd, kd, vd = q.detach(), k.detach(), v.detach()
                    entries["bwd_impl"] = lambda: fo._bwd_impl(dO, qd, kd, vd, o2, lse, scale, -1, 0, -1, False,
                                                               fo.center_flag(None))
                    dq, dk, dv = (torch.empty_like(t) for t in (qd, kd, vd))
                    pl = fo._plan(fa.BACKWARD, qd, kd, scale, -1, 0, -1, False)
                    ptrs = [(n, t.data_ptr()) for n, t in (("q", qd), ("k", kd), ("v", vd), ("o", o2),
                            ("softmax_lse", lse), ("do_", dO), ("dq", dq), ("dk", dk), ("dv", dv))]

                    def bwd_c():
                        # the plan's structure is shared with _bwd_impl: its pointers are set per call
                        for n, ptr in ptrs:
                            setattr(pl.ptrs, n, ptr)
                        fo._call(fa.BACKWARD, pl, fa.BF16, fo.center_flag(None), 0)
                    entries["bwd_c"] = bwd_c
                    entries["py_identity"] = identity_backward(torch, qd)
                    text.append(f"\nN {N}: backward version {pl.version}, forward version "
                                f"{fo._plan(fa.FORWARD, qd, kd, scale, -1, 0, -1, False).version}")
                for entry, fn in entries.items():
                    h, syncs = host_us(torch, fn)
                    lp = loop_us(torch, fn)
                    gms, why = gpu_timing.graph_ms(torch, fn, repeats=10) if entry in ("fwd", "bwd_impl", "bwd_c") \
                        else (None, "autograd's backward is not captured here")
                    rows.append(dict(case="train", impl=impl, entry=entry, B=B, H=H, H_kv=H, N=N, d=d,
                                     host_us=f"{h:.1f}", syncs=syncs, loop_us=f"{lp:.1f}",
                                     graph_us="" if gms is None else f"{gms * 1000:.1f}",
                                     torch_syncs=torch_syncs(torch, fn), note=why))
                    print(f"train N {N} {impl:10s} {entry:8s} host {h:7.1f} us  loop {lp:7.1f} us  "
                          f"syncs {syncs}", flush=True)
                    if impl == "ours" and N == 512:
                        profiles(torch, f"ours {entry} N {N}", fn, text)
            q.grad = k.grad = v.grad = None


def decode_cases(torch, F, rows, text):
    from torch.nn.attention import SDPBackend
    from flashattn_stages import flash_attn_with_kvcache
    B, H, H_kv, d = 1, 32, 8, 128
    for S in (8192, 32768):
        g = torch.Generator(device="cuda").manual_seed(S)
        q = torch.randn(B, 1, H, d, device="cuda", dtype=torch.bfloat16, generator=g)
        kc, vc = (torch.randn(B, S, H_kv, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
        qs = q.transpose(1, 2).contiguous()
        ks, vs = kc.transpose(1, 2).contiguous(), vc.transpose(1, 2).contiguous()
        page = 64
        kp, vp = kc.view(B * S // page, page, H_kv, d), vc.view(B * S // page, page, H_kv, d)
        table = torch.arange(B * S // page, dtype=torch.int32, device="cuda").view(B, S // page)
        impls = {"ours": (lambda: flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens), None),
                 "ours_paged": (lambda: flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table),
                                None),
                 "sdpa_cudnn": (lambda: F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True),
                                SDPBackend.CUDNN_ATTENTION),
                 "sdpa_flash": (lambda: F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True),
                                SDPBackend.FLASH_ATTENTION)}
        for impl, (fn, backend) in impls.items():
            with sdpa_backend(backend):
                try:
                    fn()
                except RuntimeError as e:
                    rows.append(dict(case="decode", impl=impl, entry="decode", B=B, H=H, H_kv=H_kv, N=S, d=d,
                                     note=f"does not run: {str(e).splitlines()[0][:80]}"))
                    continue
                h, syncs = host_us(torch, fn)
                lp = loop_us(torch, fn)
                gms, why = gpu_timing.graph_ms(torch, fn, repeats=10)
                rows.append(dict(case="decode", impl=impl, entry="decode", B=B, H=H, H_kv=H_kv, N=S, d=d,
                                 host_us=f"{h:.1f}", syncs=syncs, loop_us=f"{lp:.1f}",
                                 graph_us="" if gms is None else f"{gms * 1000:.1f}",
                                 torch_syncs=torch_syncs(torch, fn), note=why))
                print(f"decode S {S} {impl:10s} host {h:7.1f} us  loop {lp:7.1f} us  syncs {syncs}", flush=True)
                if impl == "ours" and S == 8192:
                    profiles(torch, f"ours decode S {S}", fn, text)


def version_times(torch, fo, fa, budget_s):
    """Every version's graph-replayed time per shape, and the chooser's pick."""
    out, t_end = [], time.time() + budget_s
    for (B, H) in ((1, 16), (4, 16)):
        for N in (512, 1024, 2048, 4096):
            for d in (64, 128):
                for causal in (0, 1):
                    if time.time() > t_end:
                        return out
                    g = torch.Generator(device="cuda").manual_seed(N + d + causal)
                    q, k, v, dO = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g)
                                   for _ in range(4))
                    scale, right = 1.0 / math.sqrt(d), 0 if causal else -1
                    p = fa.Params(B, H, H, N, N, d, scale, -1, right)
                    for pass_ in (fa.FORWARD, fa.BACKWARD):
                        chosen = fo.dispatch.choose_version(pass_, fa.BF16, p)
                        with torch.no_grad():
                            o, lse = fo._fwd_impl(q, k, v, scale, -1, right, False, -1, -1, False, False)
                        for r in fa.versions(fa.library(), pass_):
                            if r.version == 0 or not fa.library().fa_check_supported(
                                    pass_, r.version, fa.BF16, ctypes.byref(p)) == fa.OK:
                                continue
                            if pass_ == fa.FORWARD:
                                fn = (lambda ver=r.version: fo._fwd_impl(q, k, v, scale, -1, right, False, ver, -1,
                                                                          False, False))
                            else:
                                fn = (lambda ver=r.version: fo._bwd_impl(dO, q, k, v, o, lse, scale, -1, right,
                                                                          ver, False, fo.center_flag(None)))
                            ms, why = gpu_timing.graph_ms(torch, fn, repeats=7)
                            out.append(dict(pass_=fo.dispatch.PASS_NAMES[pass_], B=B, H=H, N=N, d=d, causal=causal,
                                            version=r.version, name=r.name.decode(),
                                            graph_us="" if ms is None else f"{ms * 1000:.1f}",
                                            chosen=int(r.version == chosen), note=why))
    return out


def write_csv(path, columns, rows, rec):
    """rows (dicts) under the provenance columns (rec) and `columns`; a cell a row lacks is empty."""
    gpu_timing.write_rows(path, prov.COLUMNS + columns, [{**rec, **r} for r in rows],
                          lambda r, c: gpu_timing.csv_cell(r.get(c, "")))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the folder the three files go to")
    ap.add_argument("--versions-budget-s", type=float, default=90.0)
    a = ap.parse_args(argv[1:])
    torch = gpu_timing.torch_on_gpu("host_profile.py")
    if torch is None:
        return 2
    import torch.nn.functional as F
    from flashattn_stages import fa
    from flashattn_stages import flash_op as fo
    rec = prov.record(argv)
    os.makedirs(a.out, exist_ok=True)
    rows, text, vt = [], [], []
    try:
        training_cases(torch, F, fo, fa, rows, text)
        decode_cases(torch, F, rows, text)
        vt = version_times(torch, fo, fa, a.versions_budget_s)
    finally:   # what was measured is kept when a later case fails
        write_all(a.out, rows, vt, text, rec)
    return 0


def write_all(out, rows, vt, text, rec):
    write_csv(os.path.join(out, "host_profile.csv"),
              ["case", "impl", "entry", "B", "H", "H_kv", "N", "d", "host_us", "syncs", "loop_us", "graph_us",
               "torch_syncs", "note"], rows, rec)
    write_csv(os.path.join(out, "version_times.csv"),
              ["pass_", "B", "H", "N", "d", "causal", "version", "name", "graph_us", "chosen", "note"], vt, rec)
    with open(os.path.join(out, "host_profile.txt"), "w") as f:
        f.write(prov.line(rec) + "\n" + "\n".join(text) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
