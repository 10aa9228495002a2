#!/usr/bin/env python3
"""tests/gpu/test_varlen_op.py -- packed sequences of different lengths
(flash_attn_varlen_func, python/flashattn_stages/varlen_op.py; fa_forward_varlen and
fa_backward_varlen of core/fa_gpu.h) against the dense op on each sequence
alone and against fp64.

One line per test in the protocol of tests/run.sh. Part of `make test` and
`make gpu-test` (kernels/gpu.mk); SKIP lines, never PASS, where torch, a
CUDA GPU or build/libfa_gpu.so is missing (varlen-abi needs only the
library). Fresh random inputs (the seed is printed; FA_SEED=N replays);
outputs poisoned (NaN) before every call.

  varlen-abi
      the C interface: fa_check_varlen refuses a version whose row does not
      say `varlen` with one line, and a bad stride (batch != 0);
      fa_varlen_check refuses bad arrays in one line (the host check of
      core/varlen.h; build/test_varlen holds it on random arrays).
  varlen-errors
      bad calls raise a ValueError of one line starting
      "flash_attn_varlen_func:": cu_seqlens of the wrong length, int64, on
      the CPU, 2-D q, dropout_p; with check_cu_seqlens=True also cu_seqlens
      decreasing, a last entry other than the total, a sequence longer than
      max_seqlen. fa_varlen_check (the host read of cu_seqlens) runs once
      with check_cu_seqlens=True and never without it.
  varlen-fwd CASE DTYPE
      every case of CASES (sequences of length 0 and 1 among longer ones;
      full, causal, causal with seqlen_q != seqlen_k per sequence, window,
      GQA 8:1 with a causal window, d 64 and 128, more tiles than SMs): the
      rows of each sequence of one varlen call bitwise equal to the dense
      op (flash_attn_func, the same forward version) on that sequence alone,
      O and L; and O, L against SDPA's math backend in fp64 on each sequence
      with the twice-PyTorch rule of test_flash_op.py, the peer's error being
      that of the whole call: 2 x the largest error the first fused SDPA
      backend makes on any sequence of the batch (each / its own max |ref|),
      or eps/2. One varlen call is one problem: held to the peer sequence by
      sequence, the rule would draw a peer error per sequence, and a short
      sequence where the peer happens to round well fails a result that is
      bitwise the dense kernel's (seen at 9bd9518: a 129-row sequence, ours
      0.00397, SDPA flash 0.00184, the limit eps/2 = 0.00391).
  varlen-grad CASE DTYPE
      dQ, dK, dV through autograd against fp64 by the same rule, and against
      the dense op's backward on each sequence: bitwise equal in
      deterministic mode (the backward's arithmetic per tile is the dense
      kernel's: rows past a sequence's end are loaded as zeros, as past the
      end of a dense tensor); in the default mode (dQ by atomic additions in
      any order) within 2 eps of it.
  varlen-poison
      through the C interface, O, L, dQ, dK, dV written into the middle of
      NaN buffers: every row of every sequence written (no NaN), the guard
      rows before and after untouched (still NaN), forward and every
      backward version that runs it here (both modes).
  varlen-compile
      torch.compile(fullgraph=True) of a function calling
      flash_attn_varlen_func and its backward (a graph break is an error):
      O and the gradients bitwise equal to eager (deterministic mode).

FA_VARLEN_PARTS=name,name runs those parts of main's list alone
(case_tests, poison_tests, compile_tests; e.g. poison_tests under
compute-sanitizer). FA_BWD3_STEP (kernels/stage5_bwd_v3_hopper.cu) picks the
step of backward 3 that the default mode runs.
"""
import ctypes
import math
import os
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
GROUPS = ["varlen-errors", "varlen-fwd", "varlen-grad", "varlen-poison", "varlen-compile"]

from flashattn_stages import fa  # noqa: E402  (needs no torch)

# name: (H, H_kv, d, lens_q, lens_k (None: lens_q), causal, window_size, dtypes)
CASES = {
    "full-d64":            (4, 4, 64, [37, 0, 1, 200, 129, 64], None, False, (-1, -1), ["bf16", "fp16"]),
    "causal-d128":         (4, 4, 128, [300, 1, 0, 177, 64, 65], None, True, (-1, -1), ["bf16", "fp16"]),
    "causal-sq!=sk":       (2, 2, 64, [50, 1, 120, 0, 7, 33], [80, 5, 100, 9, 0, 33], True, (-1, -1), ["bf16"]),
    "window-d128":         (2, 2, 128, [250, 3, 0, 129, 1], [250, 3, 2, 140, 1], False, (32, 16), ["bf16"]),
    "gqa8-causal-window":  (8, 1, 64, [200, 0, 1, 90, 257], [260, 4, 1, 90, 200], True, (63, -1), ["bf16", "fp16"]),
    "many-tiles-causal":   (4, 2, 128, [1000, 2000, 513, 0, 1, 1500], None, True, (-1, -1), ["bf16"]),
}


def abi_tests():
    """The C interface without a GPU: refusals in one line."""
    name = "varlen-abi"
    try:
        lib = fa.load()
    except OSError as e:
        print(f"SKIP {name}: build/libfa_gpu.so not loadable ({str(e).splitlines()[0][:80]})")
        return
    bad = []
    p = fa.Params(3, 4, 4, 100, 100, 64, 0.125, -1, 0)
    vl = fa.Varlen(1 << 12, 1 << 12, 150, 150)   # device pointers are not read by the check
    rows = {fa.FORWARD: fa.versions(lib, fa.FORWARD), fa.BACKWARD: fa.versions(lib, fa.BACKWARD)}
    n_varlen = 0
    for pass_, rs in rows.items():
        for r in rs:
            rc = lib.fa_check_varlen(pass_, r.version, fa.BF16, ctypes.byref(p), ctypes.byref(vl))
            msg = lib.fa_error_string().decode()
            if not r.varlen:
                if rc != fa.ERR_UNSUPPORTED or "variable lengths" not in msg or "\n" in msg:
                    bad.append(f"pass {pass_} v{r.version} (no varlen): rc {rc}, '{msg}'")
            else:
                n_varlen += 1
                if rc == fa.ERR_UNSUPPORTED and "variable lengths" in msg and "takes no" in msg:
                    bad.append(f"pass {pass_} v{r.version} says varlen but refuses: '{msg}'")
    vl_small = fa.Varlen(1 << 12, 1 << 12, 50, 150)   # fewer rows than max_seqlen_q
    for pass_, rs in rows.items():
        for r in rs:
            if r.varlen and lib.fa_check_varlen(pass_, r.version, fa.BF16, ctypes.byref(p),
                                                ctypes.byref(vl_small)) != fa.ERR_UNSUPPORTED:
                bad.append(f"v{r.version}: total_q 50 < max_seqlen_q 100 accepted")
    cu_ok = (ctypes.c_int32 * 4)(0, 50, 50, 150)
    cases = [((ctypes.c_int32 * 4)(0, 50, 40, 150), "must not decrease"),
             ((ctypes.c_int32 * 4)(0, 50, 60, 149), "last entry"),
             ((ctypes.c_int32 * 4)(1, 50, 60, 150), "first entry"),
             ((ctypes.c_int32 * 4)(0, 120, 130, 150), "more than max_seqlen_q")]
    if lib.fa_varlen_check(cu_ok, cu_ok, 3, 150, 150, 100, 100) != fa.OK:
        bad.append(f"good arrays refused: {lib.fa_error_string().decode()}")
    for cu, words in cases:
        rc = lib.fa_varlen_check(cu, cu_ok, 3, 150, 150, 100, 100)
        msg = lib.fa_error_string().decode()
        if rc != fa.ERR_UNSUPPORTED or words not in msg or "cu_seqlens_q" not in msg:
            bad.append(f"{list(cu)}: rc {rc}, '{msg}'")
    if n_varlen < 3:
        bad.append(f"only {n_varlen} rows say varlen (expected the forward v3 and backward v3, v4)")
    print(f"FAIL {name}: {'; '.join(bad)}" if bad else
          f"PASS {name} ({n_varlen} varlen rows; refusals in one line)")


def skip_all(why, groups=GROUPS):
    for g in groups:
        print(f"SKIP {g}: {why}")


abi_tests()
try:
    import torch
    import torch._dynamo
except ImportError:
    skip_all("torch is not installed (the GPU tests need it: pip install torch)")
    sys.exit(0)
if not os.path.exists(fa.library_path()):
    skip_all("build/libfa_gpu.so is not built (make build/libfa_gpu.so)")
    sys.exit(0)

from flashattn_stages import dispatch, flash_op  # noqa: E402
from flashattn_stages.flash_attn_interface import flash_attn_func, flash_attn_varlen_func  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
EPS = {"fp16": 2.0 ** -10, "bf16": 2.0 ** -7}


def expect_error(name, fn, words):
    try:
        fn()
    except ValueError as e:
        msg = str(e)
        if not msg.startswith("flash_attn_varlen_func:") or "\n" in msg or words not in msg:
            return f"{name}: '{msg}' (expected one line naming {words!r})"
        return None
    except Exception as e:  # noqa: BLE001
        return f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
    return f"{name}: accepted"


def error_tests():
    name = "varlen-errors"
    if not torch.cuda.is_available():
        print(f"SKIP {name}: no CUDA GPU here")
        return
    dev = "cuda"
    q = torch.randn(20, 2, 64, device=dev, dtype=torch.bfloat16)
    k, v = q.clone(), q.clone()

    def cu(*xs, dtype=torch.int32, device=dev):
        return torch.tensor(xs, dtype=dtype, device=device)
    ok = cu(0, 5, 20)
    calls = [
        ("decreasing", lambda: flash_attn_varlen_func(q, k, v, cu(0, 12, 5, 20), cu(0, 12, 5, 20), 15, 15,
                                                      check_cu_seqlens=True), "must not decrease"),
        ("wrong length", lambda: flash_attn_varlen_func(q, k, v, cu(0, 5, 20), cu(0, 5, 10, 20), 15, 15),
         "B + 1 each"),
        ("last entry", lambda: flash_attn_varlen_func(q, k, v, cu(0, 5, 19), cu(0, 5, 19), 15, 15,
                                                      check_cu_seqlens=True), "last entry"),
        ("int64", lambda: flash_attn_varlen_func(q, k, v, cu(0, 5, 20, dtype=torch.int64), ok, 15, 15),
         "torch.int32"),
        ("on the CPU", lambda: flash_attn_varlen_func(q, k, v, cu(0, 5, 20, device="cpu"), ok, 15, 15),
         "device"),
        ("too long", lambda: flash_attn_varlen_func(q, k, v, ok, ok, 10, 15, check_cu_seqlens=True),
         "max_seqlen_q"),
        ("2-D q", lambda: flash_attn_varlen_func(q[:, 0], k, v, ok, ok, 15, 15), "3 dimensions"),
        ("one entry", lambda: flash_attn_varlen_func(q, k, v, cu(20), cu(20), 15, 15), "B >= 1"),
        ("dropout", lambda: flash_attn_varlen_func(q, k, v, ok, ok, 15, 15, dropout_p=0.1), "dropout"),
        ("heads", lambda: flash_attn_varlen_func(q.expand(20, 2, 64).repeat(1, 2, 1)[:, :3], k[:, :2],
                                                 v[:, :2], ok, ok, 15, 15), "multiple"),
    ]
    bad = [m for m in (expect_error(n, f, w) for n, f, w in calls) if m]
    # without check_cu_seqlens the arrays are never read on the host: no
    # fa_varlen_check, no synchronization (a bad array is the caller's)
    lib = fa.library()
    check = lib.fa_varlen_check
    reads = []

    def counted(*a):
        reads.append(1)
        return check(*a)
    lib.fa_varlen_check = counted
    try:
        flash_attn_varlen_func(q, k, v, ok, ok, 15, 15)
        unread = len(reads)
        flash_attn_varlen_func(q, k, v, ok, ok, 15, 15, check_cu_seqlens=True)
        read = len(reads) - unread
    finally:
        lib.fa_varlen_check = check
    if unread or read != 1:
        bad.append(f"cu_seqlens read {unread} times by default (0 expected), {read} with check_cu_seqlens=True "
                   "(1 expected)")
    print(f"FAIL {name}: {'; '.join(bad)}" if bad else f"PASS {name} ({len(calls)} bad calls, one line each; "
          "cu_seqlens read once with check_cu_seqlens=True, never by default)")


class Batch:
    """One case in a dtype: per-sequence problems (tests/gpu/test_flash_op.py's
    Problem: inputs, the mask of core/mask.h, the fp64 reference, the fused
    SDPA peer) and the same inputs packed."""

    def __init__(self, case, dtype, gen):
        import test_flash_op as tfo
        H, H_kv, d, lq, lk, causal, window, _ = CASES[case]
        lk = lq if lk is None else lk
        self.case, self.dtype, self.H, self.H_kv, self.d = case, dtype, H, H_kv, d
        self.lq, self.lk, self.causal, self.window = lq, lk, causal, window
        self.probs, parts = [], {"q": [], "k": [], "v": [], "do": []}
        for b, (sq, sk) in enumerate(zip(lq, lk)):
            if sq >= 1 and sk >= 1:
                key = f"_varlen_{case}_{b}"
                tfo.CASES[key] = (1, H, H_kv, sq, sk, d, causal, window, None)
                pr = tfo.Problem(key, dtype, gen)
                t = {n: getattr(pr, n)[0].transpose(0, 1) for n in ("q", "k", "v", "do")}
            else:
                pr = None
                t = {"q": torch.randn(sq, H, d, generator=gen, device="cuda").to(dtype),
                     "do": torch.randn(sq, H, d, generator=gen, device="cuda").to(dtype),
                     "k": torch.randn(sk, H_kv, d, generator=gen, device="cuda").to(dtype),
                     "v": torch.randn(sk, H_kv, d, generator=gen, device="cuda").to(dtype)}
            self.probs.append(pr)
            for n in parts:
                parts[n].append(t[n])
        for n in parts:
            setattr(self, n, torch.cat(parts[n]).contiguous())
        self.cu_q = torch.tensor([0] + list(_cumsum(lq)), dtype=torch.int32, device="cuda")
        self.cu_k = torch.tensor([0] + list(_cumsum(lk)), dtype=torch.int32, device="cuda")
        self.tfo = tfo

    def rows(self, b):
        c, ck = self.cu_q.tolist(), self.cu_k.tolist()
        return slice(c[b], c[b + 1]), slice(ck[b], ck[b + 1])

    def varlen(self, deterministic, grad=True):
        q, k, v = (t.detach().clone().requires_grad_(grad) for t in (self.q, self.k, self.v))
        o, lse = flash_attn_varlen_func(q, k, v, self.cu_q, self.cu_k, max(self.lq), max(self.lk),
                                        causal=self.causal, window_size=self.window,
                                        deterministic=deterministic, return_lse=True)
        out = {"O": o.detach(), "L": lse}
        if grad:
            o.backward(self.do)
            out.update(dQ=q.grad, dK=k.grad, dV=v.grad)
        torch.cuda.synchronize()
        return out

    def dense(self, b, deterministic):
        rq, rk = self.rows(b)
        q, k, v = (t[r][None].detach().clone().requires_grad_() for t, r in
                   ((self.q, rq), (self.k, rk), (self.v, rk)))
        o, lse = flash_attn_func(q, k, v, causal=self.causal, window_size=self.window,
                                 deterministic=deterministic, return_lse=True)
        o.backward(self.do[rq][None])
        torch.cuda.synchronize()
        return {"O": o.detach()[0], "L": lse[0], "dQ": q.grad[0], "dK": k.grad[0], "dV": v.grad[0]}


def _cumsum(xs):
    s = 0
    for x in xs:
        s += x
        yield s


def seq_view(out, B, b):
    """Sequence b's rows of a varlen result, in test_flash_op's (1, H, S, d) layout."""
    rq, rk = B.rows(b)
    return {"O": out["O"][rq].transpose(0, 1)[None], "L": out["L"][:, rq][None],
            "dQ": out["dQ"][rq].transpose(0, 1)[None], "dK": out["dK"][rk].transpose(0, 1)[None],
            "dV": out["dV"][rk].transpose(0, 1)[None]}


def bitwise(a, b):
    return a.shape == b.shape and torch.equal(torch.nan_to_num(a.float(), nan=7.0), torch.nan_to_num(b.float(), nan=7.0))


def batch_peer(fused):
    """{"O": ..., "grad": ...} for test_flash_op.check from the per-sequence
    peers [(name, {key: error})]: the first backend's name, each key's largest
    error over the sequences it ran; (None, why) when none ran."""
    ran = [f for f in fused if f[0]]
    if not ran:
        return {"O": (None, "no peer"), "grad": (None, "no peer")}
    worst = {k: max(f[1][k] for f in ran) for k in ran[0][1]}
    name = ran[0][0] + ("" if all(f[0] == ran[0][0] for f in ran) else "+")
    return {"O": (name, worst), "grad": (name, worst)}


def case_tests(gen):
    for case in CASES:
        for dt in CASES[case][7]:
            B = Batch(case, DTYPES[dt], gen)
            det = B.varlen(True)
            nondet = B.varlen(False)
            bad_f, bad_g, notes_f, notes_g = [], [], [], []
            worst_nd = 0.0
            peers = batch_peer([pr.peer() for pr in B.probs if pr is not None])
            for b, pr in enumerate(B.probs):
                rq, rk = B.rows(b)
                if B.lq[b] == 0:   # keys no query sees: dK = dV = 0
                    if not ((det["dK"][rk] == 0).all() and (det["dV"][rk] == 0).all()):
                        bad_g.append(f"seq {b} (no query): dK, dV not 0")
                    continue
                if not torch.isfinite(det["O"][rq]).all() or not torch.isfinite(det["dQ"][rq]).all():
                    bad_f.append(f"seq {b}: non-finite O or dQ (a row not written?)")
                    continue
                if B.lk[b] == 0:   # no key: O = 0, L = -inf, dQ = 0
                    if not ((det["O"][rq] == 0).all() and torch.isneginf(det["L"][:, rq]).all()
                            and (det["dQ"][rq] == 0).all()):
                        bad_f.append(f"seq {b} (no key): O, L, dQ not 0, -inf, 0")
                    continue
                dn = B.dense(b, True)
                for key in ("O", "L"):
                    got = det[key][rq] if key == "O" else det[key][:, rq]
                    if not bitwise(got, dn[key]):
                        diff = (got.float() - dn[key].float()).abs().nan_to_num(nan=math.inf).max().item()
                        bad_f.append(f"seq {b} {key} differs from the dense call (max {diff:.3g})")
                for key, r in (("dQ", rq), ("dK", rk), ("dV", rk)):
                    if not bitwise(det[key][r], dn[key]):
                        diff = (det[key][r].float() - dn[key].float()).abs().max().item()
                        bad_g.append(f"seq {b} {key} (deterministic) differs from dense by {diff:.3g}")
                    ref = dn[key].float()
                    e = (nondet[key][r].float() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
                    worst_nd = max(worst_nd, e)
                    if not e <= 2 * EPS[dt]:
                        bad_g.append(f"seq {b} {key} (atomic dQ mode) off dense by {e:.3g} > 2 eps")
                got = seq_view(det, B, b)
                fb, summary = B.tfo.check(pr, {"O": got["O"], "L": got["L"]}, dt, peers)
                bad_f += [f"seq {b}: {m}" for m in fb]
                notes_f.append(f"{B.lq[b]}x{B.lk[b]}: {summary}")
                gb, gsum = B.tfo.check(pr, got, dt, peers)
                bad_g += [f"seq {b}: {m}" for m in gb if not m.startswith(("O ", "L "))]
                notes_g.append(f"{B.lq[b]}x{B.lk[b]}: {gsum.split(', L ')[0]}")
            tot = f"{len(B.lq)} seqs, total {sum(B.lq)}x{sum(B.lk)}"
            for grp, bad, notes in (("varlen-fwd", bad_f, notes_f), ("varlen-grad", bad_g, notes_g)):
                label = f"{grp} {case} {dt}"
                extra = f"; atomic-mode grads within {worst_nd:.2e} of dense" if grp == "varlen-grad" else ""
                if bad:
                    print(f"FAIL {label}: {'; '.join(bad[:6])}")
                else:
                    print(f"PASS {label} ({tot}; bitwise = dense per sequence{extra}; " + " | ".join(notes) + ")")


def poison_tests(gen):
    """C-level calls into the middle of NaN buffers: every row written, guards
    untouched; d = 64 and 128 (the backward's two tile shapes)."""
    name = "varlen-poison"
    lib = fa.library()
    bad, said = [], ""
    for d in (64, 128):
        said = poison_one(gen, lib, d, bad)
    print(f"FAIL {name}: {'; '.join(bad)}" if bad else f"PASS {name} (d 64 and 128; {said})")


def poison_one(gen, lib, d, bad):
    """One head dimension of poison_tests: its failures appended to bad (each
    naming d), what ran returned."""
    H, H_kv, lq, lk = 4, 2, [65, 0, 1, 130, 7], [70, 3, 0, 129, 7]
    cu_q = torch.tensor([0] + list(_cumsum(lq)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(_cumsum(lk)), dtype=torch.int32, device="cuda")
    tq, tk, G = sum(lq), sum(lk), 64
    bf = torch.bfloat16
    q = torch.randn(tq, H, d, generator=gen, device="cuda").to(bf)
    k = torch.randn(tk, H_kv, d, generator=gen, device="cuda").to(bf)
    v = torch.randn(tk, H_kv, d, generator=gen, device="cuda").to(bf)
    do = torch.randn(tq, H, d, generator=gen, device="cuda").to(bf)
    nan = float("nan")
    O = torch.full((tq + 2 * G, H, d), nan, dtype=bf, device="cuda")
    Lb = torch.full((H * tq + 2 * G,), nan, dtype=torch.float32, device="cuda")
    dQ = torch.full((tq + 2 * G, H, d), nan, dtype=bf, device="cuda")
    dK = torch.full((tk + 2 * G, H_kv, d), nan, dtype=bf, device="cuda")
    dV = torch.full((tk + 2 * G, H_kv, d), nan, dtype=bf, device="cuda")
    p = fa.Params(len(lq), H, H_kv, max(lq), max(lk), d, 1 / 8, -1, 0)
    vl = fa.Varlen(cu_q.data_ptr(), cu_k.data_ptr(), tq, tk)
    x = fa.Ptrs()
    x.q, x.k, x.v, x.do_ = q.data_ptr(), k.data_ptr(), v.data_ptr(), do.data_ptr()
    x.o, x.softmax_lse = O[G:].data_ptr(), Lb[G:].data_ptr()
    n_bad = len(bad)
    fv = max(r.version for r in fa.versions(lib, fa.FORWARD) if r.varlen)
    # every backward that runs packed sequences on this GPU, each into fresh NaN buffers
    bvs = [r.version for r in fa.versions(lib, fa.BACKWARD) if r.varlen and
           lib.fa_check_varlen(fa.BACKWARD, r.version, fa.BF16, ctypes.byref(p), ctypes.byref(vl)) == fa.OK]
    if not bvs:
        bad.append(f"d {d}: no backward version runs this varlen problem")
    stream = dispatch.raw_stream(torch.cuda.current_device())
    rc = lib.fa_forward_varlen(fv, fa.BF16, ctypes.byref(p), ctypes.byref(vl), ctypes.byref(x), stream)
    if rc != fa.OK:
        bad.append(f"d {d}: forward: {lib.fa_error_string().decode()}")
    x.dq, x.dk, x.dv = dQ[G:].data_ptr(), dK[G:].data_ptr(), dV[G:].data_ptr()

    def written(nm, t, n, G_, who):
        inside, guards = t[G_:G_ + n], torch.cat([t[:G_], t[G_ + n:]])
        if nm == "L":   # rows that see no key hold -inf, never NaN
            if torch.isnan(inside).any():
                bad.append(f"d {d}: L: {int(torch.isnan(inside).sum())} entries not written")
        elif not torch.isfinite(inside).all():
            n = int((~torch.isfinite(inside)).sum())
            bad.append(f"d {d}: {who} {nm}: {n} entries of the sequences not written")
        if not torch.isnan(guards.float()).all():
            bad.append(f"d {d}: {who} {nm}: a guard row outside the packed rows was written")
    torch.cuda.synchronize()
    written("O", O, tq, G, f"forward v{fv}")
    written("L", Lb, H * tq, G, f"forward v{fv}")
    for bv in bvs if len(bad) == n_bad else []:
        ws_n = lib.fa_workspace_bytes_varlen(fa.BACKWARD, bv, fa.BF16, ctypes.byref(p), ctypes.byref(vl))
        ws = torch.empty(max(ws_n, 1), dtype=torch.uint8, device="cuda")
        x.workspace, x.workspace_bytes = ws.data_ptr(), ws_n
        for det in (0, 1):
            for t in (dQ, dK, dV):
                t.fill_(nan)
            rc = lib.fa_backward_varlen(bv, fa.BF16, ctypes.byref(p), ctypes.byref(vl), ctypes.byref(x), det,
                                        stream)
            if rc != fa.OK:
                bad.append(f"d {d}: backward v{bv}: {lib.fa_error_string().decode()}")
            torch.cuda.synchronize()
            for nm, t, n in (("dQ", dQ, tq), ("dK", dK, tk), ("dV", dV, tk)):
                written(nm, t, n, G, f"backward v{bv}{' deterministic' if det else ''}")
    return (f"forward v{fv}, backward {', '.join(f'v{v}' for v in bvs)} in both modes: every row written, "
            f"{G} guard rows each side untouched")


def compile_tests(gen):
    name = "varlen-compile"
    B = Batch("gqa8-causal-window", torch.bfloat16, gen)
    mq, mk = max(B.lq), max(B.lk)

    def f(q, k, v, cu_q, cu_k):
        return flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, causal=True, window_size=(63, -1),
                                      deterministic=True)

    def run(fn):
        q, k, v = (t.detach().clone().requires_grad_() for t in (B.q, B.k, B.v))
        o = fn(q, k, v, B.cu_q, B.cu_k)
        o.backward(B.do)
        torch.cuda.synchronize()
        return [o.detach(), q.grad, k.grad, v.grad]
    eager = run(f)
    torch._dynamo.reset()
    fc = torch.compile(f, fullgraph=True)
    try:
        comp = run(fc)
        again = run(fc)
    except Exception as e:  # noqa: BLE001 (a graph break under fullgraph is an exception)
        print(f"FAIL {name}: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
        return
    bad = [n for n, a, c in zip(("O", "dQ", "dK", "dV"), eager, comp) if not bitwise(a, c)]
    bad += [f"{n} (second call)" for n, a, c in zip(("O", "dQ", "dK", "dV"), eager, again) if not bitwise(a, c)]
    print(f"FAIL {name}: {', '.join(bad)} differ from eager" if bad else
          f"PASS {name} (fullgraph, forward and backward: O, dQ, dK, dV bitwise = eager)")


def main():
    error_tests()
    if not torch.cuda.is_available():
        skip_all("no CUDA GPU here", GROUPS[1:])
        return
    seed = int(os.environ.get("FA_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"# seed {seed} (replay: FA_SEED={seed} python3 tests/gpu/test_varlen_op.py); "
          f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    flash_op.poison_outputs = True
    import test_flash_op
    for part in test_flash_op.only_parts([case_tests, poison_tests, compile_tests], "FA_VARLEN_PARTS", "varlen"):
        try:
            part(gen)
        except Exception:  # noqa: BLE001 (a crash is one FAIL, the rest still runs)
            print(f"FAIL varlen {part.__name__}: crashed: " + traceback.format_exc().strip().splitlines()[-1])
            traceback.print_exc(file=sys.stdout)


if __name__ == "__main__":
    main()
