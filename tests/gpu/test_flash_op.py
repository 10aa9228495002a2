#!/usr/bin/env python3
"""tests/gpu/test_flash_op.py -- the PyTorch op (python/flashattn_stages/flash_op.py) against PyTorch's attention.

One line per test in the protocol of tests/run.sh (PASS / FAIL: why / SKIP: why).
Part of `make test` and `make gpu-test` (kernels/gpu.mk); SKIP lines, never
PASS, where torch, a CUDA GPU or build/libfa_gpu.so is missing.

What it checks, on fresh random inputs (the seed is printed; FA_SEED=N replays):
  flash_op-grad CASE DTYPE fwd vF bwd vB
      for every problem of CASES (full, causal, windows, seqlen_q != seqlen_k
      both ways, rows that see no key, grouped and multi-query heads, d 32
      to 128, a non-default softmax_scale), in fp32, fp16 and bf16, every
      forward version of the table that runs it (with the best backward) and
      every other backward version (with the best forward): O, L, dQ, dK, dV
      of the op against SDPA's math backend in float64 on the same inputs
      (rounded to the dtype), with the mask given to SDPA as a boolean
      attn_mask read from core/mask.h (flash_op.visible_mask: nothing here
      spells the rule). Error = max |x - ref| / max |ref| per tensor.
        fp32        O, dQ, dK, dV, L <= 1e-5 (L: / max(1, max |L_ref|))
        fp16, bf16  O, dQ, dK, dV <= 2 x the error of PyTorch's own fused
                    kernel in the same dtype on the same inputs (the first of
                    SDPA flash, cuDNN, memory-efficient that takes the
                    problem), or eps/2 where that is smaller (a correctly
                    rounded result: eps = 2^-10 fp16, 2^-7 bf16);
                    L <= eps x max(1, max |L_ref|) (L is fp32, from scores
                    that version 0 rounds to the dtype)
        every dtype no NaN/inf; a row that sees no key has O = 0, L = -inf
                    and dQ = 0 exactly; a key that no query sees has dK =
                    dV = 0 exactly. Outputs are poisoned (NaN) before each call.
  flash_op-deterministic DTYPE bwd vB
      deterministic=True: dQ, dK, dV bitwise equal over 5 calls.
  flash_op-noncontiguous, -stream, -autocast, -no-grad
      strided inputs, a side stream, torch.autocast(bf16) over fp32 leaves,
      and torch.no_grad() give the same O as the plain call.
  flash_op-errors
      bad calls raise a ValueError of one line starting "flash_attention:".
  flash_op-op-path
      the registered operators (torch.ops, what torch.compile calls) and the
      eager path give O, L, dQ, dK, dV bitwise equal (deterministic mode).
  flash_op-compile CASE
      torch.compile(fullgraph=True) (a graph break is an error) of the op
      alone (causal, GQA, through flash_attn_func): O, L, dQ, dK, dV
      bitwise equal to eager in deterministic mode; of a small model with
      linear layers around the op: runs with no graph break, O and the
      gradients within bf16 rounding of eager (whether bitwise is noted).
  flash_op-graph
      CUDA graph capture of forward and backward, replayed on two fresh
      inputs copied in: O and the gradients bitwise equal to eager calls.
  flash_op-strided, flash_op-packed
      (B, S, H, d) views (also GQA with seqlen_q != seqlen_k, causal, and
      accurate_dq, whose pre-pass reads Q and K through their strides: also
      within 4 eps of the uncentered gradients) and
      the three slices of one packed (B, S, 3, H, d) QKV tensor: O, L and
      the gradients bitwise equal to contiguous copies of the same inputs;
      the note says whether the forward read the strides (no copy).
  flash_op-empty
      seqlen_q = 0: empty O and L; seqlen_k = 0: O = 0, L = -inf, dQ = 0;
      B = 0; none reaches the library (its entry is replaced by one that
      fails, for the check).
  flash_op-stream-value
      the stream handed to the library is torch.cuda.current_stream()'s
      cuda_stream, on the default and on a side stream.
  flash_op-flash-attn-func
      flash_attn_func (B, S, H, d) against flash_attention on the transposed
      tensors, bitwise (full, causal with seqlen_q != seqlen_k, window,
      GQA, return_lse, return_attn_probs), qkvpacked and kvpacked likewise;
      dropout_p, softcap and alibi_slopes refused with one line.
  flash_op-installed
      pip install --no-build-isolation --no-deps --target TMP . (the
      package, its library inside), then from /tmp with only TMP on the
      path: the package imports, loads its own library, and its O on seeded
      inputs is bitwise the repository op's.
FA_OP_PARTS=name,name (the functions of main's list, e.g. compile_tests)
runs only those parts (the skipped groups print nothing).
Cost on an H200: about two minutes (most of it torch.compile and pip).
"""
import ctypes
import math
import os
import sys
import time
import traceback
import warnings

import skips   # tests/gpu/, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEV = "cuda"
GROUPS = ["flash_op-errors", "flash_op-grad", "flash_op-deterministic", "flash_op-noncontiguous",
          "flash_op-stream", "flash_op-autocast", "flash_op-no-grad", "flash_op-op-path",
          "flash_op-compile", "flash_op-graph", "flash_op-strided", "flash_op-packed",
          "flash_op-empty", "flash_op-stream-value", "flash_op-flash-attn-func",
          "flash_op-installed"]
PLUMBING = GROUPS[3:7]


def skip_all(why, groups=GROUPS):
    skips.skip_all(groups, why)


torch = skips.need_torch(GROUPS)
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from flashattn_stages import dispatch, flash_op  # noqa: E402
from flashattn_stages.flash_op import fa, flash_attention  # noqa: E402
from flashattn_stages.flash_attn_interface import (flash_attn_func, flash_attn_kvpacked_func,  # noqa: E402
                                  flash_attn_qkvpacked_func)

# name: (B, H, H_kv, seqlen_q, seqlen_k, d, causal, window_size, softmax_scale)
CASES = {
    "full":            (2, 4, 4, 256, 256, 64, False, (-1, -1), None),
    "full-n113-d128":  (1, 3, 3, 113, 113, 128, False, (-1, -1), None),
    "full-n1-d32":     (2, 2, 2, 1, 1, 32, False, (-1, -1), None),
    "full-n17-scale":  (1, 2, 2, 17, 17, 64, False, (-1, -1), 0.3),
    "causal":          (2, 4, 4, 256, 256, 64, True, (-1, -1), None),
    "causal-sq<sk":    (1, 4, 4, 100, 257, 64, True, (-1, -1), None),
    "causal-sq>sk":    (1, 4, 4, 300, 129, 64, True, (-1, -1), None),   # 171 rows see no key
    "window":          (2, 2, 2, 256, 256, 64, False, (32, 16), None),
    "causal-window":   (1, 4, 4, 384, 384, 64, True, (63, -1), None),
    "window-sq<sk":    (1, 2, 2, 200, 333, 64, False, (20, 40), None),  # keys nobody sees
    "gqa-causal":      (2, 8, 2, 256, 256, 64, True, (-1, -1), None),
    "mqa-sq<sk":       (1, 8, 1, 128, 200, 64, False, (-1, -1), None),
    "gqa-window-d128": (1, 6, 3, 160, 160, 128, False, (31, 31), None),
}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
EPS = {"fp16": 2.0 ** -10, "bf16": 2.0 ** -7}
PEERS = [("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
         ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION)]


def rel_err(x, ref):
    """max |x - ref| / max |ref| in float64; inf when x has a non-finite entry."""
    x = x.double()
    if not torch.isfinite(x).all():
        return math.inf
    scale = ref.abs().max().item()
    d = (x - ref).abs().max().item() if x.numel() else 0.0
    return d / scale if scale > 0 else d


def lse_err(L, ref):
    """L's error on the rows that see a key, / max(1, max |L_ref|); inf when a
    row's -inf does not match or a finite row is not finite."""
    fin = torch.isfinite(ref)
    if not torch.equal(torch.isneginf(L), ~fin) or not torch.isfinite(L[fin]).all():
        return math.inf
    if not fin.any():
        return 0.0
    return (L[fin].double() - ref[fin]).abs().max().item() / max(1.0, ref[fin].abs().max().item())


class Problem:
    """One case's inputs in a dtype, its mask (from core/mask.h) and the fp64 reference."""

    def __init__(self, case, dtype, gen):
        B, H, H_kv, Sq, Sk, d, causal, window, scale = CASES[case]
        self.causal, self.window, self.scale = causal, window, scale
        self.group = H // H_kv
        dev = DEV
        self.q = torch.randn(B, H, Sq, d, generator=gen, device=dev).to(dtype)
        self.k = torch.randn(B, H_kv, Sk, d, generator=gen, device=dev).to(dtype)
        self.v = torch.randn(B, H_kv, Sk, d, generator=gen, device=dev).to(dtype)
        self.do = torch.randn(B, H, Sq, d, generator=gen, device=dev).to(dtype)
        left, right = flash_op.window_of(causal, window)
        self.masked = left >= 0 or right >= 0
        mask = flash_op.visible_mask(Sq, Sk, causal, window, device=dev)
        self.empty_rows = ~mask.any(dim=1)    # queries that see no key
        self.unseen_keys = ~mask.any(dim=0)   # keys no query sees
        # SDPA's softmax of a row with no visible key is 0/0. The convention
        # (O = 0, zero gradients) is what one gets by letting such a row see
        # every key and giving it dO = 0: O's row is then constant in Q, K, V.
        self.sdpa_mask = mask | self.empty_rows[:, None] if self.masked else None
        self.do_ref = self.do.masked_fill(self.empty_rows[None, None, :, None], 0)
        # Causal with seqlen_q == seqlen_k: top-left and bottom-right agree,
        # so SDPA's is_causal (which every fused backend takes) is the same mask.
        self.sdpa_causal = causal and left < 0 and Sq == Sk
        self.mask = mask
        self.reference()

    def sdpa(self, q, k, v, expand):
        kw = {"scale": self.scale}
        if self.sdpa_causal:
            kw["is_causal"] = True
        elif self.masked:
            kw["attn_mask"] = self.sdpa_mask
        if self.group > 1:
            if expand:
                k, v = k.repeat_interleave(self.group, 1), v.repeat_interleave(self.group, 1)
            else:
                kw["enable_gqa"] = True
        return F.scaled_dot_product_attention(q, k, v, **kw)

    def reference(self):
        q, k, v = (t.double().requires_grad_() for t in (self.q, self.k, self.v))
        with sdpa_kernel([SDPBackend.MATH]):
            o = self.sdpa(q, k, v, expand=True)
        o.backward(self.do_ref.double())
        o = o.detach().masked_fill(self.empty_rows[None, None, :, None], 0)
        kk = k.detach().repeat_interleave(self.group, 1)
        s = (q.detach() @ kk.transpose(-1, -2)) * (self.scale or 1.0 / math.sqrt(q.shape[-1]))
        L = torch.logsumexp(s.masked_fill(~self.mask, -math.inf), dim=-1)
        self.ref = {"O": o, "L": L, "dQ": q.grad, "dK": k.grad, "dV": v.grad}

    def peer(self):
        """(name, {O, dQ, dK, dV} errors) of the first fused SDPA backend that
        takes the problem in this dtype, or (None, why)."""
        why = []
        for name, backend in PEERS:
            for expand in ([False, True] if self.group > 1 else [False]):
                q, k, v = (t.detach().clone().requires_grad_() for t in (self.q, self.k, self.v))
                try:
                    with warnings.catch_warnings(), sdpa_kernel([backend]):
                        warnings.simplefilter("ignore")
                        o = self.sdpa(q, k, v, expand)
                        o.backward(self.do_ref)
                    torch.cuda.synchronize()
                except RuntimeError as e:
                    why.append(f"{name}{' expanded' if expand else ''}: {str(e).splitlines()[0][:60]}")
                    continue
                return name + (" (k, v expanded)" if expand else ""), self.errors(o, q, k, v)
        return None, "; ".join(why)

    def materialized(self):
        """The errors of PyTorch's materialized attention in the dtype
        (softmax(Q K^T scale) V as three torch ops, S and P stored in the
        dtype): the peer of our materialized version 0."""
        q, k, v = (t.detach().clone().requires_grad_() for t in (self.q, self.k, self.v))
        kk, vv = k.repeat_interleave(self.group, 1), v.repeat_interleave(self.group, 1)
        s = (q @ kk.transpose(-1, -2)) * (self.scale or 1.0 / math.sqrt(q.shape[-1]))
        if self.sdpa_mask is not None:
            s = s.masked_fill(~self.sdpa_mask, -math.inf)
        o = torch.softmax(s, dim=-1) @ vv
        o.backward(self.do_ref)
        return "torch_materialized", self.errors(o, q, k, v)

    def errors(self, o, q, k, v):
        o = o.detach().masked_fill(self.empty_rows[None, None, :, None], 0)
        return {"O": rel_err(o, self.ref["O"]), "dQ": rel_err(q.grad, self.ref["dQ"]),
                "dK": rel_err(k.grad, self.ref["dK"]), "dV": rel_err(v.grad, self.ref["dV"])}

    def ours(self, version, deterministic=False, grad=True):
        q, k, v = (t.detach().clone().requires_grad_(grad) for t in (self.q, self.k, self.v))
        o, L = flash_attention(q, k, v, causal=self.causal, window_size=self.window,
                               softmax_scale=self.scale, version=version,
                               deterministic=deterministic, return_lse=True)
        out = {"O": o.detach(), "L": L}
        if grad:
            o.backward(self.do)   # the real dO: rows that see no key must ignore it
            out.update(dQ=q.grad, dK=k.grad, dV=v.grad)
        torch.cuda.synchronize()
        return out


def versions_for(pass_, dtype, p):
    lib = fa.library()
    ok, why = [], []
    for row in fa.versions(lib, pass_):
        if lib.fa_check_supported(pass_, row.version, flash_op.DTYPE_CODES[dtype],
                                  ctypes.byref(p)) == fa.OK:
            ok.append(row.version)
        else:
            why.append(f"{row.name.decode()}: {lib.fa_error_string().decode()}")
    return ok, "; ".join(why) or "the library has no such version"


def check(prob, got, dt, peers):
    """The failures of one call (a list of strings) and a summary of its errors.
    peers: {"O": (name, errors), "grad": (name, errors)}, the PyTorch path each
    output is held to (fused for a tiled version, materialized for version 0);
    name None where no such path ran."""
    bad, parts = [], []
    ref = prob.ref
    for key in [k for k in ("O", "dQ", "dK", "dV") if k in got]:
        e = rel_err(got[key], ref[key])
        pname, perr = peers["O" if key == "O" else "grad"]
        if dt == "fp32":
            limit, shown = 1e-5, ""
        elif pname:
            limit, shown = max(2 * perr[key], EPS[dt] / 2), f" ({pname} {perr[key]:.2e})"
        else:
            limit, shown = EPS[dt] / 2, " (no peer: eps/2)"
        parts.append(f"{key} {e:.2e}{shown}")
        if not e <= limit:
            bad.append(f"{key} error {e:.3g} > {limit:.3g}")
    eL = lse_err(got["L"], ref["L"])
    limitL = 1e-5 if dt == "fp32" else EPS[dt]
    parts.append(f"L {eL:.1e}")
    if not eL <= limitL:
        bad.append(f"L error {eL:.3g} > {limitL:.3g} (or its -inf rows differ)")
    er = prob.empty_rows
    if er.any():
        if not (got["O"][:, :, er] == 0).all():
            bad.append("O is not 0 on rows that see no key")
        if "dQ" in got and not (got["dQ"][:, :, er] == 0).all():
            bad.append("dQ is not 0 on rows that see no key")
    uk = prob.unseen_keys
    if "dK" in got and uk.any():
        if not ((got["dK"][:, :, uk] == 0).all() and (got["dV"][:, :, uk] == 0).all()):
            bad.append("dK or dV is not 0 on keys no query sees")
    return bad, ", ".join(parts)


def grad_tests(gen):
    for case in CASES:
        for dt, dtype in DTYPES.items():
            prob = Problem(case, dtype, gen)
            p = flash_op.problem(prob.q, prob.k, prob.causal, prob.window, prob.scale)
            fwds, why_f = versions_for(fa.FORWARD, dtype, p)
            bwds, why_b = versions_for(fa.BACKWARD, dtype, p)
            name = f"flash_op-grad {case} {dt}"
            if not fwds:
                print(f"SKIP {name}: no forward version runs it ({why_f})")
                continue
            fused = prob.peer() if dt != "fp32" else (None, "")
            if dt != "fp32" and not fused[0]:
                print(f"# {name}: no fused SDPA backend takes it ({fused[1]}); bound eps/2")
            mat = prob.materialized() if dt != "fp32" else (None, "")
            lib = fa.library()

            def peer_of(pass_, version):   # like with like: tiled vs fused, materialized vs materialized
                return fused if lib.fa_block_rows(pass_, version, p.d) > 0 else mat

            runs = [(f, max(bwds) if bwds else None) for f in fwds]
            runs += [(max(fwds), b) for b in bwds if b != max(bwds)]
            for f, b in runs:
                label = f"{name} fwd v{f}" + (f" bwd v{b}" if b is not None else "")
                try:
                    got = prob.ours((f, b), grad=b is not None)
                except Exception as e:  # noqa: BLE001 (report any failure as one line)
                    print(f"FAIL {label}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                    continue
                # The gradients inherit the forward's O (through D = rowsum(dO * O)):
                # a materialized forward or backward makes the pair materialized.
                grad_peer = (None, "")
                if b is not None:
                    grad_peer = fused if peer_of(fa.FORWARD, f) is fused and peer_of(fa.BACKWARD, b) is fused else mat
                peers = {"O": peer_of(fa.FORWARD, f), "grad": grad_peer}
                bad, summary = check(prob, got, dt, peers)
                print(f"FAIL {label}: {'; '.join(bad)} ({summary})" if bad else f"PASS {label} ({summary})")
            if not bwds:
                print(f"SKIP {name} backward: no backward version runs it ({why_b})")


def deterministic_tests(gen):
    lib = fa.library()
    det = [r.version for r in fa.versions(lib, fa.BACKWARD) if r.deterministic]
    if not det:
        print("SKIP flash_op-deterministic: no backward version has a deterministic mode")
        return
    for dt in DTYPES:
        prob = Problem("gqa-causal", DTYPES[dt], gen)
        p = flash_op.problem(prob.q, prob.k, prob.causal, prob.window, prob.scale)
        fwds, _ = versions_for(fa.FORWARD, DTYPES[dt], p)
        bwds, why = versions_for(fa.BACKWARD, DTYPES[dt], p)
        runnable = [b for b in det if b in bwds] if fwds else []
        if not runnable:
            print(f"SKIP flash_op-deterministic gqa-causal {dt}: no deterministic backward version "
                  f"runs it ({why})")
        for b in runnable:
            name = f"flash_op-deterministic gqa-causal {dt} bwd v{b}"
            try:
                runs = [prob.ours((max(fwds), b), deterministic=True) for _ in range(5)]
            except Exception as e:  # noqa: BLE001
                print(f"FAIL {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                continue
            same = all(torch.equal(r[t], runs[0][t]) for r in runs[1:] for t in ("dQ", "dK", "dV"))
            print(f"PASS {name} (5 calls bitwise equal)" if same else
                  f"FAIL {name}: dQ, dK or dV differ between calls with deterministic=True")


def plumbing_tests(gen):
    dtype = torch.bfloat16
    # the plainest problem (no mask, H_kv = H), so that these run on any table
    B, H, H_kv, S, d = 2, 4, 4, 192, 64
    q = torch.randn(B, S, H, d, generator=gen, device=DEV).to(dtype)
    k = torch.randn(B, S, H_kv, d, generator=gen, device=DEV).to(dtype)
    v = torch.randn(B, S, H_kv, d, generator=gen, device=DEV).to(dtype)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))   # (B, H, S, d) views, strided
    try:
        base = flash_attention(qt.contiguous(), kt.contiguous(), vt.contiguous())
    except ValueError as e:
        for g in PLUMBING:
            print(f"SKIP {g}: {e}")
        return

    def same(name, o, note):
        if o.dtype == base.dtype and torch.equal(o, base):
            print(f"PASS {name} ({note})")
        else:
            print(f"FAIL {name}: O differs from the plain call ({note})")

    same("flash_op-noncontiguous", flash_attention(qt, kt, vt), "transposed views")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        o = flash_attention(qt, kt, vt)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    same("flash_op-stream", o, "on a side stream")
    leaves = [t.float().requires_grad_() for t in (qt, kt, vt)]
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            o = flash_attention(*leaves)
        o.float().sum().backward()
    except ValueError as e:   # e.g. no backward version for this problem
        print(f"SKIP flash_op-autocast: {e}")
    else:
        if all(t.grad is not None and t.grad.dtype == torch.float32 and torch.isfinite(t.grad).all()
               for t in leaves):
            same("flash_op-autocast", o.detach(), "fp32 leaves under autocast(bf16): bf16 O, fp32 grads")
        else:
            print("FAIL flash_op-autocast: the fp32 leaves got no finite fp32 gradient")
    with torch.no_grad():
        o = flash_attention(*[t.detach().requires_grad_() for t in (qt, kt, vt)])
    if o.requires_grad:
        print("FAIL flash_op-no-grad: O requires grad under torch.no_grad()")
    else:
        same("flash_op-no-grad", o, "under torch.no_grad(), inputs that require grad")


# ---------------------------------------------------------------------------
# The op as a library: operators, compile, graphs, strides, empty, the package
# ---------------------------------------------------------------------------
def _run_grads(fn, q, k, v, do):
    """O, L and dQ, dK, dV of fn(q, k, v) -> (o, L) on fresh leaves, dO given."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o, L = fn(q, k, v)
    o.backward(do)
    torch.cuda.synchronize()
    return {"O": o.detach(), "L": L.detach(), "dQ": q.grad, "dK": k.grad, "dV": v.grad}


def _diff(a, b, keys=("O", "L", "dQ", "dK", "dV")):
    """The names of the tensors of a and b that are not bitwise equal."""
    return [t for t in keys if t in a and not (a[t].shape == b[t].shape and torch.equal(a[t], b[t]))]


def _inputs(gen, B, H, H_kv, Sq, Sk, d, dtype=torch.bfloat16):
    mk = lambda h, s: torch.randn(B, h, s, d, generator=gen, device=DEV).to(dtype)  # noqa: E731
    return mk(H, Sq), mk(H_kv, Sk), mk(H_kv, Sk), mk(H, Sq)


def _report(name, bad, note):
    print(f"FAIL {name}: {'; '.join(bad)} ({note})" if bad else f"PASS {name} ({note})")


def _det(causal=False, window=(-1, -1)):
    return lambda q, k, v: flash_attention(q, k, v, causal=causal, window_size=window,
                                           deterministic=True, return_lse=True)


def op_path_tests(gen):
    q, k, v, do = _inputs(gen, 2, 8, 2, 200, 300, 64)
    fast = _run_grads(_det(True), q, k, v, do)
    flash_op.eager_fast_path = False
    try:
        slow = _run_grads(_det(True), q, k, v, do)
    finally:
        flash_op.eager_fast_path = True
    _report("flash_op-op-path", [f"{t} differs" for t in _diff(fast, slow)],
            f"torch.ops.{flash_op.NAMESPACE}.fwd/bwd vs the eager path, GQA causal 200 x 300, bf16")


def compile_tests(gen):
    import torch._dynamo
    cases = {"causal": (2, 4, 4, 256, 256, 64, True), "gqa-sq<sk": (1, 8, 2, 100, 257, 64, True),
             "full-d128": (1, 2, 2, 130, 130, 128, False)}
    for case, (B, H, H_kv, Sq, Sk, d, causal) in cases.items():
        q, k, v, do = _inputs(gen, B, H, H_kv, Sq, Sk, d)
        name = f"flash_op-compile {case}"
        try:
            eager = _run_grads(_det(causal), q, k, v, do)
            torch._dynamo.reset()
            comp = _run_grads(torch.compile(_det(causal), fullgraph=True), q, k, v, do)
        except Exception as e:  # noqa: BLE001 (a graph break under fullgraph is an exception)
            print(f"FAIL {name}: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
            continue
        _report(name, [f"{t} differs" for t in _diff(eager, comp)], "fullgraph, deterministic, bitwise")
    # flash_attn_func under compile: (B, S, H, d) in, transposes inside the graph
    q, k, v, do = _inputs(gen, 2, 4, 4, 128, 128, 64)
    qs, ks, vs, dos = (t.transpose(1, 2).contiguous() for t in (q, k, v, do))
    fn = lambda q, k, v: flash_attn_func(q, k, v, causal=True, deterministic=True, return_lse=True)  # noqa: E731
    try:
        eager = _run_grads(fn, qs, ks, vs, dos)
        torch._dynamo.reset()
        comp = _run_grads(torch.compile(fn, fullgraph=True), qs, ks, vs, dos)
        _report("flash_op-compile flash_attn_func", [f"{t} differs" for t in _diff(eager, comp)],
                "fullgraph, (B, S, H, d), deterministic, bitwise")
    except Exception as e:  # noqa: BLE001
        print(f"FAIL flash_op-compile flash_attn_func: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
    # a small model: linear layers around the op, packed QKV as strided views
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen, device=DEV).item()))

    class Attn(torch.nn.Module):
        def __init__(self, D=256, H=4):
            super().__init__()
            self.H, self.qkv, self.proj = H, torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)

        def forward(self, x):
            B, N, D = x.shape
            q, k, v = self.qkv(x).view(B, N, 3, self.H, D // self.H).permute(2, 0, 3, 1, 4)
            y = flash_attention(q, k, v, causal=True, deterministic=True)
            return self.proj(y.transpose(1, 2).reshape(B, N, D))

    model = Attn().to(DEV).to(torch.bfloat16)
    x = torch.randn(4, 192, 256, generator=gen, device=DEV).to(torch.bfloat16)
    dy = torch.randn(4, 192, 256, generator=gen, device=DEV).to(torch.bfloat16)

    def run(m):
        model.zero_grad(set_to_none=True)
        xx = x.clone().requires_grad_()
        y = m(xx)
        y.backward(dy)
        torch.cuda.synchronize()
        return {"O": y.detach(), "dx": xx.grad, **{n: p.grad for n, p in model.named_parameters()}}
    try:
        eager = run(model)
        torch._dynamo.reset()
        comp = run(torch.compile(model, fullgraph=True))
    except Exception as e:  # noqa: BLE001
        print(f"FAIL flash_op-compile model: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
        return
    errs = {t: rel_err(comp[t], eager[t].double()) for t in eager}
    worst = max(errs, key=errs.get)
    bitwise = not _diff(eager, comp, tuple(eager))
    bad = [] if errs[worst] <= 2 * EPS["bf16"] else [f"{worst} off eager by {errs[worst]:.3g} > 2 eps"]
    _report("flash_op-compile model", bad, f"fullgraph, linear + op + linear, bf16: largest "
            f"relative difference {errs[worst]:.2e} ({worst}); bitwise equal: {bitwise}")


def graph_tests(gen):
    q0, k0, v0, do = _inputs(gen, 2, 4, 2, 192, 256, 64)
    q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))

    def step():
        o, L = flash_attention(q, k, v, causal=True, deterministic=True, return_lse=True)
        o.backward(do)
        return o, L
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):   # warm-up off the default stream, as capture wants
        for _ in range(2):
            for t in (q, k, v):
                t.grad = None
            step()
    torch.cuda.current_stream().wait_stream(s)
    for t in (q, k, v):
        t.grad = None
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            o_s, L_s = step()
    except Exception as e:  # noqa: BLE001
        print(f"FAIL flash_op-graph: capture: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
        return
    bad = []
    for trial in range(2):
        nq, nk, nv, _ = _inputs(gen, 2, 4, 2, 192, 256, 64)
        with torch.no_grad():
            q.copy_(nq), k.copy_(nk), v.copy_(nv)
        g.replay()
        torch.cuda.synchronize()
        ref = _run_grads(_det(True), nq, nk, nv, do)
        got = {"O": o_s, "L": L_s, "dQ": q.grad, "dK": k.grad, "dV": v.grad}
        bad += [f"replay {trial}: {t} differs" for t in _diff(got, ref)]
    _report("flash_op-graph", bad, "forward + backward captured, 2 replays on new inputs, bitwise")


def _strided_mode(name, fn, qkv, views, do, other, what, other_what):
    """fn on contiguous q, k, v and on their (B, S, H, d) views: bitwise equal, and within 4 eps of
    `other` (the gradients of a less accurate mode); returns the contiguous run's."""
    base, got = _run_grads(fn, *qkv, do), _run_grads(fn, *views, do)
    bad = [f"{t} differs" for t in _diff(base, got)]
    errs = {t: rel_err(base[t], other[t].double()) for t in ("dQ", "dK", "dV")}
    bad += [f"{t} off the {other_what} backward by {e:.3g} > 4 eps" for t, e in errs.items()
            if not e <= 4 * EPS["bf16"]]
    _report(name, bad, f"(B, S, H, d) views vs contiguous {what}, bitwise; against the {other_what} backward "
            + ", ".join(f"{t} {e:.1e}" for t, e in errs.items()))
    return base


def strided_tests(gen):
    cases = {"bshd": (2, 4, 4, 256, 256, 64, False), "bshd-gqa-causal-sq<sk": (2, 8, 2, 100, 300, 64, True),
             "bshd-d128": (1, 4, 4, 130, 130, 128, False)}
    fwd_row = None
    for case, (B, H, H_kv, Sq, Sk, d, causal) in cases.items():
        q, k, v, do = _inputs(gen, B, H, H_kv, Sq, Sk, d)
        # the same values in (B, S, H, d) memory, seen as (B, H, S, d)
        qs, ks, vs = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
        base = _run_grads(_det(causal), q, k, v, do)
        got = _run_grads(_det(causal), qs, ks, vs, do)
        p = flash_op.problem(q, k, causal)
        fv = dispatch.choose_version(fa.FORWARD, flash_op.DTYPE_CODES[q.dtype], p)
        fwd_row = dispatch.row(fa.FORWARD, fv)
        _report(f"flash_op-strided {case}", [f"{t} differs" for t in _diff(base, got)],
                f"bitwise vs contiguous; forward {fwd_row.name.decode()} "
                + ("reads the strides" if fwd_row.strided else "takes copies"))
    # accurate_dq (K centered by a pre-pass that reads Q and K through their strides), and "full"
    # (the dQ pass reads Q, K, V, dO and writes dQ through their strides): each bitwise on
    # (B, S, H, d) views, and near the backward one step less accurate
    q, k, v, do = _inputs(gen, 2, 8, 2, 160, 224, 64)
    qs, ks, vs = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))

    def mode(accurate_dq):
        return lambda a, b, c: flash_attention(a, b, c, causal=True, deterministic=True, return_lse=True,
                                               accurate_dq=accurate_dq)
    plain = _run_grads(mode(False), q, k, v, do)
    base = _strided_mode("flash_op-strided accurate-dq", mode(True), (q, k, v), (qs, ks, vs), do, plain,
                         "with K centered", "uncentered")
    _strided_mode("flash_op-strided accurate-dq full", mode("full"), (q, k, v), (qs, ks, vs), do, base,
                  "with the dQ pass", "centered")
    # accurate_dq=None: the library's rule (fa_bwd_center_auto, for the backward version the op
    # runs) picks centered or as given, bitwise one of the two; one shape where it centers and one
    # where it does not (version 3's rule centers without a mask from N = 9300 at d = 64)
    lib, bad, seen = fa.library(), [], []
    for B, H, N in ((1, 2, 256), (2, 8, 4096), (1, 8, 16384), (2, 8, 16384)):
        q, k, v, do = _inputs(gen, B, H, H, N, N, 64)
        p = flash_op.problem(q, k, False)
        bv = dispatch.choose_version(fa.BACKWARD, fa.BF16, p, deterministic=True)
        auto = lib.fa_bwd_center_auto(bv, fa.BF16, ctypes.byref(p))
        if auto in seen:
            continue
        seen.append(auto)
        runs = {a: _run_grads(lambda x, y, z, a=a: flash_attention(x, y, z, deterministic=True, return_lse=True,
                                                                  accurate_dq=a), q, k, v, do)
                for a in (None, True, False)}
        bad += [f"B={B} H={H} N={N}: auto={auto} but accurate_dq=None differs from "
                f"accurate_dq={bool(auto)} in {t}" for t in _diff(runs[None], runs[bool(auto)])]
    if seen != [0, 1]:
        bad.append(f"the shapes tried gave auto = {seen}, not both 0 and 1")
    try:
        flash_attention(q, k, v, accurate_dq="yes")
        bad.append("accurate_dq='yes' was accepted")
    except (ValueError, RuntimeError, TypeError) as ex:
        if "accurate_dq" not in str(ex):
            bad.append(f"accurate_dq='yes' refused without naming it: {ex}")
    _report("flash_op accurate-dq auto", bad, "accurate_dq=None bitwise as the rule's choice "
            f"(fa_bwd_center_auto gave {seen} on the shapes run); a bad value refused")
    B, S, H, d = 2, 256, 4, 64
    qkv = torch.randn(B, S, 3, H, d, generator=gen, device=DEV).to(torch.bfloat16)
    do = torch.randn(B, H, S, d, generator=gen, device=DEV).to(torch.bfloat16)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)   # three (B, H, S, d) views of one tensor
    base = _run_grads(_det(True), q.contiguous(), k.contiguous(), v.contiguous(), do)
    got = _run_grads(_det(True), q, k, v, do)
    qkv_leaf = qkv.clone().requires_grad_()
    o, L = _det(True)(*qkv_leaf.permute(2, 0, 3, 1, 4))
    o.backward(do)
    bad = [f"{t} differs" for t in _diff(base, got)]
    packed_grad = qkv_leaf.grad.permute(2, 0, 3, 1, 4)
    bad += [f"packed {t} differs" for t, i in (("dQ", 0), ("dK", 1), ("dV", 2))
            if not torch.equal(packed_grad[i], base[t])]
    _report("flash_op-packed", bad, "slices of one (B, S, 3, H, d) tensor vs contiguous copies, "
            "and the gradient of the packed leaf, bitwise")


def empty_tests(gen):
    real = flash_op._call

    def no_call(*a, **kw):
        raise AssertionError("the library was called")
    flash_op._call = no_call
    bad = []
    try:
        for what, (B, H, Sq, Sk) in {"seqlen_q 0": (2, 4, 0, 64), "seqlen_k 0": (2, 4, 64, 0),
                                     "both 0": (1, 2, 0, 0), "B 0": (0, 4, 64, 64)}.items():
            q = torch.randn(B, H, Sq, 64, generator=gen, device=DEV).to(torch.bfloat16).requires_grad_()
            k = torch.randn(B, H, Sk, 64, generator=gen, device=DEV).to(torch.bfloat16).requires_grad_()
            v = torch.randn(B, H, Sk, 64, generator=gen, device=DEV).to(torch.bfloat16).requires_grad_()
            for path in ("eager", "op"):
                flash_op.eager_fast_path = path == "eager"
                for t in (q, k, v):
                    t.grad = None
                try:
                    o, L = flash_attention(q, k, v, causal=True, return_lse=True)
                    o.backward(torch.ones_like(o))
                except Exception as e:  # noqa: BLE001
                    bad.append(f"{what} ({path}): {type(e).__name__}: {str(e).splitlines()[0][:80]}")
                    continue
                ok = (o.shape == q.shape and L.shape == (B, H, Sq) and L.dtype == torch.float32
                      and (o == 0).all() and (torch.isneginf(L).all())
                      and all(t.grad is not None and t.grad.shape == t.shape and (t.grad == 0).all()
                              for t in (q, k, v)))
                if not ok:
                    bad.append(f"{what} ({path}): shapes {tuple(o.shape)}, {tuple(L.shape)} or values wrong")
    finally:
        flash_op._call = real
        flash_op.eager_fast_path = True
    _report("flash_op-empty", bad, "empty O, or O = 0 and L = -inf, zero gradients, no library call; "
            "eager and operator paths")


def stream_value_tests(gen):
    bad = []
    d = torch.device(DEV, torch.cuda.current_device())
    if dispatch.raw_stream(d.index) != torch.cuda.current_stream().cuda_stream:
        bad.append("default stream differs")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        if dispatch.raw_stream(d.index) != torch.cuda.current_stream().cuda_stream or dispatch.raw_stream(d.index) != s.cuda_stream:
            bad.append("side stream differs")
    _report("flash_op-stream-value", bad, "the library's stream is torch.cuda.current_stream().cuda_stream")


def flash_attn_func_tests(gen):
    bad, n = [], 0
    for B, H, H_kv, Sq, Sk, d, causal, window in [(2, 4, 4, 128, 128, 64, False, (-1, -1)),
                                                  (1, 4, 4, 100, 257, 64, True, (-1, -1)),
                                                  (2, 2, 2, 256, 256, 64, False, (32, 16)),
                                                  (2, 8, 2, 192, 192, 128, True, (-1, -1))]:
        q, k, v, do = _inputs(gen, B, H, H_kv, Sq, Sk, d)
        ref = _run_grads(lambda a, b, c: flash_attention(a, b, c, causal=causal, window_size=window,
                                                         deterministic=True, return_lse=True), q, k, v, do)
        qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))

        def fn(a, b, c):
            o, L = flash_attn_func(a.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2), causal=causal,
                                   window_size=window, deterministic=True, return_lse=True)
            if o.shape != (B, Sq, H, d) or not o.is_contiguous():
                bad.append(f"out shape {tuple(o.shape)} or not contiguous")
            return o.transpose(1, 2), L
        got = _run_grads(fn, q, k, v, do)   # leaves in (B, H, S, d); flash_attn_func sees (B, S, H, d)
        bad += [f"case {n}: {t} differs" for t in _diff(ref, got)]
        out, lse, probs = flash_attn_func(qs, ks, vs, causal=causal, window_size=window, return_attn_probs=True)
        if probs is not None or not torch.equal(lse, ref["L"]) or not torch.equal(out.transpose(1, 2), ref["O"]):
            bad.append(f"case {n}: return_attn_probs gives other values")
        n += 1
    q, k, v, do = _inputs(gen, 2, 4, 4, 128, 128, 64)
    qkv = torch.stack([t.transpose(1, 2) for t in (q, k, v)], dim=2)   # (B, S, 3, H, d)
    ref = flash_attention(q, k, v, causal=True)
    if not torch.equal(flash_attn_qkvpacked_func(qkv, causal=True).transpose(1, 2), ref):
        bad.append("qkvpacked differs")
    if not torch.equal(flash_attn_kvpacked_func(q.transpose(1, 2), qkv[:, :, 1:], causal=True).transpose(1, 2), ref):
        bad.append("kvpacked differs")
    qs = q.transpose(1, 2)
    for what, call in [("dropout_p 0.1", lambda: flash_attn_func(qs, qs, qs, dropout_p=0.1)),
                       ("softcap 30", lambda: flash_attn_func(qs, qs, qs, softcap=30.0)),
                       ("alibi", lambda: flash_attn_func(qs, qs, qs, alibi_slopes=torch.ones(4, device=DEV))),
                       ("3-d q", lambda: flash_attn_func(qs[0], qs, qs))]:
        try:
            call()
            bad.append(f"{what}: no error")
        except ValueError as e:
            if "\n" in str(e) or not str(e).startswith("flash_attn_func: "):
                bad.append(f"{what}: message {str(e)!r}")
    _report("flash_op-flash-attn-func", bad, f"{n} problems (B, S, H, d) bitwise vs flash_attention, "
            "packed forms, 4 refusals")


INSTALLED_PROBE = r"""
import sys, torch, flashattn_stages
from flashattn_stages import flash_attention, flash_attn_func, fa
assert flashattn_stages.__file__.startswith(sys.argv[1]), flashattn_stages.__file__
assert fa.library_path().startswith(sys.argv[1]), fa.library_path()
g = torch.Generator(device="cuda").manual_seed(1234)
q, k, v = (torch.randn(2, 4, 128, 64, generator=g, device="cuda").to(torch.bfloat16) for _ in range(3))
o = flash_attention(q, k, v, causal=True)
torch.save({"q": q.cpu(), "k": k.cpu(), "v": v.cpu(), "o": o.cpu()}, sys.argv[2])
print("probe ok", fa.library_path())
"""


def installed_tests(gen):
    import shutil
    import subprocess
    import tempfile
    try:   # pip builds here without isolation and without an index: what it needs must be here
        import setuptools
        ver = tuple(int(x) for x in setuptools.__version__.split(".")[:2])
        if ver < (70, 1):
            import wheel  # noqa: F401  (setuptools before 70.1 builds wheels through it)
    except ImportError as e:
        print(f"SKIP flash_op-installed: {e.name} is not installed (pip builds without isolation here)")
        return
    tmp = tempfile.mkdtemp(prefix="fa_pkg_")
    try:
        target = os.path.join(tmp, "site")
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                            "--no-index", "--target", target, ROOT], capture_output=True, text=True,
                           timeout=240)
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
            print(f"FAIL flash_op-installed: pip install exited {r.returncode}: {tail[0][:200]}")
            return
        out = os.path.join(tmp, "probe.pt")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FA_GPU_LIB")}
        env["PYTHONPATH"] = target
        r = subprocess.run([sys.executable, "-c", INSTALLED_PROBE, target, out], cwd="/tmp", env=env,
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
            print(f"FAIL flash_op-installed: the import from /tmp failed: {tail[0][:200]}")
            return
        t = torch.load(out)
        o = flash_attention(t["q"].to(DEV), t["k"].to(DEV), t["v"].to(DEV), causal=True)
        _report("flash_op-installed", [] if torch.equal(o.cpu(), t["o"]) else ["O differs from the repository op's"],
                "pip install --target, imported from /tmp, library inside the package, O bitwise")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def error_tests():
    """Each bad call must raise ValueError, one line, 'flash_attention: ...'."""
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    t = lambda *s, dt=torch.float16: torch.zeros(*s, dtype=dt, device=dev)  # noqa: E731
    q, k = t(1, 4, 8, 64), t(1, 2, 8, 64)
    cases = [
        ("cpu tensors", lambda: flash_attention(q.cpu(), k.cpu(), k.cpu())),
        ("3-d q", lambda: flash_attention(q[0], k, k)),
        ("not a tensor", lambda: flash_attention([1.0], k, k)),
    ]
    if cuda:
        cases += [
            ("dtypes differ", lambda: flash_attention(q, k.float(), k)),
            ("float64", lambda: flash_attention(q.double(), k.double(), k.double())),
            ("k, v shapes differ", lambda: flash_attention(q, k, t(1, 2, 9, 64))),
            ("head dims differ", lambda: flash_attention(q, t(1, 2, 8, 32), t(1, 2, 8, 32))),
            ("heads not a multiple", lambda: flash_attention(q, t(1, 3, 8, 64), t(1, 3, 8, 64))),
            ("window -2", lambda: flash_attention(q, k, k, window_size=(-2, 0))),
            ("window not a pair", lambda: flash_attention(q, k, k, window_size=5)),
            ("window of strings", lambda: flash_attention(q, k, k, window_size=("left", "right"))),
            ("scale 0", lambda: flash_attention(q, k, k, softmax_scale=0.0)),
            ("B H > 65535", lambda: flash_attention(t(1, 65536, 1, 16), t(1, 1, 1, 16), t(1, 1, 1, 16))),
            ("version 99", lambda: flash_attention(q, k, k, version=99)),
        ]
    bad = []
    for what, call in cases:
        try:
            call()
            bad.append(f"{what}: no error")
        except ValueError as e:
            msg = str(e)
            if "\n" in msg or not msg.startswith("flash_attention: "):
                bad.append(f"{what}: message {msg!r}")
        except Exception as e:  # noqa: BLE001
            bad.append(f"{what}: {type(e).__name__} instead of ValueError: {str(e)[:80]!r}")
    if bad:
        print(f"FAIL flash_op-errors: {'; '.join(bad)}")
    else:
        print(f"PASS flash_op-errors ({len(cases)} bad calls, each a one-line ValueError"
              + ("" if cuda else "; CUDA-only cases skipped: no GPU") + ")")


def only_parts(parts, var, label):
    """The functions of parts that the environment variable var names
    (name,name: those parts alone, a short device run), all of them when it is
    unset; a FAIL line (label) for a name of no part."""
    only = [w.strip() for w in os.environ.get(var, "").split(",") if w.strip()]
    if not only:
        return parts
    unknown = [w for w in only if w not in {f.__name__ for f in parts}]
    if unknown:
        print(f"FAIL {label}: {var} names no part {', '.join(unknown)}")
    print(f"# {var}: only {', '.join(only)}")
    return [f for f in parts if f.__name__ in only]


def main():
    if not os.path.exists(os.path.join(ROOT, "build", "libfa_gpu.so")):
        skip_all("build/libfa_gpu.so is not built (nvcc not found; make build/libfa_gpu.so)")
    error_tests()
    if not torch.cuda.is_available():
        skip_all("no CUDA GPU here", GROUPS[1:])
    seed = int(os.environ.get("FA_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"# seed {seed} (replay: FA_SEED={seed} python3 tests/gpu/test_flash_op.py); "
          f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    gen = torch.Generator(device=DEV).manual_seed(seed)
    flash_op.poison_outputs = True
    t0 = time.time()
    parts = [grad_tests, deterministic_tests, plumbing_tests, op_path_tests, compile_tests, graph_tests,
             strided_tests, empty_tests, stream_value_tests, flash_attn_func_tests, installed_tests]
    for part in only_parts(parts, "FA_OP_PARTS", "flash_op"):
        try:
            part(gen)
        except Exception:  # noqa: BLE001 (a crash is one FAIL, the rest still runs)
            print(f"FAIL flash_op {part.__name__}: crashed: "
                  + traceback.format_exc().strip().splitlines()[-1])
            traceback.print_exc(file=sys.stdout)
    print(f"# flash_op tests took {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
