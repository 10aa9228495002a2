#!/usr/bin/env python3
"""tests/gpu/test_flash_op.py -- the PyTorch op (python/flash_op.py) against PyTorch's attention.

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
Cost on an H200: about half a minute.
"""
import ctypes
import math
import os
import sys
import time
import traceback
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEV = "cuda"
GROUPS = ["flash_op-errors", "flash_op-grad", "flash_op-deterministic", "flash_op-noncontiguous",
          "flash_op-stream", "flash_op-autocast", "flash_op-no-grad"]


def skip_all(why, groups=GROUPS):
    for g in groups:
        print(f"SKIP {g}: {why}")
    sys.exit(0)


try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    skip_all("torch is not installed (the GPU machine has it)")

sys.path.insert(0, os.path.join(ROOT, "python"))
import flash_op  # noqa: E402
from flash_op import fa, flash_attention  # noqa: E402

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
    lib = flash_op.library()
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
            lib = flash_op.library()

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
    lib = flash_op.library()
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
        for g in GROUPS[3:]:
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
            ("causal with right 3", lambda: flash_attention(q, k, k, causal=True, window_size=(-1, 3))),
            ("scale 0", lambda: flash_attention(q, k, k, softmax_scale=0.0)),
            ("seqlen 0", lambda: flash_attention(t(1, 4, 0, 64), k, k)),
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
    for part in (grad_tests, deterministic_tests, plumbing_tests):
        try:
            part(gen)
        except Exception:  # noqa: BLE001 (a crash is one FAIL, the rest still runs)
            print(f"FAIL flash_op {part.__name__}: crashed: "
                  + traceback.format_exc().strip().splitlines()[-1])
            traceback.print_exc(file=sys.stdout)
    print(f"# flash_op tests took {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
