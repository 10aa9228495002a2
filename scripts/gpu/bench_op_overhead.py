#!/usr/bin/env python3
"""bench_op_overhead.py -- the PyTorch op's cost per call at small shapes, beside SDPA's.

At small and medium shapes (inference, small models) a call's cost is the
host's work -- Python, the dispatcher, argument checks, allocation, the
launch -- more than the kernel's. This times one call as a training or
inference loop sees it: N calls back to back on torch's current stream, the
GPU synchronized once before and once after, wall time / N (the median of
--repeats such loops), for each shape of SHAPES (B, H, N from 1 x 1 x 1 to
8 x 32 x 1024, d = 64, bf16, no mask), in the same run:

    ours          flash_op.flash_attention (the eager path: an
                  autograd.Function over the implementations)
    ours_op       the registered operator, torch.ops.<namespace>.fwd (what
                  torch.compile calls; eager_fast_path off)
    sdpa_flash    F.scaled_dot_product_attention, flash backend
    sdpa_cudnn    the same, cuDNN backend (a row says when it does not run)

Passes: fwd (inputs without requires_grad: inference) and fwdbwd (forward
and backward, upstream gradient ones). Then strides: at STRIDE_SHAPES (where
the kernels' time is the cost) ours on contiguous (B, H, N, d) tensors, on
(B, N, H, d) views and on slices of one packed QKV tensor, the same values;
goal: no layout more than 3% slower than contiguous. Prints a table with ours / sdpa_flash
and writes --csv (data/gpu/op_overhead.csv) with the provenance columns gpu,
driver, cuda, torch, commit, date, command. The goal: ours <= 1.3 x
sdpa_flash forward at B 1, H 16, N 128, d 64 (the line after the table says
whether it holds).

Usage (GPU machine; make build/libfa_gpu.so first):
    python3 scripts/gpu/bench_op_overhead.py --csv data/gpu/op_overhead.csv
    python3 scripts/gpu/bench_op_overhead.py --summary build/paper/op_overhead.md
        (no GPU, no torch: the paper's tables from the CSV; writes nothing
        and removes the file when the CSV is absent)
Cost: about 20 s on an H200. Exit 2 without torch or a GPU.
"""
import argparse
import csv
import os
import statistics
import sys
import time

import provenance as prov   # scripts/, this script's own folder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = [(1, 1, 1), (1, 1, 128), (1, 16, 1), (1, 16, 128), (1, 16, 512), (2, 16, 256),
          (4, 16, 512), (1, 32, 1024), (8, 32, 128), (8, 32, 1024)]
D = 64
GOAL = ((1, 16, 128), 1.3)
STRIDE_SHAPES = [(4, 16, 2048, 64), (2, 16, 4096, 128)]
IMPLS = ["ours", "ours_op", "sdpa_flash", "sdpa_cudnn"]
PROV_COLS = prov.COLUMNS


class _fast_path:
    """flash_op.eager_fast_path set to `on` inside the block."""

    def __init__(self, mod, on):
        self.mod, self.on = mod, on

    def __enter__(self):
        self.old, self.mod.eager_fast_path = self.mod.eager_fast_path, self.on

    def __exit__(self, *exc):
        self.mod.eager_fast_path = self.old


def write_summary(csv_path, md_path):
    """The paper's tables (Markdown) from the CSV: per pass, microseconds per
    call of each impl by shape and ours / sdpa_flash; then the strided
    layouts against contiguous; then the goal's line and the provenance.
    Needs no torch and no GPU; removes md_path when there is no CSV."""
    rows = prov.summary_rows("bench_op_overhead", csv_path, md_path)
    if rows is None:
        return 0
    out = []
    for pass_ in ("fwd", "fwdbwd"):
        cells = {}
        for r in rows:
            if r["pass"] == pass_ and r["impl"] in IMPLS:
                cells.setdefault((int(r["B"]), int(r["H"]), int(r["N"])), {})[r["impl"]] = r["us_per_call"]
        if not cells:
            continue
        out += [f"| {'forward' if pass_ == 'fwd' else 'forward + backward'}: B, H, N | "
                + " | ".join(f"`{i}` (us)" for i in IMPLS) + " | ours / sdpa_flash |",
                "|---|" + "---:|" * (len(IMPLS) + 1)]
        for (B, H, N), c in cells.items():
            ratio = (f"{float(c['ours']) / float(c['sdpa_flash']):.2f}"
                     if c.get("ours") and c.get("sdpa_flash") else "")
            out.append(f"| {B}, {H}, {N} | " + " | ".join(c.get(i) or "-" for i in IMPLS) + f" | {ratio} |")
        out.append("")
    lay = [r for r in rows if r["impl"].startswith("ours_") and r["impl"] != "ours_op"]
    if lay:
        out += ["| layout | B, H, N, d | pass | us per call | / contiguous |", "|---|---|---|---:|---:|"]
        for r in lay:
            out.append(f"| {r['impl'][5:]} | {r['B']}, {r['H']}, {r['N']}, {r['d']} | {r['pass']} | "
                       f"{r['us_per_call']} | {r['note'].split(' ')[0]} |")
        out.append("")
    (gB, gH, gN), goal = GOAL
    g = {r["impl"]: float(r["us_per_call"]) for r in rows if r["pass"] == "fwd" and r["us_per_call"]
         and (int(r["B"]), int(r["H"]), int(r["N"])) == (gB, gH, gN)}
    p = rows[0] if rows else {}
    text = "\n".join(out)
    if "ours" in g and "sdpa_flash" in g:
        ratio = g["ours"] / g["sdpa_flash"]
        text += (f"\nForward at B {gB}, H {gH}, N {gN}, d {D}: ours {g['ours']:.2f} us, SDPA flash "
                 f"{g['sdpa_flash']:.2f} us, {ratio:.2f} times (the goal, at most {goal} times, "
                 f"{'met' if ratio <= goal else 'not met'}). ")
    text += (f"Wall time per call of loops of calls, bf16, d = {D} unless given; {p.get('gpu', '?')}, "
             f"driver {p.get('driver', '?')}, CUDA {p.get('cuda', '?')}, torch {p.get('torch', '?')}, "
             f"commit {p.get('commit', '?')}, {p.get('date', '?')}.\n")
    return prov.write_summary("bench_op_overhead", md_path, csv_path, text)


def parse_args(argv):
    """The command line (without the program's name) -> the flags."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", help="write the rows here (data/gpu/op_overhead.csv)")
    ap.add_argument("--summary", metavar="MD", help="only write the Markdown tables of --from-csv "
                    "(no torch, no GPU)")
    ap.add_argument("--from-csv", default=os.path.join(ROOT, "data", "gpu", "op_overhead.csv"))
    ap.add_argument("--calls", type=int, default=200, help="calls per timed loop")
    ap.add_argument("--repeats", type=int, default=7, help="timed loops per cell (median)")
    ap.add_argument("--stride-repeats", type=int, default=9,
                    help="alternating loops of 20 calls per layout in the stride table (median)")
    return ap.parse_args(argv)


def time_call(torch, f, q, k, v, bwd, calls, repeats):
    """Microseconds per call of f(q, k, v) (and its backward when bwd): the
    median of `repeats` loops of `calls` calls, after 5 warm-up calls."""
    go = None
    if bwd:
        go = torch.ones_like(q)

    def once():
        o = f(q, k, v)
        if bwd:   # the gradients returned, not accumulated into .grad (no extra adds)
            torch.autograd.grad(o, (q, k, v), go)
    for _ in range(5):
        once()
    ts = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            once()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / calls)
    return 1e6 * statistics.median(ts)


def time_shapes(torch, fns, args, gen, rows):
    """Each pass and shape of SHAPES, each impl of fns: a row in rows and a
    line of the table."""
    for pass_ in ("fwd", "fwdbwd"):
        print(f"\n{pass_:7s} {'B':>2s} {'H':>3s} {'N':>5s} " + " ".join(f"{i:>11s}" for i in IMPLS)
              + f" {'ours/flash':>11s} {'op/flash':>9s}")
        for B, H, N in SHAPES:
            q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=gen,
                                   requires_grad=pass_ == "fwdbwd") for _ in range(3))
            got = {}
            for name in IMPLS:
                f, ctx = fns[name]
                try:
                    with ctx():
                        got[name] = time_call(torch, f, q, k, v, pass_ == "fwdbwd", args.calls, args.repeats)
                    note = ""
                except (RuntimeError, ValueError) as e:
                    got[name], note = None, str(e).strip().splitlines()[0][:100]
                ref = got.get("sdpa_flash")
                rows.append([name, pass_, "bf16", B, H, N, D,
                             "" if got[name] is None else f"{got[name]:.2f}",
                             "" if got[name] is None or not ref else f"{got[name] / ref:.3f}", note])
            ref = got.get("sdpa_flash")
            # rows of this shape were written before sdpa_flash's time was known: fill the ratios
            for r in rows[-len(IMPLS):]:
                if r[7] and ref:
                    r[8] = f"{float(r[7]) / ref:.3f}"
            cells = " ".join(f"{got[i]:11.2f}" if got[i] is not None else f"{'-':>11s}" for i in IMPLS)
            ratio = (f"{got['ours'] / ref:11.2f} {got['ours_op'] / ref:9.2f}"
                     if ref and got["ours"] and got["ours_op"] else "")
            print(f"{pass_:7s} {B:2d} {H:3d} {N:5d} {cells} {ratio}", flush=True)


def print_goal(rows):
    """The goal's line: ours against sdpa_flash forward at GOAL's shape."""
    (gB, gH, gN), goal = GOAL
    g = {r[0]: float(r[7]) for r in rows if r[1] == "fwd" and (r[3], r[4], r[5]) == (gB, gH, gN) and r[7]}
    if "ours" in g and "sdpa_flash" in g:
        ratio = g["ours"] / g["sdpa_flash"]
        print(f"\ngoal: forward at B {gB}, H {gH}, N {gN}, d {D}: ours {g['ours']:.2f} us, sdpa_flash "
              f"{g['sdpa_flash']:.2f} us, {ratio:.2f}x (goal <= {goal}x: {'met' if ratio <= goal else 'NOT met'})")


def time_strides(torch, ours, args, gen, rows):
    """The stride table: ours on each layout of STRIDE_SHAPES, a row in rows
    and a line each, then the slowest strided layout against its goal."""
    # Strides: the same values as contiguous (B, H, N, d) tensors, as (B, N, H, d)
    # views, and as slices of one packed (B, N, 3, H, d) QKV tensor, at shapes
    # where the kernels' time is the cost; goal: no more than 3% slower.
    print(f"\nlayout   {'B':>2s} {'H':>3s} {'N':>5s} {'d':>4s} {'pass':>7s} {'us/call':>9s} {'/ contiguous':>13s}")
    worst = 0.0
    for B, H, N, d in STRIDE_SHAPES:
        qkv = torch.randn(B, N, 3, H, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        packed = [t.requires_grad_() for t in qkv.detach().permute(2, 0, 3, 1, 4)]   # (B, H, N, d) views
        layouts = {"contig": [t.detach().contiguous() for t in packed],
                   "bshd": [t.detach().transpose(1, 2).contiguous().transpose(1, 2) for t in packed],
                   "packed": [t.detach() for t in packed]}
        for pass_ in ("fwd", "fwdbwd"):
            ins = {lay: [t.detach().requires_grad_(pass_ == "fwdbwd") for t in qkv3]
                   for lay, qkv3 in layouts.items()}
            # the layouts' loops alternate (a loop of each, --stride-repeats times), so that
            # the GPU's clock and temperature drift over the run reach all of them alike
            ts = {lay: [] for lay in ins}
            for _ in range(args.stride_repeats):
                for lay, (q, k, v) in ins.items():
                    ts[lay].append(time_call(torch, ours, q, k, v, pass_ == "fwdbwd", 20, 1))
            base = statistics.median(ts["contig"])
            for lay in ins:
                us = statistics.median(ts[lay])
                if lay != "contig":
                    worst = max(worst, us / base)
                rows.append(["ours_" + lay, pass_, "bf16", B, H, N, d, f"{us:.2f}", "",
                             f"{us / base:.4f} x contiguous (median of {args.stride_repeats} alternating loops of 20)"])
                print(f"{lay:8s} {B:2d} {H:3d} {N:5d} {d:4d} {pass_:>7s} {us:9.2f} {us / base:13.4f}", flush=True)
    print(f"strides: the slowest strided layout is {worst:.4f} x contiguous "
          f"(goal <= 1.03: {'met' if worst <= 1.03 else 'NOT met'})")


def write_csv(path, pv, rows):
    """The provenance columns pv and the rows into the CSV at path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(PROV_COLS + ["impl", "pass", "dtype", "B", "H", "N", "d", "us_per_call",
                                "ratio_to_sdpa_flash", "note"])
        for r in rows:
            w.writerow([pv[c] for c in PROV_COLS] + r)
    print(f"wrote {path} ({len(rows)} rows)")


def main(argv):
    args = parse_args(argv)
    if args.summary:
        return write_summary(args.from_csv, args.summary)
    if args.calls < 1 or args.repeats < 1 or args.stride_repeats < 1:
        print("bench_op_overhead: --calls and --repeats must be >= 1", file=sys.stderr)
        return 2
    import gpu_timing   # scripts/, this script's own folder
    torch = gpu_timing.torch_on_gpu("bench_op_overhead")
    if torch is None:
        return 2
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from flashattn_stages import flash_op

    def ours(q, k, v):
        return flash_op.flash_attention(q, k, v)

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    # impl -> (the call, the context it is timed in: outside the loop, so
    # that no impl pays for setting a flag per call)
    fns = {"ours": (ours, lambda: _fast_path(flash_op, True)),
           "ours_op": (ours, lambda: _fast_path(flash_op, False)),
           "sdpa_flash": (sdpa, lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])),
           "sdpa_cudnn": (sdpa, lambda: sdpa_kernel([SDPBackend.CUDNN_ATTENTION]))}

    pv = prov.record(sys.argv)
    print(f"# {pv['gpu']}, driver {pv['driver']}, CUDA {pv['cuda']}, torch {pv['torch']}, "
          f"commit {pv['commit']}, {pv['date']}")
    print(f"# microseconds per call (median of {args.repeats} loops of {args.calls}), bf16, d = {D}, no mask")
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    time_shapes(torch, fns, args, gen, rows)
    print_goal(rows)
    time_strides(torch, ours, args, gen, rows)
    if args.csv:
        write_csv(args.csv, pv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
