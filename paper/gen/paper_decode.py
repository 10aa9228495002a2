#!/usr/bin/env python3
"""paper_decode.py -- the decoding chapter's generated pieces, from data/ only.

    python3 paper/gen/paper_decode.py --out build/paper        (make paper runs it)

Writes into --out:
  decode_io.md    the CPU stage 8's traffic, counted against the closed form,
                  from data/cpu/decode_io.csv (./stage8 --sweep io, make
                  sweep): a table of the rows at seqlen_q = 1, d = 64 and
                  pages of 16 keys, with the split count of the rule marked,
                  and a line saying how many of all the rows match
  decode_bw.md    from data/gpu/decode.csv (make gpu-data-apps, on the H200),
                  when the repository has it: the bandwidth of the decode
                  kernel and of SDPA's best backend as fractions of the copy
                  bandwidth measured in the same run, against the targets;
                  without the file, one paragraph saying the measurement is
                  pending (no number); with the file also the split counts
                  measured against the rule's
  decode_bw.csv   the figure's data (figures/decode_bw.gp), only with
                  data/gpu/decode.csv; removed otherwise
Every number comes from those files; nothing is typed here.
"""
import argparse
import csv
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_csv(path):
    """(provenance lines '# key: value' as a dict, rows as dicts)."""
    prov, lines = {}, []
    with open(path) as f:
        for ln in f:
            if ln.startswith("#"):
                k, _, v = ln[1:].partition(":")
                prov[k.strip()] = v.strip()
            elif ln.strip():
                lines.append(ln)
    return prov, list(csv.DictReader(lines))


def cpu_table(path):
    if not os.path.exists(path):
        return ("*(No `data/cpu/decode_io.csv` in this build: `make sweep` writes it with "
                "`./stage8 --sweep io`.)*\n")
    prov, rows = read_csv(path)
    equal = sum(1 for r in rows if r["counted_elements"] == r["formula_elements"])
    sel = [r for r in rows if r["B"] == "1" and r["seqlen_q"] == "1" and r["page_size"] == "16" and r["d"] == "64"
           and r["H_kv"] == "2" and r["seqlen_k"] in ("1024", "4096")
           and (r["num_splits"] in ("1", "4", "16") or r["num_splits"] == r["rule_splits"])]
    out = ["| $B$ | $H_{kv}$ | seqlen_k | splits | cache | $Q$ | partials (written + read) | $O$, $L$ "
           "| counted | formula | partials' share of the GPU bytes |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sel:
        s = r["num_splits"] + (" (rule)" if r["num_splits"] == r["rule_splits"] else "")
        parts = int(r["partials_written"]) + int(r["partials_read"])
        out.append(f"| {r['B']} | {r['H_kv']} | {r['seqlen_k']} | {s} | {r['cache']} | {r['q']} | {parts} | "
                   f"{r['out']} | {r['counted_elements']} | {r['formula_elements']} | "
                   f"{100 * float(r['partials_share_of_gpu_bytes']):.1f}% |")
    out.append("")
    out.append(f": Stage 8 on the CPU, elements of slow memory counted while it ran against the closed form "
               f"of `src/cpu/stage8_decode.h` ($H$ = {rows[0]['H']} query heads, $d$ = {rows[0]['d']}, one query row, "
               f"pages of 16 keys, the rule's split count for {rows[0]['sms']} SMs of one CTA each marked). Over all "
               f"{len(rows)} rows of the sweep (batch, heads, query rows, lengths, page sizes, split counts) "
               f"the count equals the formula in {equal}. The last column is what the partials weigh among the "
               f"bytes the GPU kernels move (cache, $Q$, $O$ in two bytes; $L$ and the partials in four). "
               f"Data: `data/cpu/decode_io.csv` (commit {prov.get('commit', '?')}, {prov.get('date', '?')}).")
    return "\n".join(out) + "\n"


def gpu_pieces(path, out_dir):
    fig = os.path.join(out_dir, "decode_bw.csv")
    if not os.path.exists(path):
        if os.path.exists(fig):
            os.remove(fig)
        return ("The measurement on the H200 is pending: `data/gpu/decode.csv` is not in the repository "
                "yet. `make gpu-data-apps` (or `scripts/device/decode.sh`) writes it; this section then shows "
                "the kernel's bandwidth beside the copy's and SDPA's, measured in the same run, and the "
                "targets held against them. No number is given here until then.\n")
    _, rows = read_csv(path)
    copy = [r for r in rows if r["impl"] == "copy"]
    copy_gbps = float(copy[0]["gbps"]) if copy else None
    key = lambda r: (int(r["H_kv"]), int(r["B"]), int(r["seqlen_k"]))  # noqa: E731
    ours = {key(r): r for r in rows if r["impl"] == "ours_decode"}
    sdpa = {}
    for r in rows:
        if r["impl"].startswith("sdpa_"):
            k = key(r)
            if k not in sdpa or float(r["median_ms"]) < float(sdpa[k]["median_ms"]):
                sdpa[k] = r
    with open(fig, "w") as f:
        f.write("H_kv,B,seqlen_k,ours_frac,sdpa_best_frac,sdpa_best\n")
        for k in sorted(ours):
            s = sdpa.get(k)
            f.write(f"{k[0]},{k[1]},{k[2]},{ours[k]['frac_of_copy']},"
                    f"{s['frac_of_copy'] if s else 'NaN'},{s['impl'] if s else ''}\n")
    lines = [f"The copy ran at {copy_gbps:.0f} GB/s (bytes read and written)." if copy_gbps else "",
             "", "| $H_{kv}$ | $B$ | seqlen_k | splits | ours / copy | best SDPA / copy | best SDPA | ours vs it |",
             "|---:|---:|---:|---:|---:|---:|:--|---:|"]
    for k in sorted(ours):
        o, s = ours[k], sdpa.get(k)
        ratio = f"{float(s['median_ms']) / float(o['median_ms']):.2f}x" if s else "-"
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {o['num_splits']} | {float(o['frac_of_copy']):.2f} | "
                     f"{float(s['frac_of_copy']):.2f} | {s['impl']} | {ratio} |" if s else
                     f"| {k[0]} | {k[1]} | {k[2]} | {o['num_splits']} | {float(o['frac_of_copy']):.2f} | - | - | - |")
    r0 = rows[0]
    lines.append("")
    lines.append(f": Decode bandwidth (cache bytes over time) as a fraction of the copy bandwidth of the same run "
                 f"(rounded to two decimals; the targets below are counted on the unrounded values); "
                 f"{r0['gpu']}, driver {r0['driver']}, CUDA {r0['cuda']}, torch {r0['torch']}, commit "
                 f"{r0['commit']}, {r0['date']}. Data: `data/gpu/decode.csv`.")
    t1 = [k for k in ours if k[2] >= 8192 and k[0] * k[1] >= 8]
    met1 = sum(1 for k in t1 if float(ours[k]["frac_of_copy"]) >= 0.85)
    t2 = [k for k in ours if k[2] >= 8192 and k[0] == 8 and k[1] == 1]
    met2 = sum(1 for k in t2 if float(ours[k]["frac_of_copy"]) >= 0.7)
    t3 = [k for k in ours if k[1] == 1 and k in sdpa]
    met3 = sum(1 for k in t3 if float(sdpa[k]["median_ms"]) >= 1.5 * float(ours[k]["median_ms"]))
    lines.append("")
    lines.append(f"Targets: at least 0.85 of the copy at seqlen_k from 8192 with $B H_{{kv}} \\ge 8$: "
                 f"{met1} of {len(t1)} shapes; at least 0.7 at $B$ = 1, $H_{{kv}}$ = 8: {met2} of {len(t2)}; "
                 f"at least 1.5 times SDPA's best backend at $B$ = 1: {met3} of {len(t3)}.")
    alt = [r for r in rows if r["impl"] == "ours_splits"]
    if alt:
        lines += ["", "| $B$ | $H_{kv}$ | seqlen_k | splits | ms | ours / copy | |",
                  "|---:|---:|---:|---:|---:|---:|:--|"]
        for r in sorted(alt, key=lambda r: (int(r["B"]), int(r["seqlen_k"]), int(r["num_splits"]))):
            lines.append(f"| {r['B']} | {r['H_kv']} | {r['seqlen_k']} | {r['num_splits']} | {r['median_ms']} | "
                         f"{float(r['frac_of_copy']):.2f} | {r['note']} |")
        lines += ["", ": The split-count rule against its alternatives: the same step with every split count "
                  "from 1 up, same run as the table above."]
    return "\n".join(lines) + "\n"


def varlen_ncu_lines():
    """What Nsight Compute saw of the packed forward against the dense one
    on the equal batch (data/gpu/studies/varlen/ncu/, data/gpu/studies/varlen/varlen_ncu.py):
    a sentence, or nothing without the files."""
    import glob
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import paper_gpu
    T, I, M = "gpu__time_duration.sum", "smsp__inst_executed.sum", "dram__bytes.sum"
    CA, CM = "sm__cycles_active.avg", "sm__cycles_active.max"

    def one(f):
        rr = paper_gpu.ncu_kernels(os.path.relpath(f, ROOT))
        return rr[0] if rr else None
    pairs = []
    for f in sorted(glob.glob(os.path.join(ROOT, "data", "gpu", "studies", "varlen", "ncu", "ncu_fwd_*_dense.csv"))):
        g = f.replace("_dense.csv", "_varlen.csv")
        a, b = one(f), (one(g) if os.path.exists(g) else None)
        if a and b:
            pairs.append((a[T] / b[T], b[I] / a[I], b[M] / a[M], b[CM] / b[CA], a[CM] / a[CA]))
    if not pairs:
        return []
    span = paper_gpu.span
    return ["", f"Nsight Compute on one forward each ({len(pairs)} shapes of the equal batch, "
            "`data/gpu/studies/varlen/ncu/`): the packed kernel took "
            f"{span([p[0] for p in pairs])} of the dense one's speed, issuing {span([p[1] for p in pairs])} times "
            f"its instructions with {span([p[2] for p in pairs])} times its DRAM bytes, on the same persistent grid, "
            f"its busiest multiprocessor at {span([p[3] for p in pairs])} of the average's cycles (dense: "
            f"{span([p[4] for p in pairs])}): the difference is in the kernel's work per tile (each tile finds its "
            "sequence and bounds), not in memory traffic or balance."]


def varlen_piece(path):
    """Packed sequences against the dense kernels (data/gpu/varlen.csv,
    scripts/gpu/bench_varlen.py): each row's time over the dense call's at the
    same total tokens, ours and SDPA flash (dense, and padded to the longest
    sequence where SDPA needs it)."""
    if not os.path.exists(path):
        return "`data/gpu/varlen.csv` is not in the repository yet (`make gpu-data-apps` writes it).\n"
    _, rows = read_csv(path)
    names = {"ours_varlen_equal": "ours packed, equal", "ours_varlen_mixed": "ours packed, mixed",
             "ours_padded": "ours padded", "sdpa_flash_dense": "SDPA flash dense",
             "sdpa_flash_padded": "SDPA flash padded"}
    at = {(r["impl"], r["pass"], int(r["d"]), int(r["causal"])): float(r["vs_dense"]) for r in rows if r.get("vs_dense")}
    shapes = sorted({(r["pass"], int(r["d"]), int(r["causal"])) for r in rows}, key=lambda c: (c[0] != "fwd", c[1], c[2]))
    impls = [i for i in names if any((i, *c) in at for c in shapes)]
    lines = ["| pass, $d$, mask | " + " | ".join(names[i] for i in impls) + " |", "|:--|" + "---:|" * len(impls)]
    for c in shapes:
        lines.append(f"| {c[0]}, {c[1]}, {'causal' if c[2] else 'none'} | "
                     + " | ".join(f"{at[(i, *c)]:.3f}" if (i, *c) in at else "-" for i in impls) + " |")
    r0 = rows[0]
    lines += ["", f": Packed sequences (`flash_attn_varlen_func`) against the dense kernel at the same total tokens "
              f"(useful TFLOP/s as `scripts/gpu/bench_varlen.py` counts them, over ours dense's; equal: every sequence "
              f"of the same length; mixed: 16 lengths, log-uniform, the sum the same); {r0['gpu']}, driver {r0['driver']}, CUDA {r0['cuda']}, torch {r0['torch']}, "
              f"commit {r0['commit']}, {r0['date']}. Data: `data/gpu/varlen.csv`."]
    lines += varlen_ncu_lines()
    return "\n".join(lines) + "\n"


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv[1:])
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "decode_io.md"), "w") as f:
        f.write(cpu_table(os.path.join(ROOT, "data", "cpu", "decode_io.csv")))
    with open(os.path.join(a.out, "decode_bw.md"), "w") as f:
        f.write(gpu_pieces(os.path.join(ROOT, "data", "gpu", "decode.csv"), a.out))
    with open(os.path.join(a.out, "varlen.md"), "w") as f:
        f.write(varlen_piece(os.path.join(ROOT, "data", "gpu", "varlen.csv")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
