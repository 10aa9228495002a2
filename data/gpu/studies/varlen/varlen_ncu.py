#!/usr/bin/env python3
"""Question it answers: why the packed forward (forward version 3 with
cu_seqlens) runs at 0.92-0.97 of the dense call on the same rows
(data/gpu/varlen.csv); the answer is in data/gpu/studies/varlen/ncu/ (Nsight
Compute, one forward each) and the closing paragraph of chapter 4e's
varlen table.

varlen_ncu.py --d D --causal C --impl dense|varlen -- one forward of
bench_varlen.py's equal batch (bf16, 16 sequences of 1024 rows, H d = 2048)
with the CUDA profiler started around that call alone, for
ncu --profile-from-start off.
"""
import argparse
import math
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 4))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d", type=int, choices=[64, 128], required=True)
    ap.add_argument("--causal", type=int, choices=[0, 1], required=True)
    ap.add_argument("--impl", choices=["dense", "varlen"], required=True)
    a = ap.parse_args()
    import torch
    from flashattn_stages import flash_op, varlen_op
    B, N, H, d = 16, 1024, 2048 // a.d, a.d
    scale, (left, right) = 1.0 / math.sqrt(d), ((-1, 0) if a.causal else (-1, -1))
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, N, H, d, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = torch.arange(0, B * N + 1, N, dtype=torch.int32, device="cuda")
    if a.impl == "dense":
        def run():
            return flash_op._fwd_impl(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale,
                                      left, right, True, -1, -1, False, False)
    else:
        qp, kp, vp = (t.reshape(B * N, H, d) for t in (q, k, v))

        def run():
            return varlen_op._fwd_impl(qp, kp, vp, cu, cu, N, N, scale, left, right, -1, -1, False, False)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"varlen_ncu.py: {a.impl} d {d} causal {a.causal}: profiled one forward")


if __name__ == "__main__":
    main()
