#!/usr/bin/env python3
"""Question it answers: where the Hopper passes lose to cuDNN's -- the
backward (version 3, steps 2 and 3) at the bench shapes where it is slowest
against cuDNN, and the forward (version 3) at N = 1024, causal; the answer is
in data/gpu/studies/bwd_v3_steps/steps.md's last section, chapters/23-hopper.md
and its records in chapters/91-records.md (tensor-pipe use, issue stalls,
instructions, per kernel, ours beside cuDNN's and FlashAttention-2's; the raw
files in data/gpu/studies/hopper_ncu/).

hopper_ncu.py -- one pass of one implementation on one shape, with the CUDA
profiler started around that pass alone (warm-up calls before it are not
profiled), for Nsight Compute's --profile-from-start off:

    ncu --profile-from-start off ... python3 scripts/gpu/hopper_ncu.py \
        --impl ours --pass bwd --d 128 --n 8192 --causal 0

The shape is bench_gpu.py's: bf16, B N = 16384 tokens, H d = 2048.
  --impl ours      python/flashattn_stages/flash_op.py's default versions (FA_BWD3_STEP in
                   the environment picks backward 3's step)
  --impl cudnn     SDPA's cuDNN backend
  --impl flash     SDPA's flash backend (FlashAttention-2)
  --pass fwd|bwd   bwd profiles only the backward (the forward runs before
                   the profiler starts)
  --accurate-dq    ours only: the op's accurate_dq, auto (None, the
                   default), center (True), full (the dQ pass, whose
                   kernels chapters/21-gpu-backward.md's IO count is set
                   against) or off
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", choices=["ours", "cudnn", "flash"], required=True)
    ap.add_argument("--pass", dest="pass_", choices=["fwd", "bwd"], required=True)
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--causal", type=int, choices=[0, 1], required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--accurate-dq", choices=["auto", "center", "full", "off"], default="auto")
    a = ap.parse_args()
    accurate_dq = {"auto": None, "center": True, "full": "full", "off": False}[a.accurate_dq]
    if 16384 % a.n or 2048 % a.d:
        sys.exit(f"hopper_ncu.py: --n must divide 16384 and --d 2048 (got {a.n}, {a.d})")
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, H = 16384 // a.n, 2048 // a.d
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(B, H, a.n, a.d, generator=g, device="cuda", dtype=torch.bfloat16)
                   for _ in range(4))
    causal = bool(a.causal)
    if a.impl == "ours":
        from flashattn_stages import flash_op

        def fwd(q, k, v):
            return flash_op.flash_attention(q, k, v, causal=causal, accurate_dq=accurate_dq)
    else:
        backend = SDPBackend.CUDNN_ATTENTION if a.impl == "cudnn" else SDPBackend.FLASH_ATTENTION

        def fwd(q, k, v):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    grad = a.pass_ == "bwd"
    leaves = [t.detach().clone().requires_grad_(grad) for t in (q, k, v)]
    for _ in range(a.warmup + 1):
        for t in leaves:
            t.grad = None
        if grad:
            o = fwd(*leaves)
            torch.cuda.synchronize()
            last = _ == a.warmup
            if last:
                torch.cuda.profiler.start()
            o.backward(do)
        else:
            last = _ == a.warmup
            with torch.no_grad():
                if last:
                    torch.cuda.profiler.start()
                fwd(*leaves)
        torch.cuda.synchronize()
        if last:
            torch.cuda.profiler.stop()
    print(f"hopper_ncu.py: {a.impl} {a.pass_} d {a.d} N {a.n} causal {a.causal} B {B} H {H} "
          f"accurate_dq {a.accurate_dq}: profiled one call")


if __name__ == "__main__":
    main()
