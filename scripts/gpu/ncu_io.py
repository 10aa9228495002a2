#!/usr/bin/env python3
"""ncu_io.py NCU.csv MAP.json OUT.csv COMMAND -- fold Nsight Compute's per-kernel
rows into one row per (shape, implementation) and set the IO model beside them.

Input: the raw CSV page of ncu (--csv --page raw --print-units base) over a run
of scripts/gpu/bench_gpu.py --profile-io, whose MAP.json maps marker tags to
configurations. A marker kernel (fa_marker_kernel, grid size = tag) opens each
group; the kernels after it, up to the next marker, are summed.

Output columns: provenance (provenance.COLUMNS: gpu, driver, cuda, torch,
cudnn, commit, date, command), the
configuration, kernels counted, measured DRAM read/write/total bytes, L2
bytes (all of lts__t_bytes, and the sectors requested by the SMs), kernel
time, the model bytes of versions 0 and 1 (kernels/stage4_fwd_v0.cu,
kernels/fa_api.cu), the compulsory bytes (Q, K, V read once, O and L written
once) and measured / model.
"""
import csv
import json
import sys

import provenance


def num(s):
    return float(str(s).replace(",", "")) if str(s).strip() not in ("", "n/a") else float("nan")


def kernel_groups(ncu_csv):
    """{tag: [kernel rows]} of an ncu raw page: each row a dict by the
    page's column names; a marker kernel (fa_marker_kernel, grid size = its
    tag) opens a group, the kernels after it up to the next marker fill it
    (the units row and ncu's own '==PROF==' lines skipped). The kernel's
    name is under "Kernel Name" whatever the ncu version calls that column."""
    lines = [ln for ln in open(ncu_csv) if ln.startswith('"')]   # ncu's own '==PROF==' lines are not CSV
    rows = list(csv.DictReader(lines))
    head = list(rows[0]) if rows else []
    name = "Kernel Name" if "Kernel Name" in head else \
        next(h for h in head if "Name" in h and "Process" not in h and "Host" not in h)   # older/newer ncu
    groups, cur = {}, None
    for r in rows:
        if not r["ID"].strip().isdigit():
            continue   # the units row
        r["Kernel Name"] = r[name]
        if "fa_marker_kernel" in r["Kernel Name"]:
            grid = r["launch__grid_size"] if "launch__grid_size" in r else r["Grid Size"]
            cur = int(num(grid)) if str(grid).replace(",", "").strip().isdigit() else \
                int(str(grid).strip("()").split(",")[0])
            groups[cur] = []
            continue
        if cur is not None:
            groups[cur].append(r)
    return groups


def main():
    ncu_csv, map_json, out, command = sys.argv[1:5]
    tagmap = {int(k): v for k, v in json.load(open(map_json)).items()}
    groups = kernel_groups(ncu_csv)
    pv = provenance.record(command=command)
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(provenance.COLUMNS + ["impl", "dtype", "B", "H", "N", "d",
                    "label", "kernels", "dram_read_bytes", "dram_write_bytes", "dram_bytes",
                    "l2_bytes", "l2_from_sm_bytes", "kernel_time_ms", "model_bytes", "model_v0_bytes", "model_v1_bytes",
                    "compulsory_bytes", "dram_over_model", "l2_over_model", "l2_from_sm_over_model",
                    "dram_over_compulsory",
                    "kernel_names"])
        for tag in sorted(tagmap):
            m = tagmap[tag]
            ks = groups.get(tag, [])
            rd = sum(num(r["dram__bytes_read.sum"]) for r in ks)
            wr = sum(num(r["dram__bytes_write.sum"]) for r in ks)
            l2 = sum(num(r["lts__t_bytes.sum"]) for r in ks)
            t = sum(num(r["gpu__time_duration.sum"]) for r in ks) / 1e6   # ns -> ms
            sm = float("nan")
            if ks and "lts__t_sectors_srcunit_tex_op_read.sum" in ks[0]:
                sm = 32 * sum(num(r["lts__t_sectors_srcunit_tex_op_read.sum"]) +
                              num(r["lts__t_sectors_srcunit_tex_op_write.sum"]) for r in ks)
            model = m["model_bytes"]
            w.writerow([pv[c] for c in provenance.COLUMNS] + [m["impl"], m["dtype"], m["B"], m["H"],
                        m["N"], m["d"], m["label"], len(ks), f"{rd:.0f}", f"{wr:.0f}", f"{rd + wr:.0f}",
                        f"{l2:.0f}", "" if sm != sm else f"{sm:.0f}", f"{t:.4f}", "" if model is None else f"{model:.0f}",
                        f"{m['model_v0_bytes']:.0f}", f"{m['model_v1_bytes']:.0f}",
                        f"{m['compulsory_bytes']:.0f}",
                        "" if not model else f"{(rd + wr) / model:.4f}",
                        "" if not model else f"{l2 / model:.4f}",
                        "" if not model or sm != sm else f"{sm / model:.4f}",
                        f"{(rd + wr) / m['compulsory_bytes']:.4f}",
                        " | ".join(sorted({r["Kernel Name"][:60] for r in ks}))])
            print(f"{m['impl']:22s} {m['dtype']} B={m['B']:3d} H={m['H']:3d} N={m['N']:5d} d={m['d']:3d} "
                  f"DRAM {(rd + wr) / 1e9:8.3f} GB  L2 {l2 / 1e9:8.3f} GB  SM-L2 {sm / 1e9:8.3f} GB  "
                  f"model {'' if model is None else f'{model / 1e9:8.3f} GB'}  "
                  f"compulsory {m['compulsory_bytes'] / 1e9:7.3f} GB  {t:8.3f} ms  ({len(ks)} kernels)")


if __name__ == "__main__":
    main()
