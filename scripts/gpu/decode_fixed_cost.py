#!/usr/bin/env python3
"""decode_fixed_cost.py -- what a decoding step costs beyond streaming its cache, ours beside cuDNN's.

    python3 scripts/gpu/decode_fixed_cost.py --csv FILE          (make study-decode-fixed-cost; an H200)
    python3 scripts/gpu/decode_fixed_cost.py --one IMPL --seqlen-k L   (one call inside
                          cudaProfilerStart/Stop, for ncu --profile-from-start off)

The question (issue 30, decoding at the bandwidth): at B 1, H_kv 8, H 32,
d 128, bf16, data/gpu/decode.csv has our step graph-replayed at 32 us for
8k keys, 60 us for 32k and 167 us for 128k, and cuDNN's at 21, 48 and 151.
A line through ours gives a cost of about 23 us that does not grow with the
cache; through cuDNN's about 13. Where do ours' extra 10 us go?

--csv: for seqlen_k 1k to 128k (doubling), graph-replayed (gpu_timing.graph_ms,
the L2 flushed before each replay) and eager (CUDA events) times of
  ours_rule    flash_attn_with_kvcache(q (1, 1, 32, 128), k_cache, v_cache
               (pages of 64, H_kv 8), cache_seqlens=, block_table=), num_splits=0
  ours_splits_S   the same with num_splits=S, S in 8, 16, 32, 64, 128
  sdpa_cudnn, sdpa_flash   scaled_dot_product_attention(q (1, 32, 1, 128),
               K, V (1, 8, seqlen_k, 128), enable_gqa=True) in sdpa_kernel(backend)
and the least-squares line (intercept_us, us_per_1k_keys) of each impl's graph
times from 8k keys up, as rows with seqlen_k empty. Provenance columns.
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_timing  # noqa: E402
import provenance as prov  # noqa: E402

B, H, H_KV, D, PAGE = 1, 32, 8, 128, 64
LENGTHS = [1024 << i for i in range(8)]   # 1k ... 128k
SPLITS = (8, 16, 32, 64, 128)
IMPLS = ["ours_rule"] + [f"ours_splits_{s}" for s in SPLITS] + ["sdpa_cudnn", "sdpa_flash"]   # calls()' keys


def calls(torch, L):
    """{impl: fn} for one seqlen_k, inputs made once."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    from flashattn_stages import flash_attn_with_kvcache
    g = torch.Generator(device="cuda").manual_seed(L)
    q = torch.randn(B, 1, H, D, device="cuda", dtype=torch.bfloat16, generator=g)
    kp, vp = (torch.randn(B * L // PAGE, PAGE, H_KV, D, device="cuda", dtype=torch.bfloat16, generator=g)
              for _ in range(2))
    table = torch.arange(B * L // PAGE, dtype=torch.int32, device="cuda").view(B, L // PAGE)
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    qs = q.transpose(1, 2).contiguous()
    ks, vs = (t.view(B, L, H_KV, D).transpose(1, 2).contiguous() for t in (kp, vp))
    out = {"ours_rule": lambda: flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table)}
    for s in SPLITS:
        out[f"ours_splits_{s}"] = (lambda s=s: flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens,
                                                                       block_table=table, num_splits=s))
    for name, be in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
        def sdpa(be=be):
            with sdpa_kernel(be):
                return F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)
        out[name] = sdpa
    assert list(out) == IMPLS
    return out


def sweep(torch, path, repeats):
    rec = prov.record(sys.argv)
    rows, graph = [], {}
    for L in LENGTHS:
        for impl, fn in calls(torch, L).items():
            try:
                fn()
                torch.cuda.synchronize()
                ms = gpu_timing.median_ms(torch, fn, repeats, warmup=1)[0]
                gms, why = gpu_timing.graph_ms(torch, fn, repeats, warmup=1)
            except Exception as e:  # noqa: BLE001  (a backend that refuses the shape is a row saying so)
                ms, gms, why = None, None, f"failed: {str(e).splitlines()[0][:100]}"
            rows.append(dict(rec, impl=impl, seqlen_k=L, median_us="" if ms is None else f"{ms * 1e3:.1f}",
                             graph_us="" if gms is None else f"{gms * 1e3:.1f}", intercept_us="",
                             us_per_1k_keys="", note=why))
            if gms is not None:
                graph.setdefault(impl, []).append((L / 1024, gms * 1e3))
            print(f"{impl:16s} seqlen_k {L:6d}  eager {rows[-1]['median_us']:>7s} us  graph "
                  f"{rows[-1]['graph_us']:>7s} us  {why}", flush=True)
    for impl, pts in graph.items():
        pts = [p for p in pts if p[0] >= 8]
        if len(pts) >= 2:
            b, a = statistics.linear_regression(*zip(*pts))   # least squares: slope, intercept
            rows.append(dict(rec, impl=impl, seqlen_k="", median_us="", graph_us="", intercept_us=f"{a:.1f}",
                             us_per_1k_keys=f"{b:.3f}", note="least squares over graph_us from 8k keys"))
            print(f"{impl:16s} line: {a:.1f} us + {b:.3f} us per 1k keys", flush=True)
    gpu_timing.write_rows(path, prov.COLUMNS + ["impl", "seqlen_k", "median_us", "graph_us", "intercept_us",
                                                "us_per_1k_keys", "note"], rows,
                          lambda r, c: gpu_timing.csv_cell(r.get(c, "")))


def one(torch, impl, L):
    """One warm call of impl inside cudaProfilerStart/Stop (what ncu profiles)."""
    fn = calls(torch, L)[impl]
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--one", help="ours_rule, ours_splits_S, sdpa_cudnn or sdpa_flash")
    ap.add_argument("--seqlen-k", type=int, default=8192)
    a = ap.parse_args(argv)
    if not a.csv and not a.one:
        ap.error("give --csv FILE or --one IMPL")
    if a.one and a.one not in IMPLS:
        ap.error(f"--one {a.one}: expected one of {', '.join(IMPLS)}")
    if a.seqlen_k < PAGE or a.seqlen_k % PAGE:
        ap.error(f"--seqlen-k {a.seqlen_k}: must be a positive multiple of {PAGE}")
    torch = gpu_timing.torch_on_gpu("decode_fixed_cost.py")
    if torch is None:
        return 2
    if a.one:
        one(torch, a.one, a.seqlen_k)
    else:
        sweep(torch, a.csv, a.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
