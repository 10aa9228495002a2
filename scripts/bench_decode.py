#!/usr/bin/env python3
"""bench_decode.py -- stage 8's decode kernels against the memory's bandwidth and SDPA.

    python3 scripts/bench_decode.py --csv data/gpu/decode.csv     (make decode-gpu; an H200)
    python3 scripts/bench_decode.py --quick                        (a few rows, no CSV)

One decoding step, seqlen_q = 1, bf16, d = 128, H = 32 query heads on H_kv = 8
or 32 key/value heads, B = 1 to 64 sequences of seqlen_k = 1k to 128k keys
each (every sequence at the full length, so SDPA needs no padding), pages of
--page-size keys. Measured in the same run, on the same tensors:
  copy              a device-to-device copy of 2 GiB: bytes read + written /
                    time, the bandwidth a kernel that reads each byte once can
                    hope for (the row's gbps; frac_of_copy is 1)
  ours_decode       python/decode_op.py, the split count of the rule
                    (decode_num_splits, core/decode_plan.h) for this GPU's SMs
                    and the kernel's CTAs per SM;
                    pages in order, so the rows are SDPA's
  ours_decode_shuffled  the same with the block table shuffled (timing only)
  ours_splits       B = 1 and 4, H_kv = 8, seqlen_k 8k and 32k: every split
                    count 1, 2, 4, ..., 128 (the rule measured against its
                    alternatives; note says which one the rule takes)
  sdpa_flash, sdpa_efficient, sdpa_cudnn, sdpa_math
                    torch's scaled_dot_product_attention with one backend, on
                    the same K, V viewed as (B, H_kv, seqlen_k, d) with
                    enable_gqa=True; a backend that refuses grouped heads gets
                    K, V expanded to H heads where memory allows (note says
                    so; its bytes moved are then H / H_kv times the cache's),
                    math only up to 2 GB of cache
For every row: median_ms (CUDA events, median of --repeats runs, the L2
overwritten before each run -- a 512 MiB write, which also keeps the GPU busy
while Python enqueues the call, so no launch overhead is timed; ours is timed
through its launcher on tensors made once, the op's layout copies left out), cache_bytes (K and V of all sequences, read
once), gbps = cache_bytes / time, frac_of_copy = gbps / the copy's, and
max_abs_diff of the output against ours_decode's. Rows carry provenance
columns (GPU, driver, CUDA, torch, commit, date, command). Shapes whose cache
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gpu_timing  # noqa: E402  (scripts/)
import provenance as prov  # noqa: E402

COLUMNS = prov.COLUMNS + ["impl", "dtype", "B", "H", "H_kv", "d", "seqlen_k", "page_size", "num_splits", "median_ms",
                          "cache_bytes", "gbps", "frac_of_copy", "repeats", "max_abs_diff", "note"]


def main(argv):
    ap = gpu_timing.bench_parser(__doc__, "a few shapes, no CSV")
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=180.0)
    ap.add_argument("--max-cache-gb", type=float, default=40.0)
    a = ap.parse_args(argv[1:])
    if not gpu_timing.bench_output(a, "bench_decode.py"):
        return 2
    if a.page_size not in (16, 32, 64, 128, 256) or a.repeats < 1:
        print("bench_decode.py: error: --page-size is 16, 32, 64, 128 or 256; --repeats >= 1", file=sys.stderr)
        return 2
    torch = gpu_timing.torch_on_gpu("bench_decode.py: error")
    if torch is None:
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
    pv = {"gpu": torch.cuda.get_device_name(0), "driver": prov.gpu_and_driver()[1], "cuda": torch.version.cuda,
          "torch": torch.__version__, "commit": prov.commit(), "date": prov.utc_now(),
          "command": " ".join(["python3"] + argv)}
    rows = []

    def timed(fn):   # the median of a.repeats runs after one warm-up, the L2 flushed before each
        return gpu_timing.median_ms(torch, fn, a.repeats, warmup=1)[0]

    def row(impl, B, H_kv, L, splits, ms, cache_bytes, diff, note, copy_gbps):
        gbps = cache_bytes / (ms * 1e-3) / 1e9
        r = dict(pv, impl=impl, dtype="bf16", B=B, H=H, H_kv=H_kv, d=d, seqlen_k=L, page_size=P,
                 num_splits=splits, median_ms=f"{ms:.4f}", cache_bytes=cache_bytes, gbps=f"{gbps:.1f}",
                 frac_of_copy=f"{gbps / copy_gbps:.3f}" if copy_gbps else "", repeats=a.repeats,
                 max_abs_diff="" if diff is None else f"{diff:.3e}", note=note)
        rows.append(r)
        print(f"{impl:22s} B={B:3d} H_kv={H_kv:2d} seqlen_k={L:6d} splits={splits!s:>3s} {ms:9.4f} ms "
              f"{gbps:8.1f} GB/s  {note}")

    # the copy: 2 GiB, read and written
    n = 1 << 31
    src = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src))
    copy_gbps = 2 * n / (ms * 1e-3) / 1e9
    row("copy", 0, 0, 0, "", ms, 2 * n, None, "device-to-device copy of 2 GiB: bytes read + written", copy_gbps)
    del src, dst
    torch.cuda.empty_cache()

    Ls = [8192, 131072] if a.quick else [8192, 32768, 131072, 1024]
    Bs = [1, 16] if a.quick else [1, 4, 16, 64]
    Hkvs = [8] if a.quick else [8, 32]
    shapes = [(B, Hkv, L) for L in Ls for Hkv in Hkvs for B in Bs]
    backends = [("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_math", SDPBackend.MATH)]
    for B, Hkv, L in shapes:
        cache_bytes = 2 * B * Hkv * L * d * 2
        if cache_bytes > a.max_cache_gb * 1e9:
            print(f"skipped B={B} H_kv={Hkv} seqlen_k={L}: cache {cache_bytes / 1e9:.1f} GB > --max-cache-gb")
            continue
        if time.time() - t_start > a.budget_s:
            print(f"skipped B={B} H_kv={Hkv} seqlen_k={L}: the run's budget of {a.budget_s:.0f} s is spent")
            continue
        g = torch.Generator(device=dev)
        g.manual_seed(B * 1000003 + Hkv * 1009 + L)
        kd = torch.empty(B, L, Hkv, d, dtype=dtype, device=dev).normal_(generator=g)
        vd = torch.empty(B, L, Hkv, d, dtype=dtype, device=dev).normal_(generator=g)
        q = torch.empty(B, 1, H, d, dtype=dtype, device=dev).normal_(generator=g)
        lens = torch.full((B,), L, dtype=torch.int32, device=dev)
        npg = B * L // P
        kp, vp = kd.view(npg, P, Hkv, d), vd.view(npg, P, Hkv, d)
        table = torch.arange(npg, dtype=torch.int32, device=dev).view(B, L // P)
        p = decode_op.DecodeParams(B, H, Hkv, d, 1, P, L // P, B * L // P, 1.0 / math.sqrt(d), -1, -1)
        rule = lib.fa_decode_num_splits(decode_op.fa.BF16, ctypes.byref(p), L, sms)

        def ours(splits, t=table):
            return decode_op.kvcache_decode(q, kp, vp, lens, t, num_splits=splits, check_tables=False)

        # What is timed is the launcher alone (the split and combine kernels)
        # on tensors made once: the op's own layout changes of q and out are
        # kernels of their own, not part of the decoding step.
        q_bhsd = q.transpose(1, 2).contiguous()
        o_bhsd = torch.empty_like(q_bhsd)
        lse = torch.empty(B, H, 1, dtype=torch.float32, device=dev)

        def launcher(splits, t=table):
            nb = lib.fa_decode_workspace_bytes(ctypes.byref(p), splits)
            ws = torch.empty(max(nb, 16), dtype=torch.uint8, device=dev)
            x = decode_op.DecodePtrs(q_bhsd.data_ptr(), kp.data_ptr(), vp.data_ptr(), t.data_ptr(), lens.data_ptr(),
                                     o_bhsd.data_ptr(), lse.data_ptr(), ws.data_ptr(), nb)
            stream = torch.cuda.current_stream().cuda_stream

            def fn():
                decode_op.fa.check(lib, lib.fa_decode(decode_op.fa.BF16, ctypes.byref(p), splits, ctypes.byref(x),
                                                      stream))
                return o_bhsd
            return fn, ws

        base = ours(rule)
        fn, ws = launcher(rule)
        fn()
        same = torch.equal(o_bhsd.transpose(1, 2), base)
        ms = timed(fn)
        row("ours_decode", B, Hkv, L, rule, ms, cache_bytes, 0.0,
            f"the rule's splits ({sms} SMs, {lib.fa_decode_ctas_per_sm(decode_op.fa.BF16, d)} CTAs each)"
            + ("" if same else "; LAUNCHER OUTPUT DIFFERS FROM THE OP'S"), copy_gbps)
        shuffled = table.view(-1)[torch.randperm(npg, device=dev)].view(B, L // P).contiguous()
        fn, ws = launcher(rule, shuffled)
        ms = timed(fn)
        row("ours_decode_shuffled", B, Hkv, L, rule, ms, cache_bytes, None, "block table shuffled", copy_gbps)
        if Hkv == 8 and B in (1, 4) and L in (8192, 32768):
            for s in [1, 2, 4, 8, 16, 32, 64, 128]:
                if s > max(1, (L // 64) // 2) and s > 1:
                    break
                fn, ws = launcher(s)
                ms = timed(fn)
                diff = (fn().transpose(1, 2).float() - base.float()).abs().max().item()
                row("ours_splits", B, Hkv, L, s, ms, cache_bytes, diff, "the rule's" if s == rule else "", copy_gbps)
            fn, ws = launcher(rule)
        qh = q.transpose(1, 2)                          # (B, H, 1, d)
        kh, vh = kd.transpose(1, 2), vd.transpose(1, 2)  # (B, H_kv, L, d), strided views of the same bytes
        for name, be in backends:
            if name == "sdpa_math" and cache_bytes > 2e9:
                continue
            note, fn = "enable_gqa", None
            try:
                with sdpa_kernel(be):
                    out = F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=True)
                fn = lambda be=be: _sdpa(F, sdpa_kernel, be, qh, kh, vh, True)  # noqa: E731
            except RuntimeError:
                if cache_bytes * H / Hkv > a.max_cache_gb * 1e9 or Hkv == H:
                    print(f"{name:22s} B={B:3d} H_kv={Hkv:2d} seqlen_k={L:6d}: refused this problem")
                    continue
                ke, ve = kh.repeat_interleave(H // Hkv, dim=1), vh.repeat_interleave(H // Hkv, dim=1)
                try:
                    with sdpa_kernel(be):
                        out = F.scaled_dot_product_attention(qh, ke, ve)
                except RuntimeError:
                    print(f"{name:22s} B={B:3d} H_kv={Hkv:2d} seqlen_k={L:6d}: refused this problem")
                    del ke, ve
                    continue
                note = f"K, V expanded to {H} heads (moves {H // Hkv}x the cache's bytes)"
                fn = lambda be=be, ke=ke, ve=ve: _sdpa(F, sdpa_kernel, be, qh, ke, ve, False)  # noqa: E731
            ms = timed(fn)
            diff = (out.transpose(1, 2).float() - base.float()).abs().max().item()
            row(name, B, Hkv, L, "", ms, cache_bytes, diff, note, copy_gbps)
            del fn, out
        del kd, vd, kp, vp, q, base
        torch.cuda.empty_cache()

    print(f"bench_decode.py: {len(rows)} rows in {time.time() - t_start:.0f} s")
    if a.csv:
        gpu_timing.write_rows(a.csv, COLUMNS, rows, lambda r, c: _csv(r[c]))
        print(f"bench_decode.py: wrote {a.csv}")
    return 0


def _sdpa(F, sdpa_kernel, be, q, k, v, gqa):
    with sdpa_kernel(be):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa) if gqa else \
            F.scaled_dot_product_attention(q, k, v)


def _csv(x):
    s = str(x)
    return f'"{s}"' if "," in s or '"' in s else s


if __name__ == "__main__":
    sys.exit(main(sys.argv))
