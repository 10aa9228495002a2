"""scripts/gpu_timing.py -- what the GPU measurement scripts share: torch on
a CUDA machine (or one line on stderr saying what is missing), and the time
of one call by CUDA events with the L2 overwritten before each, so that
every call reads its inputs from DRAM as a first touch would. Used by
bench_gpu.py, bench_decode.py, bench_op_overhead.py, train_compare.py and
v3_peers.py (from scripts/: `import gpu_timing`).

    torch = gpu_timing.torch_on_gpu("bench_decode")   # None: say so, exit 2
    ms, runs = gpu_timing.median_ms(torch, fn, repeats=15)

Timing: `warmup` calls, then up to `repeats` calls, each between two CUDA
events with the flush outside them; stops early after 5 calls once
`budget_ms` of timed calls have run; the median of the calls timed.
"""
import sys


def torch_on_gpu(prog):
    """The torch module where torch and a CUDA GPU are there; else None,
    after one line on stderr naming what is missing (the caller exits 2)."""
    try:
        import torch
    except ImportError:
        print(f"{prog}: torch is not installed (it runs on the GPU machine)", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print(f"{prog}: no CUDA GPU here", file=sys.stderr)
        return None
    return torch


_FLUSH = {}


def flush_l2(torch):
    """Overwrite the L2 (a buffer twice its size, kept between calls)."""
    dev = torch.cuda.current_device()
    if dev not in _FLUSH:
        size = 2 * torch.cuda.get_device_properties(dev).L2_cache_size
        _FLUSH[dev] = torch.empty(size, dtype=torch.uint8, device="cuda")
    _FLUSH[dev].zero_()


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def median_ms(torch, fn, repeats, warmup=3, budget_ms=None):
    """(median milliseconds, calls timed) of fn(), L2 flushed before each."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for r in range(repeats):
        flush_l2(torch)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
        if budget_ms is not None and r >= 4 and sum(times) > budget_ms:
            break
    return median(times), len(times)
