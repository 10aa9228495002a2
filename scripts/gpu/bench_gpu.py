#!/usr/bin/env python3
"""bench_gpu.py -- our kernels beside PyTorch's attention on the GPU: forward and backward.

What it does: loads build/libfa_gpu.so (core/fa_gpu.h) through ctypes
(python/flashattn_stages/fa.py), and times every version in the library's table of versions
(forward and backward) beside torch.nn.functional.scaled_dot_product_attention
with its FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION backends and
the plain materialized torch expression softmax(Q K^T scale) V, all on the
same torch tensors in the same run (our launchers get the tensors'
data_ptr()). A new kernel version shows up here without a change.

Protocol of the FlashAttention papers: batch x N = 16384 tokens, hidden 2048
so H = 2048 / d; d = 64 and 128; N = 512 .. 16384; causal and not; bf16 and
fp16 (fp32 where asked: SDPA's flash and cuDNN backends do not take it, such
rows carry a note). FLOPs (fa_flops): forward 4 B H N^2 d, halved when
causal; backward 2.5 times the forward; fwd+bwd 3.5 times. Passes:
  fwd     one forward call
  bwd     one backward call, given the forward's saved outputs (ours:
          fa_backward with O and L of the same version's forward, or v2's;
          torch and our package: torch.autograd.grad(out, (q, k, v), dO,
          retain_graph=True), as a model's earlier layers receive them)
  fwdbwd  forward then backward
Each timing: CUDA events around one call, 3 warm-ups, the L2 overwritten
before every timed call (outside the events), the median of --repeats calls
(at least 5, stopping after about 1 s of timed work).

Usage (on a GPU machine; make gpu-data-bench-fwd builds the library first):
    python3 scripts/gpu/bench_gpu.py --csv data/gpu/bench_fwd.csv --bwd-csv data/gpu/bench_bwd.csv
    python3 scripts/gpu/bench_gpu.py --quick          # N = 1024 and 4096 only, no CSV
    python3 scripts/gpu/bench_gpu.py --profile-io MAP.json   # used by scripts/gpu/ncu_io.sh
    python3 scripts/gpu/bench_gpu.py --tables         # Markdown tables from data/gpu/*.csv
Every CSV row carries GPU name, driver, CUDA version, torch and cuDNN
versions, commit, date and the command (FA_COMMIT in the environment
overrides git, for copies of the tree without .git).
Cost: a few minutes on an H200. Materialized versions need B H N^2 elements
of workspace; rows whose workspace would pass --max-workspace-gb are
skipped with a note.
"""
import argparse
import ctypes
import gc
import json
import math
import os
import sys

import gpu_timing   # scripts/, this script's own folder
import provenance as prov

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from flashattn_stages import fa  # noqa: E402  (the binding of the C interface; PYTHONPATH=python)

try:   # --tables needs no GPU and no torch
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    torch = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DTYPES = {"fp32": ("float32", fa.FP32), "fp16": ("float16", fa.FP16), "bf16": ("bfloat16", fa.BF16)}
HEADER = ("gpu,driver,cuda,torch,cudnn,commit,date,command,impl,pass,dtype,causal,B,H,N,d,"
          "median_ms,tflops,repeats,max_abs_diff,note,graph_ms,how_called")
PASS_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}


def provenance(argv):
    """The columns every row carries (scripts/gpu/provenance.py)."""
    return prov.record(argv)


class Skip(Exception):
    """A (implementation, shape) this run does not measure, with the reason."""


class Ours:
    """One of our versions on torch tensors q (B,H,N,d), k, v (B,H_kv,N,d):
    fwd() runs the forward; bwd() the backward from the forward's O, L."""

    def __init__(self, lib, info_f, info_b, q, k, v, do, causal, max_ws, deterministic=False):
        self.lib, self.q, self.k, self.v, self.do = lib, q, k, v, do
        self.deterministic = int(deterministic)
        B, H, N, d = q.shape
        self.dcode = {torch.float32: fa.FP32, torch.float16: fa.FP16, torch.bfloat16: fa.BF16}[q.dtype]
        self.p = fa.params(B, H, N, d, H_kv=k.shape[1], seqlen_k=k.shape[2],
                           window=(-1, 0) if causal else (-1, -1))
        self.pp = ctypes.byref(self.p)
        self.vf, self.vb = info_f, info_b
        for info, ps in ((info_f, fa.FORWARD), (info_b, fa.BACKWARD)):
            if info is not None and lib.fa_check_supported(ps, info.version, self.dcode, self.pp):
                raise Skip("not supported: " + lib.fa_error_string().decode())
        self.o = torch.empty_like(q)
        self.L = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
        self.dq, self.dk, self.dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        wsb = 0
        for info, ps in ((info_f, fa.FORWARD), (info_b, fa.BACKWARD)):
            if info is not None:
                wsb = max(wsb, lib.fa_workspace_bytes(ps, info.version, self.dcode, self.pp))
        if wsb > max_ws * 1e9:
            raise Skip(f"skipped: needs {wsb / 1e9:.1f} GB of workspace (--max-workspace-gb {max_ws:g})")
        self.ws = torch.empty(wsb, dtype=torch.uint8, device=q.device) if wsb else None
        ptr = lambda t: t.data_ptr() if t is not None else None
        self.x = fa.Ptrs(q=ptr(q), k=ptr(k), v=ptr(v), o=ptr(self.o), softmax_lse=ptr(self.L),
                         do_=ptr(do), dq=ptr(self.dq), dk=ptr(self.dk), dv=ptr(self.dv),
                         workspace=ptr(self.ws), workspace_bytes=wsb)

    def fwd(self):
        fa.check(self.lib, self.lib.fa_forward(self.vf.version, self.dcode, self.pp, ctypes.byref(self.x),
                                               torch.cuda.current_stream().cuda_stream))
        return self.o

    def bwd(self):
        fa.check(self.lib, self.lib.fa_backward(self.vb.version, self.dcode, self.pp, ctypes.byref(self.x),
                                                self.deterministic, torch.cuda.current_stream().cuda_stream))
        return self.dq

    def fwdbwd(self):
        self.fwd()
        return self.bwd()


def grads(out, inputs, do, retain_graph=False):
    """(dQ, dK, dV) of out by torch.autograd.grad, as the layers before
    attention receive them in a model: not accumulated into .grad, whose
    copy to the leaf's layout (where the gradient's strides differ) is a
    cost of this harness, not of any implementation."""
    return torch.autograd.grad(out, (inputs.q, inputs.k, inputs.v), do, retain_graph=retain_graph)


class Torch:
    """SDPA with one backend, or the materialized expression, with autograd."""

    def __init__(self, backend, q, k, v, do, causal):
        self.backend, self.do, self.causal = backend, do, causal
        self.q, self.k, self.v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        self.out = None

    def _forward(self):
        if self.backend is None:   # materialized: S and P in memory, in the dtype
            q, k, v = self.q, self.k, self.v
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
            if self.causal:
                n = s.shape[-1]
                s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
            return torch.softmax(s, dim=-1) @ v
        with sdpa_kernel(self.backend):
            return F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal)

    def fwd(self):
        with torch.no_grad():
            return self._forward()

    def bwd(self):
        if self.out is None:
            self.out = self._forward()
        return grads(self.out, self, self.do, retain_graph=True)[0]

    def fwdbwd(self):
        return grads(self._forward(), self, self.do)[0]


def public_op():
    """Our package's public flash_attn_func (FlashAttention's interface), or
    None where the package does not load."""
    for mod in ("flashattn_stages.flash_attn_interface", "flash_attn_interface"):
        try:
            return __import__(mod, fromlist=["flash_attn_func"]).flash_attn_func
        except ImportError:
            continue
    return None


class OpPublic:
    """Our package's public entry, flash_attn_func, in its own preferred
    layout (B, N, H, d), made once from the (B, H, N, d) inputs before any
    timing; the version is the op's own choice, its layout copies (if any)
    are part of the call; the backward through torch.autograd.grad, as a
    model's earlier layers receive it."""

    def __init__(self, func, q, k, v, do, causal):
        self.func, self.causal = func, causal
        self.q, self.k, self.v = (t.transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v))
        self.do = do.transpose(1, 2).contiguous()
        self.out = None

    def _forward(self):
        return self.func(self.q, self.k, self.v, causal=self.causal)

    def fwd(self):
        with torch.no_grad():
            return self._forward().transpose(1, 2)

    def bwd(self):
        if self.out is None:
            self.out = self._forward()
        return grads(self.out, self, self.do, retain_graph=True)[0].transpose(1, 2)

    def fwdbwd(self):
        return grads(self._forward(), self, self.do)[0].transpose(1, 2)


# how each implementation is called (the how_called column)
HOW = {
    "ours": "the library's C entry fa_forward/fa_backward at this version through ctypes (python/flashattn_stages/fa.py); "
            "q, k, v, O, dO (B,H,N,d) contiguous, O, L, dQ, dK, dV and workspace allocated once",
    "ours_op": "flash_attn_func(q, k, v (B,N,H,d) contiguous, causal=) of our package; "
               "backward by torch.autograd.grad(out, (q, k, v), dO)",
    "sdpa": "torch.nn.functional.scaled_dot_product_attention(q, k, v (B,H,N,d) contiguous, is_causal=) "
            "in sdpa_kernel({}); backward by torch.autograd.grad(out, (q, k, v), dO)",
    "torch_materialized": "softmax(q @ k^T * scale, masked) @ v in torch, (B,H,N,d); backward by torch.autograd.grad",
}


def how_called(name):
    if name == "ours_op" or name == "torch_materialized":
        return HOW[name]
    if name.startswith("sdpa_"):
        return HOW["sdpa"].format({"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION",
                                   "sdpa_efficient": "EFFICIENT_ATTENTION"}.get(name, name))
    return HOW["ours"]


def time_ms(fn, repeats):
    """Median of per-call CUDA-event times, after 3 warm-ups, L2 flushed before
    each, at most about a second of timed calls (gpu_timing.py)."""
    return gpu_timing.median_ms(torch, fn, repeats, warmup=3, budget_ms=1000.0)


def make_inputs(B, H, N, d, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn((B, H, N, d), device="cuda", dtype=dtype, generator=g) for _ in range(4)]


IMPL_FILTER = None   # --impls: a subset of the labels


def fa_block_rows_of(lib, info):
    return lib.fa_block_rows(fa.BACKWARD, info.version, 64)


def impls(lib, q, k, v, do, causal, max_ws):
    """(label, maker) for every implementation: our versions from the table
    (a forward version with the backward of the same number, the same
    technique; where that technique has no backward, the highest-numbered
    backward), then the peers."""
    fwd = {v_.version: v_ for v_ in fa.versions(lib, fa.FORWARD)}
    bwd = {v_.version: v_ for v_ in fa.versions(lib, fa.BACKWARD)}
    out = []
    for ver, info in sorted(fwd.items()):
        info_b = bwd.get(ver, bwd[max(bwd)] if bwd else None)
        out.append((info.label(), lambda i=info, b=info_b: Ours(lib, i, b, q, k, v, do, causal, max_ws),
                    info, info_b))
    for ver, info in sorted(bwd.items()):
        if ver not in fwd:
            out.append((info.label(), lambda b=info: Ours(lib, fwd[2], b, q, k, v, do, causal, max_ws),
                        None, info))
    # what determinism costs: the tiled backwards once more in their deterministic mode
    for ver, info in sorted(bwd.items()):
        if info.deterministic and fa_block_rows_of(lib, info) > 0:
            out.append((info.label() + "_det",
                        lambda b=info: Ours(lib, fwd[2], b, q, k, v, do, causal, max_ws, deterministic=True),
                        None, info))
    op = public_op()
    if op is not None:
        out.append(("ours_op", lambda: OpPublic(op, q, k, v, do, causal), None, None))
    # every SDPA backend that runs the problem, each as itself
    out.append(("sdpa_flash", lambda: Torch(SDPBackend.FLASH_ATTENTION, q, k, v, do, causal), None, None))
    out.append(("sdpa_cudnn", lambda: Torch(SDPBackend.CUDNN_ATTENTION, q, k, v, do, causal), None, None))
    out.append(("sdpa_efficient", lambda: Torch(SDPBackend.EFFICIENT_ATTENTION, q, k, v, do, causal), None, None))
    out.append(("torch_materialized", lambda: Torch(None, q, k, v, do, causal), None, None))
    return [x for x in out if IMPL_FILTER is None or x[0] in IMPL_FILTER]


def bench(args, lib, prov):
    files, by_path = {}, {}   # pass -> open file; path -> open file (bwd and fwdbwd share one)
    for ps, path in (("fwd", args.csv), ("bwd", args.bwd_csv), ("fwdbwd", args.bwd_csv)):
        if path and path not in by_path:
            by_path[path] = open(path, "w")
            by_path[path].write(HEADER + "\n")
        if path:
            files[ps] = by_path[path]
    rows = []

    def emit(impl, ps, dt, causal, B, H, N, d, ms, tflops, reps, diff, note, gms, how):
        cells = [prov[k] for k in ("gpu", "driver", "cuda", "torch", "cudnn", "commit", "date", "command")]
        cells += [impl, ps, dt, str(int(causal)), str(B), str(H), str(N), str(d),
                  "" if ms is None else f"{ms:.4f}", "" if tflops is None else f"{tflops:.2f}",
                  "" if reps is None else str(reps), "" if diff is None else f"{diff:.3e}", note,
                  "" if gms is None else f"{gms:.4f}", how]
        line = ",".join('"' + c.replace('"', "'") + '"' if ("," in c or '"' in c) else c for c in cells)
        rows.append((impl, ps, dt, causal, N, d, tflops, note))
        if ps in files:
            files[ps].write(line + "\n")
            files[ps].flush()
        print(f"{impl:24s} {ps:6s} {dt:5s} c={int(causal)} N={N:6d} d={d:4d} B={B:3d} H={H:3d} "
              f"{'' if ms is None else f'{ms:9.3f} ms':>12s} "
              f"{'' if tflops is None else f'{tflops:7.2f} TFLOP/s':>16s} {note}", flush=True)

    for dt in args.dtypes:
        tdtype = getattr(torch, DTYPES[dt][0])
        for d in args.dims:
            H = 2048 // d
            for causal in args.causal:
                for N in args.ns:
                    B = max(1, 16384 // N)
                    p = fa.params(B, H, N, d, window=(-1, 0) if causal else (-1, -1))
                    flops = {ps: lib.fa_flops(fa.FORWARD, ctypes.byref(p)) * f for ps, f in PASS_FLOP_FACTOR.items()}
                    q, k, v, do = make_inputs(B, H, N, d, tdtype, seed=1000 + N + d + causal)
                    measured = []   # (impl, pass, ms, reps, note, result as fp32)
                    for name0, make, info_f, info_b in impls(lib, q, k, v, do, causal, args.max_workspace_gb):
                        def label(ps, name0=name0, info_f=info_f, info_b=info_b):
                            """Rows are named by what ran: a bwd row by its
                            backward (ours_v4_mma8), a fwdbwd row whose two
                            versions differ by both (ours_v3_hopper+bwd_v4)."""
                            if info_b is None or not name0.startswith("ours"):
                                return name0
                            det = "_det" if name0.endswith("_det") else ""
                            if ps == "bwd":
                                return info_b.label() + det
                            if ps == "fwdbwd" and info_f is not None and info_f.version != info_b.version:
                                return f"{info_f.label()}+bwd_{info_b.name.decode()}"
                            return name0
                        name = name0
                        # the passes this path has (a deterministic row is a backward only)
                        # (ours_op, the public entry, has every pass, as the peers do)
                        passes = [ps for ps in args.passes if not name0.startswith("ours_v") or
                                  ((ps == "bwd" or info_f is not None) and (ps == "fwd" or info_b is not None))]
                        if N > args.slow_max_n and ("_tiled" in name or "materialized" in name):
                            for ps in passes:
                                measured.append((label(ps), ps, None, None,
                                                 f"skipped: slow path, N > --slow-max-n {args.slow_max_n}", None,
                                                 None, how_called(name0)))
                            continue
                        try:
                            obj = make()
                        except Skip as e:
                            for ps in passes:
                                measured.append((label(ps), ps, None, None, str(e), None, None, how_called(name0)))
                            continue
                        except Exception as e:
                            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                            for ps in passes:
                                measured.append((label(ps), ps, None, None, "failed: " + msg[:160], None, None,
                                                 how_called(name0)))
                            continue
                        for ps in passes:
                            fn = getattr(obj, ps)
                            try:
                                if ps == "bwd" and isinstance(obj, Ours):
                                    obj.fwd()
                                out = fn()
                                torch.cuda.synchronize()
                                ms, reps = time_ms(fn, args.repeats)
                                # the same call replayed from a CUDA graph: no host overhead, for every path alike
                                # (a backward's forward rebuilt on the capture stream: setup)
                                reset = (lambda o=obj: setattr(o, "out", None)) \
                                    if ps == "bwd" and hasattr(obj, "out") else None
                                gms, why = gpu_timing.graph_ms(torch, fn, args.repeats, setup=reset)
                                measured.append((label(ps), ps, ms, reps, why, out.float().clone(), gms,
                                                 how_called(name0)))
                            except Exception as e:
                                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                                if name.startswith("sdpa") and dt == "fp32":
                                    msg = "not supported: SDPA flash/cuDNN backends take fp16/bf16 only"
                                else:
                                    msg = "failed: " + msg[:160]
                                measured.append((label(ps), ps, None, None, msg, None, None, how_called(name0)))
                        del obj
                        gc.collect()   # the implementation's objects freed now, before the next one allocates
                        torch.cuda.empty_cache()
                    # accuracy on the same tensors: max |O - O_flash| (fwd) or |dQ - dQ_flash| (bwd)
                    for ps in args.passes:
                        base = {m[0]: m[5] for m in measured if m[1] == ps and m[5] is not None}
                        bname = "sdpa_flash" if "sdpa_flash" in base else "ours_v0_materialized"
                        for name, ps2, ms, reps, note, o, gms, how in measured:
                            if ps2 != ps:
                                continue
                            diff = None
                            if o is not None and bname in base and name != bname:
                                diff = (o - base[bname]).abs().max().item()
                                note = "; ".join(x for x in (note, f"diff vs {bname}") if x)
                            emit(name, ps, dt, causal, B, H, N, d, ms,
                                 None if ms is None else flops[ps] / (ms * 1e-3) / 1e12, reps, diff, note, gms, how)
                    del q, k, v, do, measured
                    torch.cuda.empty_cache()
                    # what the allocator keeps reserved between shapes: it must not grow from shape to shape
                    print(f"reserved after {dt} c={int(causal)} d={d} N={N}: "
                          f"{torch.cuda.memory_reserved() / 2**30:.1f} GiB", flush=True)
    for f in set(files.values()):
        f.close()
    summary(rows)


def summary(rows):
    """The table the reply quotes: TFLOP/s by (pass, dtype, causal, d, N) and
    our best version against the peers."""
    names = sorted({r[0] for r in rows if r[0].startswith("ours")}) + ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient",
                                                                        "torch_materialized"]
    for ps in ("fwd", "bwd", "fwdbwd"):
        keys = sorted({(r[2], r[3], r[5], r[4]) for r in rows if r[1] == ps})
        if not keys:
            continue
        print(f"\nTFLOP/s, pass {ps}:")
        print(f"{'dtype':5s} {'c':1s} {'d':>4s} {'N':>6s} " + " ".join(f"{n[-14:]:>14s}" for n in names) +
              "   best/flash best/cudnn")
        for dt, causal, d, N in keys:
            tf = {}
            for n in names:
                m = [r for r in rows if r[0] == n and r[1] == ps and r[2] == dt and r[3] == causal
                     and r[4] == N and r[5] == d and r[6] is not None]
                if m:
                    tf[n] = m[0][6]
            ours = [tf[n] for n in names if n.startswith("ours") and n in tf]
            best = max(ours) if ours else None
            rf = f"{best / tf['sdpa_flash']:10.2f}" if best and "sdpa_flash" in tf else f"{'-':>10s}"
            rc = f"{best / tf['sdpa_cudnn']:11.2f}" if best and "sdpa_cudnn" in tf else f"{'-':>11s}"
            print(f"{dt:5s} {int(causal):1d} {d:4d} {N:6d} " +
                  " ".join(f"{tf[n]:14.1f}" if n in tf else f"{'-':>14s}" for n in names) + f" {rf} {rc}")


def profile_io(args, lib):
    """Each (config, impl, pass) once between profiler start/stop, after a
    marker kernel whose grid size is the tag; MAP.json maps tags to configs.
    Run under ncu --profile-from-start off (scripts/gpu/ncu_io.sh)."""
    configs = []
    if "fwd" in args.passes:
        for N in (256, 512, 1024, 2048, 4096, 8192):
            configs.append(("fwd", "fp16", 16384 // N, 32, N, 64, "sweep"))
        configs.append(("fwd", "fp16", 64, 16, 1024, 64, "FlashAttention Figure 2 (B 64, H 16, N 1024, d 64)"))
        configs.append(("fwd", "bf16", 4, 16, 4096, 128, "d 128"))
        configs.append(("fwd", "fp32", 4, 32, 4096, 64, "fp32"))
    if "bwd" in args.passes:
        configs.append(("bwd", "bf16", 4, 32, 4096, 64, "backward"))
        configs.append(("bwd", "bf16", 4, 16, 4096, 128, "backward d 128"))
    tagmap = {}
    tag = 1
    for ps, dt, B, H, N, d, label in configs:
        tdtype, dcode = getattr(torch, DTYPES[dt][0]), DTYPES[dt][1]
        q, k, v, do = make_inputs(B, H, N, d, tdtype, seed=N)
        p = ctypes.byref(fa.params(B, H, N, d))
        pass_code = fa.FORWARD if ps == "fwd" else fa.BACKWARD
        for name, make, info_f, info_b in impls(lib, q, k, v, do, False, 1e9):
            if name == "torch_materialized":
                continue
            # the passes a row has, as in the timed rows: a backward-only
            # version or a deterministic row has no forward of its own (its
            # maker runs version 2's), so profiling its forward would put
            # version 2's bytes under another version's name
            if ps == "fwd" and name.startswith("ours_v") and info_f is None:
                continue
            try:
                obj = make()
                fn = getattr(obj, ps)
                if ps == "bwd" and isinstance(obj, Ours):
                    obj.fwd()
                fn()
                torch.cuda.synchronize()   # warm: handles, module loads, autotuning
            except Exception as e:
                print(f"skip {name} {ps} {dt}: {str(e).splitlines()[0][:120]}", flush=True)
                continue
            info = info_f if ps == "fwd" else info_b
            if ps == "bwd" and info_b is not None and name.startswith("ours"):
                # named by the backward that ran, as in the timed rows
                name = info_b.label() + ("_det" if name.endswith("_det") else "")
            model = lib.fa_model_bytes(pass_code, info.version, dcode, p) if info is not None else None
            tagmap[tag] = dict(impl=name, pass_=ps, dtype=dt, B=B, H=H, N=N, d=d, label=label,
                               model_bytes=model,
                               model_v0_bytes=lib.fa_model_bytes(pass_code, 0, dcode, p),
                               model_v1_bytes=lib.fa_model_bytes(pass_code, 1, dcode, p),
                               compulsory_bytes=lib.fa_compulsory_bytes(pass_code, dcode, p))
            torch.cuda.profiler.start()
            lib.fa_marker(tag)
            fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            print(f"profiled tag {tag}: {name} {ps} {dt} B={B} H={H} N={N} d={d}", flush=True)
            tag += 1
            del obj
            torch.cuda.empty_cache()
        del q, k, v, do
        torch.cuda.empty_cache()
    with open(args.profile_io, "w") as f:
        json.dump(tagmap, f, indent=1)


SPEED_FLOPS = {"fwd": "4 B H N^2 d", "bwd": "2.5 x 4 B H N^2 d", "fwdbwd": "3.5 x 4 B H N^2 d"}


def speed_table(rows, fname, ps):
    """One Markdown table of TFLOP/s for pass ps: a row per (dtype, causal, d,
    N), a column per implementation in the file (ours first, by version,
    then the peers), and our fastest version over SDPA flash and cuDNN."""
    if not rows:
        return []
    r0 = rows[0]
    impls_ = []
    for r in rows:
        if r["impl"] not in impls_:
            impls_.append(r["impl"])
    ours = sorted(i for i in impls_ if i.startswith("ours"))
    peers = [i for i in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "torch_materialized") if i in impls_]
    cols = ours + peers
    out = [f"Speed, pass {ps} (TFLOP/s = {SPEED_FLOPS[ps]} / median time, halved when causal): {r0['gpu']}, "
           f"driver {r0['driver']}, CUDA {r0['cuda']}, torch {r0['torch']}, cuDNN {r0['cudnn']}, commit "
           f"{r0['commit']}, {r0['date']} (data/gpu/{fname}). `-`: not run (a slow path above its N, or no such "
           f"pass); n/a: the dtype is not supported.\n",
           "| dtype | causal | d | N | B x H | " + " | ".join(c.replace("_", " ") for c in cols)
           + " | best ours / flash | best ours / cuDNN |",
           "|---|---|---|---|---|" + "---|" * (len(cols) + 2)]
    keys = []
    for r in rows:
        k = (r["dtype"], r["causal"], int(r["d"]), int(r["N"]), r["B"] + " x " + r["H"])
        if k not in keys:
            keys.append(k)
    for dt, c, dd, N, bh in keys:
        tf, cells = {}, []
        for col in cols:
            m = [r for r in rows if r["impl"] == col and r["dtype"] == dt and r["causal"] == c and
                 int(r["d"]) == dd and int(r["N"]) == N]
            if m and m[0]["tflops"]:
                tf[col] = float(m[0]["tflops"])
                cells.append(f"{tf[col]:.1f}")
            else:
                cells.append("n/a" if m and "not supported" in m[0]["note"] else "-")
        best = max((tf[o] for o in ours if o in tf and not o.endswith("_det")), default=None)
        rat = [f"{best / tf[p]:.2f}" if best and p in tf else "-" for p in ("sdpa_flash", "sdpa_cudnn")]
        out.append(f"| {dt} | {c} | {dd} | {N} | {bh} | " + " | ".join(cells) + " | " + " | ".join(rat) + " |")
    out.append("")
    return out


def bytes_table(rows, fname, what):
    """One Markdown table of Nsight Compute's bytes (scripts/gpu/ncu_io.py's
    columns) beside the IO models, a row per (shape, implementation)."""
    if not rows:
        return []
    r0 = rows[0]
    gb = lambda x: f"{float(x) / 1e9:.3f}" if x else "-"  # noqa: E731
    over = lambda a, b: f"{float(a) / float(b):.2f}" if a and b else "-"  # noqa: E731
    out = [f"Bytes, {what}: {r0['gpu']}, driver {r0['driver']}, commit {r0['commit']}, {r0['date']} "
           f"(data/gpu/{fname}; GB = 1e9 bytes).\n",
           "| config | dtype | B,H,N,d | impl | DRAM GB | L2 GB (all) | L2 GB (SM requests) | model GB | "
           "compulsory GB | DRAM / model | SM-L2 / model | L2 (all) / model | time ms |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['label']} | {r['dtype']} | {r['B']},{r['H']},{r['N']},{r['d']} | {r['impl']} | "
                   f"{gb(r['dram_bytes'])} | {gb(r['l2_bytes'])} | {gb(r.get('l2_from_sm_bytes'))} | "
                   f"{gb(r['model_bytes'])} | {gb(r['compulsory_bytes'])} | {r['dram_over_model'] or '-'} | "
                   f"{r.get('l2_from_sm_over_model') or '-'} | {over(r['l2_bytes'], r['model_bytes'])} | "
                   f"{float(r['kernel_time_ms']):.3f} |")
    out.append("")
    return out


def tables(args):
    """Markdown tables for data/gpu/README.md, read from the measured files
    (nothing typed by hand): speed, bytes, errors."""
    import csv
    import re
    d = os.path.join(ROOT, "data", "gpu")
    out = []
    for fname, ps in (("bench_fwd.csv", "fwd"), ("bench_bwd.csv", "bwd"), ("bench_bwd.csv", "fwdbwd")):
        path = os.path.join(d, fname)
        if os.path.exists(path):
            out += speed_table([r for r in csv.DictReader(ln for ln in open(path) if not ln.startswith("#"))
                                if r["pass"] == ps], fname, ps)
    io = []
    for fname, what in (("io_bwd.csv", "one backward per implementation; cuDNN's and flash's have no model"),
                        ("io_fwd.csv", "forward")):
        path = os.path.join(d, fname)
        rows = list(csv.DictReader(open(path))) if os.path.exists(path) else []
        out += bytes_table(rows, fname, what)
        if fname == "io_fwd.csv":
            io = rows
    if io:
        def dram(impl, N, d, dt="fp16", H="32"):
            m = [r for r in io if r["impl"] == impl and r["N"] == str(N) and r["d"] == str(d)
                 and r["dtype"] == dt and r["H"] == H]
            return float(m[0]["dram_bytes"]) if m else None
        for N in (4096,):
            a, b, c = dram("ours_v0_materialized", N, 64), dram("ours_v1_tiled", N, 64), dram("ours_v2_mma", N, 64)
            if a and b and c:
                out.append(f"\nMeasured DRAM bytes at N = {N}, d = 64 (fp16, B = 4, H = 32): v0 / v1 = {a / b:.1f}, "
                           f"v0 / v2 = {a / c:.1f} (acceptance: >= 5).")
        fig = [r for r in io if r["label"].startswith("FlashAttention Figure 2")]
        if fig:
            out.append("\nFlashAttention paper's Figure 2 shape, forward only (B 64, H 16, N 1024, d 64, fp16): " +
                       "; ".join(f"{r['impl']} DRAM {float(r['dram_bytes']) / 1e9:.2f} GB, L2 "
                                 f"{float(r['l2_bytes']) / 1e9:.2f} GB, {float(r['kernel_time_ms']):.2f} ms"
                                 for r in fig) + ".")
        out.append("")
    # stage 4's tests, as make gpu-test logged them
    log = os.path.join(d, "gpu_test.log") if os.path.exists(os.path.join(d, "gpu_test.log")) else None
    if log:
        txt = open(log).read()
        seed = re.search(r"seed (\d+)", txt)
        out.append(f"Errors (data/gpu/{os.path.basename(log)}, seed {seed.group(1) if seed else '?'}): "
                   "max |O - O_ref| / max |O_ref| against the CPU fp64 reference on the inputs rounded to the dtype.\n")
        cols = (("fp32", "v0"), ("fp32", "v1"), ("fp16", "v0"), ("fp16", "v1"), ("fp16", "v2"), ("fp16", "v3"),
                ("bf16", "v0"), ("bf16", "v1"), ("bf16", "v2"), ("bf16", "v3"))
        out.append("| test | " + " | ".join(f"{dt} {v}" for dt, v in cols) + " |")
        out.append("|---|" + "---|" * len(cols))
        rows = {}
        # PASS lines of two formats: "stage4 fp16 (1,2,17,64) (v0 err 4.2e-04, ...)" (before masks
        # reached stage 4) and "stage4 N=17 (B,H/H_kv,Sq,Sk,d) = (...) fp16 (err O/L: v0 4.2e-04/1.1e-07, ...; ...)"
        for m in re.finditer(r"^(PASS|FAIL) stage4 (fp32|fp16|bf16) (\([0-9,]+\)) \((.*)\)$", txt, re.M):
            errs = dict(re.findall(r"(v\d) err ([0-9.e+-]+)", m.group(4)))
            rows.setdefault(m.group(3), {})[m.group(2)] = errs
        for m in re.finditer(r"^PASS stage4 (.+) (fp32|fp16|bf16) \(err O/L: ([^;]*);", txt, re.M):
            errs = dict(re.findall(r"(v\d) ([0-9.e+-]+|inf|nan)/", m.group(3)))
            rows.setdefault(m.group(1), {})[m.group(2)] = errs
        for shape, r in rows.items():
            c = [r.get(dt, {}).get(v, "-") for dt, v in cols]
            out.append(f"| {shape} | " + " | ".join(c) + " |")
        summ = re.search(r"^\d+ passed, \d+ failed, \d+ skipped$", txt, re.M)
        san = re.findall(r"^(?:PASS|FAIL) stage4-(?:memcheck|racecheck).*$", txt, re.M)
        tail = ([summ.group(0)] if summ else []) + san
        if not summ:
            tail.insert(0, f"{len(re.findall(r'^PASS', txt, re.M))} PASS, {len(re.findall(r'^FAIL', txt, re.M))} FAIL")
        out.append("\n" + "; ".join(tail))
    print("\n".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", help="write the forward rows here (with provenance columns)")
    ap.add_argument("--bwd-csv", help="write the bwd and fwdbwd rows here")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libfa_gpu.so"))
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--ns", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1", help="0, 1 or 0,1")
    ap.add_argument("--passes", default="fwd,bwd,fwdbwd")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--max-workspace-gb", type=float, default=40.0)
    ap.add_argument("--slow-max-n", type=int, default=1 << 30,
                    help="run the materialized and CUDA-core paths only up to this N")
    ap.add_argument("--quick", action="store_true", help="N = 1024 and 4096 only")
    ap.add_argument("--profile-io", metavar="MAP.json", help="ncu mode (scripts/gpu/ncu_io.sh)")
    ap.add_argument("--tables", action="store_true",
                    help="print the Markdown tables of data/gpu/README.md from data/gpu/*.csv (no GPU; make gpu-data-readme)")
    ap.add_argument("--impls", help="comma-separated subset of implementations (default: all)")
    args = ap.parse_args()
    global IMPL_FILTER
    if args.impls:
        IMPL_FILTER = set(args.impls.split(","))
    if args.tables:
        tables(args)
        return 0
    args.dtypes = args.dtypes.split(",")
    for dt in args.dtypes:
        if dt not in DTYPES:
            print(f"bench_gpu.py: error: --dtypes: unknown dtype {dt}", file=sys.stderr)
            return 2
    args.passes = args.passes.split(",")
    for ps in args.passes:
        if ps not in PASS_FLOP_FACTOR:
            print(f"bench_gpu.py: error: --passes: unknown pass {ps} (fwd, bwd, fwdbwd)", file=sys.stderr)
            return 2
    try:
        args.causal = [bool(int(c)) for c in args.causal.split(",")]
        args.dims = [int(x) for x in args.dims.split(",")]
        args.ns = [1024, 4096] if args.quick else [int(x) for x in args.ns.split(",")]
    except ValueError as e:
        print(f"bench_gpu.py: error: {e}", file=sys.stderr)
        return 2
    if torch is None or not torch.cuda.is_available():
        print("bench_gpu.py: no CUDA GPU here; nothing to run")
        return 0
    lib = fa.load(args.lib)
    if args.profile_io:
        profile_io(args, lib)
        return 0
    p = provenance(sys.argv)
    print(f"# {p}")
    bench(args, lib, p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
