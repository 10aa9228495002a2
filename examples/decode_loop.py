#!/usr/bin/env python3
"""examples/decode_loop.py -- a serving engine's decode loop on flashattn_stages:
packed prompts prefilled, then one decoding step captured in a CUDA graph and
replayed once per token.

    make build/libfa_gpu.so                                  (or: pip install .)
    PYTHONPATH=python python3 examples/decode_loop.py        (a CUDA GPU)
    PYTHONPATH=python python3 examples/decode_loop.py --page 0 --dtype fp16 --head-dim 64

Flags: --dtype fp16|bf16 (bf16), --batch B (4), --heads H (32), --kv-heads
H_kv (8; H a multiple of it), --head-dim 64|128 (128), --prompt-lens a comma
list of B lengths >= 1 (37,300,1000,5), --steps (32), --page (64; 0 = an
unpaged cache, else the page_block_size of a paged one: 16 to 256, a power of
two), --seed (0).

What it shows, in the order a server runs it:
  prefill  B prompts of different lengths packed along the rows: q (total, H,
           d), k, v (total, H_kv, d), cu_seqlens int32 (B + 1,), through
           flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_len,
           max_len, causal=True). Each prompt's k, v are then written into
           the KV cache: unpaged (B, capacity, H_kv, d), or paged
           (num_blocks, page, H_kv, d) with an int32 block_table (B,
           capacity / page) naming the blocks in shuffled order;
           cache_seqlens (int32, (B,)) = the prompt lengths.
  decode   each step is ONE call flash_attn_with_kvcache(q, k_cache, v_cache,
           k, v, cache_seqlens=..., block_table=..., causal=True) with q (B, 1,
           H, d), k, v (B, 1, H_kv, d): it writes k, v into the cache at row
           cache_seqlens[b] itself and attends over rows 0 .. cache_seqlens[b].
           It does not advance cache_seqlens: the caller does, in place on the
           device (cache_seqlens += 1), so the graph sees the new lengths.
           The step is captured once in a torch.cuda.CUDAGraph (after one
           warm-up call on a side stream) with static q, k, v buffers that the
           loop writes before each replay; nothing in the step reads the GPU
           on the host. The next token's q, k, v come from a toy model: the
           previous step's out, RMS-normalised, through fixed random
           projections, so each step depends on the last (the first step's
           input is the prefill's out at each prompt's last row).
Checks: every replayed step's out, and the cache after the loop, against the
same steps called eagerly (no graph) on a copy of the cache, bitwise; the
last step against float64 (PyTorch SDPA's math backend on the keys and values
gathered from the cache: with one query row the bottom-right causal mask sees
every key up to cache_seqlens), error max|x - ref| / max|ref|, beside
PyTorch's own SDPA in the same dtype on the same inputs. Time per step (CUDA
events; graph replay and eager call) is information only.

Prints the problem, the two checks and the times, then "ok" (exit 0) when the
replay is bitwise equal to eager and the error is at most max(2 x PyTorch's,
eps/2) (eps = 2^-10 fp16, 2^-7 bf16), else "MISMATCH" (exit 1). A bad flag,
or no torch, CUDA GPU, flashattn_stages or its library: one line, exit 2.
run(args) does the work and returns the figures (tests/gpu/test_decode_op.py
calls it).
"""
import argparse
import math
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:            # said in one line by missing()
    torch = None

PROG = "decode_loop.py"
PAGES = (0, 16, 32, 64, 128, 256)
TIMED_STEPS = 100


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"{PROG}: error: {message}", file=sys.stderr)
        sys.exit(2)


def parse_args(argv):
    """The flags (see the module's text); one line and exit 2 on a bad one."""
    ap = _Parser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="bf16")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, choices=(64, 128), default=128)
    ap.add_argument("--prompt-lens", default="37,300,1000,5")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        a.prompt_lens = [int(x) for x in a.prompt_lens.split(",")]
    except ValueError:
        ap.error(f"--prompt-lens {a.prompt_lens!r}: expected a comma list of integers")
    if a.batch < 1 or len(a.prompt_lens) != a.batch:
        ap.error(f"--batch {a.batch} and --prompt-lens of {len(a.prompt_lens)}: expected one length per sequence")
    if min(a.prompt_lens) < 1:
        ap.error("--prompt-lens: every prompt has at least one token")
    if a.heads < 1 or a.kv_heads < 1 or a.heads % a.kv_heads:
        ap.error(f"--heads {a.heads}, --kv-heads {a.kv_heads}: expected H a multiple of H_kv, both >= 1")
    if a.steps < 1:
        ap.error(f"--steps {a.steps}: expected >= 1")
    if a.page not in PAGES:
        ap.error(f"--page {a.page}: expected 0 (unpaged) or one of 16, 32, 64, 128, 256")
    return a


def missing():
    """What the example cannot run without, in one line; None when it can run."""
    if torch is None:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    try:
        from flashattn_stages import fa
    except ImportError:
        return "the package flashattn_stages is not importable (pip install ., or PYTHONPATH=python)"
    try:
        lib = fa.library()
    except fa.FaError as e:
        return str(e)
    if not lib.has_decode:
        return f"{fa.library_path()} has no decode kernels (make build/libfa_gpu.so)"
    return None


def new_cache(args, dtype, g):
    """(k_cache, v_cache, block_table or None): room for each prompt and
    every step; stale random rows past cache_seqlens, which no step reads."""
    B, H_kv, d, page = args.batch, args.kv_heads, args.head_dim, args.page
    unit = page or 16            # an unpaged cache's capacity: a multiple of 16
    cap = -(-(max(args.prompt_lens) + args.steps) // unit) * unit
    if page:
        blocks = B * (cap // page)
        table = torch.randperm(blocks, generator=g, device="cuda").to(torch.int32).view(B, cap // page)
        shape = (blocks, page, H_kv, d)
    else:
        table, shape = None, (B, cap, H_kv, d)
    kc = torch.randn(shape, generator=g, device="cuda").to(dtype)
    vc = torch.randn(shape, generator=g, device="cuda").to(dtype)
    return kc, vc, table


def write_prompts(kc, vc, table, k, v, prompt_lens):
    """Each prompt's k, v (packed rows) into its cache rows 0 .. len - 1:
    through the block table's pages, or row b of the unpaged cache."""
    dev = k.device
    lens = torch.tensor(prompt_lens, device=dev)
    b_of = torch.repeat_interleave(torch.arange(len(prompt_lens), device=dev), lens)
    pos = torch.cat([torch.arange(n, device=dev) for n in prompt_lens])
    if table is None:
        idx = (b_of, pos)
    else:
        page = kc.shape[1]
        idx = (table.long()[b_of, pos // page], pos % page)
    kc[idx] = k
    vc[idx] = v


def prefill(args, kc, vc, table, dtype, g):
    """The prompts through flash_attn_varlen_func, their k, v into the cache;
    (each prompt's out at its last row (B, 1, H, d), cache_seqlens (B,) int32)."""
    from flashattn_stages import flash_attn_varlen_func
    H, H_kv, d, lens = args.heads, args.kv_heads, args.head_dim, args.prompt_lens
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32, device="cuda")
    cu[1:] = torch.cumsum(seqlens, 0)
    total = sum(lens)
    q = torch.randn(total, H, d, generator=g, device="cuda").to(dtype)
    k = torch.randn(total, H_kv, d, generator=g, device="cuda").to(dtype)
    v = torch.randn(total, H_kv, d, generator=g, device="cuda").to(dtype)
    out = flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)   # (total, H, d)
    write_prompts(kc, vc, table, k, v, lens)
    return out[cu[1:].long() - 1].unsqueeze(1), seqlens


class ToyModel:
    """The next token's q (B, 1, H, d), k, v (B, 1, H_kv, d) from the last
    step's out (B, 1, H, d): RMS-normalised per sequence, then fixed random
    projections -- a stand-in for the layers of a model, deterministic."""

    def __init__(self, H, H_kv, d, dtype, g):
        n = H * d
        self.heads = (H, H_kv, H_kv)
        self.w = [(torch.randn(n, h * d, generator=g, device="cuda") / math.sqrt(n)).to(dtype)
                  for h in self.heads]

    def __call__(self, out):
        B = out.shape[0]
        x = out.reshape(B, -1).float()
        x = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).to(out.dtype)
        return tuple((x @ w).view(B, 1, h, -1) for w, h in zip(self.w, self.heads))


def decode_step(q, k, v, kc, vc, seqlens, table):
    """One decoding step: k, v appended at row seqlens[b], q attends over rows
    0 .. seqlens[b]. The caller advances seqlens."""
    from flashattn_stages import flash_attn_with_kvcache
    return flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table, causal=True)


class CapturedStep:
    """decode_step captured once in a CUDA graph over static q, k, v buffers,
    the cache, seqlens and the table (their addresses are baked into the
    graph): step(q, k, v) copies the inputs in, replays, and returns out,
    which the next replay overwrites."""

    def __init__(self, qkv, kc, vc, seqlens, table):
        self.q, self.k, self.v = (t.clone() for t in qkv)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            # warm-up off the graph (library load, plans, allocator); it writes
            # k, v at row seqlens[b], the row the first replay writes again
            decode_step(self.q, self.k, self.v, kc, vc, seqlens, table)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = decode_step(self.q, self.k, self.v, kc, vc, seqlens, table)

    def __call__(self, q, k, v):
        self.q.copy_(q)
        self.k.copy_(k)
        self.v.copy_(v)
        self.graph.replay()
        return self.out


def decode_loop(model, x, steps, step, seqlens):
    """steps tokens: model -> step -> seqlens += 1 (on the device); each
    step's out (copied) and the last step's q."""
    outs = []
    for _ in range(steps):
        q, k, v = model(x)
        x = step(q, k, v).clone()
        seqlens += 1
        outs.append(x)
    return outs, q


def gathered(cache, table, b, n):
    """Sequence b's cache rows 0 .. n - 1, (n, H_kv, d)."""
    if table is None:
        return cache[b, :n]
    return cache[table[b].long()].reshape(-1, *cache.shape[2:])[:n]


def reference(q, kc, vc, seqlens, table, dtype):
    """q (B, 1, H, d) over each sequence's cache rows 0 .. seqlens[b] - 1 by
    PyTorch's SDPA in dtype (float64: its math backend, the reference; q's
    dtype: the backend SDPA picks). One query row: every key is visible."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, _, H, d = q.shape
    out = torch.empty(B, 1, H, d, dtype=dtype, device=q.device)
    for b, n in enumerate(seqlens.tolist()):
        k = gathered(kc, table, b, n).transpose(0, 1).to(dtype)           # (H_kv, n, d)
        v = gathered(vc, table, b, n).transpose(0, 1).to(dtype)
        k, v = (t.repeat_interleave(H // t.shape[0], dim=0) for t in (k, v))
        qb = q[b].transpose(0, 1).to(dtype)                                # (H, 1, d)
        if dtype == torch.float64:
            with sdpa_kernel(SDPBackend.MATH):
                o = F.scaled_dot_product_attention(qb[None], k[None], v[None])[0]
        else:
            o = F.scaled_dot_product_attention(qb[None], k[None], v[None])[0]
        out[b] = o.transpose(0, 1)
    return out


def rel_err(x, ref):
    """max|x - ref| / max|ref|."""
    return ((x.double() - ref).abs().max() / ref.abs().max()).item()


def time_ms(fn, reps=TIMED_STEPS):
    """Milliseconds per call of fn over reps calls (CUDA events, after 3 warm-up calls)."""
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def run(args):
    """Prefill, the decode loop replayed and eager, the checks and the times
    (see the module's text); a dict: bitwise, steps_equal, cache_equal, err,
    err_torch, eps, allowed, graph_ms, eager_ms, capacity, and last (the last
    step's q, out, cache, cache_seqlens after it, block_table)."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    g = torch.Generator(device="cuda")
    g.manual_seed(args.seed)
    kc, vc, table = new_cache(args, dtype, g)
    x0, start = prefill(args, kc, vc, table, dtype, g)
    model = ToyModel(args.heads, args.kv_heads, args.head_dim, dtype, g)
    # eager, on a copy of the cache
    ke, ve, lens_e = kc.clone(), vc.clone(), start.clone()
    eager, _ = decode_loop(model, x0, args.steps, lambda q, k, v: decode_step(q, k, v, ke, ve, lens_e, table),
                           lens_e)
    # captured once, replayed once per token
    lens_g = start.clone()
    step = CapturedStep(model(x0), kc, vc, lens_g, table)
    replayed, q_last = decode_loop(model, x0, args.steps, step, lens_g)
    same = sum(torch.equal(a, b) for a, b in zip(replayed, eager))
    cache_same = torch.equal(kc, ke) and torch.equal(vc, ve)
    ref = reference(q_last, kc, vc, lens_g, table, torch.float64)
    err = rel_err(replayed[-1], ref)
    err_torch = rel_err(reference(q_last, kc, vc, lens_g, table, dtype), ref)
    eps = 2.0 ** -10 if dtype == torch.float16 else 2.0 ** -7
    last = dict(q=q_last.clone(), out=replayed[-1], k_cache=kc.clone(), v_cache=vc.clone(),
                cache_seqlens=lens_g.clone(), block_table=table)
    # times: the same step again and again at the prompts' lengths (the cache's
    # rows there are overwritten; the checks above are done)
    lens_g.copy_(start)
    graph_ms = time_ms(step.graph.replay)
    eager_ms = time_ms(lambda: decode_step(step.q, step.k, step.v, kc, vc, lens_g, table))
    return dict(bitwise=same == args.steps and cache_same, steps_equal=same, cache_equal=cache_same, err=err,
                err_torch=err_torch, eps=eps, allowed=max(2 * err_torch, eps / 2), graph_ms=graph_ms,
                eager_ms=eager_ms, capacity=kc.shape[1] if table is None else table.shape[1] * args.page,
                last=last)


def report(args, r):
    """The lines the program prints; True when both checks hold."""
    lens = ",".join(str(n) for n in args.prompt_lens)
    if args.page:
        layout = (f"paged: {args.batch} x {r['capacity'] // args.page} blocks of {args.page} rows, "
                  "block_table shuffled")
    else:
        layout = f"unpaged ({args.batch}, {r['capacity']}, {args.kv_heads}, {args.head_dim})"
    print(f"{PROG}: {args.dtype}, B {args.batch}, H {args.heads}, H_kv {args.kv_heads}, d {args.head_dim}, "
          f"prompts {lens} (prefill: flash_attn_varlen_func, packed), {args.steps} decode steps; cache {layout}")
    print(f"graph replay vs eager: {r['steps_equal']}/{args.steps} steps bitwise equal, "
          f"cache after the loop bitwise equal: {r['cache_equal']}")
    print(f"last step vs float64: err {r['err']:.3g} (PyTorch SDPA in {args.dtype}: {r['err_torch']:.3g}; "
          f"limit max(2 x that, eps/2) = {r['allowed']:.3g})")
    print(f"time per step: graph replay {r['graph_ms']:.4f} ms, eager call {r['eager_ms']:.4f} ms "
          f"(CUDA events over {TIMED_STEPS} steps; information, not a check)")
    ok = r["bitwise"] and r["err"] <= r["allowed"]
    print("ok" if ok else "MISMATCH")
    return ok


def main(argv):
    args = parse_args(argv)
    why = missing()
    if why:
        print(f"{PROG}: cannot run: {why}", file=sys.stderr)
        return 2
    return 0 if report(args, run(args)) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
