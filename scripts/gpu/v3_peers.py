#!/usr/bin/env python3
"""v3_peers.py -- PyTorch SDPA's flash and cuDNN forward at the shapes where
tests/gpu/v3_check --time measures the steps of version 3, in the same
device run, appended to the same CSV (scripts/gpu/v3_steps.sh).

Shapes: bf16, B N = 16384 tokens, H = 2048 / d, d = 64 and 128, causal and
not, N from --ns. TFLOP/s counts visible pairs as v3_check does:
4 d B H N^2 (non-causal), 4 d B H N (N + 1) / 2 (causal). Timing: CUDA
events, twice the L2 written before each launch (L2 flushed, as v3_check
does; gpu_timing.py), median of 15 after 3 warm-ups.

Usage: python3 scripts/gpu/v3_peers.py --csv FILE [--ns 2048,8192,16384] [--device NAME]
Appends rows in v3_check's columns (impl sdpa_flash / sdpa_cudnn, step 0).
"""
import argparse
import math
import sys

import gpu_timing   # scripts/, this script's own folder
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_flushed(fn, repeats=15):
    return gpu_timing.median_ms(torch, fn, repeats, warmup=3)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", required=True)
    ap.add_argument("--ns", default="2048,8192,16384")
    ap.add_argument("--device", default=None)
    a = ap.parse_args()
    ns = [int(x) for x in a.ns.split(",")]
    device = a.device or torch.cuda.get_device_name(0)
    out = open(a.csv, "a")
    print(f"peers: torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {device}")
    print(f"{'impl':12s} {'d':>4s} {'N':>6s} {'causal':>6s} {'ms':>10s} {'TFLOP/s':>9s}")
    for d in (64, 128):
        for causal in (0, 1):
            for N in ns:
                B, H = max(1, 16384 // N), 2048 // d
                g = torch.Generator(device="cuda").manual_seed(77 + N + d)
                q, k, v = [torch.randn((B, H, N, d), device="cuda", dtype=torch.bfloat16, generator=g)
                           for _ in range(3)]
                pairs = 0.5 * N * N if causal else float(N) * N
                flops = 4.0 * d * B * H * pairs
                for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                                      ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
                    def run():
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                    try:
                        ms = time_flushed(run)
                    except Exception as e:  # a backend that refuses the shape
                        print(f"{name:12s} {d:4d} {N:6d} {causal:6d} failed: {str(e).splitlines()[0][:120]}")
                        continue
                    tf = flops / (ms * 1e-3) / 1e12
                    print(f"{name:12s} {d:4d} {N:6d} {causal:6d} {ms:10.4f} {tf:9.1f}")
                    out.write(f'"{device}",{name},0,bf16,{causal},{B},{H},{N},{d},{ms:.5f},{tf:.2f},15,,\n')
                    out.flush()
                del q, k, v
                torch.cuda.empty_cache()
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
