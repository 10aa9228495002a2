#!/usr/bin/env python3
"""bench_decode.py -- stage 8's decode kernels against the memory's bandwidth and SDPA.

    python3 scripts/gpu/bench_decode.py --csv data/gpu/decode.csv     (make gpu-data-apps; an H200)
    python3 scripts/gpu/bench_decode.py --quick                        (a few rows, no CSV)

One decoding step, seqlen_q = 1, bf16, d = 128, H = 32 query heads on H_kv = 8
or 32 key/value heads, B = 1 to 64 sequences of seqlen_k = 1k to 128k keys
each (every sequence at the full length, so SDPA needs no padding), pages of
--page-size keys. Measured in the same run, on the same tensors:
  copy              a device-to-device copy of 2 GiB: bytes read + written /
                    time, the bandwidth a kernel that reads each byte once can
                    hope for (the row's gbps; frac_of_copy is 1)
  ours_decode       our package's public entry flash_attn_with_kvcache
                    (python/flashattn_stages/decode_op.py) in its preferred layout: q
                    (B, 1, H, d), the paged cache (pages, page_size, H_kv, d),
                    the block table; num_splits=0, the rule's count
                    (decode_num_splits, core/decode_plan.h); its own layout
                    copies of q and O are part of the call; pages in order
  ours_decode_shuffled  the same with the block table shuffled
  ours_splits       B = 1 and 4, H_kv = 8, seqlen_k 8k and 32k: every split
                    count 1, 2, 4, ..., 128 through the same entry (the rule
                    measured against its alternatives; note says which one
                    the rule takes)
  sdpa_flash, sdpa_efficient, sdpa_cudnn, sdpa_math
                    torch's public scaled_dot_product_attention with one
                    backend, in its preferred layout: q (B, H, 1, d) and K, V
                    (B, H_kv, seqlen_k, d) contiguous, made once, with
                    enable_gqa=True; the backend chosen by sdpa_kernel,
                    entered once around all of its timed calls. A backend
                    that refuses grouped heads runs on K, V expanded to H
                    heads where memory allows, as its own row NAME_expanded
                    (its bytes moved are then H / H_kv times the cache's);
                    math only up to 2 GB of cache
For every row: median_ms (CUDA events, median of --repeats calls, the L2
overwritten before each call -- gpu_timing.flush_l2 zeroes twice the L2, about
100 MB, a few tens of microseconds of GPU work while Python enqueues the call:
host time beyond that is timed, so a call whose host path is longer shows it),
graph_ms (the same call captured once into a CUDA graph and replayed, which
takes the host's overhead out for every implementation alike; empty where
the call cannot be captured, note says why), how_called (the call as timed),
cache_bytes (K and V of all sequences, read once), gbps = cache_bytes /
median_ms, frac_of_copy = gbps / the copy's, and max_abs_diff of the output
against ours_decode's. Inputs are made once per shape, before any timing.
Rows carry provenance columns (scripts/gpu/provenance.py). Shapes whose cache
exceeds --max-cache-gb are skipped with a line; the whole run stops adding
shapes after --budget-s seconds (default 180: under four minutes with set-up).
The CSV is written to a temporary file and moved into place only at the end:
a failed run leaves the old file as it was.
"""
import ctypes
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
import gpu_timing  # noqa: E402  (scripts/)
import provenance as prov  # noqa: E402

COLUMNS = prov.COLUMNS + ["impl", "dtype", "B", "H", "H_kv", "d", "seqlen_k", "page_size", "num_splits", "median_ms",
                          "graph_ms", "how_called", "cache_bytes", "gbps", "frac_of_copy", "repeats", "max_abs_diff", "note"]


def parse_args(argv):
    """The command line -> the flags, or None after a one-line error (exit 2)."""
    ap = gpu_timing.bench_parser(__doc__, "a few shapes, no CSV")
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=180.0)
    ap.add_argument("--max-cache-gb", type=float, default=40.0)
    a = ap.parse_args(argv[1:])
    if not gpu_timing.bench_output(a, "bench_decode.py"):
        return None
    if a.page_size not in (16, 32, 64, 128, 256) or a.repeats < 1:
        print("bench_decode.py: error: --page-size is 16, 32, 64, 128 or 256; --repeats >= 1", file=sys.stderr)
        return None
    return a


class Recorder:
    """Times calls and keeps the rows: one row per timed call, printed as it
    is added. H query heads, head dimension d, page size P, the flags a,
    the provenance columns pv."""

    def __init__(self, torch, a, pv, H, d, P):
        self.torch, self.a, self.pv, self.H, self.d, self.P = torch, a, pv, H, d, P
        self.rows = []

    def timed(self, fn):   # (median ms, graph-replay ms or None, why not) of a.repeats calls, the L2 flushed before each
        ms = gpu_timing.median_ms(self.torch, fn, self.a.repeats, warmup=1)[0]
        gms, why = gpu_timing.graph_ms(self.torch, fn, self.a.repeats, warmup=1)
        return ms, gms, why

    def row(self, impl, B, H_kv, L, splits, t, how, cache_bytes, diff, note, copy_gbps):
        ms, gms, why = t
        gbps = cache_bytes / (ms * 1e-3) / 1e9
        note = "; ".join(x for x in (note, why) if x)
        r = dict(self.pv, impl=impl, dtype="bf16", B=B, H=self.H, H_kv=H_kv, d=self.d, seqlen_k=L, page_size=self.P,
                 num_splits=splits, median_ms=f"{ms:.4f}", graph_ms="" if gms is None else f"{gms:.4f}",
                 how_called=how, cache_bytes=cache_bytes, gbps=f"{gbps:.1f}",
                 frac_of_copy=f"{gbps / copy_gbps:.3f}" if copy_gbps else "", repeats=self.a.repeats,
                 max_abs_diff="" if diff is None else f"{diff:.3e}", note=note)
        self.rows.append(r)
        print(f"{impl:22s} B={B:3d} H_kv={H_kv:2d} seqlen_k={L:6d} splits={splits!s:>3s} {ms:9.4f} ms "
              f"{gbps:8.1f} GB/s  {note}")


def time_copy(torch, rec, dev):
    """The copy's row: 2 GiB read and written; returns its GB/s."""
    n = 1 << 31
    src = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
    dst = torch.empty_like(src)
    t = rec.timed(lambda: dst.copy_(src))
    copy_gbps = 2 * n / (t[0] * 1e-3) / 1e9
    rec.row("copy", 0, 0, 0, "", t, "dst.copy_(src)", 2 * n, None, "device-to-device copy of 2 GiB: bytes read + written",
            copy_gbps)
    del src, dst
    torch.cuda.empty_cache()
    return copy_gbps


def time_ours(torch, decode_op, lib, sms, rec, dev, inputs, B, H_kv, L, cache_bytes, copy_gbps):
    """Our entry's rows at one shape: the rule's splits, the block table
    shuffled, and (at the split shapes) every split count; returns the
    rule's output, the reference of every other row's max_abs_diff."""
    q, kp, vp, lens, table = inputs
    H, d, P = rec.H, rec.d, rec.P
    npg = B * L // P
    p = decode_op.DecodeParams(B, H, H_kv, d, 1, P, L // P, B * L // P, 1.0 / math.sqrt(d), -1, -1)
    rule = lib.fa_decode_num_splits(decode_op.fa.BF16, ctypes.byref(p), L, sms)

    how_ours = ("flashattn_stages.flash_attn_with_kvcache(q (B,1,H,d), k_cache, v_cache (pages,page_size,H_kv,d), "
                "cache_seqlens=, block_table=, num_splits={})")

    def ours(splits, t=table):
        return lambda: decode_op.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=t,
                                                         num_splits=splits)

    base = ours(0)()
    rec.row("ours_decode", B, H_kv, L, rule, rec.timed(ours(0)), how_ours.format(0), cache_bytes, 0.0,
            f"the rule's splits ({sms} SMs, {lib.fa_decode_ctas_per_sm(decode_op.fa.BF16, d)} CTAs each)", copy_gbps)
    shuffled = table.view(-1)[torch.randperm(npg, device=dev)].view(B, L // P).contiguous()
    rec.row("ours_decode_shuffled", B, H_kv, L, rule, rec.timed(ours(0, shuffled)), how_ours.format(0), cache_bytes,
            None, "block table shuffled", copy_gbps)
    if H_kv == 8 and B in (1, 4) and L in (8192, 32768):
        for sp in [1, 2, 4, 8, 16, 32, 64, 128]:
            if sp > max(1, (L // 64) // 2) and sp > 1:
                break
            diff = (ours(sp)().float() - base.float()).abs().max().item()
            rec.row("ours_splits", B, H_kv, L, sp, rec.timed(ours(sp)), how_ours.format(sp), cache_bytes, diff,
                    "the rule's" if sp == rule else "", copy_gbps)
    return base


def time_sdpa(F, sdpa_kernel, backends, rec, q, kd, vd, base, B, H_kv, L, cache_bytes, copy_gbps):
    """SDPA's rows at one shape, one per backend (expanded K, V where a
    backend refuses grouped heads and memory allows)."""
    H, max_cache_gb = rec.H, rec.a.max_cache_gb
    # SDPA's preferred layout, made once: q (B, H, 1, d), K, V (B, H_kv, L, d) contiguous
    qh = q.transpose(1, 2).contiguous()
    kh, vh = kd.transpose(1, 2).contiguous(), vd.transpose(1, 2).contiguous()
    for name, be in backends:
        if name == "sdpa_math" and cache_bytes > 2e9:
            continue
        impl, kk, vv, gqa = name, kh, vh, True
        how = f"scaled_dot_product_attention(q (B,H,1,d), k, v (B,H_kv,L,d) contiguous, enable_gqa=True) " \
              f"in sdpa_kernel({be.name})"
        try:
            with sdpa_kernel(be):
                out = F.scaled_dot_product_attention(qh, kk, vv, enable_gqa=True)
        except RuntimeError:
            if cache_bytes * H / H_kv > max_cache_gb * 1e9 or H_kv == H:
                print(f"{name:22s} B={B:3d} H_kv={H_kv:2d} seqlen_k={L:6d}: refused this problem")
                continue
            impl, gqa = name + "_expanded", False
            kk, vv = kh.repeat_interleave(H // H_kv, dim=1), vh.repeat_interleave(H // H_kv, dim=1)
            how = f"scaled_dot_product_attention(q (B,H,1,d), k, v expanded to (B,H,L,d)) in sdpa_kernel({be.name})"
            try:
                with sdpa_kernel(be):
                    out = F.scaled_dot_product_attention(qh, kk, vv)
            except RuntimeError:
                print(f"{name:22s} B={B:3d} H_kv={H_kv:2d} seqlen_k={L:6d}: refused this problem")
                del kk, vv
                continue
        with sdpa_kernel(be):
            t = rec.timed(lambda kk=kk, vv=vv, gqa=gqa: F.scaled_dot_product_attention(qh, kk, vv, enable_gqa=gqa))
        diff = (out.transpose(1, 2).float() - base.float()).abs().max().item()
        rec.row(impl, B, H_kv, L, "", t, how, cache_bytes, diff,
                f"K, V expanded to {H} heads (moves {H // H_kv}x the cache's bytes)" if not gqa else "", copy_gbps)
        del out, kk, vv
    del kh, vh, qh


def main(argv):
    a = parse_args(argv)
    torch = None if a is None else gpu_timing.torch_on_gpu("bench_decode.py: error")
    if torch is None:   # bad flags or no GPU: parse_args or torch_on_gpu said which
        return 2
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from flashattn_stages import decode_op
    t_start = time.time()
    dev = "cuda"
    dtype = torch.bfloat16
    H, d, P = 32, 128, a.page_size
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    lib = decode_op.library()
    rec = Recorder(torch, a, prov.record(argv), H, d, P)

    copy_gbps = time_copy(torch, rec, dev)

    Ls = [8192, 131072] if a.quick else [8192, 32768, 131072, 1024]
    Bs = [1, 16] if a.quick else [1, 4, 16, 64]
    H_kvs = [8] if a.quick else [8, 32]
    shapes = [(B, H_kv, L) for L in Ls for H_kv in H_kvs for B in Bs]
    backends = [("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_math", SDPBackend.MATH)]
    for B, H_kv, L in shapes:
        cache_bytes = 2 * B * H_kv * L * d * 2
        if cache_bytes > a.max_cache_gb * 1e9:
            print(f"skipped B={B} H_kv={H_kv} seqlen_k={L}: cache {cache_bytes / 1e9:.1f} GB > --max-cache-gb")
            continue
        if time.time() - t_start > a.budget_s:
            print(f"skipped B={B} H_kv={H_kv} seqlen_k={L}: the run's budget of {a.budget_s:.0f} s is spent")
            continue
        g = torch.Generator(device=dev)
        g.manual_seed(B * 1000003 + H_kv * 1009 + L)
        kd = torch.empty(B, L, H_kv, d, dtype=dtype, device=dev).normal_(generator=g)
        vd = torch.empty(B, L, H_kv, d, dtype=dtype, device=dev).normal_(generator=g)
        q = torch.empty(B, 1, H, d, dtype=dtype, device=dev).normal_(generator=g)
        lens = torch.full((B,), L, dtype=torch.int32, device=dev)
        npg = B * L // P
        kp, vp = kd.view(npg, P, H_kv, d), vd.view(npg, P, H_kv, d)
        table = torch.arange(npg, dtype=torch.int32, device=dev).view(B, L // P)
        base = time_ours(torch, decode_op, lib, sms, rec, dev, (q, kp, vp, lens, table), B, H_kv, L, cache_bytes,
                         copy_gbps)
        time_sdpa(F, sdpa_kernel, backends, rec, q, kd, vd, base, B, H_kv, L, cache_bytes, copy_gbps)
        del kd, vd, kp, vp, q, base
        torch.cuda.empty_cache()

    print(f"bench_decode.py: {len(rec.rows)} rows in {time.time() - t_start:.0f} s")
    if a.csv:
        gpu_timing.write_rows(a.csv, COLUMNS, rec.rows, lambda r, c: gpu_timing.csv_cell(r[c]))
        print(f"bench_decode.py: wrote {a.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
