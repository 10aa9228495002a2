#!/usr/bin/env python3
"""host_fresh_graph.py -- why a forward + backward built fresh each call costs
our op more host time than its forward and backward measured apart.

    python3 scripts/gpu/host_fresh_graph.py --out DIR    (make study-host-path; an H200)

The question (data/gpu/studies/host_path/): at B 1, H 16, d 64, causal,
bf16, N 512, host_profile.py measured our forward 57 us and our backward
on a kept graph 199 us a call, but the two built fresh each call 652 us
(SDPA flash: 40, 261 and 356). Each row below changes one thing about the
fresh call, or measures a floor:
  ours                 flash_attention(q, k, v).backward(dO), grads accumulating
  ours_grad_none       the same with q.grad, k.grad, v.grad set to None first
  ours_single_thread   the same inside torch.autograd.set_multithreading_enabled(False):
                       the backward on the calling thread, not the engine's device thread
  ours_impl            flash_op._fwd_impl then _bwd_impl: the work without autograd
  sdpa_flash, sdpa_flash_single_thread   SDPA's flash backend, grads set to None first
  py_identity          a Python autograd.Function returning its input's view and its
                       gradient, built and run backward fresh each call
  cpp_clone            x.clone().backward(g): a C++ node's floor
Writes DIR/host_fresh_graph.csv (provenance columns, case, N, host_us, loop_us),
host_us and loop_us as host_profile.py measures them. Cost: about a minute.
"""
import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import host_profile as hp  # noqa: E402  (host_us, loop_us)
import provenance as prov  # noqa: E402


def cases(torch, F, fo, N):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, H, d = 1, 16, 64
    g = torch.Generator(device="cuda").manual_seed(N)
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
               for _ in range(3))
    dO = torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g)
    scale = 1.0 / math.sqrt(d)

    def none():
        q.grad = k.grad = v.grad = None

    def ours():
        fo.flash_attention(q, k, v, causal=True).backward(dO)

    def ours_grad_none():
        none()
        ours()

    def ours_single_thread():
        none()
        with torch.autograd.set_multithreading_enabled(False):
            ours()

    qd, kd, vd = q.detach(), k.detach(), v.detach()

    def ours_impl():
        o, lse = fo._fwd_impl(qd, kd, vd, scale, -1, 0, False, -1, -1, False, False)
        fo._bwd_impl(dO, qd, kd, vd, o, lse, scale, -1, 0, -1, False, fo.center_flag(None))

    def sdpa_flash():
        none()
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dO)

    def sdpa_flash_single_thread():
        with torch.autograd.set_multithreading_enabled(False):
            sdpa_flash()

    Identity = hp.identity_function(torch)
    x = qd.clone().requires_grad_()

    def py_identity():
        x.grad = None
        Identity.apply(x).backward(dO)

    def cpp_clone():
        x.grad = None
        x.clone().backward(dO)

    return [(f.__name__, f) for f in (ours, ours_grad_none, ours_single_thread, ours_impl, sdpa_flash,
                                       sdpa_flash_single_thread, py_identity, cpp_clone)]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    torch = hp.gpu_timing.torch_on_gpu("host_fresh_graph.py")
    if torch is None:
        return 2
    import torch.nn.functional as F
    from flashattn_stages import flash_op as fo
    rec = prov.record(["scripts/gpu/host_fresh_graph.py"] + argv)
    rows = []
    for N in (512, 2048):
        for name, fn in cases(torch, F, fo, N):
            h, syncs = hp.host_us(torch, fn)
            lp = hp.loop_us(torch, fn)
            rows.append(dict(case=name, N=N, host_us=f"{h:.1f}", syncs=syncs, loop_us=f"{lp:.1f}"))
            print(f"N {N} {name:26s} host {h:7.1f} us  loop {lp:7.1f} us  syncs {syncs}", flush=True)
    os.makedirs(a.out, exist_ok=True)
    hp.write_csv(os.path.join(a.out, "host_fresh_graph.csv"), ["case", "N", "host_us", "syncs", "loop_us"],
                 rows, rec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
