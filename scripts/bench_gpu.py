#!/usr/bin/env python3
"""bench_gpu.py -- stage 4's forward kernels beside PyTorch's attention, on the GPU.

What it does: loads build/libfa_gpu.so (kernels/fa_gpu.h) through ctypes
(scripts/fa.py), and times our versions (0:
materialized, 1: tiled on the CUDA cores, 2: tiled on the tensor cores) beside torch.nn.functional.scaled_dot_product_attention
with its FLASH_ATTENTION and CUDNN_ATTENTION backends and the plain
materialized torch expression softmax(Q K^T scale) V, all on the same torch
tensors in the same run (our launchers get the tensors' data_ptr()).

Protocol of the FlashAttention papers: batch x N = 16384 tokens, hidden 2048
so H = 2048 / d; d = 64 and 128; N = 512 .. 16384; non-causal; bf16 and fp32.
FLOPs = 4 B H N^2 d. Each timing: CUDA events around one launch, 3 warm-ups,
then the median of --repeats launches (fewer when one launch is long: at
least 5, stopping after about 1 s). SDPA's flash and cuDNN backends do not
take fp32: such rows carry a note, not a number.

Usage (on a GPU machine; make bench-gpu builds the library first):
    python3 scripts/bench_gpu.py --csv data/gpu/bench_fwd.csv
    python3 scripts/bench_gpu.py --quick          # N = 1024 only, no CSV
    python3 scripts/bench_gpu.py --profile-io MAP.json   # used by scripts/ncu_io.sh
    python3 scripts/bench_gpu.py --tables         # Markdown tables from data/gpu/*.csv
Every CSV row carries GPU name, driver, CUDA version, torch version, commit,
date and the command (FA_COMMIT in the environment overrides git, for copies
of the tree without .git).
Cost: about a minute on an H200; version 0 needs 2 B H N^2 elements of
workspace (69 GB at N = 16384 in fp32).
"""
import argparse
import ctypes
import json
import math
import os
import sys

import fa
import provenance as prov

try:   # --tables needs no GPU and no torch
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    torch = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = {"fp32": ("float32", 0), "fp16": ("float16", 1), "bf16": ("bfloat16", 2)}


def provenance(argv):
    """The columns every row of bench_fwd.csv carries (scripts/provenance.py)."""
    return {
        "gpu": torch.cuda.get_device_name(0),
        "driver": prov.gpu_and_driver()[1],
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "cudnn": str(torch.backends.cudnn.version()),
        "commit": prov.commit(),
        "date": prov.utc_now(),
        "command": " ".join(["python3"] + argv),
    }


class Ours:
    """One of our forward versions as a callable on torch tensors (B, H, N, d)."""

    def __init__(self, lib, kernel, q, k, v):
        self.lib, self.kernel, self.q, self.k, self.v = lib, kernel, q, k, v
        B, H, N, d = q.shape
        self.dcode = {torch.float32: fa.FP32, torch.float16: fa.FP16, torch.bfloat16: fa.BF16}[q.dtype]
        self.p = fa.params(B, H, N, d)
        self.o = torch.empty_like(q)
        self.L = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
        wsb = lib.fa_workspace_bytes(fa.FORWARD, kernel, self.dcode, ctypes.byref(self.p))
        self.ws = torch.empty(wsb, dtype=torch.uint8, device=q.device) if wsb else None
        self.x = fa.Ptrs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=self.o.data_ptr(),
                         softmax_lse=self.L.data_ptr(),
                         workspace=self.ws.data_ptr() if self.ws is not None else None,
                         workspace_bytes=wsb)

    def __call__(self):
        fa.check(self.lib, self.lib.fa_forward(self.kernel, self.dcode, ctypes.byref(self.p),
                                               ctypes.byref(self.x),
                                               torch.cuda.current_stream().cuda_stream))
        return self.o


def sdpa(backend, q, k, v):
    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v)
    return run


def materialized_torch(q, k, v):
    scale = 1.0 / math.sqrt(q.shape[-1])
    return lambda: torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v


def time_ms(fn, repeats):
    """Median of per-launch CUDA-event times, after 3 warm-ups."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    spent = 0.0
    for r in range(repeats):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        t = e0.elapsed_time(e1)
        times.append(t)
        spent += t
        if r >= 4 and spent > 1000.0:
            break
    times.sort()
    n = len(times)
    return (times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])), n


def make_inputs(B, H, N, d, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn((B, H, N, d), device="cuda", dtype=dtype, generator=g) for _ in range(3)]


IMPL_FILTER = None   # --impls: a subset of the names below


def impls(lib, q, k, v):
    out = [("ours_v0_materialized", lambda: Ours(lib, 0, q, k, v)),
           ("ours_v1_tiled", lambda: Ours(lib, 1, q, k, v)),
           ("ours_v2_mma", lambda: Ours(lib, 2, q, k, v))]
    out.append(("sdpa_flash", lambda: sdpa(SDPBackend.FLASH_ATTENTION, q, k, v)))
    out.append(("sdpa_cudnn", lambda: sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v)))
    out.append(("torch_materialized", lambda: materialized_torch(q, k, v)))
    return [x for x in out if IMPL_FILTER is None or x[0] in IMPL_FILTER]


def bench(args, lib, prov):
    header = ("gpu,driver,cuda,torch,cudnn,commit,date,command,impl,dtype,causal,B,H,N,d,"
              "median_ms,tflops,repeats,max_abs_diff_vs_sdpa_or_v0,note")
    rows = []
    csv = open(args.csv, "w") if args.csv else None
    if csv:
        csv.write(header + "\n")

    def emit(impl, dt, B, H, N, d, ms, tflops, reps, diff, note):
        cells = [prov[k] for k in ("gpu", "driver", "cuda", "torch", "cudnn", "commit", "date", "command")]
        cells += [impl, dt, "0", str(B), str(H), str(N), str(d),
                  "" if ms is None else f"{ms:.4f}", "" if tflops is None else f"{tflops:.2f}",
                  "" if reps is None else str(reps), "" if diff is None else f"{diff:.3e}", note]
        line = ",".join('"' + c.replace('"', "'") + '"' if ("," in c or '"' in c) else c for c in cells)
        rows.append((impl, dt, N, d, tflops, note))
        if csv:
            csv.write(line + "\n")
            csv.flush()
        print(f"{impl:22s} {dt:5s} N={N:6d} d={d:4d} B={B:3d} H={H:3d} "
              f"{'' if ms is None else f'{ms:9.3f} ms':>12s} "
              f"{'' if tflops is None else f'{tflops:7.2f} TFLOP/s':>16s} {note}", flush=True)

    for dt in args.dtypes:
        tdtype = getattr(torch, DTYPES[dt][0])
        for d in args.dims:
            H = 2048 // d
            for N in args.ns:
                B = max(1, 16384 // N)
                flops = 4.0 * B * H * N * N * d
                q, k, v = make_inputs(B, H, N, d, tdtype, seed=1000 + N + d)
                measured = []   # (name, ms, reps, note, O as fp32)
                for name, make in impls(lib, q, k, v):
                    try:
                        fn = make()
                        out = fn()
                        torch.cuda.synchronize()
                    except Exception as e:  # unsupported backend/dtype, out of memory
                        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                        if name.startswith("sdpa") and dt == "fp32":
                            note = "not supported: SDPA flash/cuDNN backends take fp16/bf16 only"
                        elif name == "ours_v2_mma" and dt == "fp32":
                            note = "not supported: version 2 (tensor cores) takes fp16/bf16 only"
                        else:
                            note = "failed: " + msg[:160]
                        measured.append((name, None, None, note, None))
                        torch.cuda.empty_cache()
                        continue
                    ms, reps = time_ms(fn, args.repeats)
                    measured.append((name, ms, reps, "", out.float()))
                    del fn
                    torch.cuda.empty_cache()
                # accuracy on the same tensors: max |O - O_base|, base = SDPA flash
                # where it runs (bf16), else our version 0 (fp32)
                base = dict((m[0], m[4]) for m in measured if m[4] is not None)
                bname = "sdpa_flash" if "sdpa_flash" in base else "ours_v0_materialized"
                for name, ms, reps, note, o in measured:
                    diff = None
                    if o is not None and bname in base:
                        diff = (o - base[bname]).abs().max().item()
                        note = note or f"diff vs {bname}"
                    emit(name, dt, B, H, N, d, ms, None if ms is None else flops / (ms * 1e-3) / 1e12,
                         reps, diff, note)
                del q, k, v, measured, base
                torch.cuda.empty_cache()
    if csv:
        csv.close()
    # the summary table the reply and README quote
    print("\nTFLOP/s (forward, non-causal):")
    names = ["ours_v0_materialized", "ours_v1_tiled", "ours_v2_mma", "sdpa_flash", "sdpa_cudnn",
             "torch_materialized"]
    print(f"{'dtype':5s} {'d':>4s} {'N':>6s} " + " ".join(f"{n[:18]:>18s}" for n in names))
    keys = sorted({(r[1], r[3], r[2]) for r in rows})
    for dt, d, N in keys:
        cells = []
        for n in names:
            m = [r for r in rows if r[0] == n and r[1] == dt and r[2] == N and r[3] == d]
            cells.append(f"{m[0][4]:18.2f}" if m and m[0][4] is not None else f"{'n/a':>18s}")
        print(f"{dt:5s} {d:4d} {N:6d} " + " ".join(cells))


def profile_io(args, lib):
    """Each (config, impl) once between profiler start/stop, after a marker
    kernel whose grid size is the tag; MAP.json maps tags to configs. Run
    under ncu --profile-from-start off (scripts/ncu_io.sh)."""
    configs = []
    for N in (256, 512, 1024, 2048, 4096, 8192):
        configs.append(("fp16", 16384 // N, 32, N, 64, "sweep"))
    configs.append(("fp16", 64, 16, 1024, 64, "FlashAttention Figure 2 (B 64, H 16, N 1024, d 64)"))
    configs.append(("bf16", 4, 16, 4096, 128, "d 128"))
    configs.append(("fp32", 4, 32, 4096, 64, "fp32"))
    tagmap = {}
    tag = 1
    for dt, B, H, N, d, label in configs:
        tdtype, dcode = getattr(torch, DTYPES[dt][0]), DTYPES[dt][1]
        q, k, v = make_inputs(B, H, N, d, tdtype, seed=N)
        for name, make in impls(lib, q, k, v):
            if name == "torch_materialized":
                continue
            try:
                fn = make()
                fn()
                torch.cuda.synchronize()   # warm: handles, module loads, autotuning
            except Exception as e:
                print(f"skip {name} {dt}: {str(e).splitlines()[0][:120]}", flush=True)
                continue
            kernel = {"ours_v0_materialized": 0, "ours_v1_tiled": 1, "ours_v2_mma": 2}.get(name, 1)
            p = ctypes.byref(fa.params(B, H, N, d))
            model = lib.fa_model_bytes(fa.FORWARD, kernel, dcode, p) if name.startswith("ours") else None
            tagmap[tag] = dict(impl=name, dtype=dt, B=B, H=H, N=N, d=d, label=label,
                               model_bytes=model,
                               model_v0_bytes=lib.fa_model_bytes(fa.FORWARD, 0, dcode, p),
                               model_v1_bytes=lib.fa_model_bytes(fa.FORWARD, 1, dcode, p),
                               compulsory_bytes=lib.fa_compulsory_bytes(fa.FORWARD, dcode, p))
            torch.cuda.profiler.start()
            lib.fa_marker(tag)
            fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            print(f"profiled tag {tag}: {name} {dt} B={B} H={H} N={N} d={d}", flush=True)
            tag += 1
            del fn
            torch.cuda.empty_cache()
        del q, k, v
        torch.cuda.empty_cache()
    with open(args.profile_io, "w") as f:
        json.dump(tagmap, f, indent=1)


def tables(args):
    """Markdown tables for data/gpu/README.md, read from the measured files
    (nothing typed by hand): speed, bytes, errors."""
    import csv
    import re
    d = os.path.join(ROOT, "data", "gpu")
    out = []
    bench = [r for r in csv.DictReader(open(os.path.join(d, "bench_fwd.csv")))]
    if bench:
        b0 = bench[0]
        out.append(f"Speed: {b0['gpu']}, driver {b0['driver']}, CUDA {b0['cuda']}, torch {b0['torch']}, "
                   f"cuDNN {b0['cudnn']}, commit {b0['commit']}, {b0['date']} (data/gpu/bench_fwd.csv).\n")
        names = [("ours_v0_materialized", "v0 materialized"), ("ours_v1_tiled", "v1 tiled (CUDA cores)"),
                 ("ours_v2_mma", "v2 tiled (mma.sync)"), ("sdpa_flash", "SDPA flash"),
                 ("sdpa_cudnn", "SDPA cuDNN"), ("torch_materialized", "torch matmul+softmax")]
        out.append("| dtype | d | N | B x H | " + " | ".join(n[1] for n in names) + " | v2 / flash |")
        out.append("|---|---|---|---|" + "---|" * len(names) + "---|")
        keys = []
        for r in bench:
            k = (r["dtype"], int(r["d"]), int(r["N"]), r["B"] + " x " + r["H"])
            if k not in keys:
                keys.append(k)
        for dt, dd, N, bh in keys:
            cells, tf = [], {}
            for n, _ in names:
                m = [r for r in bench if r["impl"] == n and r["dtype"] == dt and int(r["d"]) == dd and int(r["N"]) == N]
                if m and m[0]["tflops"]:
                    tf[n] = float(m[0]["tflops"])
                    cells.append(f"{tf[n]:.1f}")
                else:
                    cells.append("n/a" if m and "not supported" in m[0]["note"] else "-")
            ratio = f"{tf['ours_v2_mma'] / tf['sdpa_flash']:.2f}" if "ours_v2_mma" in tf and "sdpa_flash" in tf else "-"
            out.append(f"| {dt} | {dd} | {N} | {bh} | " + " | ".join(cells) + f" | {ratio} |")
        out.append("\nTFLOP/s = 4 B H N^2 d / median time; n/a: the implementation does not take the dtype.")
        for dd in sorted({int(r["d"]) for r in bench}):
            rat = []
            for N in sorted({int(r["N"]) for r in bench}):
                f = {r["impl"]: float(r["tflops"]) for r in bench if r["dtype"] == "bf16" and int(r["d"]) == dd
                     and int(r["N"]) == N and r["tflops"]}
                if "ours_v2_mma" in f and "sdpa_flash" in f:
                    rat.append(f["ours_v2_mma"] / f["sdpa_flash"])
            if rat:
                out.append(f"bf16, d = {dd}: version 2 reaches {min(rat):.2f} to {max(rat):.2f} of SDPA flash "
                           f"(FlashAttention-2) over N.")
        out.append("")
    io = [r for r in csv.DictReader(open(os.path.join(d, "io_fwd.csv")))]
    if io:
        i0 = io[0]
        out.append(f"Bytes: {i0['gpu']}, driver {i0['driver']}, commit {i0['commit']}, {i0['date']} "
                   f"(data/gpu/io_fwd.csv; GB = 1e9 bytes).\n")
        out.append("| config | dtype | B,H,N,d | impl | DRAM GB | L2 GB (all) | L2 GB (SM requests) | "
                   "model GB | compulsory GB | DRAM / model | SM-L2 / model | time ms |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        g = lambda x: f"{float(x) / 1e9:.3f}" if x else "-"
        for r in io:
            out.append(f"| {r['label']} | {r['dtype']} | {r['B']},{r['H']},{r['N']},{r['d']} | {r['impl']} | "
                       f"{g(r['dram_bytes'])} | {g(r['l2_bytes'])} | {g(r.get('l2_from_sm_bytes'))} | "
                       f"{g(r['model_bytes'])} | {g(r['compulsory_bytes'])} | {r['dram_over_model'] or '-'} | "
                       f"{r.get('l2_from_sm_over_model') or '-'} | {float(r['kernel_time_ms']):.3f} |")
        def dram(impl, N, d, dt="fp16", H="32"):
            m = [r for r in io if r["impl"] == impl and r["N"] == str(N) and r["d"] == str(d)
                 and r["dtype"] == dt and r["H"] == H]
            return float(m[0]["dram_bytes"]) if m else None
        for N in (4096,):
            a, b, c = dram("ours_v0_materialized", N, 64), dram("ours_v1_tiled", N, 64), dram("ours_v2_mma", N, 64)
            if a and b and c:
                out.append(f"\nMeasured DRAM bytes at N = {N}, d = 64 (fp16, B = 4, H = 32): v0 / v1 = {a / b:.1f}, "
                           f"v0 / v2 = {a / c:.1f} (acceptance: >= 5).")
        fig = [r for r in io if r["label"].startswith("FlashAttention Figure 2")]
        if fig:
            out.append("\nFlashAttention paper's Figure 2 shape, forward only (B 64, H 16, N 1024, d 64, fp16): " +
                       "; ".join(f"{r['impl']} DRAM {float(r['dram_bytes']) / 1e9:.2f} GB, L2 "
                                 f"{float(r['l2_bytes']) / 1e9:.2f} GB, {float(r['kernel_time_ms']):.2f} ms"
                                 for r in fig) + ".")
        out.append("")
    lay_path = os.path.join(d, "v2_layout_ab.csv")
    if os.path.exists(lay_path):
        lay = list(csv.DictReader(open(lay_path)))
        if lay:
            out.append(f"Version 2's L2 reads by shared-memory layout (data/gpu/v2_layout_ab.csv, commit "
                       f"{lay[0]['commit']}, {lay[0]['date']}):\n")
            out.append("| layout | dtype | B,H,N,d | cp.async bytes (512 x LDGSTS) | model reads | L2 read bytes "
                       "| sectors / request | L2 reads / model | time ms |")
            out.append("|---|---|---|---|---|---|---|---|---|")
            for r in lay:
                out.append(f"| {r['layout']} | {r['dtype']} | {r['B']},{r['H']},{r['N']},{r['d']} | "
                           f"{float(r['ldgsts_bytes']) / 1e9:.3f} GB | {float(r['model_read_bytes']) / 1e9:.3f} GB | "
                           f"{float(r['l2_read_bytes']) / 1e9:.3f} GB | {r['sectors_per_request']} | "
                           f"{r['l2_read_over_model']} | {float(r['kernel_time_ms']):.3f} |")
            out.append("")
    log = os.path.join(d, "gpu_test.log")
    if os.path.exists(log):
        txt = open(log).read()
        seed = re.search(r"seed (\d+)", txt)
        out.append(f"Errors (data/gpu/gpu_test.log, seed {seed.group(1) if seed else '?'}): "
                   "max |O - O_ref| / max |O_ref| against the CPU fp64 reference on the inputs rounded to the dtype.\n")
        out.append("| shape (B,H,N,d) | fp32 v0 | fp32 v1 | fp16 v0 | fp16 v1 | fp16 v2 | bf16 v0 | bf16 v1 | bf16 v2 |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        rows = {}
        for m in re.finditer(r"^(PASS|FAIL) stage4 (fp32|fp16|bf16) (\([0-9,]+\)) \((.*)\)$", txt, re.M):
            errs = dict(re.findall(r"(v\d) err ([0-9.e+-]+)", m.group(4)))
            rows.setdefault(m.group(3), {})[m.group(2)] = errs
        for shape, r in rows.items():
            c = [r.get(dt, {}).get(v, "-") for dt, v in (("fp32", "v0"), ("fp32", "v1"), ("fp16", "v0"),
                 ("fp16", "v1"), ("fp16", "v2"), ("bf16", "v0"), ("bf16", "v1"), ("bf16", "v2"))]
            out.append(f"| {shape} | " + " | ".join(c) + " |")
        summ = re.search(r"^\d+ passed, \d+ failed, \d+ skipped$", txt, re.M)
        san = re.findall(r"^(?:PASS|FAIL) stage4-(?:memcheck|racecheck).*$", txt, re.M)
        out.append("\n" + (summ.group(0) if summ else "") + "; " + "; ".join(san))
    text = "\n".join(out)
    if args.readme:
        readme = open(args.readme).read()
        a, b = "<!-- BEGIN GENERATED", "<!-- END GENERATED -->"
        i, j = readme.index(a), readme.index(b)
        head = readme[:i] + "<!-- BEGIN GENERATED by python3 scripts/bench_gpu.py --tables --readme " \
            "data/gpu/README.md; do not edit by hand -->\n\n"
        open(args.readme, "w").write(head + text + "\n\n" + readme[j:])
    else:
        print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", help="write the rows here (with provenance columns)")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libfa_gpu.so"))
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--ns", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="N = 1024 only")
    ap.add_argument("--profile-io", metavar="MAP.json", help="ncu mode (scripts/ncu_io.sh)")
    ap.add_argument("--tables", action="store_true",
                    help="print the Markdown tables of data/gpu/README.md from data/gpu/*.csv (no GPU)")
    ap.add_argument("--readme", help="with --tables: rewrite the generated block of this README instead")
    ap.add_argument("--impls", help="comma-separated subset of implementations (default: all)")
    args = ap.parse_args()
    global IMPL_FILTER
    if args.impls:
        IMPL_FILTER = set(args.impls.split(","))
    if args.tables:
        tables(args)
        return 0
    if torch is None or not torch.cuda.is_available():
        print("bench_gpu.py: no CUDA GPU here; nothing to run")
        return 0
    args.dtypes = args.dtypes.split(",")
    for dt in args.dtypes:
        if dt not in DTYPES:
            print(f"bench_gpu.py: error: --dtypes: unknown dtype {dt}", file=sys.stderr)
            return 2
    args.dims = [int(x) for x in args.dims.split(",")]
    args.ns = [1024] if args.quick else [int(x) for x in args.ns.split(",")]
    lib = fa.load(args.lib)
    if args.profile_io:
        profile_io(args, lib)
        return 0
    prov = provenance(sys.argv)
    print(f"# {prov}")
    bench(args, lib, prov)
    return 0


if __name__ == "__main__":
    sys.exit(main())
