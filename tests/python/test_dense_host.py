#!/usr/bin/env python3
"""tests/python/test_dense_host.py -- the dense entries' host layer, without a GPU.

    python3 tests/python/test_dense_host.py      (make test runs it; PYTHONPATH=python)

flash_attention and FlashAttention's flash_attn_func hand fa_forward and
fa_backward pointers, strides, a problem structure, a version, flags and a
workspace; whether every tensor arrives where and in the layout the
library's contract says (core/fa_gpu.h: q, k, v, o, dO (B, heads, seqlen, d)
through fa_ptrs' strides, all zero meaning contiguous, read only by versions
whose row says `strided`; L (B, H, seqlen_q) fp32; dQ, dK, dV contiguous) is a
property of the Python layer alone. Here the library is replaced by one
with two versions per pass -- 1 contiguous only and deterministic, 2
strided -- whose kernels compute in float64 from the pointers they are
given: the forward O and L from Q, K, V; the backward P = exp(S - L) from
the L it is handed and D = rowsum(dO * O) from the O it is handed, as the
chapter's backward does. The tensors are CPU tensors that say they are on
a GPU. Each case draws fresh inputs and compares O, L and the gradients
with torch's float64 autograd over the same rounded inputs (the mask from
core/mask.h through build/libfa_mask.so), through the public entries:

  dense-host-cases     contiguous, (B, seqlen, H, d) views, slices of a packed
                       qkv, transposed and misaligned tensors, an expanded
                       dO, grouped heads, causal and windows, rows that see
                       no key, empty sequences, fp32, fp16 and bf16, each
                       with the strided version and the contiguous one
  dense-host-plan      the version check and the workspace size are asked
                       once per signature, not per call; a backward gets a
                       workspace of the size asked; deterministic=True and
                       accurate_dq reach fa_backward's flags
  dense-host-errors    a problem no version runs is refused in one line
                       before any launch, the backward's refusal before the
                       forward runs

Needs torch (CPU is enough), numpy and build/libfa_mask.so; without them one
SKIP line.
"""
import ctypes
import math
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "src", "cpu", "reference"))

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP dense-host: {e.name} is not installed (this test needs torch and numpy; the CPU build of "
          "torch is enough)")
    sys.exit(0)
if not os.path.exists(os.environ.get("FA_MASK_LIB") or os.path.join(ROOT, "build", "libfa_mask.so")):
    print("SKIP dense-host: build/libfa_mask.so is missing (make build/libfa_mask.so)")
    sys.exit(0)

import attention_ref  # noqa: E402  (the mask of core/mask.h)
from flashattn_stages import fa, flash_attn_interface, flash_op  # noqa: E402  (PYTHONPATH=python)
from cpu_as_gpu import gpu  # noqa: E402
import cpu_as_gpu  # noqa: E402

SEED = int(os.environ.get("FA_SEED", random.randrange(1 << 30)))
TORCH_DTYPES = {fa.FP32: torch.float32, fa.FP16: torch.float16, fa.BF16: torch.bfloat16}
CALLS = {"check": 0, "workspace_bytes": 0, "forward": 0, "backward": 0}
SEEN = {"flags": [], "workspace": []}   # what each fa_backward call was given


def cpu(t):
    return torch.Tensor(t) if t is not None else None


def at(ptr, shape, strides, dtype):
    """The memory at host address ptr as a torch tensor of `shape` with
    element `strides` (0 on every stride: contiguous), shared, not copied."""
    if not any(strides):
        strides = torch.empty(shape, device="meta").stride()
    es = torch.empty((), dtype=dtype).element_size()
    n = 1 + sum((s - 1) * st for s, st in zip(shape, strides)) if all(shape) else 0
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * max(n * es, 1)).from_address(ptr))
    return torch.from_numpy(raw)[:n * es].view(dtype).as_strided(shape, strides)


def stride_of(st, d):
    return (st.batch, st.head, st.row, 1) if (st.batch or st.head or st.row) else (0, 0, 0, 0)


class FakeLibrary:
    """The dense entry points of libfa_gpu.so: versions 1 (contiguous only,
    deterministic) and 2 (strided, with a workspace for the backward), d
    from 8 to 64; fa_forward and fa_backward compute in float64 from the
    pointers and strides they are given."""

    def __init__(self):
        self.rows = {}
        for pass_ in (fa.FORWARD, fa.BACKWARD):
            for version, strided in ((1, 0), (2, 1)):
                self.rows[(pass_, version)] = fa.VersionInfo(
                    pass_, version, str(version).encode(), b"fake", 7, 8, 64, 8, 1, 1 - strided, 0,
                    b"fake", strided, 0, 0, 0.0)
        self.message = b""

    def fa_num_versions(self, pass_):
        return 2

    def fa_version(self, pass_, version):
        row = self.rows.get((pass_, version))
        return ctypes.pointer(row) if row is not None else None

    def fa_error_string(self):
        return self.message

    def fa_check_supported(self, pass_, version, dtype, p_ref):
        CALLS["check"] += 1
        d = p_ref._obj.d
        if (pass_, version) not in self.rows or not 8 <= d <= 64 or d % 8:
            self.message = f"d = {d}: the fake versions take d = 8, 16, ..., 64".encode()
            return fa.ERR_UNSUPPORTED
        return fa.OK

    @staticmethod
    def workspace_bytes(pass_, version, p):
        """What the fake's versions need: version 2's backward an fp32 dQ accumulator."""
        return p.B * p.H * p.seqlen_q * p.d * 4 if (pass_, version) == (fa.BACKWARD, 2) else 0

    def fa_workspace_bytes(self, pass_, version, dtype, p_ref):
        CALLS["workspace_bytes"] += 1
        return self.workspace_bytes(pass_, version, p_ref._obj)

    def _strides_ok(self, version, x, names, es):
        """The contract: a contiguous-only version gets zero strides; a strided
        one 16-byte-aligned rows and addresses."""
        for n in names:
            st = getattr(x, "s" + n.rstrip("_"))
            if version == 1 and (st.batch or st.head or st.row):
                return False
            if any(s * es % 16 for s in (st.batch, st.head, st.row)) or getattr(x, n) % 16:
                return False
        return True

    def _inputs(self, p, x, dt, names):
        B, H, Hk, Sq, Sk, d = p.B, p.H, p.H_kv, p.seqlen_q, p.seqlen_k, p.d
        shapes = {"q": (B, H, Sq, d), "k": (B, Hk, Sk, d), "v": (B, Hk, Sk, d), "o": (B, H, Sq, d),
                  "do_": (B, H, Sq, d)}
        return [at(getattr(x, n), shapes[n], stride_of(getattr(x, "s" + n.rstrip("_")), d), dt).double()
                for n in names]

    def fa_forward(self, version, dtype, p_ref, x_ref, stream):
        CALLS["forward"] += 1
        p, x, dt = p_ref._obj, x_ref._obj, TORCH_DTYPES[dtype]
        if not self._strides_ok(version, x, ("q", "k", "v", "o"), dt.itemsize):
            self.message = b"strides the version cannot read"
            return fa.ERR_UNSUPPORTED
        q, k, v = self._inputs(p, x, dt, ("q", "k", "v"))
        o = at(x.o, (p.B, p.H, p.seqlen_q, p.d), stride_of(x.so, p.d), dt)
        lse = at(x.softmax_lse, (p.B, p.H, p.seqlen_q), (0, 0, 0), torch.float32)
        window = (p.window_size_left, p.window_size_right)
        G = p.H // p.H_kv
        for b in range(p.B):
            for h in range(p.H):
                O, L, _ = attention_ref.naive_forward(q[b, h].numpy(), k[b, h // G].numpy(), v[b, h // G].numpy(),
                                                      p.softmax_scale, window)
                o[b, h] = torch.from_numpy(O)
                lse[b, h] = torch.from_numpy(L)
        return fa.OK

    def fa_backward(self, version, dtype, p_ref, x_ref, flags, stream):
        CALLS["backward"] += 1
        p, x, dt = p_ref._obj, x_ref._obj, TORCH_DTYPES[dtype]
        SEEN["flags"].append(flags)
        SEEN["workspace"].append((x.workspace or 0, x.workspace_bytes))
        need = self.workspace_bytes(fa.BACKWARD, version, p)
        if need and (not x.workspace or x.workspace_bytes < need):
            self.message = b"no workspace"
            return fa.ERR_UNSUPPORTED
        if not self._strides_ok(version, x, ("q", "k", "v", "o", "do_"), dt.itemsize):
            self.message = b"strides the version cannot read"
            return fa.ERR_UNSUPPORTED
        q, k, v, o, do = self._inputs(p, x, dt, ("q", "k", "v", "o", "do_"))
        lse = at(x.softmax_lse, (p.B, p.H, p.seqlen_q), (0, 0, 0), torch.float32).double()
        dq = at(x.dq, (p.B, p.H, p.seqlen_q, p.d), (0, 0, 0, 0), dt)
        dk = at(x.dk, (p.B, p.H_kv, p.seqlen_k, p.d), (0, 0, 0, 0), dt)
        dv = at(x.dv, (p.B, p.H_kv, p.seqlen_k, p.d), (0, 0, 0, 0), dt)
        window = (p.window_size_left, p.window_size_right)
        visible = attention_ref.mask(p.seqlen_q, p.seqlen_k, window)
        G = p.H // p.H_kv
        acc_k = torch.zeros(dk.shape, dtype=torch.float64)
        acc_v = torch.zeros(dv.shape, dtype=torch.float64)
        for b in range(p.B):
            for h in range(p.H):
                Q, K, V = q[b, h].numpy(), k[b, h // G].numpy(), v[b, h // G].numpy()
                L = lse[b, h].numpy()[:, None]
                with np.errstate(invalid="ignore"):
                    P = np.where(visible, np.exp(Q @ K.T * p.softmax_scale - L), 0.0)   # rebuilt from L
                dQ, dK, dV = attention_ref.naive_backward(Q, K, V, o[b, h].numpy(), P, do[b, h].numpy(),
                                                          p.softmax_scale)
                dq[b, h] = torch.from_numpy(dQ)
                acc_k[b, h // G] += torch.from_numpy(dK)
                acc_v[b, h // G] += torch.from_numpy(dV)
        dk.copy_(acc_k)
        dv.copy_(acc_v)
        return fa.OK


def install_fakes():
    lib = FakeLibrary()
    cpu_as_gpu.install(lib)
    return lib


def reference(q, k, v, do, scale, window):
    """O, L, dQ, dK, dV in float64 by torch's autograd, (B, heads, seqlen, d)."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    if q.shape[2] == 0 or k.shape[2] == 0:   # SDPA's empty sequences: O = 0, L = -inf, zero gradients
        z = torch.zeros
        return (z(q.shape, dtype=torch.float64), torch.full(q.shape[:3], -math.inf, dtype=torch.float64),
                z(q.shape, dtype=torch.float64), z(k.shape, dtype=torch.float64), z(v.shape, dtype=torch.float64))
    G = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    visible = torch.from_numpy(attention_ref.mask(q.shape[2], k.shape[2], window))
    s = (q @ kk.transpose(-1, -2) * scale).masked_fill(~visible, -math.inf)
    empty = ~visible.any(-1)[:, None]                      # rows that see no key: O = 0, L = -inf
    L = torch.logsumexp(s.masked_fill(empty, 0.0), -1).masked_fill(empty[:, 0], -math.inf)
    P = torch.softmax(s.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0)
    o = P @ vv
    o.backward(do.double())
    return o.detach(), L.detach(), q.grad, k.grad, v.grad


def err(got, want):
    """max |got - want| over max |want| (1 where want is all zero); NaN fails."""
    e = (got.double() - want).abs().max().item() if want.numel() else 0.0
    return e / max(want.abs().max().item(), 1.0) if want.numel() else 0.0


TOL = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def draw(g, shape, dtype):
    return torch.randn(shape, generator=g).to(dtype)


def case(g, c):
    """One forward and backward through a public entry: "" or what is wrong."""
    dtype, layout, version = c["dtype"], c["layout"], c.get("version")
    B, H, Hk, Sq, Sk, d = c["shape"]
    causal, window = c.get("causal", False), c.get("window", (-1, -1))
    if layout == "packed":   # (B, seqlen, 3, H, d): q, k, v slices of one tensor
        qkv = draw(g, (B, Sq, 3, H, d), dtype).requires_grad_()
        leaves = [qkv]
        run = lambda: flash_attn_interface.flash_attn_qkvpacked_func(   # noqa: E731
            gpu(qkv), causal=causal, window_size=window, return_lse=True)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    else:
        q = draw(g, (B, H, Sq, d), dtype)
        k, v = draw(g, (B, Hk, Sk, d), dtype), draw(g, (B, Hk, Sk, d), dtype)
        if layout == "bshd":   # FlashAttention's layout: heads-major views
            q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
            leaves = [t.requires_grad_() for t in (q, k, v)]
            run = lambda: flash_attn_interface.flash_attn_func(   # noqa: E731
                *map(gpu, leaves), causal=causal, window_size=window, return_lse=True)
            q, k, v = (t.transpose(1, 2) for t in leaves)
        elif layout == "misaligned":   # one element past a 16-byte boundary
            q, k, v = (torch.cat([t.flatten(), t.flatten()[:1]])[1:].view(t.shape) for t in (q, k, v))
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            q, k, v = leaves
            run = lambda: flash_op.flash_attention(   # noqa: E731
                gpu(q), gpu(k), gpu(v), causal=causal, window_size=window, version=version, return_lse=True)
        else:   # "contiguous", "transposed" (d not the last dimension in memory)
            if layout == "transposed":
                q, k, v = (t.transpose(-1, -2).contiguous().transpose(-1, -2) for t in (q, k, v))
            leaves = [t.requires_grad_() for t in (q, k, v)]
            run = lambda: flash_op.flash_attention(   # noqa: E731
                gpu(q), gpu(k), gpu(v), causal=causal, window_size=window, version=version, return_lse=True)
    o, lse = run()
    o, lse = cpu(o), cpu(lse)
    o_sdpa = o.transpose(1, 2) if layout in ("bshd", "packed") else o
    if c.get("expanded_do"):
        do = torch.ones(o.shape, dtype=dtype)
        o.float().sum().backward()
    else:
        do = draw(g, o.shape, dtype)
        o.backward(do)
    do_sdpa = do.transpose(1, 2) if layout in ("bshd", "packed") else do
    scale = 1.0 / math.sqrt(d)
    ro, rL, rdq, rdk, rdv = reference(q, k, v, do_sdpa, scale, (window[0], 0 if causal else window[1]))
    tol, why = TOL[dtype], []
    if not (o.dtype == dtype and tuple(o_sdpa.shape) == (B, H, Sq, d)):
        why.append(f"o {o.dtype} {tuple(o_sdpa.shape)}")
    for name, got, want, t in (("O", o_sdpa, ro, tol), ("L", lse, rL, 1e-6)):
        fin = torch.isfinite(want)
        if not torch.equal(torch.isfinite(got), fin) if name == "L" else not err(got, want) <= t:
            why.append(f"{name} off the float64 reference by {err(got, want):.1e}")
        elif name == "L" and not err(got[fin], want[fin]) <= t:
            why.append(f"L off by {err(got[fin], want[fin]):.1e}")
    if layout == "packed":
        gq, gk, gv = (cpu(qkv.grad)[:, :, i].transpose(1, 2) for i in range(3))
    elif layout == "bshd":
        gq, gk, gv = (cpu(t.grad).transpose(1, 2) for t in leaves)
    else:
        gq, gk, gv = (cpu(t.grad) for t in leaves)
    for name, got, want in (("dQ", gq, rdq), ("dK", gk, rdk), ("dV", gv, rdv)):
        if got is None or not err(got, want) <= 4 * tol:
            why.append(f"{name} off the float64 reference by {err(got, want) if got is not None else 'None'}")
    return "; ".join(why)


def report(name, bad, what):
    print(f"PASS {name}: {what}" if not bad else f"FAIL {name}: {'; '.join(bad)} [FA_SEED={SEED}]")


def cases():
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
    out = []
    for version in (None, 1):
        out += [dict(dtype=f32, layout="contiguous", shape=(2, 4, 2, 5, 7, 16), causal=True, version=version),
                dict(dtype=f16, layout="contiguous", shape=(1, 2, 2, 9, 6, 32), window=(2, 1), version=version),
                dict(dtype=f16, layout="transposed", shape=(2, 2, 1, 6, 6, 8), version=version),
                dict(dtype=f32, layout="misaligned", shape=(1, 3, 1, 4, 5, 16), causal=True, version=version),
                dict(dtype=bf16, layout="contiguous", shape=(1, 2, 1, 7, 3, 16), causal=True, version=version,
                     expanded_do=True),   # rows 0-3 see no key; dO has stride 0
                dict(dtype=f32, layout="contiguous", shape=(1, 2, 2, 0, 5, 16), version=version),
                dict(dtype=f32, layout="contiguous", shape=(1, 2, 2, 4, 0, 16), version=version)]
    out += [dict(dtype=f16, layout="bshd", shape=(2, 4, 2, 6, 8, 32), causal=True),
            dict(dtype=bf16, layout="bshd", shape=(1, 2, 1, 5, 5, 64), window=(1, 2), expanded_do=True),
            dict(dtype=f16, layout="packed", shape=(2, 2, 2, 7, 7, 16), causal=True)]
    return out


def main():
    lib = install_fakes()
    g = torch.Generator().manual_seed(SEED)
    bad = []
    all_cases = cases()
    for c in all_cases:
        try:
            why = case(g, c)
        except (ValueError, RuntimeError) as e:   # fa.FaError is a RuntimeError
            why = f"raised {type(e).__name__}: {e}"
        if why:
            bad.append(f"{c}: {why}")
    report("dense-host-cases", bad, f"{len(all_cases)} forward and backward calls (contiguous, (B, seqlen, H, d) "
           "views, packed qkv, transposed and misaligned tensors, expanded dO, grouped heads, masks, empty rows "
           "and sequences; fp32, fp16, bf16; strided and contiguous versions) equal float64 autograd")

    # one signature no case above had, called 5 times
    q, k, v = (gpu(draw(g, (1, 6, 12, 24), torch.float16).requires_grad_()) for _ in range(3))
    before, flags0 = dict(CALLS), len(SEEN["flags"])
    for _ in range(5):
        flash_op.flash_attention(q, k, v, causal=True).float().sum().backward()
    asked = {n: CALLS[n] - before[n] for n in CALLS}
    plan_bad = [f"{n} asked {asked[n]} times in 5 calls of one signature" for n in ("check", "workspace_bytes")
                if asked[n] != 2]   # once per pass
    if (asked["forward"], asked["backward"]) != (5, 5):
        plan_bad.append(f"{asked['forward']} forward and {asked['backward']} backward launches for 5 calls")
    want = lib.workspace_bytes(fa.BACKWARD, 2, fa.Params(1, 6, 6, 12, 12, 24, 1.0, -1, 0))
    if any(not ptr or got < want for ptr, got in SEEN["workspace"][flags0:]):
        plan_bad.append(f"a backward got workspace {SEEN['workspace'][flags0:]}, asked {want} bytes")
    for kw, want_flags in ((dict(deterministic=True), fa.BWD_DETERMINISTIC | fa.BWD_CENTER_AUTO),
                           (dict(accurate_dq=True), fa.BWD_CENTER_K), (dict(accurate_dq=False), 0),
                           (dict(accurate_dq="full"), fa.BWD_DQ_PASS)):
        flash_op.flash_attention(q, k, v, **kw).float().sum().backward()
        if SEEN["flags"][-1] != want_flags:
            plan_bad.append(f"{kw}: fa_backward got flags {SEEN['flags'][-1]}, expected {want_flags}")
    report("dense-host-plan", plan_bad, "the version check and workspace size asked once per pass for 5 calls of "
           "one signature; the backward's workspace of the size asked; deterministic and accurate_dq as flags")

    err_bad = []
    launches = CALLS["forward"] + CALLS["backward"]
    for d, grad, want in ((72, False, "d = 72"), (72, True, "d = 72")):
        q, k, v = (gpu(draw(g, (1, 2, 4, d), torch.float16).requires_grad_(grad)) for _ in range(3))
        try:
            flash_op.flash_attention(q, k, v)
            err_bad.append(f"d {d} accepted")
        except ValueError as e:
            if want not in str(e) or "\n" in str(e):
                err_bad.append(f"d {d}: said {e}")
    q, k, v = (gpu(draw(g, (1, 2, 4, 16), torch.float16).requires_grad_()) for _ in range(3))
    try:   # a backward version that does not exist: refused before the forward launches
        flash_op.flash_attention(q, k, v, version=(2, 5))
        err_bad.append("backward version 5 accepted")
    except ValueError as e:
        if "version=5" not in str(e):
            err_bad.append(f"backward version 5: said {e}")
    if CALLS["forward"] + CALLS["backward"] != launches:
        err_bad.append("a refused call launched")
    report("dense-host-errors", err_bad, "d = 72 refused in one line with and without grad, a backward version "
           "that does not exist refused before the forward, no launch")


if __name__ == "__main__":
    main()
