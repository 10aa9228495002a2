#!/usr/bin/env python3
"""ncu_layout.py DIR OUT.csv COMMAND -- fold the two Nsight Compute runs of
data/gpu/studies/fwd_v2_smem_layout/ncu_layout.sh (DIR/padded.csv + padded.json, DIR/swizzle.csv +
swizzle.json) into one CSV row per (layout, shape): LDGSTS bytes (512 per
warp instruction), L2 read requests and sectors from the SMs, sectors per
request, and the model's read bytes (Q once, K and V once per query block).
"""
import csv
import json
import os
import sys

import provenance


def num(s):
    return float(str(s).replace(",", ""))


def groups(path):
    lines = [l for l in open(path) if l.startswith('"')]
    rows = list(csv.reader(lines))
    col = {h: i for i, h in enumerate(rows[0])}
    out, cur = {}, None
    for r in rows[1:]:
        if not r[col["ID"]].strip().isdigit():
            continue
        if "fa_marker_kernel" in r[col["Kernel Name"]]:
            cur = int(num(r[col["launch__grid_size"]]))
            out[cur] = []
        elif cur is not None:
            out[cur].append(r)
    return out, col


def main():
    d, out, command = sys.argv[1:4]
    gpu, driver = provenance.gpu_and_driver()
    date = provenance.utc_now()
    commit = provenance.commit()
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["gpu", "driver", "commit", "date", "command", "layout", "dtype", "B", "H", "N", "d",
                    "ldgsts_warp_instructions", "ldgsts_bytes", "model_read_bytes", "l2_read_requests",
                    "l2_read_sectors", "l2_read_bytes", "sectors_per_request", "l2_read_over_model",
                    "kernel_time_ms"])
        for layout in ("padded", "swizzle"):
            g, col = groups(os.path.join(d, layout + ".csv"))
            tagmap = {int(k): v for k, v in json.load(open(os.path.join(d, layout + ".json"))).items()}
            for tag in sorted(tagmap):
                m, ks = tagmap[tag], g.get(tag, [])
                if m["model_bytes"] is None:   # a peer (SDPA): no model
                    continue
                s = lambda k: sum(num(r[col[k]]) for r in ks)
                inst, req = s("smsp__inst_executed_op_ldgsts.sum"), s("lts__t_requests_srcunit_tex_op_read.sum")
                sec, t = s("lts__t_sectors_srcunit_tex_op_read.sum"), s("gpu__time_duration.sum") / 1e6
                es = 4 if m["dtype"] == "fp32" else 2
                bh, N, dd = m["B"] * m["H"], m["N"], m["d"]
                model_read = m["model_bytes"] - bh * (es * N * dd + 4 * N)   # less O and L writes
                w.writerow([gpu, driver, commit, date, command, layout, m["dtype"], m["B"], m["H"], N, dd,
                            f"{inst:.0f}", f"{512 * inst:.0f}", f"{model_read:.0f}", f"{req:.0f}", f"{sec:.0f}",
                            f"{32 * sec:.0f}", f"{sec / req:.3f}" if req else "", f"{32 * sec / model_read:.4f}",
                            f"{t:.4f}"])
                print(f"{layout:8s} {m['dtype']} B={m['B']:3d} H={m['H']:3d} N={N:5d} d={dd:3d} "
                      f"LDGSTS {512 * inst / 1e9:7.3f} GB  model reads {model_read / 1e9:7.3f} GB  "
                      f"L2 reads {32 * sec / 1e9:7.3f} GB  sectors/request {sec / req if req else 0:5.2f}  {t:7.3f} ms")


if __name__ == "__main__":
    main()
