#!/usr/bin/env python3
"""paper/gen/paper_bwd.py -- the numbers chapters/21-gpu-backward.md (the GPU backward) quotes from the H200 run.

    python3 paper/gen/paper_bwd.py         prints the values, one "key<TAB>value" a line

claims.py takes values() into build/paper/values.tsv. Two files, both written
by make gpu-data (kernels/gpu_data.mk):

  data/gpu/bench_bwd.csv  TFLOP/s of one backward call (pass bwd) and of a
                          forward plus backward (pass fwdbwd) for every
                          version in the library's table, their
                          deterministic modes (rows *_det), SDPA flash and
                          cuDNN, on the same tensors in the same run
  data/gpu/io_bwd.csv     Nsight Compute's DRAM and L2 bytes of one backward
                          per implementation beside each version's IO model

From them: our fastest backward against flash and cuDNN (range over the
shapes with N >= N_LO, and the geometric mean), version 2 likewise (the
issue's target was version 2 at 1.0x flash), the forward-plus-backward
ratios, what the deterministic mode costs, fp16, and the bytes. Ratios are
of TFLOP/s from graph_ms (every call replayed from a CUDA graph, the one
clock that charges no host overhead to either side; paper_gpu.fair_tflops),
which on one shape is the inverse ratio of times; a shape whose graph did not
capture for one side is left out. Without the
files every key is "n/a" (bwd_status "absent"). Standard library only.
"""
import csv
import math
import os
import re
import sys

import paper_bwd3  # CAPTURE_STUDY: the run with every graph captured
import paper_gpu  # print_values: the one key<TAB>value printer of the chapter generators
from paper_gpu import span  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.environ.get("PAPER_BWD_CSV", "data/gpu/bench_bwd.csv")
IO = os.environ.get("PAPER_BWD_IO", "data/gpu/io_bwd.csv")
OPS = {"ours": "data/gpu/studies/bwd_v4_ncu/bwd_opcodes_v4.txt", "flash": "data/gpu/studies/bwd_v4_ncu/bwd_opcodes_flash.txt",
       "before": "data/gpu/studies/bwd_v4_steps/bwd_opcodes_v4_round1.txt"}   # version 3 before its second round
# opcode groups of the instruction-count comparison
INTEGER = ("IMAD", "LEA", "LOP3", "ISETP", "SHF", "IADD3", "SEL", "VIADD", "IABS", "VIADDMNMX", "VIMNMX",
           "PRMT", "MOV", "I2F", "F2I", "S2R", "LDC", "ULDC", "UIADD3", "ULEA", "UMOV", "USHF", "UISETP",
           "ULOP3", "USEL", "UIMAD", "S2UR", "R2UR", "P2R", "R2P", "PLOP3")
BRANCH = ("BRA", "BSSY", "BSYNC")
N_LO = 2048          # the "N >= 2048"
# backward rows (pass bwd). Version 4 (kernels/stage5_bwd_v4.cu) was named
# ours_v3_mma8 before backward version 3 (Hopper) took the number 3; files of
# either age are read, and its values are bwd_*v4* (core/versions.def's
# numbers). Unknown impl names are ignored.
V2 = "ours_v2_mma"
V4_NAMES = ("ours_v4_mma8", "ours_v3_mma8")
V4 = V4_NAMES[0]
HOPPER_BWD = "ours_v3_hopper"                # backward version 3 (pass bwd), in newer files
V3_FB = "ours_v3_hopper"                     # forward v3 + the op's best backward (pass fwdbwd)
FLASH, CUDNN = "sdpa_flash", "sdpa_cudnn"


def full(rel):
    return rel if os.path.isabs(rel) else os.path.join(ROOT, rel)


def rows(rel):
    if not os.path.exists(full(rel)):
        return None
    with open(full(rel), newline="") as f:
        return list(csv.DictReader(ln for ln in f if not ln.startswith("#") and ln.strip()))


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def table(rs, ps, dtype):
    """(impl, d, causal, N) -> (TFLOP/s, ms) for one pass and dtype, timed rows only."""
    out = {}
    for r in rs:
        tf = paper_gpu.fair_tflops(r)   # graph-replayed: no host overhead on either side
        if r["pass"] == ps and r["dtype"] == dtype and tf and r["median_ms"]:
            out[(r["impl"], int(r["d"]), int(r["causal"]), int(r["N"]))] = (tf, float(r["median_ms"]))
    return out


def both_peers(t):
    """t restricted to the shapes where both peers were timed (their graphs
    captured), so that every ratio of one table is over the same shapes."""
    ok = {k[1:] for k in t if k[0] == FLASH} & {k[1:] for k in t if k[0] == CUDNN}
    return {k: x for k, x in t.items() if k[1:] in ok}


def ratios(t, a, b, n_lo=N_LO, n_hi=None):
    """TFLOP/s of a over b on every shape both ran with N in [n_lo, n_hi]."""
    out = []
    for (impl, d, c, N), (tf, _) in t.items():
        if impl == a and N >= n_lo and (n_hi is None or N <= n_hi) and (b, d, c, N) in t:
            out.append(tf / t[(b, d, c, N)][0])
    return out


# The line of the benchmark that takes PyTorch's backward by
# torch.autograd.grad. A file measured by a harness without it called
# .backward() on leaf inputs, and autograd copied two of SDPA flash's
# (B, N, H, d)-strided gradients into the leaves' contiguous .grad (two
# at::elementwise_kernel launches in io_bwd.csv's rows).
HARNESS = ("scripts/gpu/bench_gpu.py", "torch.autograd.grad(out, (inputs.q")
NCU_RAW = os.environ.get("PAPER_BWD_NCU_RAW", "data/gpu/io_bwd_ncu_raw.csv")
NCU_MAP = os.environ.get("PAPER_BWD_NCU_MAP", "data/gpu/io_bwd_map.json")
COPY_KERNEL = "at::elementwise_kernel"


def old_harness(rel):
    """True where data file rel was measured by a bench_gpu.py that took the
    backward by .backward() on leaf inputs (so SDPA flash's rows include the
    copies of its gradients into .grad); False where it took
    torch.autograd.grad or where that cannot be told."""
    return paper_gpu.measured_code_has(rel, *HARNESS) is False


def flash_copies():
    """{d: (copy bytes, all DRAM bytes, copy time, all kernel time)} of SDPA
    flash's backward in the Nsight Compute run of io_bwd.csv: the kernels
    named COPY_KERNEL in flash's group of the raw page, grouped as
    scripts/gpu/ncu_io.py groups them. {} without the files."""
    import json
    sys.path.insert(0, full(os.path.join("scripts", "gpu")))
    import ncu_io
    try:
        tags = {int(k): m for k, m in json.load(open(full(NCU_MAP))).items()}
        groups = ncu_io.kernel_groups(full(NCU_RAW))
    except (OSError, ValueError):
        return {}
    by = lambda r: ncu_io.num(r["dram__bytes_read.sum"]) + ncu_io.num(r["dram__bytes_write.sum"])  # noqa: E731
    tm = lambda r: ncu_io.num(r["gpu__time_duration.sum"])  # noqa: E731
    out = {}
    for tag, m in tags.items():
        ks = groups.get(tag, [])
        if m.get("impl") != FLASH or m.get("pass_") != "bwd" or not ks:
            continue
        cp = [r for r in ks if COPY_KERNEL in r["Kernel Name"]]
        out[int(m["d"])] = (sum(map(by, cp)), sum(map(by, ks)), sum(map(tm, cp)), sum(map(tm, ks)))
    return out


def copies_values():
    """The clauses that say SDPA flash's stored backward figures include the
    old harness's two gradient copies: each "" once its file was measured by
    the harness that makes none (HARNESS), so they vanish on re-measurement."""
    v = {"bwd_io_flash_copies": "", "bwd_flash_copies": "", "bwd_flash_copies_claim": "", "bwd_flash_copies_short": "",
         "bwd_io_flash_copies_short": "",
         "bwd_flash_copy_share": "n/a"}
    cp = flash_copies()
    share = [c[2] / c[3] for c in cp.values() if c[3]]
    if share:
        v["bwd_flash_copy_share"] = span([100 * x for x in share], 1) + " %"
    io_n = next((r["N"] for r in rows(IO) or [] if r["impl"] == FLASH), None)
    at = f" at $N$ = {io_n}" if io_n else ""
    if old_harness(IO) and cp:
        b = cp.get(128) or next(iter(cp.values()))
        v["bwd_io_flash_copies_short"] = f" ({b[0] / 1e9:.2f} GB of flash's are those two copies)"
        v["bwd_io_flash_copies"] = (
            f" (of flash's, {b[0] / 1e9:.2f} GB are two {COPY_KERNEL} launches that copy its gradients "
            "into the inputs' contiguous .grad: the benchmark that measured these bytes called backward() "
            "on its inputs, where it now takes the gradients by torch.autograd.grad, which makes no such copy)")
    timed = [rel for rel in (BENCH, paper_bwd3.CAPTURE_STUDY) if old_harness(rel)]
    if not timed:   # no sentence on the times to refer to: the bytes' clause says it all
        v["bwd_io_flash_copies_short"] = v["bwd_io_flash_copies"]
    if timed:
        what = (f"{v['bwd_flash_copy_share']} of its kernel time{at} by Nsight Compute"
                if share else "their share was not measured")
        v["bwd_flash_copies"] = (
            "SDPA flash's backward times here include two copies of its gradients into the inputs' "
            f"contiguous .grad ({what}), made by the benchmark that measured them, which called "
            "backward() on its inputs, not by the attention; every ratio to flash's backward is in our "
            "favour by about that share, more at shorter sequences, since the copies move the same bytes "
            "at every shape of the grid. The benchmark now takes the gradients by torch.autograd.grad, "
            "which makes no such copy.")
        v["bwd_flash_copies_short"] = (
            "SDPA flash's backward times here include two copies of its gradients into the inputs' .grad, "
            f"made by the benchmark that measured them, not by the attention ({what}).")
        v["bwd_flash_copies_claim"] = (
            f"; flash's times include two gradient copies into .grad made by the measuring harness "
            f"({v['bwd_flash_copy_share']} of its kernel time{at.replace('$', '')})" if share else
            "; flash's times include two gradient copies into .grad made by the measuring harness")
    return v


def opcodes(rel):
    """{opcode: executed warp instructions} and the kernel's duration (ns)
    from an ncu --print-metric-instances details log; None if absent."""
    if not os.path.exists(full(rel)):
        return None
    text = open(full(rel)).read()
    m = re.search(r"sass__inst_executed_per_opcode\s+[\d,]+\s*\(", text)   # the value, not a command line
    if not m:
        return None
    body = text[m.end():text.index(")", m.end())]
    ops = {m.group(1): int(m.group(2).replace(",", "")) for m in re.finditer(r"([A-Z][A-Z0-9_]*):\s*([\d,]+)", body)}
    shape = re.search(r"bwd\s+bf16\s+c=(\d)\s+N=\s*(\d+)\s+d=\s*(\d+)", text)
    regs = re.search(r"launch__registers_per_thread\s+\S+\s+(\d+)", text)
    extra = {"N": shape.group(2) if shape else None, "d": shape.group(3) if shape else None,
             "regs": regs.group(1) if regs else None}
    dur = re.search(r"gpu__time_duration.sum\s+(\w+)\s+([\d,.]+)", text)
    ns = None
    if dur:
        ns = float(dur.group(2).replace(",", "")) * {"ns": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}.get(dur.group(1), 1)
    return ops, ns, extra


def opcode_values():
    keys = ["bwd_op_N", "bwd_op_d", "bwd_op_regs_ours", "bwd_op_regs_flash", "bwd_op_ours", "bwd_op_flash", "bwd_op_ratio", "bwd_op_hmma", "bwd_op_time_ratio",
            "bwd_op_int_ours", "bwd_op_int_flash", "bwd_op_branch_ours", "bwd_op_branch_flash",
            "bwd_op_ldsm_ours", "bwd_op_ldsm_flash", "bwd_op_per_hmma_ours", "bwd_op_per_hmma_flash",
            "bwd_op_before", "bwd_op_before_ratio", "bwd_op_before_per_hmma", "bwd_op_before_int",
            "bwd_op_before_branch", "bwd_op_rate_ratio", "bwd_bitwise", "bwd_bitwise_shapes"]
    v = {k: "n/a" for k in keys}
    a, b = opcodes(OPS["ours"]), opcodes(OPS["flash"])
    if not a or not b:
        return v
    (oa, ta, ea), (ob, tb, eb) = a, b
    v["bwd_op_N"], v["bwd_op_d"] = ea["N"] or "n/a", ea["d"] or "n/a"
    v["bwd_op_regs_ours"], v["bwd_op_regs_flash"] = ea["regs"] or "n/a", eb["regs"] or "n/a"
    G = lambda x: f"{x / 1e9:.2f}"  # noqa: E731  (billions)
    M = lambda x: f"{x / 1e6:.0f}"  # noqa: E731  (millions)
    na, nb = sum(oa.values()), sum(ob.values())
    v["bwd_op_ours"], v["bwd_op_flash"], v["bwd_op_ratio"] = G(na), G(nb), f"{na / nb:.2f}"
    v["bwd_op_hmma"] = M(oa.get("HMMA", 0)) if oa.get("HMMA") == ob.get("HMMA") else \
        f"{M(oa.get('HMMA', 0))} and {M(ob.get('HMMA', 0))}"
    if ta and tb:
        v["bwd_op_time_ratio"] = f"{ta / tb:.2f}"
        # flash's instructions per unit time over ours
        v["bwd_op_rate_ratio"] = f"{(nb / tb) / (na / ta):.2f}"
    for key, group in (("int", INTEGER), ("branch", BRANCH), ("ldsm", ("LDSM",))):
        v[f"bwd_op_{key}_ours"] = M(sum(oa.get(o, 0) for o in group))
        v[f"bwd_op_{key}_flash"] = M(sum(ob.get(o, 0) for o in group))
    v["bwd_op_per_hmma_ours"] = f"{na / oa['HMMA']:.1f}" if oa.get("HMMA") else "n/a"
    v["bwd_op_per_hmma_flash"] = f"{nb / ob['HMMA']:.1f}" if ob.get("HMMA") else "n/a"
    bit = full("data/gpu/studies/bwd_v4_steps/bitwise_round2.log")
    if os.path.exists(bit):
        lines = [ln for ln in open(bit) if ln.startswith(("SAME", "DIFFERENT"))]
        same = sum(ln.startswith("SAME") for ln in lines)
        v["bwd_bitwise"] = f"{same} of {len(lines)}"
        v["bwd_bitwise_shapes"] = str(len({ln.split(" deterministic ", 1)[-1] for ln in lines}))
    c = opcodes(OPS["before"])
    if c and c[0].get("HMMA"):
        oc = c[0]
        nc = sum(oc.values())
        v["bwd_op_before"], v["bwd_op_before_ratio"] = G(nc), f"{nc / nb:.2f}"
        v["bwd_op_before_per_hmma"] = f"{nc / oc['HMMA']:.1f}"
        v["bwd_op_before_int"] = M(sum(oc.get(o, 0) for o in INTEGER))
        v["bwd_op_before_branch"] = M(sum(oc.get(o, 0) for o in BRANCH))
    return v


def values():
    keys = ["bwd_status", "bwd_commit", "bwd_date", "bwd_nshapes", "bwd_N_lo", "bwd_tokens", "bwd_hidden",
            "bwd_fp16_Ns",
            "bwd_v4_flash", "bwd_v4_flash_gm", "bwd_v4_cudnn", "bwd_v4_cudnn_gm",
            "bwd_v2_flash", "bwd_v2_flash_gm", "bwd_v2_cudnn", "bwd_v4_over_v2",
            "bwd_v4_tf", "bwd_v2_tf", "bwd_flash_tf", "bwd_cudnn_tf",
            "bwd_fb_flash", "bwd_fb_flash_gm", "bwd_fb_cudnn", "bwd_fb_cudnn_gm", "bwd_fb_pair",
            "bwd_det_v2", "bwd_det_v4", "bwd_fp16_v4_flash", "bwd_fp16_v4_cudnn", "bwd_vs_flash",
            "bwd_v4_flash_512", "bwd_cover", "bwd_all_apart",
            "bwd_io_N", "bwd_io_d", "bwd_io_v4_l2", "bwd_io_v4_model", "bwd_io_v4_ratio",
            "bwd_io_v2_l2", "bwd_io_v2_model", "bwd_io_v2_ratio", "bwd_io_flash_l2",
            "bwd_io_cudnn_l2", "bwd_io_v4_dram", "bwd_io_compulsory", "bwd_io_flash_dram",
            "bwd_io_v4_l2sm", "bwd_io_v4_sm_ratio", "bwd_io_v2_l2sm", "bwd_io_v2_sm_ratio",
            "bwd_io_flash_l2sm", "bwd_io_cudnn_l2sm"]
    v = {k: "n/a" for k in keys}
    v["bwd_status"] = "absent"
    v["bwd_all_apart"] = v["bwd_all_claim"] = ""
    v.update(opcode_values())
    v.update(copies_values())
    rs = rows(BENCH)
    if rs:
        global V4
        names = {r["impl"] for r in rs if r["pass"] == "bwd"}
        V4 = next((n for n in V4_NAMES if n in names), V4_NAMES[0])
        # the fwdbwd row "ours_v3_hopper" pairs forward version 3 with the
        # backward of the same number: version 3 when the file has its bwd
        # rows, else (files before the renumbering) what is now version 4
        hopper = any(r["impl"] == HOPPER_BWD and r["pass"] == "bwd" and r["tflops"] for r in rs)
        v["bwd_fb_pair"] = ("forward and backward version 3" if hopper else
                            "forward version 3 with backward version 4")
        every = table(rs, "bwd", "bf16")
        t = both_peers(every)
        r4f, r4c = ratios(t, V4, FLASH), ratios(t, V4, CUDNN)
        r2f, r2c = ratios(t, V2, FLASH), ratios(t, V2, CUDNN)
        if r4f:   # version 2's keys stay "n/a" in a file without its rows
            v["bwd_status"] = "present"
            first = next(r for r in rs if r["pass"] == "bwd")
            v["bwd_commit"], v["bwd_date"] = first["commit"], first["date"][:10]
            v["bwd_nshapes"] = str(len(r4f))
            # which shapes the ratios cover, and where a peer's graph was lost the
            # same means over every shape from the run with every graph captured
            ran = {k[1:] for k in every if k[0] == V4 and k[3] >= N_LO}
            got = {k[1:] for k in t if k[0] == V4 and k[3] >= N_LO}
            v["bwd_cover"] = paper_gpu.cover_words(got, ran)
            if not got >= ran:
                st = both_peers(table(rows(paper_bwd3.CAPTURE_STUDY) or [], "bwd", "bf16"))
                sf, sc = ratios(st, V4, FLASH), ratios(st, V4, CUDNN)
                if len(sf) == len(ran) and len(sc) == len(ran):
                    # the complete set first, then what the table holds
                    v["bwd_all_apart"] = (f"over all {len(ran)} shapes, in a run of the same benchmark with every "
                                          f"graph captured ({paper_bwd3.CAPTURE_STUDY}), version 4 is at "
                                          f"{gmean(sf):.2f} of flash's backward and {gmean(sc):.2f} of cuDNN's "
                                          "in geometric mean. The table below is ")
                    v["bwd_all_claim"] = (f"; over all {len(ran)} in a run with every graph captured: "
                                          f"{gmean(sf):.2f} x flash, {gmean(sc):.2f} x cuDNN (geometric means)")
            bt = [r for r in rs if r["pass"] == "bwd" and r["dtype"] == "bf16"]
            tokens = sorted({int(r["B"]) * int(r["N"]) for r in bt})
            hidden = sorted({int(r["H"]) * int(r["d"]) for r in bt})
            v["bwd_tokens"] = "/".join(str(x) for x in tokens)
            v["bwd_hidden"] = "/".join(str(x) for x in hidden)
            v["bwd_N_lo"] = f"{N_LO}"
            v["bwd_v4_flash"], v["bwd_v4_flash_gm"] = span(r4f), f"{gmean(r4f):.2f}"
            v["bwd_v4_cudnn"], v["bwd_v4_cudnn_gm"] = span(r4c), f"{gmean(r4c):.2f}"
            if r2f:
                v["bwd_v2_flash"], v["bwd_v2_flash_gm"] = span(r2f), f"{gmean(r2f):.2f}"
                v["bwd_v2_cudnn"] = span(r2c)
                v["bwd_v4_over_v2"] = span(ratios(t, V4, V2))
                # how the text reads the two ranges against flash
                reach = sum(x >= 1 for x in r4f)
                v["bwd_vs_flash"] = ("neither reaches flash's backward at any of these shapes" if
                                     max(r4f + r2f) < 1 else
                                     f"version 4 reaches flash's backward at {reach} of these shapes"
                                     + (" and version 2 at some" if max(r2f) >= 1 else ""))
            for key, impl in (("bwd_v4_tf", V4), ("bwd_v2_tf", V2), ("bwd_flash_tf", FLASH), ("bwd_cudnn_tf", CUDNN)):
                xs = [tf for (i, d, c, N), (tf, _) in t.items() if i == impl and N >= N_LO]
                v[key] = span(xs, 0) if xs else "n/a"
            small = ratios(t, V4, FLASH, 512, 512)
            v["bwd_v4_flash_512"] = span(small) if small else "n/a"
            # the deterministic mode: its time over the default's, same version and
            # shape, at every shape where both of ours were captured (the peers' play no part)
            for key, impl in (("bwd_det_v2", V2), ("bwd_det_v4", V4)):
                xs = [every[(impl, d, c, N)][0] / every[(impl + "_det", d, c, N)][0]
                      for (i, d, c, N) in every if i == impl and N >= N_LO and (impl + "_det", d, c, N) in every]
                v[key] = span(xs, 1) if xs else "n/a"
        fb = both_peers(table(rs, "fwdbwd", "bf16"))
        f3f, f3c = ratios(fb, V3_FB, FLASH), ratios(fb, V3_FB, CUDNN)
        if f3f:
            v["bwd_fb_flash"], v["bwd_fb_flash_gm"] = span(f3f), f"{gmean(f3f):.2f}"
            v["bwd_fb_cudnn"], v["bwd_fb_cudnn_gm"] = span(f3c), f"{gmean(f3c):.2f}"
        h = both_peers(table(rs, "bwd", "fp16"))
        hf, hc = ratios(h, V4, FLASH), ratios(h, V4, CUDNN)
        if hf:
            ns = sorted({N for (i, d, c, N) in h if i == V4})
            v["bwd_fp16_Ns"] = " and ".join(str(n) for n in ns)
            v["bwd_fp16_v4_flash"], v["bwd_fp16_v4_cudnn"] = span(hf), span(hc)
    io = rows(IO)
    if io:
        d128 = {r["impl"]: r for r in io if r["d"] == "128"}
        # backward rows were once named by the forward (ours_v3_hopper); accept both
        r4 = next((d128[n] for n in V4_NAMES if n in d128), None) or d128.get(V3_FB)
        r2, rf, rc = d128.get(V2), d128.get(FLASH), d128.get(CUDNN)
        if r4 and r2 and rf:
            gb = lambda r, k: float(r[k]) / 1e9  # noqa: E731
            v["bwd_io_N"], v["bwd_io_d"] = r4["N"], r4["d"]
            v["bwd_io_v4_model"], v["bwd_io_v2_model"] = f"{gb(r4, 'model_bytes'):.1f}", f"{gb(r2, 'model_bytes'):.1f}"
            # l2: all L2 traffic; l2sm: the GPU forward chapter's metric, the bytes the SMs
            # request from L2 by loads and stores
            # (lts__t_sectors_srcunit_tex_op_read + _op_write)
            for tag, col, ratio in (("l2", "l2_bytes", "ratio"), ("l2sm", "l2_from_sm_bytes", "sm_ratio")):
                for who, r in (("v4", r4), ("v2", r2), ("flash", rf), ("cudnn", rc)):
                    v[f"bwd_io_{who}_{tag}"] = f"{gb(r, col):.1f}" if r else "n/a"
                for who, r in (("v4", r4), ("v2", r2)):
                    v[f"bwd_io_{who}_{ratio}"] = f"{float(r[col]) / float(r['model_bytes']):.2f}"
            v["bwd_io_v4_dram"] = f"{gb(r4, 'dram_bytes'):.2f}"
            v["bwd_io_flash_dram"] = f"{gb(rf, 'dram_bytes'):.2f}"
            v["bwd_io_compulsory"] = f"{gb(r4, 'compulsory_bytes'):.2f}"
    return v


if __name__ == "__main__":
    sys.exit(paper_gpu.print_values(values()))
