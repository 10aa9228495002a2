#!/usr/bin/env python3
"""tests/gpu/test_decode_op.py -- the decode entry (python/flashattn_stages/decode_op.py) against PyTorch.

One line per test in the protocol of tests/run.sh (PASS / FAIL: why / SKIP: why).
Part of `make test` and `make gpu-test`; SKIP lines, never PASS, where torch, a
CUDA GPU or build/libfa_gpu.so (with the decode kernels) is missing.

On fresh random inputs (the seed is printed; FA_SEED=N replays), for each case
of CASES in float16 and bfloat16: kvcache_decode's out and
softmax_lse against reference_kvcache in float64 (SDPA's math backend per
sequence on the dense K, V gathered from the pages, core/mask.h's mask), with
pages in shuffled order and sequences of length 0 and 1 in the batch.
Error = max |x - ref| / max |ref|:
    out    <= 2 x the error of PyTorch's own SDPA in the same dtype on the same
           inputs, or eps/2 where that is larger (a correctly rounded result:
           eps = 2^-10 fp16, 2^-7 bf16) -- the twice-PyTorch rule
    lse    <= 1e-5 x max(1, max |lse_ref|) (fp32)
    rows that see no key: out = 0 and lse = -inf exactly; no NaN anywhere
           (outputs poisoned before the call)
Also: num_splits = 1 against the rule's and against 7 splits (bitwise where
every key lies in split 0: sequences of at most 64 keys); the unpaged layout
(B, seqlen_cache, H_kv, d) against the same cache paged; bad calls raise a
ValueError of one line starting "flash_attn_with_kvcache:" (check_tables=True
for the tables' checks).
decode_op-graph: a decode loop captured in a CUDA graph and replayed: each
step flash_attn_with_kvcache with its defaults (num_splits=0) appends one
token's k, v (with rotary embedding) at cache_seqlens and attends; between
replays the caller writes the next q, k, v and advances cache_seqlens in
place. Each replayed step's out equals the same step called eagerly on a
copy of the cache, bitwise, and the cache after the loop equals the eager
copy's, bitwise (no host synchronization inside the step: capture fails
otherwise); paged and unpaged caches, float16 and bfloat16.
decode_op-steps: a serving loop's step (one query row, nothing appended)
repeated with one signature, q and cache_seqlens written in place: each
step through flash_attn_with_kvcache (all but the first straight to the
launch) bitwise equal to kvcache_decode on the same tensors; then that
step captured in a CUDA graph (through the same short path: kvcache_decode
is not called) and replayed on new q and lengths, bitwise equal again;
paged and unpaged caches, float16 and bfloat16.
decode_op-loop: examples/decode_loop.py (imported by path, its run(args)):
packed prompts 5, 130, 300 prefilled, then 8 steps of B 3, H 8, H_kv 2, d 64
and 128, unpaged and paged (pages of 64), float16 and bfloat16. Its replayed
steps and cache bitwise equal to its eager ones; its last step against
reference_kvcache in float64 within the twice-PyTorch rule above; the error
it reports equal to this one (within 1e-9).
"""
import contextlib
import importlib.util
import math
import os
import sys
import traceback

import skips   # tests/gpu/, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUPS = ["decode_op-errors", "decode_op-cases", "decode_op-splits", "decode_op-unpaged", "decode_op-graph",
          "decode_op-loop"]

torch = skips.need_torch(GROUPS)
if not torch.cuda.is_available():
    skips.skip_all(GROUPS, "no CUDA GPU")
if not os.path.exists(os.path.join(ROOT, "build", "libfa_gpu.so")):
    skips.skip_all(GROUPS, "build/libfa_gpu.so is not built")
from flashattn_stages import decode_op, flash_op  # noqa: E402

flash_op.poison_outputs = True
DEV = "cuda"
SEED = int(os.environ.get("FA_SEED", int.from_bytes(os.urandom(4), "little")))
print(f"test_decode_op: seed {SEED} (FA_SEED={SEED} replays)")
EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}

# name, B, H, H_kv, seqlen_q, d, page, capacity, causal, window
CASES = [
    ("gqa4-page16", 4, 32, 8, 1, 128, 16, 3000, False, (-1, -1)),
    ("mha-page64-causal-4rows", 3, 8, 8, 4, 64, 64, 1500, True, (-1, -1)),
    ("gqa8-page256-window", 4, 16, 2, 8, 128, 256, 2000, False, (50, 0)),
    ("mqa-16rows-page32", 2, 8, 1, 16, 64, 32, 700, True, (-1, -1)),
]


def make(B, H, H_kv, Sq, d, page, cap, dtype, g, short=False):
    pps = (cap + page - 1) // page
    num_pages = B * pps + 3
    q = torch.randn(B, Sq, H, d, generator=g, device=DEV).to(dtype)
    kc = torch.randn(num_pages, page, H_kv, d, generator=g, device=DEV).to(dtype)
    vc = torch.randn(num_pages, page, H_kv, d, generator=g, device=DEV).to(dtype)
    perm = torch.randperm(num_pages, generator=g, device=DEV)[:B * pps]
    table = perm.view(B, pps).to(torch.int32)
    hi = min(cap, 64) if short else cap
    lens = torch.randint(0, hi + 1, (B,), generator=g, device=DEV)
    if B >= 3:
        lens[0], lens[1] = 0, 1
    if not short:
        lens[-1] = cap
    return q, kc, vc, lens.to(torch.int32), table


def rel(x, ref):
    x, ref = x.double(), ref.double()
    both_inf = torch.isinf(ref) & (x == ref)
    diff = torch.where(both_inf, torch.zeros_like(ref), (x - ref).abs())
    scale = ref[torch.isfinite(ref)].abs().max().item() if torch.isfinite(ref).any() else 1.0
    return diff.max().item() / max(scale, 1e-300)


def verdict(ok, tag, text):
    """One line of the protocol: PASS or FAIL, the test's name and what it
    found, the seed on a FAIL."""
    print(f"{'PASS' if ok else 'FAIL'} {tag}: {text}" + ("" if ok else f" [seed {SEED}]"))


@contextlib.contextmanager
def one_line(tag):
    """A test's body: an exception in it is one FAIL line naming it (with
    the seed), then its traceback; never a traceback alone."""
    try:
        yield
    except Exception as e:  # noqa: BLE001
        print(f"FAIL {tag}: {type(e).__name__}: {e} [seed {SEED}]")
        traceback.print_exc()


def check_case(name, dtype, args, causal, window, g):
    q, kc, vc, lens, table = args
    out, lse = decode_op.kvcache_decode(q, kc, vc, lens, table, causal=causal, window_size=window,
                                                 return_softmax_lse=True)
    ref, rlse = decode_op.reference_kvcache(q, kc, vc, lens, table, causal=causal, window_size=window)
    torch_out, _ = decode_op.reference_kvcache(q, kc, vc, lens, table, causal=causal, window_size=window,
                                               dtype=dtype)
    e_ours, e_torch = rel(out, ref), rel(torch_out, ref)
    allowed = max(2 * e_torch, EPS[dtype] / 2)
    fin = torch.isfinite(rlse)
    L_scale = max(1.0, rlse[fin].abs().max().item()) if fin.any() else 1.0
    e_L = ((lse.double() - rlse).abs()[fin].max().item() / L_scale) if fin.any() else 0.0
    empty_ok = bool((lse[~fin] == -math.inf).all()) and bool((out.transpose(1, 2)[~fin] == 0).all())
    nan = int(torch.isnan(out).sum()) + int(torch.isnan(lse).sum())
    ok = e_ours <= allowed and e_L <= 1e-5 and empty_ok and nan == 0
    verdict(ok, f"decode_op-cases {name} {str(dtype)[6:]}",
            f"out err {e_ours:.3g} <= {allowed:.3g} (2 x torch {e_torch:.3g}, floor eps/2), lse err {e_L:.3g} "
            f"<= 1e-5, empty rows exact {empty_ok}, {nan} NaN")


def main():
    g = torch.Generator(device=DEV)
    g.manual_seed(SEED)
    # errors
    errs = []
    q, kc, vc, lens, table = make(2, 8, 2, 1, 64, 16, 100, torch.bfloat16, g)

    def expect(why, **kw):
        a = dict(q=q, k_cache=kc, v_cache=vc, cache_seqlens=lens, block_table=table, check_tables=True)
        a.update(kw)
        try:
            decode_op.kvcache_decode(**a)
            errs.append(f"{why}: no error")
        except ValueError as e:
            s = str(e)
            if not s.startswith("flash_attn_with_kvcache:") or "\n" in s:
                errs.append(f"{why}: {s!r}")
    expect("fp32", q=q.float(), k_cache=kc.float(), v_cache=vc.float())
    expect("d 32", q=q[..., :32].contiguous(), k_cache=kc[..., :32].contiguous(), v_cache=vc[..., :32].contiguous())
    bad = table.clone(); bad[0, 0] = kc.shape[0]
    expect("table entry past the pool", block_table=bad)
    expect("length past capacity", cache_seqlens=torch.tensor([5, table.shape[1] * 16 + 1], dtype=torch.int32, device=DEV))
    expect("splits 129", num_splits=129)
    expect("page 8", k_cache=kc.view(-1, 8, *kc.shape[2:]), v_cache=vc.view(-1, 8, *vc.shape[2:]),
           block_table=torch.zeros(2, 26, dtype=torch.int32, device=DEV))
    expect("17 rows", q=torch.zeros(2, 17, 8, 64, dtype=torch.bfloat16, device=DEV))
    print(("PASS decode_op-errors (7 bad calls, one-line ValueErrors)" if not errs
           else "FAIL decode_op-errors: " + "; ".join(errs)))
    for dtype in (torch.float16, torch.bfloat16):
        for name, B, H, H_kv, Sq, d, page, cap, causal, window in CASES:
            with one_line(f"decode_op-cases {name} {str(dtype)[6:]}"):
                check_case(name, dtype, make(B, H, H_kv, Sq, d, page, cap, dtype, g), causal, window, g)
        # splits: 1 vs the rule and 7; bitwise on short sequences
        q, kc, vc, lens, table = make(5, 16, 4, 2, 128, 32, 64, dtype, g, short=True)
        o1 = decode_op.kvcache_decode(q, kc, vc, lens, table, causal=True, num_splits=1)
        o7 = decode_op.kvcache_decode(q, kc, vc, lens, table, causal=True, num_splits=7)
        q, kc, vc, lens2, table2 = make(3, 16, 4, 2, 128, 32, 5000, dtype, g)
        a = decode_op.kvcache_decode(q, kc, vc, lens2, table2, num_splits=1)
        b = decode_op.kvcache_decode(q, kc, vc, lens2, table2, num_splits=0)
        ref, _ = decode_op.reference_kvcache(q, kc, vc, lens2, table2)
        e1, e0 = rel(a, ref), rel(b, ref)
        ok = torch.equal(o1, o7) and e0 <= max(EPS[dtype], 2 * e1)
        verdict(ok, f"decode_op-splits {str(dtype)[6:]}", f"7 splits bitwise = 1 on keys in split 0: "
                f"{torch.equal(o1, o7)}; rule's splits err {e0:.3g}, one split {e1:.3g}")
        # unpaged layout = the same cache paged
        B, S = 3, 512
        kd = torch.randn(B, S, 2, 64, generator=g, device=DEV).to(dtype)
        vd = torch.randn(B, S, 2, 64, generator=g, device=DEV).to(dtype)
        q = torch.randn(B, 1, 8, 64, generator=g, device=DEV).to(dtype)
        lens3 = torch.tensor([0, 77, 512], dtype=torch.int32, device=DEV)
        u = decode_op.kvcache_decode(q, kd, vd, lens3, num_splits=3)
        t = torch.arange(B * 2, dtype=torch.int32, device=DEV).view(B, 2)
        pg = decode_op.kvcache_decode(q, kd.reshape(B * 2, 256, 2, 64), vd.reshape(B * 2, 256, 2, 64),
                                               lens3, t, num_splits=3)
        print(f"{'PASS' if torch.equal(u, pg) else 'FAIL'} decode_op-unpaged {str(dtype)[6:]}: "
              f"(B, seqlen_cache, H_kv, d) equals the same cache as pages of 256, bitwise")
        for paged in (False, True):
            graph_loop(dtype, paged, g)
            repeated_steps(dtype, paged, g)
    example_loops()
    return 0


def graph_loop(dtype, paged, g, B=3, H=16, H_kv=4, d=128, cap=1024, steps=6):
    """decode_op-graph for one dtype and layout (see the module's text)."""
    tag = f"decode_op-graph {'paged' if paged else 'dense'} {str(dtype)[6:]}"
    with one_line(tag):
        page = 64
        if paged:
            pps = cap // page
            perm = torch.randperm(B * pps, generator=g, device=DEV).to(torch.int32)
            table = perm.view(B, pps).contiguous()
            kc = torch.randn(B * pps, page, H_kv, d, generator=g, device=DEV).to(dtype)
        else:
            table = None
            kc = torch.randn(B, cap, H_kv, d, generator=g, device=DEV).to(dtype)
        vc = torch.randn(kc.shape, generator=g, device=DEV).to(dtype)
        start = torch.tensor([5, 300, 900], dtype=torch.int32, device=DEV)
        cos = torch.rand(cap, 32, generator=g, device=DEV)
        sin = torch.rand(cap, 32, generator=g, device=DEV)
        draws = [[torch.randn(B, 1, n, d, generator=g, device=DEV).to(dtype) for n in (H, H_kv, H_kv)]
                 for _ in range(steps)]
        kw = dict(rotary_cos=cos, rotary_sin=sin, block_table=table, causal=True)
        # eager, on copies
        ke, ve, lens_e, eager = kc.clone(), vc.clone(), start.clone(), []
        for q, k, v in draws:
            eager.append(decode_op.flash_attn_with_kvcache(q, ke, ve, k, v, cache_seqlens=lens_e, **kw).clone())
            lens_e += 1
        # captured: static inputs written before each replay
        lens_g = start.clone()
        sq, sk, sv = (torch.empty_like(t) for t in draws[0])
        sq.copy_(draws[0][0]); sk.copy_(draws[0][1]); sv.copy_(draws[0][2])
        kg, vg = kc.clone(), vc.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):             # warm-up off the graph: loads, plans, allocator
            decode_op.flash_attn_with_kvcache(sq, kg.clone(), vg.clone(), sk, sv, cache_seqlens=lens_g.clone(), **kw)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out_g = decode_op.flash_attn_with_kvcache(sq, kg, vg, sk, sv, cache_seqlens=lens_g, **kw)
        same = []
        for i, (q, k, v) in enumerate(draws):
            sq.copy_(q); sk.copy_(k); sv.copy_(v)
            graph.replay()
            same.append(torch.equal(out_g, eager[i]))
            lens_g += 1
        torch.cuda.synchronize()
        cache_same = torch.equal(kg, ke) and torch.equal(vg, ve)
        ok = all(same) and cache_same
        verdict(ok, tag, f"{steps} replayed steps bitwise equal to eager: {sum(same)}/{steps}; cache after the "
                f"loop bitwise equal: {cache_same}")


def repeated_steps(dtype, paged, g, B=2, H=16, H_kv=4, d=128, cap=1024, steps=3):
    """decode_op-steps for one dtype and layout (see the module's text)."""
    tag = f"decode_op-steps {'paged' if paged else 'dense'} {str(dtype)[6:]}"
    full_path = decode_op.kvcache_decode
    calls = []

    def counted(*a, **kw):
        calls.append(1)
        return full_path(*a, **kw)
    try:
        with one_line(tag):
            page = 64
            if paged:
                n = B * cap // page
                table = torch.randperm(n, generator=g, device=DEV).to(torch.int32).view(B, cap // page).contiguous()
                kc = torch.randn(n, page, H_kv, d, generator=g, device=DEV).to(dtype)
            else:
                table = None
                kc = torch.randn(B, cap, H_kv, d, generator=g, device=DEV).to(dtype)
            vc = torch.randn(kc.shape, generator=g, device=DEV).to(dtype)
            q = torch.empty(B, 1, H, d, dtype=dtype, device=DEV)
            lens = torch.empty(B, dtype=torch.int32, device=DEV)

            def draw():   # the caller's next step, written in place
                q.copy_(torch.randn(B, 1, H, d, generator=g, device=DEV))
                lens.copy_(torch.randint(0, cap + 1, (B,), generator=g, device=DEV))

            def step():
                return decode_op.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table)
            decode_op.kvcache_decode = counted
            eager = []
            for _ in range(steps):
                draw()
                out = step()
                eager.append(torch.equal(out, full_path(q, kc, vc, lens, table)))
            eager_full = len(calls)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out_g = step()
            captured_full = len(calls) - eager_full
            replayed = []
            for _ in range(steps):
                draw()
                graph.replay()
                replayed.append(torch.equal(out_g, full_path(q, kc, vc, lens, table)))
            torch.cuda.synchronize()
            ok = all(eager) and all(replayed) and eager_full <= 1 and captured_full == 0
            verdict(ok, tag, f"{sum(eager)}/{steps} eager steps and {sum(replayed)}/{steps} graph replays bitwise "
                    f"equal to kvcache_decode; the full path ran {eager_full} time(s) in {steps} eager steps (at most "
                    f"1) and {captured_full} in the capture (0)")
    finally:
        decode_op.kvcache_decode = full_path


def load_example():
    """examples/decode_loop.py as a module, by its path."""
    spec = importlib.util.spec_from_file_location("decode_loop", os.path.join(ROOT, "examples", "decode_loop.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def example_loops():
    """decode_op-loop for every dtype, head dimension and layout (see the module's text)."""
    try:
        ex = load_example()
    except Exception as e:  # noqa: BLE001  (one FAIL line, never a traceback alone)
        print(f"FAIL decode_op-loop: examples/decode_loop.py does not load: {type(e).__name__}: {e}")
        traceback.print_exc()
        return
    for dtype in ("fp16", "bf16"):
        for d in (64, 128):
            for page in (0, 64):
                example_loop(ex, dtype, d, page)


def example_loop(ex, dtype, d, page):
    """One run of the example, judged by this file's reference and rule."""
    tag = f"decode_op-loop {'paged' if page else 'dense'} d{d} {dtype}"
    with one_line(tag):
        args = ex.parse_args(["--dtype", dtype, "--batch", "3", "--heads", "8", "--kv-heads", "2",
                              "--head-dim", str(d), "--prompt-lens", "5,130,300", "--steps", "8",
                              "--page", str(page), "--seed", str(SEED)])
        r = ex.run(args)
        last = r["last"]
        kc, vc, table = last["k_cache"], last["v_cache"], last["block_table"]
        if table is None:      # the unpaged cache as one page per sequence
            table = torch.arange(kc.shape[0], dtype=torch.int32, device=DEV).view(-1, 1)
        refs = [decode_op.reference_kvcache(last["q"], kc, vc, last["cache_seqlens"], table, causal=True,
                                            dtype=dt)[0] for dt in (torch.float64, last["q"].dtype)]
        e_ours, e_torch = rel(last["out"], refs[0]), rel(refs[1], refs[0])
        allowed = max(2 * e_torch, EPS[last["q"].dtype] / 2)
        same_err = abs(r["err"] - e_ours) <= 1e-9
        ok = r["bitwise"] and e_ours <= allowed and same_err
        verdict(ok, tag, f"{r['steps_equal']}/8 replayed steps and cache ({r['cache_equal']}) bitwise equal to "
                f"eager; last step err {e_ours:.3g} <= {allowed:.3g} (2 x torch {e_torch:.3g}, floor eps/2); the "
                f"example's own err {r['err']:.3g} agrees: {same_err}; {r['graph_ms']:.3f} ms a replay, "
                f"{r['eager_ms']:.3f} eager (not checked)")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001
        print(f"FAIL decode_op-cases: {type(e).__name__}: {e} [seed {SEED}]")
        traceback.print_exc()
        sys.exit(0)
