#!/usr/bin/env python3
"""tests/python/test_decode_host.py -- flash_attn_with_kvcache's host layer, without a GPU.

    python3 tests/python/test_decode_host.py      (make test runs it; PYTHONPATH=python)

decode_op hands the decode kernels pointers, a problem structure, a split
count and a workspace; whether q, O, the cache, the block table and the
lengths arrive in the layouts the kernel reads is a property of the Python
layer alone. Here the library is replaced by one whose fa_decode computes
the step in float64 from those pointers, as the kernel's contract says
(core/fa_decode.h: q and O (B, H, seqlen_q, d), pages (num_pages,
page_size, H_kv, d), L (B, H, seqlen_q), bottom-right causal mask), and the
tensors are CPU tensors that say they are on a GPU. Each case draws fresh
inputs and compares the output and L with an independent float64
attention over the same keys, through the public entry:

  decode-host-cases    dense and paged caches (pages shuffled), one and
                       three query rows, causal, grouped heads, appending
                       k, v (the cache changes), empty sequences
  decode-host-plan     the split rule, the check and the workspace size are
                       asked once per signature, not per call; a workspace
                       of the rule's size reaches the kernel
  decode-host-steps    steps repeated with one signature and fresh values
                       (the cache, lengths and block table written in
                       place) equal float64; all but the first go straight
                       to the launch; other strides or dtypes take the full
                       path (and its refusals)
  decode-host-errors   check_tables refuses a length past the table and a
                       page outside the pool in one line; num_splits past
                       128 refused before any launch

Needs torch (CPU is enough) and numpy; without them one SKIP line.
"""
import ctypes
import math
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP decode-host: {e.name} is not installed (this test needs torch and numpy; the CPU build of "
          "torch is enough)")
    sys.exit(0)

from flashattn_stages import decode_op, fa  # noqa: E402  (PYTHONPATH=python)
from cpu_as_gpu import gpu  # noqa: E402
import cpu_as_gpu  # noqa: E402

SEED = int(os.environ.get("FA_SEED", random.randrange(1 << 30)))
CALLS = {"num_splits": 0, "check": 0, "workspace_bytes": 0, "decode": 0}


def host_array(ptr, n, dtype):
    ct = {np.float16: ctypes.c_uint16, np.float32: ctypes.c_float, np.int32: ctypes.c_int32}[dtype]
    a = np.ctypeslib.as_array((ct * n).from_address(ptr))
    return a.view(dtype) if dtype == np.float16 else a


class FakeLibrary:
    """The decode entry points of libfa_gpu.so, fa_decode computing the
    step in float64 from the pointers it is given (fp16 only)."""
    has_decode = True
    SPLITS = 4

    def fa_decode_num_splits(self, dtype, p_ref, max_seqlen_k, sms):
        CALLS["num_splits"] += 1
        return self.SPLITS

    def fa_decode_check(self, dtype, p_ref, num_splits):
        CALLS["check"] += 1
        return fa.OK if p_ref._obj.d in (64, 128) and 1 <= num_splits <= 128 else 1

    def fa_error_string(self):
        return b"the decode kernels take d = 64 or 128 and 1 to 128 splits"

    @staticmethod
    def partials_bytes(p, num_splits):
        """fa_decode_workspace_bytes's count (core/fa_decode.h): O and L per split."""
        return 0 if num_splits <= 1 else num_splits * p.B * p.H * p.seqlen_q * (p.d + 1) * 4

    def fa_decode_workspace_bytes(self, p_ref, num_splits):
        CALLS["workspace_bytes"] += 1
        return self.partials_bytes(p_ref._obj, num_splits)

    def fa_decode(self, dtype, p_ref, num_splits, x_ref, stream):
        CALLS["decode"] += 1
        p, x = p_ref._obj, x_ref._obj
        B, H, Hk, d, Sq = p.B, p.H, p.H_kv, p.d, p.seqlen_q
        page, pps, npg = p.page_size, p.pages_per_seq, p.num_pages
        need = self.partials_bytes(p, num_splits)
        if need and (not x.workspace or x.workspace_bytes < need):
            return 2
        q = host_array(x.q, B * H * Sq * d, np.float16).reshape(B, H, Sq, d).astype(np.float64)
        kc = host_array(x.k_cache, npg * page * Hk * d, np.float16).reshape(npg, page, Hk, d).astype(np.float64)
        vc = host_array(x.v_cache, npg * page * Hk * d, np.float16).reshape(npg, page, Hk, d).astype(np.float64)
        table = host_array(x.block_table, B * pps, np.int32).reshape(B, pps)
        lens = host_array(x.cache_seqlens, B, np.int32)
        o = host_array(x.o, B * H * Sq * d, np.float16).reshape(B, H, Sq, d)
        L = host_array(x.softmax_lse, B * H * Sq, np.float32).reshape(B, H, Sq)
        G = H // Hk
        for b in range(B):
            n = int(lens[b])
            keys = kc[table[b]].reshape(-1, Hk, d)[:n]
            vals = vc[table[b]].reshape(-1, Hk, d)[:n]
            for h in range(H):
                s = q[b, h] @ keys[:, h // G].T * p.softmax_scale
                for i in range(Sq):
                    last = n - Sq + i if p.window_size_right == 0 else n - 1
                    if last < 0 or n == 0:
                        o[b, h, i], L[b, h, i] = 0, -np.inf
                        continue
                    row = s[i, :last + 1]
                    w = np.exp(row - row.max())
                    o[b, h, i] = (w @ vals[:last + 1, h // G]) / w.sum()
                    L[b, h, i] = row.max() + math.log(w.sum())
        return fa.OK


def install_fakes():
    cpu_as_gpu.install(FakeLibrary())
    torch.cuda.get_device_properties = lambda index: type("P", (), {"multi_processor_count": 132})()


def reference(q, kc, vc, lens, table, causal):
    """out (B, seqlen_q, H, d), L (B, H, seqlen_q) in float64 from the pages."""
    B, Sq, H, d = q.shape
    Hk = kc.shape[2]
    o = torch.zeros(B, Sq, H, d, dtype=torch.float64)
    L = torch.full((B, H, Sq), -math.inf, dtype=torch.float64)
    for b in range(B):
        n = int(lens[b])
        keys = kc[table[b].long()].reshape(-1, Hk, d)[:n]
        vals = vc[table[b].long()].reshape(-1, Hk, d)[:n]
        for h in range(H):
            s = q[b, :, h] @ keys[:, h // (H // Hk)].T / math.sqrt(d)
            for i in range(Sq):
                last = n - Sq + i if causal else n - 1
                if last >= 0:
                    L[b, h, i] = torch.logsumexp(s[i, :last + 1], 0)
                    o[b, i, h] = torch.softmax(s[i, :last + 1], 0) @ vals[:last + 1, h // (H // Hk)]
    return o, L


def case(g, B, Sq, H, Hk, d, S, paged, causal=False, k_new=0, empty=False):
    """(name, error text or "") of one step through the public entry."""
    name = f"B {B} seqlen_q {Sq} H {H}/{Hk} d {d} {'paged' if paged else 'dense'}" \
           + (" causal" if causal else "") + (f" +{k_new} keys" if k_new else "") + (" empty" if empty else "")
    page = 16
    q = torch.randn(B, Sq, H, d, generator=g).half()
    if paged:
        kc, vc = (torch.randn(B * S // page, page, Hk, d, generator=g).half() for _ in range(2))
        table = torch.randperm(B * S // page, generator=g).int().view(B, S // page)
    else:
        kc, vc = (torch.randn(B, S, Hk, d, generator=g).half() for _ in range(2))
        table = torch.arange(B * S // page, dtype=torch.int32).view(B, S // page)
    lens = torch.randint(Sq, S - k_new + 1, (B,), generator=g, dtype=torch.int32)
    if empty:
        lens[0] = 0
    kw = {}
    if k_new:
        kw = dict(k=gpu(torch.randn(B, k_new, Hk, d, generator=g).half()),
                  v=gpu(torch.randn(B, k_new, Hk, d, generator=g).half()))
    kc0 = kc.clone()
    kg, vg = gpu(kc), gpu(vc)
    out, lse = decode_op.flash_attn_with_kvcache(gpu(q), kg, vg, cache_seqlens=gpu(lens.clone()),
                                                 block_table=gpu(table) if paged else None, causal=causal,
                                                 return_softmax_lse=True, **kw)
    pages = (lambda t: t) if paged else (lambda t: t.reshape(B * S // page, page, Hk, d))
    ref_o, ref_L = reference(q.double(), pages(torch.Tensor(kg)).double(), pages(torch.Tensor(vg)).double(),
                             lens + k_new, table, causal)
    out, lse = torch.Tensor(out), torch.Tensor(lse)
    why = []
    if out.shape != (B, Sq, H, d) or not out.is_contiguous():
        why.append(f"out {tuple(out.shape)} contiguous {out.is_contiguous()}")
    else:
        err = (out.double() - ref_o).abs().max().item()
        if not err <= 2e-3:   # fp16 rounding of values of order 1 (NaN fails too)
            why.append(f"out off the float64 reference by {err:.2e}")
        lerr = (lse.double() - ref_L).nan_to_num(0.0, 1.0, 1.0).abs().max().item()
        if not lerr <= 1e-4 or not torch.equal(torch.isinf(lse), torch.isinf(ref_L)):
            why.append(f"L off by {lerr:.2e}")
    if k_new and torch.equal(torch.Tensor(kg), kc0):
        why.append("the appended keys are not in the cache")
    return name, "; ".join(why)


def steps(g):
    """decode-host-steps: steps repeated with one signature and fresh values
    (q, the cache's contents, the lengths, the block table's order written in
    place, as a serving loop does) each equal the float64 reference, and all
    but the first go straight to the launch (kvcache_decode not called);
    a call whose signature differs in one property the checks read (q a
    transposed view, lengths in int64, a CPU tensor, lse asked for) takes
    the full path: the view runs, the others are refused in one line."""
    bad = []
    full = {"n": 0}
    inner = decode_op.kvcache_decode

    def counted(*a, **kw):
        full["n"] += 1
        return inner(*a, **kw)
    decode_op.kvcache_decode = counted
    try:
        B, H, Hk, d, S, page = 2, 6, 3, 64, 48, 16   # a signature no other test has
        for paged in (True, False):
            kc = gpu(torch.empty(B * S // page, page, Hk, d).half() if paged else torch.empty(B, S, Hk, d).half())
            vc = gpu(torch.empty_like(torch.Tensor(kc)))
            table = gpu(torch.arange(B * S // page, dtype=torch.int32).view(B, S // page))
            lens = gpu(torch.zeros(B, dtype=torch.int32))
            q = gpu(torch.empty(B, 1, H, d).half())
            before = full["n"]
            for step in range(4):
                torch.Tensor(q).copy_(torch.randn(B, 1, H, d, generator=g))
                torch.Tensor(kc).copy_(torch.randn(kc.shape, generator=g))
                torch.Tensor(vc).copy_(torch.randn(vc.shape, generator=g))
                torch.Tensor(lens).copy_(torch.randint(0, S + 1, (B,), generator=g))
                if paged:
                    torch.Tensor(table).copy_(torch.randperm(B * S // page, generator=g).view(B, S // page))
                out, lse = decode_op.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens,
                                                             block_table=table if paged else None,
                                                             return_softmax_lse=True)
                pages = torch.Tensor(kc) if paged else torch.Tensor(kc).reshape(-1, page, Hk, d)
                vpages = torch.Tensor(vc) if paged else torch.Tensor(vc).reshape(-1, page, Hk, d)
                ref_o, ref_L = reference(torch.Tensor(q).double(), pages.double(), vpages.double(),
                                         torch.Tensor(lens), torch.Tensor(table), False)
                err = (torch.Tensor(out).double() - ref_o).abs().max().item()
                lerr = (torch.Tensor(lse).double() - ref_L).nan_to_num(0.0, 1.0, 1.0).abs().max().item()
                if not err <= 2e-3 or not lerr <= 1e-4:
                    bad.append(f"{'paged' if paged else 'dense'} step {step}: out off by {err:.2e}, L by {lerr:.2e}")
            if full["n"] - before != 1:
                bad.append(f"{'paged' if paged else 'dense'}: the full path ran {full['n'] - before} times in 4 "
                           "steps of one signature (expected once)")
        qt = gpu(torch.randn(B, H, 1, d, generator=g).half()).transpose(1, 2)   # same shape, other strides
        torch.Tensor(lens).copy_(torch.tensor([S, 5]))
        before = full["n"]
        out = decode_op.flash_attn_with_kvcache(qt, kc, vc, cache_seqlens=lens)
        ref_o, _ = reference(torch.Tensor(qt).double(), torch.Tensor(kc).reshape(-1, page, Hk, d).double(),
                             torch.Tensor(vc).reshape(-1, page, Hk, d).double(), torch.Tensor(lens),
                             torch.Tensor(table), False)
        if full["n"] != before + 1 or not (torch.Tensor(out).double() - ref_o).abs().max().item() <= 2e-3:
            bad.append("q as a transposed view: not run through the full path, or wrong")
        for what, args, want in (("lengths in int64", (q, kc, vc, gpu(torch.Tensor(lens).long())), "cache_seqlens"),
                                 ("a CPU q", (torch.Tensor(q), kc, vc, lens), "q must be")):
            try:
                decode_op.flash_attn_with_kvcache(*args[:3], cache_seqlens=args[3])
                bad.append(f"{what} accepted after steps of the same shapes")
            except ValueError as e:
                if want not in str(e) or "\n" in str(e):
                    bad.append(f"{what}: said {e}")
    finally:
        decode_op.kvcache_decode = inner
    report("decode-host-steps", bad, "4 steps of one signature with fresh values (paged and dense) equal float64, "
           "3 of them straight to the launch; other strides, int64 lengths, a CPU q take the full path")


def report(name, bad, what):
    print(f"PASS {name}: {what}" if not bad else f"FAIL {name}: {'; '.join(bad)} [FA_SEED={SEED}]")


def main():
    install_fakes()
    g = torch.Generator().manual_seed(SEED)
    bad = []
    shapes = [(2, 1, 8, 2, 64, 64, False), (2, 1, 8, 2, 64, 64, True), (3, 3, 8, 2, 64, 64, True, True),
              (2, 1, 8, 4, 128, 48, False, False, 1), (2, 2, 8, 4, 128, 64, False, True, 2),
              (2, 1, 4, 4, 64, 32, True, False, 0, True), (1, 1, 16, 2, 64, 64, False, True, 0, True)]
    for s in shapes:
        name, why = case(g, *s)
        if why:
            bad.append(f"{name}: {why}")
    report("decode-host-cases", bad, f"{len(shapes)} steps (dense and shuffled pages, 1-3 query rows, causal, "
           "appends, an empty sequence) equal a float64 attention over the same keys")

    before = dict(CALLS)
    # a signature no case above had: 12 heads, a pool of 10 pages
    q = gpu(torch.randn(2, 1, 12, 64, generator=g).half())
    kc, vc = (gpu(torch.randn(10, 16, 2, 64, generator=g).half()) for _ in range(2))
    table = gpu(torch.arange(8, dtype=torch.int32).view(2, 4))
    for n in range(5):
        decode_op.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=gpu(torch.tensor([n + 1, 60], dtype=torch.int32)),
                                          block_table=table)
    asked = {k: CALLS[k] - before[k] for k in CALLS}
    plan_bad = [f"{k} asked {asked[k]} times in 5 calls of one signature" for k in ("num_splits", "check",
                                                                                 "workspace_bytes") if asked[k] != 1]
    if asked["decode"] != 5:
        plan_bad.append(f"{asked['decode']} launches for 5 calls")
    report("decode-host-plan", plan_bad, "the split rule, the check and the workspace size asked once for 5 calls "
           f"of one signature, {FakeLibrary.SPLITS} splits with a workspace that holds their partials")

    steps(g)

    err_bad = []
    for lens, want in (([10, 65], "do not fit a cache of 64"), ([-1, 3], "do not fit a cache of 64")):
        try:
            decode_op.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=gpu(torch.tensor(lens, dtype=torch.int32)),
                                              block_table=table, check_tables=True)
            err_bad.append(f"cache_seqlens {lens} accepted")
        except ValueError as e:
            if want not in str(e) or "\n" in str(e):
                err_bad.append(f"cache_seqlens {lens}: {e}")
    wrong = table.clone()
    wrong[1, 2] = 99
    launches = CALLS["decode"]
    for kw, want in ((dict(block_table=wrong, check_tables=True), "block_table[1][2] = 99"),
                     (dict(block_table=table, num_splits=129), "num_splits=129")):
        try:
            decode_op.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=gpu(torch.tensor([10, 60], dtype=torch.int32)),
                                              **kw)
            err_bad.append(f"{want} accepted")
        except ValueError as e:
            if want not in str(e):
                err_bad.append(f"{want}: said {e}")
    if CALLS["decode"] != launches:
        err_bad.append("a refused call launched")
    report("decode-host-errors", err_bad, "lengths past the table, a page outside the pool (check_tables) and "
           "129 splits refused in one line, before any launch")


if __name__ == "__main__":
    main()
