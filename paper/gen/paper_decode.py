#!/usr/bin/env python3
"""paper_decode.py -- the generated pieces of split-KV decoding and packed
sequences (chapters/25-merge-rule.md), from data/ only.

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
                  pending (no number)
  decode_bw.csv   the figure's data (figures/decode_bw.gp), only with
                  data/gpu/decode.csv; removed otherwise
  decode_splits.md  for the records appendix (chapters/91-records.md): the
                  split-count rule against every other count on the same
                  step, only with data/gpu/decode.csv; removed otherwise
Every number comes from those files; nothing is typed here.
"""
import argparse
import csv
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paper_gpu  # noqa: E402  (span; the Nsight Compute reader; which code measured a file)
from paper_gpu import span  # noqa: E402


def kib(n):
    """A key count in thousands of 1024: 8192 -> '8k'."""
    return f"{n // 1024}k"


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
        for stale in (fig, os.path.join(out_dir, "decode_splits.md")):
            if os.path.exists(stale):
                os.remove(stale)
        return ("The measurement on the H200 is pending: `data/gpu/decode.csv` is not in the repository "
                "yet. `make gpu-data-apps` (or `scripts/device/decode.sh`) writes it; this section then shows "
                "the kernel's bandwidth beside the copy's and SDPA's, measured in the same run, and the "
                "targets held against them. No number is given here until then.\n")
    _, rows = read_csv(path)
    d = decode_table(rows)
    ours, sdpa, cudnn, copy_gbps = d["ours"], d["best"], d["cudnn"], d["copy_gbps"]
    fr, ms_, eager = d["frac"], d["ms"], d["eager"]
    with open(fig, "w") as f:
        f.write("H_kv,B,seqlen_k,ours_frac,sdpa_best_frac,sdpa_best\n")
        for k in sorted(ours):
            s = sdpa.get(k)
            f.write(f"{k[0]},{k[1]},{k[2]},{fr(ours[k]):.4f},"
                    f"{fr(s) if s else float('nan'):.4f},{s['impl'] if s else ''}\n")
    lines = [f"The copy ran at {copy_gbps:.0f} GB/s (bytes read and written, timed as called)." if copy_gbps else "",
             "", "| $H_{kv}$ | $B$ | seqlen_k | splits | ours, graph | ours, eager | cuDNN, graph "
             "| cuDNN, eager | ours / copy | fastest SDPA / copy |",
             "|--:|--:|----:|---:|----:|----:|----:|----:|----:|-------:|"]   # relative widths: the last holds a name
    ms = lambda r, col: f"{float(r[col]):.3f}" if r else "-"  # noqa: E731
    mark = lambda r: "$^\\dagger$" if eager(r) else ""  # noqa: E731
    for k in sorted(ours):
        o, s, c = ours[k], sdpa.get(k), cudnn.get(k)
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {o['num_splits']} | {ms(o, 'graph_ms')} | "
                     f"{ms(o, 'median_ms')} | {ms(c, 'graph_ms')} | {ms(c, 'median_ms')} | {fr(o):.2f}{mark(o)} | "
                     + (f"{fr(s):.2f}{mark(s)} ({s['impl'].replace('sdpa_', '')}) |" if s else "- |"))
    r0 = rows[0]
    hs = sorted({k[0] for k in ours})
    lines.append("")
    lines.append(f": One decoding step, each side through its public entry in its own layout "
                 f"(`flash_attn_with_kvcache` on the paged cache; `scaled_dot_product_attention` on "
                 f"$(B, H_{{kv}}, N, d)$ keys and values with `enable_gqa`), times in ms replayed from a CUDA graph "
                 f"and as called in eager mode, rows for $H_{{kv}}$ = {' and '.join(map(str, hs))}. Bandwidth "
                 f"(cache bytes over the time) as a fraction of the copy's, each side at the faster of its two "
                 f"clocks (graph-replayed unless marked $\\dagger$: eager); the fastest SDPA backend the one "
                 f"fastest so among those that read the cache as it is (a backend that needed $K$, $V$ expanded "
                 f"to $H$ heads is left out). "
                 f"{r0['gpu']}, driver {r0['driver']}, CUDA {r0['cuda']}, torch {r0['torch']}, commit "
                 f"{r0['commit']}, {r0['date']}. Data: `data/gpu/decode.csv`. {{#tbl:decode-bw}}")
    # what the table shows, in three groups of its rows (each side at its faster clock)
    t1 = [k for k in ours if k[2] >= 8192]
    t2 = [k for k in ours if k[2] >= 8192 and k[0] == hs[0] and k[1] == 1]
    t3 = [k for k in ours if k[1] == 1 and k in sdpa]
    parts = []
    if t1:
        parts.append(f"with seqlen_k from {kib(min(k[2] for k in t1))} ({len(t1)} shapes, "
                     f"$H_{{kv}}$ = {' and '.join(map(str, hs))}) our kernel reaches "
                     f"{span([fr(ours[k]) for k in t1])} of the copy's bandwidth")
    if t2:
        parts.append(f"at $B$ = 1, $H_{{kv}}$ = {hs[0]} ({len(t2)} shapes) {span([fr(ours[k]) for k in t2])}")
    if t3:
        parts.append(f"at $B$ = 1 our kernel takes "
                     f"{span([ms_(ours[k]) / ms_(sdpa[k]) for k in t3])} times "
                     f"the fastest SDPA backend's time ({len(t3)} shapes)")
    if parts:
        lines.append("")
        lines.append("Each side at the faster of its two clocks, " + "; ".join(parts) + ".")
        both = [k for k in ours if k in sdpa]
        lead = [k for k in both if ms_(ours[k]) <= ms_(sdpa[k])]
        bg = d["best_graph"]
        lead_g = [k for k in both if k in bg and float(ours[k]["graph_ms"]) <= float(bg[k]["graph_ms"])]
        where = lambda ks: "; ".join(f"$H_{{kv}}$ {k[0]}, $B$ {k[1]}, {kib(k[2])}" for k in sorted(ks))  # noqa: E731
        close = min(both, key=lambda k: ms_(ours[k]) / ms_(sdpa[k]))
        text = ("Ours is as fast as SDPA's fastest backend or faster at "
                + (f"{len(lead)} of the {len(both)} shapes ({where(lead)})" if lead else
                   f"none of the {len(both)} shapes; the closest is {ms_(ours[close]) / ms_(sdpa[close]):.2f} "
                   f"times its time ($H_{{kv}}$ {close[0]}, $B$ {close[1]}, {kib(close[2])})"))
        if lead_g and set(lead_g) != set(lead):
            flip = [k for k in lead_g if k not in lead and eager(sdpa[k])]
            text += (f". On graph-replayed times alone it would lead at {len(lead_g)} ({where(lead_g)}); at "
                     + ("each of them" if len(flip) == len(lead_g) else f"{len(flip)} of them")
                     + " an SDPA backend called eagerly beat both its own replayed call and ours")
        lines.append(text + ".")
    write_splits(rows, fr, os.path.join(out_dir, "decode_splits.md"))
    return "\n".join(lines) + "\n"


def write_splits(rows, fr, path):
    """decode_splits.md, for the records appendix: the split-count rule
    against every other count on the same step (rows of impl ours_splits);
    removed when the run has none."""
    alt = [r for r in rows if r["impl"] == "ours_splits" and r.get("graph_ms")]
    if not alt:
        if os.path.exists(path):
            os.remove(path)
        return
    lines = ["| $B$ | $H_{kv}$ | seqlen_k | splits | ms, graph | ours / copy | |",
             "|---:|---:|---:|---:|---:|---:|:--|"]
    for r in sorted(alt, key=lambda r: (int(r["B"]), int(r["seqlen_k"]), int(r["num_splits"]))):
        lines.append(f"| {r['B']} | {r['H_kv']} | {r['seqlen_k']} | {r['num_splits']} | {r['graph_ms']} | "
                     f"{fr(r):.2f} | {r['note']} |")
    r0 = alt[0]
    lines += ["", ": The split-count rule against its alternatives: one decoding step with every split count "
              f"from 1 up, graph-replayed, in the same run as the measurement of split-KV decoding "
              f"({r0['gpu']}, commit {r0['commit']}). Data: `data/gpu/decode.csv`."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def decode_table(rows):
    """The decode rows keyed (H_kv, B, seqlen_k): ours (flash_attn_with_kvcache,
    the rule's splits), cuDNN, the fastest SDPA backend among those that
    read the cache unexpanded (impl not ending in _expanded), the copy's
    bandwidth (its time as called: a 2 GiB copy has no host overhead to
    speak of), ms(row) and frac(row).

    Each side is timed on two clocks, replayed from a CUDA graph and as
    called (eager). Taking the host's work out cannot make a call slower,
    yet SDPA's replayed calls ran slower than its eager ones at the large
    shapes while ours never did; so each row is taken at the faster of its
    two clocks (ms(row), eager(row) saying whether that was the eager
    one), the fastest SDPA backend is the one fastest so, and frac(row) is
    a row's bandwidth on that time over the copy's. best_graph is the
    fastest backend by graph-replayed time alone, for saying what that
    clock alone would show."""
    copy = [r for r in rows if r["impl"] == "copy"]
    copy_gbps = float(copy[0]["gbps"]) if copy else None
    key = lambda r: (int(r["H_kv"]), int(r["B"]), int(r["seqlen_k"]))  # noqa: E731

    def eager(r):
        return bool(r.get("median_ms")) and float(r["median_ms"]) < float(r["graph_ms"])

    def ms(r):
        return float(r["median_ms"]) if eager(r) else float(r["graph_ms"])
    ours = {key(r): r for r in rows if r["impl"] == "ours_decode" and r.get("graph_ms")}
    cudnn = {key(r): r for r in rows if r["impl"] == "sdpa_cudnn" and r.get("graph_ms")}
    best, best_graph = {}, {}
    for r in rows:
        if r["impl"].startswith("sdpa_") and not r["impl"].endswith("_expanded") and r.get("graph_ms"):
            k = key(r)
            if k not in best or ms(r) < ms(best[k]):
                best[k] = r
            if k not in best_graph or float(r["graph_ms"]) < float(best_graph[k]["graph_ms"]):
                best_graph[k] = r

    def frac(r):
        return float(r["cache_bytes"]) / (ms(r) * 1e-3) / 1e9 / copy_gbps
    return {"ours": ours, "cudnn": cudnn, "best": best, "best_graph": best_graph, "copy_gbps": copy_gbps,
            "frac": frac, "ms": ms, "eager": eager}


def slower_replayed(rows, impl):
    """(shapes at which impl's graph-replayed time is above its eager one,
    shapes it ran, the largest such excess as a fraction)."""
    got = [r for r in rows if r["impl"] == impl and r.get("graph_ms") and r.get("median_ms")]
    up = [float(r["graph_ms"]) / float(r["median_ms"]) - 1 for r in got
          if float(r["graph_ms"]) > float(r["median_ms"])]
    return len(up), len(got), max(up, default=0.0)


def max_cache_gb(command):
    """The --max-cache-gb a bench_decode.py run was given: from its command
    column, else the script's own default; None when neither says."""
    m = re.search(r"--max-cache-gb[ =]([0-9.]+)", command or "")
    if m:
        return float(m.group(1))
    try:
        src = open(os.path.join(ROOT, "scripts", "gpu", "bench_decode.py")).read()
    except OSError:
        return None
    m = re.search(r'"--max-cache-gb", type=float, default=([0-9.]+)', src)
    return float(m.group(1)) if m else None


def missing_shapes(rows):
    """The shapes of the decode grid (every H_kv x B x seqlen_k the file has
    for some shape) that have no ours_decode row, and why, in words: the
    benchmark skips a shape whose cache is over --max-cache-gb. 'none' when
    the grid is complete."""
    o = [r for r in rows if r["impl"] == "ours_decode"]
    have = {(int(r["H_kv"]), int(r["B"]), int(r["seqlen_k"])) for r in o}
    grid = sorted((h, b, n) for h in {k[0] for k in have} for b in {k[1] for k in have}
                  for n in {k[2] for k in have})
    gone = [k for k in grid if k not in have]
    if not gone:
        return "none"
    d = int(o[0]["d"])
    lim = max_cache_gb(o[0].get("command"))
    out = []
    for h, b, n in gone:
        gb = 2 * b * h * n * d * 2 / 1e9    # K and V, bf16: bench_decode.py's cache_bytes
        why = (f"its cache of {gb:.0f} GB is over the run's limit of {lim:g} GB (`--max-cache-gb`), so it "
               f"was not run" if lim is not None and gb > lim else "not in the run")
        out.append(f"$H_{{kv}}$ = {h}, $B$ = {b} at seqlen_k = {n}: {why}")
    return "; ".join(out)


def values():
    """The decoding chapter's numbers (claims.py takes them into values.tsv):
    ours against cuDNN at B 1, H_kv 8, seqlen_k from 8192, graph-replayed,
    eager and each at the faster of its two clocks (dec_best); each side's
    eager over its own graph-replayed time; at how many shapes a side's
    replayed call ran slower than its eager one; bandwidth fractions, each
    row at its faster clock (decode_table); the copy's own bandwidth (bytes
    read and written)."""
    keys = ["dec_Ns", "dec_graph", "dec_eager", "dec_self", "dec_cudnn_self", "dec_frac_ours", "dec_frac_cudnn",
            "dec_big_ours", "dec_big_cudnn", "dec_big_shape", "dec_status", "dec_copy", "dec_copy_graph",
            "dec_missing", "dec_best", "dec_cudnn_slower", "dec_ours_slower"]
    v = {k: "n/a" for k in keys}
    v.update(varlen_values())
    v["dec_status"] = "absent"
    path = os.path.join(ROOT, "data", "gpu", "decode.csv")
    if not os.path.exists(path):
        return v
    _, rows = read_csv(path)
    d = decode_table(rows)
    o, c, fr = d["ours"], d["cudnn"], d["frac"]
    ks = sorted(k for k in o if k[0] == 8 and k[1] == 1 and k[2] >= 8192 and k in c)
    if not ks or not d["copy_gbps"]:
        return v
    v["dec_status"] = "present"
    v["dec_copy"] = f"{d['copy_gbps'] / 1e3:.2f} TB/s"
    cp = [r for r in rows if r["impl"] == "copy" and r.get("graph_ms")]
    if cp:
        v["dec_copy_graph"] = f"{float(cp[0]['cache_bytes']) / (float(cp[0]['graph_ms']) * 1e-3) / 1e12:.2f} TB/s"
    v["dec_missing"] = missing_shapes(rows)
    v["dec_Ns"] = f"{kib(ks[0][2])} to {kib(ks[-1][2])}"
    v["dec_graph"] = span([float(o[k]["graph_ms"]) / float(c[k]["graph_ms"]) for k in ks])
    v["dec_best"] = span([d["ms"](o[k]) / d["ms"](c[k]) for k in ks])
    for key, impl in (("dec_cudnn_slower", "sdpa_cudnn"), ("dec_ours_slower", "ours_decode")):
        n, of, up = slower_replayed(rows, impl)
        v[key] = f"at {n} of its {of} shapes, by up to {100 * up:.0f}%" if n else f"at none of its {of} shapes"
    v["dec_eager"] = span([float(o[k]["median_ms"]) / float(c[k]["median_ms"]) for k in ks])
    v["dec_self"] = span([float(o[k]["median_ms"]) / float(o[k]["graph_ms"]) for k in ks], 1)
    v["dec_cudnn_self"] = span([float(c[k]["median_ms"]) / float(c[k]["graph_ms"]) for k in ks], 1)
    v["dec_frac_ours"] = span([fr(o[k]) for k in ks])
    v["dec_frac_cudnn"] = span([fr(c[k]) for k in ks])
    big = [k for k in o if k in c and k[1] * k[0] >= 128 and k[2] >= 32768]
    if big:
        v["dec_big_shape"] = "$B H_{kv} \\ge$ 128 with seqlen_k from 32k"
        v["dec_big_ours"] = span([fr(o[k]) for k in big])
        v["dec_big_cudnn"] = span([fr(c[k]) for k in big])
    return v


def varlen_ncu_lines():
    """What Nsight Compute saw of the packed forward against the dense one
    on the equal batch (data/gpu/studies/varlen/ncu/, data/gpu/studies/varlen/varlen_ncu.py):
    a sentence, or nothing without the files."""
    import glob
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
    return ["", f"Nsight Compute on one forward each ({len(pairs)} shapes of the equal batch, "
            "`data/gpu/studies/varlen/ncu/`): the packed kernel took "
            f"{span([p[0] for p in pairs])} of the dense one's speed, issuing {span([p[1] for p in pairs])} times "
            f"its instructions with {span([p[2] for p in pairs])} times its DRAM bytes, on the same persistent grid, "
            f"its busiest multiprocessor at {span([p[3] for p in pairs])} of the average's cycles (dense: "
            f"{span([p[4] for p in pairs])}): the difference is in the kernel's work per tile (each tile finds its "
            "sequence and bounds), not in memory traffic or balance."]


def varlen_rows(path):
    """{(pass, d, causal): {impl: median_ms}} of data/gpu/varlen.csv (times as
    called, eagerly), the same of graph_ms (each call replayed from a CUDA
    graph; a call whose graph was not captured has none), and its first row."""
    _, rows = read_csv(path)
    t, g = {}, {}
    for r in rows:
        c = (r["pass"], int(r["d"]), int(r["causal"]))
        if r.get("median_ms"):
            t.setdefault(c, {})[r["impl"]] = float(r["median_ms"])
        if r.get("graph_ms"):
            g.setdefault(c, {})[r["impl"]] = float(r["graph_ms"])
    return t, g, rows[0]


def run_order(path, other, other_name):
    """Whether the run of `path` came before or after the run of `other`
    (another data file), from their first rows' date columns (ISO 8601, so
    compared as text): 'after X (FILE, dated D)'; '' when either is absent
    or undated."""
    try:
        _, a = read_csv(path)
        _, b = read_csv(other)
        da, db = a[0]["date"], b[0]["date"]
    except (OSError, KeyError, IndexError):
        return ""
    when = "after" if da > db else "before" if da < db else "at the same time as"
    return f"{when} {other_name} (`{os.path.relpath(other, ROOT)}`, dated {db})"


def varlen_piece(path):
    """Packed sequences against padding (data/gpu/varlen.csv,
    scripts/gpu/bench_varlen.py): the comparison a user faces is the same
    batch of mixed lengths packed or padded to the longest, ours and SDPA
    flash's padded call; the packed equal-length batch over the dense call
    shows what packing itself costs, as called and replayed from a graph
    (the first holds the host's work of the packed entry, the second the
    kernels' alone)."""
    if not os.path.exists(path):
        return "`data/gpu/varlen.csv` is not in the repository yet (`make gpu-data-apps` writes it).\n"
    t, g, r0 = varlen_rows(path)
    shapes = sorted(t, key=lambda c: (c[0] != "fwd", c[1], c[2]))
    lines = ["| pass, $d$, mask | packed, mixed (ms) | ours padded / packed | SDPA flash padded / packed "
             "| packed / dense, equal, eager | packed / dense, equal, graph |",
             "|:" + "-" * 16 + "|" + ("-" * 13 + ":|") * 5]
    for c in shapes:
        m, mg = t[c], g.get(c, {})
        cell = lambda a, b, m=m: f"{m[a] / m[b]:.2f}" if a in m and b in m else "-"  # noqa: E731
        lines.append(f"| {c[0]}, {c[1]}, {'causal' if c[2] else 'none'} | "
                     f"{m['ours_varlen_mixed']:.3f} | {cell('ours_padded', 'ours_varlen_mixed')} | "
                     f"{cell('sdpa_flash_padded', 'ours_varlen_mixed')} | "
                     f"{cell('ours_varlen_equal', 'ours_dense')} | {cell('ours_varlen_equal', 'ours_dense', mg)} |"
                     if "ours_varlen_mixed" in m else
                     f"| {c[0]}, {c[1]}, {'causal' if c[2] else 'none'} | - | - | - | - | - |")
    order = run_order(path, os.path.join(ROOT, "data", "gpu", "decode.csv"), "this chapter's decoding data")
    lines += ["", f": Packed sequences (`flash_attn_varlen_func`) against the same batch padded to its longest "
              f"sequence: time over the packed call's (mixed: 16 lengths, log-uniform, {r0['total_tokens']} tokens "
              f"in all; SDPA's flash kernel runs the padded batch as dense $(B, H, N, d)$ tensors, the padding computed; "
              f"its nested-tensor form of a packed batch was not measured), median of calls as made (eager), at "
              f"times of 0.2 ms and more; and the packed call's time over the dense one's when every sequence has "
              f"the same length, both as made (eager) and replayed from a CUDA graph (graph; '-' where the "
              f"backward's graph was not captured). {r0['gpu']}, driver {r0['driver']}, CUDA {r0['cuda']}, "
              f"torch {r0['torch']}; measured at commit {r0['commit']}, {r0['date']}"
              + (f", {order}" if order else "") + "."
              + (" The measured entry read `cu_seqlens` back to the host on every eager call (the current one "
                 "does so only with `check_cu_seqlens=True`); the eager forward rows include that read, the "
                 "backward's (autograd on a forward made before timing) do not."
                 if varlen_measured_reading_back() else "")
              + " Data: `data/gpu/varlen.csv`."]
    lines += varlen_ncu_lines()
    return "\n".join(lines) + "\n"


def varlen_measured_reading_back():
    """Whether data/gpu/varlen.csv was measured by an entry that read
    cu_seqlens back to the host on every eager call: the code at the file's
    commit had no check_cu_seqlens keyword (the read was unconditional).
    False where it had one (re-measured) or where that cannot be told (then
    the text describes the current entry only)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    return paper_gpu.measured_code_has("data/gpu/varlen.csv", "python/flashattn_stages/varlen_op.py",
                                       "check_cu_seqlens") is False


def varlen_values():
    keys = ["vl_pad_ours", "vl_pad_sdpa", "vl_equal", "vl_equal_graph_fwd", "vl_equal_graph_bwd",
            "vl_equal_graph_bwd_n", "vl_equal_bwd_n"]
    v = {k: "n/a" for k in keys}
    v["vl_eager_read"] = ""
    path = os.path.join(ROOT, "data", "gpu", "varlen.csv")
    if not os.path.exists(path):
        return v
    if varlen_measured_reading_back():
        v["vl_eager_read"] = (
            "The entry that was measured read the two offset arrays back to the host on every eager call, "
            "a copy that waits for the GPU and that a replayed graph leaves out: that read is what the "
            "forward's eager gap holds, and every eager forward time of the packed call here carries it, "
            "its padding comparison above included, whose packing gain it makes smaller (the backward, "
            "timed through autograd on a forward made beforehand, makes no such call).")
    t, g, _ = varlen_rows(path)
    ms = [m for m in t.values() if "ours_varlen_mixed" in m]
    po = [m["ours_padded"] / m["ours_varlen_mixed"] for m in ms if "ours_padded" in m]
    ps = [m["sdpa_flash_padded"] / m["ours_varlen_mixed"] for m in ms if "sdpa_flash_padded" in m]
    eq = [m["ours_varlen_equal"] / m["ours_dense"] for m in t.values() if "ours_varlen_equal" in m and "ours_dense" in m]
    if po:
        v["vl_pad_ours"] = span(po, 1)
    if ps:
        v["vl_pad_sdpa"] = span(ps, 1)
    if eq:
        v["vl_equal"] = span(eq)
    for ps_ in ("fwd", "bwd"):
        eg = [m["ours_varlen_equal"] / m["ours_dense"] for c, m in g.items()
              if c[0] == ps_ and "ours_varlen_equal" in m and "ours_dense" in m]
        if eg:
            v[f"vl_equal_graph_{ps_}"] = span(eg)
        if ps_ == "bwd":
            v["vl_equal_graph_bwd_n"] = str(len(eg))
            v["vl_equal_bwd_n"] = str(sum(1 for c, m in t.items() if c[0] == "bwd" and "ours_varlen_equal" in m
                                          and "ours_dense" in m))
    return v


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
