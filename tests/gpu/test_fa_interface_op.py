#!/usr/bin/env python3
"""tests/gpu/test_fa_interface_op.py -- FlashAttention 2's interface through
flashattn_stages: what its users call beyond the dense op.

One line per test in the protocol of tests/run.sh (PASS / FAIL: why / SKIP: why).
SKIP lines, never PASS, where torch, a CUDA GPU or build/libfa_gpu.so is
missing (fa-signatures needs torch only).

  fa-signatures      the seven functions' parameters: FlashAttention 2.8.3's
                     names, order and defaults (SIGNATURES below)
  fa-window          window_size as a tuple, a list and a tensor give one
                     result; causal with any window is right = 0 (bitwise
                     against flash_attention(causal=True, (left, 0)))
  fa-refusals        dropout_p > 0, softcap > 0, alibi_slopes: a ValueError
                     of one line naming the argument, from every function
  fa-varlen-dims     flash_attn_varlen_func (and its kv- and qkv-packed
                     forms) forward and backward at head dimensions the
                     varlen kernels do not take as they are (32 40 59 80 96
                     160 256), fp16 and bf16, causal, windows, grouped heads
  fa-varlen-paged    flash_attn_varlen_func with block_table: k and v read
                     from a paged cache, pages shuffled
  fa-kvcache         flash_attn_with_kvcache: k, v appended at cache_seqlens
                     (paged and not), rotary embedding (interleaved or not,
                     rotary fractions 0.5 and 1), cache_batch_idx,
                     cache_leftpad, seqlen_q above 16, d 32 59 80 256, a
                     cache length not a multiple of 16; the cache's new rows
                     checked, the rest untouched

The rule is FlashAttention's own: against a float64 reference (per
sequence, core/mask.h's mask from flash_op.visible_mask), max |ours - ref|
<= 2 x max |torch - ref| + 1e-5 x max(1, max |ref|), torch being the same
computation in the inputs' dtype (scores, softmax and products in that
dtype, as FlashAttention's attention_ref(upcast=False)); for out, dQ, dK, dV
alike. The seed is printed; FA_SEED=N replays.
"""
import inspect
import math
import os
import sys
import traceback

import skips   # tests/gpu/, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUPS = ["fa-signatures", "fa-window", "fa-refusals", "fa-varlen-dims", "fa-varlen-paged", "fa-kvcache"]

torch = skips.need_torch(GROUPS)
import flashattn_stages  # noqa: E402
from flashattn_stages import flash_op  # noqa: E402

SEED = int(os.environ.get("FA_SEED", int.from_bytes(os.urandom(4), "little")))
DEV = "cuda"

# FlashAttention 2.8.3's flash_attn_interface: (name, default) in order; None: no default
_WIN, _COMMON = (-1, -1), [("dropout_p", 0.0), ("softmax_scale", None), ("causal", False),
                           ("window_size", (-1, -1)), ("softcap", 0.0), ("alibi_slopes", None),
                           ("deterministic", False), ("return_attn_probs", False)]
REQ = inspect.Parameter.empty
SIGNATURES = {
    "flash_attn_func": [("q", REQ), ("k", REQ), ("v", REQ)] + _COMMON,
    "flash_attn_qkvpacked_func": [("qkv", REQ)] + _COMMON,
    "flash_attn_kvpacked_func": [("q", REQ), ("kv", REQ)] + _COMMON,
    "flash_attn_varlen_func": [("q", REQ), ("k", REQ), ("v", REQ), ("cu_seqlens_q", REQ), ("cu_seqlens_k", REQ),
                               ("max_seqlen_q", REQ), ("max_seqlen_k", REQ)] + _COMMON + [("block_table", None)],
    "flash_attn_varlen_qkvpacked_func": [("qkv", REQ), ("cu_seqlens", REQ), ("max_seqlen", REQ)] + _COMMON,
    "flash_attn_varlen_kvpacked_func": [("q", REQ), ("kv", REQ), ("cu_seqlens_q", REQ), ("cu_seqlens_k", REQ),
                                        ("max_seqlen_q", REQ), ("max_seqlen_k", REQ)] + _COMMON,
    "flash_attn_with_kvcache": [("q", REQ), ("k_cache", REQ), ("v_cache", REQ), ("k", None), ("v", None),
                                ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None),
                                ("cache_batch_idx", None), ("cache_leftpad", None), ("block_table", None),
                                ("softmax_scale", None), ("causal", False), ("window_size", _WIN),
                                ("softcap", 0.0), ("rotary_interleaved", True), ("alibi_slopes", None),
                                ("num_splits", 0), ("return_softmax_lse", False)],
}


def signature_tests():
    bad = []
    for name, want in SIGNATURES.items():
        params = [p for p in inspect.signature(getattr(flashattn_stages, name)).parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)]
        got = [(p.name, p.default) for p in params]
        if got != want:
            bad.append(f"{name}: {got} != {want}")
    print(f"FAIL fa-signatures: {'; '.join(bad)[:600]}" if bad else
          f"PASS fa-signatures ({len(SIGNATURES)} functions: FlashAttention 2.8.3's names, order, defaults)")


def ref_attention(q, k, v, causal, window, scale, dtype):
    """One sequence, q (Sq, H, d), k, v (Sk, H_kv, d), in `dtype` throughout
    (float64: the reference; the inputs' dtype: PyTorch's own error). Rows
    that see no key give 0."""
    Sq, H, d = q.shape
    Sk, H_kv = k.shape[0], k.shape[1]
    if Sq == 0:
        return q.new_zeros(q.shape, dtype=dtype)
    if Sk == 0:
        return torch.zeros(Sq, H, v.shape[2], dtype=dtype, device=q.device)
    g = H // H_kv
    qd = q.to(dtype).transpose(0, 1)                                   # (H, Sq, d)
    kd = k.to(dtype).repeat_interleave(g, dim=1).transpose(0, 1)
    vd = v.to(dtype).repeat_interleave(g, dim=1).transpose(0, 1)
    m = flash_op.visible_mask(Sq, Sk, causal, window, device=q.device)
    s = (qd @ kd.transpose(1, 2)) * scale
    s = s.masked_fill(~m, -math.inf)
    p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p.to(dtype), nan=0.0)
    return (p @ vd).transpose(0, 1)                                    # (Sq, H, d)


def err(x, ref):
    return (x.double() - ref.double()).abs().max().item() if x.numel() else 0.0


def rule(name, ours, torch_low, ref, bad):
    """FlashAttention's rule for one tensor: ours within 2 x PyTorch's error (+ a floor)."""
    e, e_pt = err(ours, ref), err(torch_low, ref)
    floor = 1e-5 * max(1.0, ref.abs().max().item() if ref.numel() else 1.0)
    if not e <= 2 * e_pt + floor or math.isnan(e):
        bad.append(f"{name}: err {e:.3g} > 2 x torch {e_pt:.3g} + {floor:.2g}")
    return e, e_pt


def window_tests(gen):
    from flashattn_stages import flash_attention, flash_attn_func
    bad = []
    q, k, v = (torch.randn(2, 300, 4, 64, generator=gen, device=DEV).to(torch.bfloat16) for _ in range(3))
    base = flash_attn_func(q, k, v, window_size=(32, 16))
    for form in ([32, 16], torch.tensor([32, 16]), torch.tensor([32, 16], device=DEV)):
        if not torch.equal(flash_attn_func(q, k, v, window_size=form), base):
            bad.append(f"window_size as {type(form).__name__} differs")
    for win in ((8, 5), (8, -1), (-1, 7), (0, 3)):
        got = flash_attn_func(q, k, v, causal=True, window_size=win)
        want = flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True,
                               window_size=(win[0], 0)).transpose(1, 2)
        if not torch.equal(got, want):
            bad.append(f"causal with window {win} is not right = 0")
    print(f"FAIL fa-window: {'; '.join(bad)}" if bad else
          "PASS fa-window (tuple, list, CPU and CUDA tensors alike; causal with 4 windows = right 0, bitwise)")


def refusal_tests(gen):
    import flashattn_stages as fs
    bad = []
    q = torch.randn(1, 16, 2, 64, device=DEV, dtype=torch.float16)
    qv = q[0]
    cu = torch.tensor([0, 16], dtype=torch.int32, device=DEV)
    calls = {
        "flash_attn_func": lambda **kw: fs.flash_attn_func(q, q, q, **kw),
        "flash_attn_qkvpacked_func": lambda **kw: fs.flash_attn_qkvpacked_func(torch.stack([q] * 3, 2), **kw),
        "flash_attn_kvpacked_func": lambda **kw: fs.flash_attn_kvpacked_func(q, torch.stack([q] * 2, 2), **kw),
        "flash_attn_varlen_func": lambda **kw: fs.flash_attn_varlen_func(qv, qv, qv, cu, cu, 16, 16, **kw),
        "flash_attn_varlen_qkvpacked_func":
            lambda **kw: fs.flash_attn_varlen_qkvpacked_func(torch.stack([qv] * 3, 1), cu, 16, **kw),
        "flash_attn_varlen_kvpacked_func":
            lambda **kw: fs.flash_attn_varlen_kvpacked_func(qv, torch.stack([qv] * 2, 1), cu, cu, 16, 16, **kw),
        "flash_attn_with_kvcache": lambda **kw: fs.flash_attn_with_kvcache(q, q.clone(), q.clone(), **kw),
    }
    n = 0
    for fn, call in calls.items():
        for arg, kw in (("dropout_p", {"dropout_p": 0.1}), ("softcap", {"softcap": 30.0}),
                        ("alibi_slopes", {"alibi_slopes": torch.ones(2, device=DEV)})):
            if fn == "flash_attn_with_kvcache" and arg == "dropout_p":
                continue   # FlashAttention's kvcache call has no dropout
            n += 1
            try:
                call(**kw)
                bad.append(f"{fn}({arg}): accepted")
            except ValueError as e:
                s = str(e)
                if "\n" in s or not s.startswith(fn + ":") or arg not in s:
                    bad.append(f"{fn}({arg}): {s!r}")
    print(f"FAIL fa-refusals: {'; '.join(bad)}" if bad else
          f"PASS fa-refusals ({n} calls: one line naming the function and the argument)")


def _packed(gen, lens_q, lens_k, H, H_kv, d, dtype):
    tq, tk = sum(lens_q), sum(lens_k)
    q = torch.randn(tq, H, d, generator=gen, device=DEV).to(dtype).requires_grad_()
    k = torch.randn(tk, H_kv, d, generator=gen, device=DEV).to(dtype).requires_grad_()
    v = torch.randn(tk, H_kv, d, generator=gen, device=DEV).to(dtype).requires_grad_()
    cq = torch.tensor([0] + [sum(lens_q[:i + 1]) for i in range(len(lens_q))], dtype=torch.int32, device=DEV)
    ck = torch.tensor([0] + [sum(lens_k[:i + 1]) for i in range(len(lens_k))], dtype=torch.int32, device=DEV)
    return q, k, v, cq, ck


def _ref_varlen(q, k, v, cq, ck, causal, window, scale, dtype):
    """The packed problem per sequence in `dtype`, with gradients (leaves are copies)."""
    cqs, cks = cq.tolist(), ck.tolist()
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    outs = [ref_attention(leaves[0][cqs[b]:cqs[b + 1]], leaves[1][cks[b]:cks[b + 1]],
                          leaves[2][cks[b]:cks[b + 1]], causal, window, scale, dtype)
            for b in range(len(cqs) - 1)]
    return torch.cat(outs, 0), leaves


def varlen_dims_tests(gen):
    from flashattn_stages import (flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                                  flash_attn_varlen_qkvpacked_func)
    bad, n, worst = [], 0, 0.0
    lens_q, lens_k = [70, 1, 0, 129, 33], [90, 5, 3, 129, 0]
    for d in (32, 40, 59, 80, 96, 160, 256):
        for dtype in (torch.float16, torch.bfloat16):
            for causal, window, H, H_kv, form in ((False, (-1, -1), 4, 4, "plain"), (True, (-1, -1), 4, 2, "kv"),
                                                  (False, (24, 8), 2, 1, "plain"), (True, (-1, -1), 2, 2, "qkv")):
                lq, lk = (lens_q, lens_q) if form == "qkv" else (lens_q, lens_k)
                q, k, v, cq, ck = _packed(gen, lq, lk, H, H_kv, d, dtype)
                scale = 1.0 / math.sqrt(d)
                if form == "qkv":
                    qkv = torch.stack([q, k, v], 1).detach().requires_grad_()
                    out = flash_attn_varlen_qkvpacked_func(qkv, cq, max(lq), causal=causal, window_size=window)
                elif form == "kv":
                    kv = torch.stack([k, v], 1).detach().requires_grad_()
                    out = flash_attn_varlen_kvpacked_func(q, kv, cq, ck, max(lq), max(lk), causal=causal,
                                                          window_size=window)
                else:
                    out = flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=causal,
                                                 window_size=window)
                do = torch.randn(out.shape, generator=gen, device=DEV).to(dtype)
                out.backward(do)
                if form == "qkv":
                    grads = [qkv.grad[:, 0], qkv.grad[:, 1], qkv.grad[:, 2]]
                elif form == "kv":
                    grads = [q.grad, kv.grad[:, 0], kv.grad[:, 1]]
                else:
                    grads = [q.grad, k.grad, v.grad]
                ref, lr = _ref_varlen(q, k, v, cq, ck, causal, window, scale, torch.float64)
                ref.backward(do.double())
                pt, lp = _ref_varlen(q, k, v, cq, ck, causal, window, scale, dtype)
                pt.backward(do)
                label = f"d {d} {str(dtype)[6:]} {form} causal {causal} window {window}"
                case_bad = []
                e, _ = rule(f"{label} out", out, pt, ref, case_bad)
                worst = max(worst, e)
                for nm, g, gr, gp in zip(("dQ", "dK", "dV"), grads, lr, lp):
                    rule(f"{label} {nm}", g, gp.grad, gr.grad, case_bad)
                bad += case_bad
                n += 1
    print(f"FAIL fa-varlen-dims: {'; '.join(bad[:6])} [seed {SEED}]" if bad else
          f"PASS fa-varlen-dims ({n} cases, d 32-256, out and dQ dK dV within FlashAttention's rule; "
          f"worst out err {worst:.3g})")


def varlen_paged_tests(gen):
    from flashattn_stages import flash_attn_varlen_func
    bad, n = [], 0
    for page, d, dtype, causal in ((256, 64, torch.bfloat16, True), (64, 128, torch.float16, False),
                                   (16, 80, torch.bfloat16, True)):
        lens_q, lens_k = [40, 1, 200, 0], [300, 17, 512, 9]
        H, H_kv, B = 4, 2, 4
        pps = max((x + page - 1) // page for x in lens_k)
        num_pages = B * pps + 5
        q = torch.randn(sum(lens_q), H, d, generator=gen, device=DEV).to(dtype)
        kc = torch.randn(num_pages, page, H_kv, d, generator=gen, device=DEV).to(dtype)
        vc = torch.randn(num_pages, page, H_kv, d, generator=gen, device=DEV).to(dtype)
        table = torch.randperm(num_pages, generator=gen, device=DEV)[:B * pps].view(B, pps).to(torch.int32)
        cq = torch.tensor([0, 40, 41, 241, 241], dtype=torch.int32, device=DEV)
        ck = torch.tensor([0, 300, 317, 829, 838], dtype=torch.int32, device=DEV)
        out = flash_attn_varlen_func(q, kc, vc, cq, ck, 200, 512, causal=causal, block_table=table)
        ks, vs = [], []
        for b in range(B):
            rows = torch.cat([kc[table[b, j]] for j in range(pps)])[:lens_k[b]]
            ks.append(rows)
            vs.append(torch.cat([vc[table[b, j]] for j in range(pps)])[:lens_k[b]])
        kd, vd = torch.cat(ks), torch.cat(vs)
        want = flash_attn_varlen_func(q, kd, vd, cq, ck, 200, 512, causal=causal)
        ref, _ = _ref_varlen(q, kd, vd, cq, ck, causal, (-1, -1), 1 / math.sqrt(d), torch.float64)
        pt, _ = _ref_varlen(q, kd, vd, cq, ck, causal, (-1, -1), 1 / math.sqrt(d), dtype)
        if not torch.equal(out, want):
            bad.append(f"page {page} d {d}: differs from the same keys packed")
        rule(f"page {page} d {d}", out, pt, ref, bad)
        n += 1
    print(f"FAIL fa-varlen-paged: {'; '.join(bad)} [seed {SEED}]" if bad else
          f"PASS fa-varlen-paged ({n} caches, pages of 256, 64, 16 shuffled: bitwise = the keys packed, "
          "and within FlashAttention's rule)")


def ref_rotary(x, cos, sin, pos, interleaved):
    """x (S, heads, d) rotated at positions pos (S,), in float64, rounded once to x's dtype."""
    half = cos.shape[1]
    if half == 0:
        return x.clone()
    i1 = torch.arange(0, 2 * half, 2) if interleaved else torch.arange(half)
    i2 = i1 + 1 if interleaved else i1 + half
    out = x.double().clone()
    c = cos.double()[pos][:, None, :]
    s = sin.double()[pos][:, None, :]
    x1, x2 = out[..., i1].clone(), out[..., i2].clone()
    out[..., i1] = x1 * c - x2 * s
    out[..., i2] = x1 * s + x2 * c
    return out.to(x.dtype)


# name: (B, H, H_kv, seqlen_q, cache, d, paged page, new keys, rotary fraction, interleaved,
#        leftpad, batch_idx, causal, window, dtype)
KV_CASES = [
    ("append-d64-causal", 3, 6, 6, 1, 256, 64, None, 1, 0.0, True, False, False, True, (-1, -1), "fp16"),
    ("append-rotary-inter", 2, 6, 3, 4, 339, 128, None, 4, 1.0, True, False, False, True, (-1, -1), "fp16"),
    ("append-rotary-half-neox", 2, 6, 1, 3, 1024, 64, None, 2, 0.5, False, False, False, False, (-1, -1), "bf16"),
    ("rotary-noncausal-full", 2, 4, 4, 5, 200, 128, None, 5, 1.0, False, False, False, False, (-1, -1), "fp16"),
    ("paged256-append-rotary", 2, 6, 3, 3, 800, 128, 256, 3, 0.5, True, False, False, True, (-1, -1), "bf16"),
    ("paged512-d80", 2, 6, 6, 2, 700, 80, 512, 2, 0.0, True, False, False, False, (100, 20), "fp16"),
    ("leftpad", 2, 6, 3, 1, 300, 64, None, 1, 1.0, False, True, False, True, (-1, -1), "fp16"),
    ("batch-idx", 2, 6, 6, 2, 160, 128, None, 2, 0.0, True, True, True, True, (-1, -1), "bf16"),
    ("seqlen-q-64", 2, 6, 3, 64, 800, 64, None, 64, 0.5, True, False, False, True, (-1, -1), "fp16"),
    ("seqlen-q-128-window", 1, 4, 2, 128, 300, 128, None, 0, 0.0, True, False, False, True, (50, 0), "bf16"),
    ("d32-no-append", 2, 6, 1, 3, 799, 32, None, 0, 0.0, True, False, False, False, (-1, -1), "fp16"),
    ("d59", 2, 6, 3, 1, 128, 59, None, 1, 0.0, True, False, False, True, (-1, -1), "fp16"),
    ("d256-local", 2, 6, 6, 3, 500, 256, None, 3, 1.0, True, False, False, False, (30, 10), "bf16"),
]


def kvcache_case(gen, case):
    from flashattn_stages import flash_attn_with_kvcache
    (name, B, H, H_kv, Sq, S, d, page, S_new, frac, inter, leftpad, batch_idx, causal, window, dt) = case
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    B_cache = 2 * B if batch_idx else B
    rd = int(frac * d) // 16 * 16
    q = torch.randn(B, Sq, H, d, generator=gen, device=DEV).to(dtype)
    k = torch.randn(B, S_new, H_kv, d, generator=gen, device=DEV).to(dtype) if S_new else None
    v = torch.randn(B, S_new, H_kv, d, generator=gen, device=DEV).to(dtype) if S_new else None
    if page:
        pps = (S + page - 1) // page
        num_pages = B * pps * 2
        kc = torch.randn(num_pages, page, H_kv, d, generator=gen, device=DEV).to(dtype)
        vc = torch.randn(num_pages, page, H_kv, d, generator=gen, device=DEV).to(dtype)
        table = torch.randperm(num_pages, generator=gen, device=DEV)[:B * pps].view(B, pps).to(torch.int32)

        def dense(c):
            return c[table.long().flatten()].view(B, pps * page, H_kv, d)[:, :S]
    else:
        kc = torch.randn(B_cache, S, H_kv, d, generator=gen, device=DEV).to(dtype)
        vc = torch.randn(B_cache, S, H_kv, d, generator=gen, device=DEV).to(dtype)
        table = None
    lens = torch.randint(0 if S_new else 1, S - S_new + 1, (B,), generator=gen, device=DEV).to(torch.int32)
    pad = torch.stack([torch.randint(0, max(int(x), 1), (1,), generator=gen, device=DEV)[0] for x in lens]) \
        .to(torch.int32) if leftpad else None
    idx = torch.randperm(B_cache, generator=gen, device=DEV)[:B].to(torch.int32) if batch_idx else None
    if rd:
        angle = torch.rand(S + Sq, rd // 2, generator=gen, device=DEV) * 2 * math.pi
        cos, sin = torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)
    else:
        cos = sin = None
    before_k = dense(kc).clone() if page else kc[idx.long()].clone() if batch_idx else kc.clone()
    before_v = dense(vc).clone() if page else vc[idx.long()].clone() if batch_idx else vc.clone()
    out, lse = flash_attn_with_kvcache(q, kc, vc, k, v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=lens,
                                       cache_batch_idx=idx, cache_leftpad=pad, block_table=table, causal=causal,
                                       window_size=window, rotary_interleaved=inter, return_softmax_lse=True)
    after_k = dense(kc) if page else kc[idx.long()] if batch_idx else kc
    after_v = dense(vc) if page else vc[idx.long()] if batch_idx else vc
    bad = []
    want_k, want_v = before_k.clone(), before_v.clone()
    q_ro = q.clone()
    for b in range(B):
        L = int(lens[b])
        pos_k = torch.arange(L, L + S_new)
        if S_new:
            want_k[b, L:L + S_new] = ref_rotary(k[b], cos, sin, pos_k, inter) if rd else k[b]
            want_v[b, L:L + S_new] = v[b]
        if rd:
            per_row = causal or window != (-1, -1)
            pos_q = torch.arange(L, L + Sq) if per_row else torch.full((Sq,), L)
            q_ro[b] = ref_rotary(q[b], cos, sin, pos_q, inter)
    if not torch.allclose(after_k.float(), want_k.float(), atol=1e-3, rtol=1e-3):
        bad.append("k_cache after the call differs")
    if not torch.equal(after_v, want_v):
        bad.append("v_cache after the call differs")
    scale = 1 / math.sqrt(d)
    outs = {torch.float64: [], dtype: []}
    for b in range(B):
        lo, hi = (int(pad[b]) if leftpad else 0), int(lens[b]) + S_new
        for dt_ in outs:
            outs[dt_].append(ref_attention(q_ro[b], want_k[b, lo:hi], want_v[b, lo:hi], causal, window, scale, dt_))
    ref, pt = torch.stack(outs[torch.float64]), torch.stack(outs[dtype])
    e, e_pt = rule(name, out, pt, ref, bad)
    if torch.isnan(out).any() or torch.isnan(lse).any() or lse.shape != (B, H, Sq):
        bad.append(f"NaN in out or lse, or lse {tuple(lse.shape)}")
    return bad, e, e_pt


def kvcache_tests(gen):
    bad, n = [], 0
    for case in KV_CASES:
        try:
            b, e, e_pt = kvcache_case(gen, case)
            bad += [f"{case[0]}: {m}" for m in b]
        except Exception as ex:  # noqa: BLE001  (one FAIL naming the case, never a traceback alone)
            traceback.print_exc()
            bad.append(f"{case[0]}: {type(ex).__name__}: {str(ex).splitlines()[0][:160]}")
        n += 1
    print(f"FAIL fa-kvcache: {'; '.join(bad[:6])} [seed {SEED}]" if bad else
          f"PASS fa-kvcache ({n} cases: appends paged and not, rotary, leftpad, batch index, seqlen_q to 128, "
          "d 32-256; caches and out within FlashAttention's rule)")


def main():
    signature_tests()
    if not torch.cuda.is_available():
        skips.skip_all(GROUPS[1:], "no CUDA GPU")
    if not os.path.exists(flashattn_stages.fa.library_path()):
        skips.skip_all(GROUPS[1:], "build/libfa_gpu.so is not built (make build/libfa_gpu.so)")
    print(f"test_fa_interface_op: seed {SEED} (FA_SEED={SEED} replays)")
    gen = torch.Generator(device=DEV)
    gen.manual_seed(SEED)
    for name, fn in (("fa-window", window_tests), ("fa-refusals", refusal_tests),
                     ("fa-varlen-dims", varlen_dims_tests), ("fa-varlen-paged", varlen_paged_tests),
                     ("fa-kvcache", kvcache_tests)):
        try:
            fn(gen)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            print(f"FAIL {name}: {type(e).__name__}: {str(e).splitlines()[0][:200]} [seed {SEED}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
