"""scripts/gpu/gpu_timing.py -- what the GPU measurement scripts share: torch on
a CUDA machine (or one line on stderr saying what is missing), the time of
one call by CUDA events with the L2 overwritten before each, so that every
call reads its inputs from DRAM as a first touch would, and the benchmarks'
common flags and CSV writing. Used by bench_gpu.py, bench_decode.py,
bench_varlen.py, bench_op_overhead.py, train_compare.py and v3_peers.py
(from scripts/: `import gpu_timing`).

    torch = gpu_timing.torch_on_gpu("bench_decode")   # None: say so, exit 2
    ms, runs = gpu_timing.median_ms(torch, fn, repeats=15)
    ms, why = gpu_timing.graph_ms(torch, fn, repeats=15)   # the same call replayed from a CUDA graph

Timing: `warmup` calls, then up to `repeats` calls, each between two CUDA
events with the flush outside them; stops early after 5 calls once
`budget_ms` of timed calls have run; the median of the calls timed.
"""
import argparse
import os
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


_CAPTURE = {}   # device index -> (stream, pool): one capture stream and memory pool for every graph


def capture_resources(torch):
    """(stream, pool) that every graph_ms capture on the current GPU uses.
    One pool, not one per graph: torch 2.11 never releases the private pool
    of a capture that failed (an implementation that cannot be captured, or
    runs out of memory while being captured), so per-graph pools leaked until
    the benchmark's later captures ran out of memory; graphs are destroyed
    before the next is captured, so sharing is safe. One stream for warm-up,
    setup and capture: an autograd graph recorded on another stream than its
    backward's makes the engine call record_stream inside the capture, whose
    blocks are never given back."""
    dev = torch.cuda.current_device()
    if dev not in _CAPTURE:
        _CAPTURE[dev] = (torch.cuda.Stream(), torch.cuda.graph_pool_handle())
    return _CAPTURE[dev]


def graph_ms(torch, fn, repeats, warmup=3, setup=None):
    """(median milliseconds, "") of fn() captured once into a CUDA graph and
    replayed, L2 flushed before each replay as in median_ms: the call's
    device time without the host's launch overhead, for every implementation
    alike. setup(), if given, runs first on the capture stream (e.g. to
    rebuild a forward whose backward fn replays). (None, why) when fn cannot
    be captured (a host synchronization, an allocation the caching allocator
    cannot serve inside the capture)."""
    side, pool = capture_resources(torch)
    graph = None
    try:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            if setup is not None:
                setup()
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=side):
            fn()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  (any capture failure is reported, not raised)
        torch.cuda.synchronize()
        if graph is not None:
            graph.reset()
        return None, f"not capturable: {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
    times = []
    for _ in range(repeats):
        flush_l2(torch)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        graph.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    graph.reset()
    return median(times), ""


def bench_parser(doc, quick_help):
    """A benchmark's flags: --csv FILE, --quick (quick_help), --repeats R
    (default 10); the caller adds its own and calls bench_output."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--csv", help="write the rows here (with provenance columns)")
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--repeats", type=int, default=10)
    return ap


def bench_output(a, prog):
    """True when the run has somewhere to go (--csv or --quick); else one
    line saying so (the caller exits 2)."""
    if a.csv or a.quick:
        return True
    print(f"{prog}: error: give --csv FILE (or --quick)", file=sys.stderr)
    return False


def csv_cell(x):
    """x as one CSV field: quoted where it holds a comma or a quote."""
    s = str(x)
    return '"' + s.replace('"', '""') + '"' if "," in s or '"' in s else s


def write_rows(path, columns, rows, cell):
    """The header line and one line per row (cell(row, column) -> text) into
    path + ".tmp", then moved onto path: a failed run leaves the old file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(",".join(columns) + "\n")
        for r in rows:
            f.write(",".join(cell(r, c) for c in columns) + "\n")
    os.replace(tmp, path)
