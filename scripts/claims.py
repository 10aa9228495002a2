#!/usr/bin/env python3
"""scripts/claims.py -- the paper's claims table and every number its text quotes.

    python3 scripts/claims.py [--out build/paper]

Reads only what this repository's programs wrote:
  data/cpu/*.csv      stages 2, 3 and 6 and the property tests (make sweep)
  data/gpu/*.csv      the H200 runs (make bench-gpu, make io-gpu), ring.csv
                      through scripts/paper_ring.py, v3_steps.csv and
                      v3_ncu.txt through scripts/paper_v3.py
  src/gpu_host.c, src/stage5_main.c
                      the constants of stage 5's fault inputs (chapter 4b's
                      arithmetic on them), and kernels/stage4_v3_hopper.h's
                      default step: settings the text must follow
  OUT/lse_probe.npy   the L that one run of ./stage3 --lse saves here
  OUT/guard_o.npy     the O of one run of ./stage6 on exercise 4's guard case,
                      whose inputs are written here too
and writes, into OUT only,
  claims.md       the table of the closing chapter: claim | what the source
                  says (quoted, with where) | measured here | data | erratum
  block_rules.md  the three block-size rules side by side (chapter 3)
  values.tsv      "key<TAB>value": every measured number the chapters show
                  as [key]{.m}, and every quotation as [key]{.q} (Markdown,
                  with its source), see paper/include-code.lua.
Nothing here re-derives a formula the C exports (the IO counts, the SRAM
footprints, the tile counts: data/cpu/formulas.csv) or scrapes printed text.
The only numbers typed here are other people's: the quotations in QUOTES,
each with where it stands. tests/paper.sh checks that every textbook quote
is really in the textbook, fragment by fragment.

Adding a claim: write a function f(t) that reads its data with read_csv(),
sets values with t.value(key, text) and rows with t.row(...), and decorate it
with @claim; claims run in the order they are defined. A missing data file
must give a row saying so, never a failure (CI has no GPU data).
Standard library only.
"""
import csv
import math
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paper_gpu  # noqa: E402  (the H200 tables: column aliases, Figure 2 rows)

EPS = 2.0 ** -52          # fp64 machine epsilon (IEEE 754 binary64: 52 fraction bits)
UNIT_ROUNDOFF = 2.0 ** -53


# ---------------------------------------------------------------------------
# Quotations: what the textbook chapter and the papers say, word for word.
# ---------------------------------------------------------------------------
class Quote:
    """A quotation: `fragments` stand in the source exactly as given (a long
    sentence is quoted in fragments joined by an ellipsis, each under twelve
    words); `where` says where (a textbook line, a paper's section)."""

    def __init__(self, source, where, *fragments):
        self.source, self.where, self.fragments = source, where, fragments

    def markdown(self):
        body = " … ".join(texify(f) for f in self.fragments)
        return f"“{body}” ({CITE[self.source]}, {self.where})"


CITE = {
    "chapter": "textbook",
    "fa1": "Dao et al. 2022",
    "h200": "NVIDIA H200 datasheet",
}

# The textbook chapter (FlashAttention I: IO-Awareness & The Online Softmax):
# the fragments are its text byte for byte, LaTeX delimiters included.
QUOTES = {
    "q_online_err": Quote("chapter", "l. 124, the code's comment; l. 126",
                          "# ~1e-16, machine epsilon",
                          "on the order of \\(10^{-16}\\)"),
    "q_o1": Quote("chapter", "l. 52", "using \\(O(1)\\) extra state"),
    "q_tiled_err": Quote("chapter", "l. 233", "# both print ~1e-15"),
    "q_gradcheck": Quote("chapter", "l. 336",
                         "The gradient check passes to \\(\\sim 10^{-7}\\),",
                         "central differences in fp64."),
    "q_naive_io": Quote("chapter", "ll. 38-42, bytes in fp16",
                        "~2·N² + 4·N·d", "~4·N²", "~2·N² + 4·N·d",
                        "dominated by the N² terms"),
    "q_order": Quote("chapter", "l. 410",
                     "SRAM on the order of \\(M \\sim 10^5\\)",
                     "\\(d^2 \\sim 10^4\\),",
                     "an order-of-magnitude reduction in HBM traffic"),
    "q_chapter_blocks": Quote("chapter", "l. 408",
                              "column block can be \\(B_c = \\Theta(M/d)\\)",
                              "row block \\(B_r = \\Theta(M/d)\\)",
                              "\\(B_r \\times B_c\\) score tile \\(\\le M\\))."),
    "q_chapter_br": Quote("chapter", "l. 410", "The last step uses \\(B_r = \\Theta(M/d)\\)."),
    "q_extra_mem": Quote("chapter", "l. 427",
                         "The only persistent extra allocations are \\(O\\)",
                         "and \\(L\\) (\\(N\\))."),
    "q_causal": Quote("chapter", "l. 241",
                      "Causal masking is free.",
                      "skip all key-blocks \\(j\\)",
                      "lie entirely above the diagonal",
                      "(\\(j_0 > i_1\\)),",
                      "This roughly halves the work for long sequences"),
    "q_causal_i1": Quote("chapter", "l. 167, the code's end of a query block",
                         "i1 = min(i0 + Br, N)"),
    "q_ex2": Quote("chapter", "l. 507, exercise 2",
                   "report the row logsumexp \\(L = m + \\log \\ell\\)"),
    "q_ex3": Quote("chapter", "ll. 511-515, exercise 3",
                   "How many bytes does the naive score matrix \\(S\\) occupy?",
                   "what is the reduction factor at this \\(d\\)?"),
    "q_ex5": Quote("chapter", "l. 597, exercise 5(b)",
                   "quantify the HBM memory that recomputation saves",
                   "and identify the compensating cost."),
    "q_ex4_skip": Quote("chapter", "l. 517, exercise 4",
                        "skip key-blocks that fall entirely outside it"),
    "q_ex4_guard": Quote("chapter", "l. 517, exercise 4",
                         "-inf guards so fully-masked rows do not produce nan"),
    "q_guard_code": Quote("chapter", "ll. 194-195, the forward's code",
                          "# guard rows that are entirely -inf",
                          "np.where(np.isneginf(m_new), 0.0, m_new)"),
    "q_guard_comment": Quote("chapter", "l. 194, the forward's code", "# guard rows that are entirely -inf"),
    "q_memory": Quote("chapter", "l. 427", "Memory drops from \\(O(N^2)\\) to \\(O(N)\\)."),
    "q_exact": Quote("chapter", "l. 491", "computes precisely the same function. No approximation."),
    "q_naive_ai": Quote("chapter", "l. 44",
                        "the arithmetic intensity",
                        "is low and roughly constant in \\(N\\),"),
    # The FlashAttention paper (Dao, Fu, Ermon, Rudra, Ré, NeurIPS 2022,
    # arXiv:2205.14135): transcribed from the paper, in its notation.
    "q_fa1_blocks": Quote("fa1", "Algorithm 1, line 1",
                          "Set block sizes $B_c = \\lceil \\frac{M}{4d} \\rceil$, "
                          "$B_r = \\min(\\lceil \\frac{M}{4d} \\rceil, d)$."),
    "q_fa1_sram": Quote("fa1", "Algorithm 1, Require", "on-chip SRAM of size $M$"),
    "q_fa1_fig2": Quote("fa1", "Figure 2, left: forward + backward, GPT-2 medium, "
                        "seq. length 1024, head dim. 64, 16 heads, batch size 64, A100",
                        "GFLOPs 66.6 | 75.2", "HBM R/W (GB) 40.3 | 4.4",
                        "Runtime (ms) 41.7 | 7.3"),
    "q_fa1_fig2_shape": Quote("fa1", "Figure 2's caption",
                              "seq. length 1024, head dim. 64, 16 heads, batch size 64"),
    "q_fa1_fig2_hbm": Quote("fa1", "Figure 2, left: forward + backward, A100",
                            "HBM R/W (GB) 40.3 | 4.4"),
    "q_fa1_speed": Quote("fa1", "Section 1, Benchmarking Attention",
                         "up to 3$\\times$ faster than the standard attention implementation",
                         "across common sequence lengths from 128 to 2K"),
    "q_fa1_theorem2": Quote("fa1", "Theorem 2",
                            "requires $\\Theta(N^2d^2M^{-1})$ HBM accesses"),
    "q_h200": Quote("h200", "2024: FP16 Tensor Core, with sparsity; GPU memory bandwidth",
                    "1,979 TFLOPS", "4.8TB/s"),
}

# Other people's numbers, each with the quotation it comes from.
PUBLISHED = {
    "fig2_gflops_std": (66.6, "q_fa1_fig2"),
    "fig2_gflops_fa": (75.2, "q_fa1_fig2"),
    "fig2_hbm_std_gb": (40.3, "q_fa1_fig2"),
    "fig2_hbm_fa_gb": (4.4, "q_fa1_fig2"),
    "fig2_ms_std": (41.7, "q_fa1_fig2"),
    "fig2_ms_fa": (7.3, "q_fa1_fig2"),
    "h200_sparse_tflops": (1979, "q_h200"),   # dense is half: sparsity doubles the datasheet rate
    "h200_hbm_tbs": (4.8, "q_h200"),
}


def pub(key):
    return PUBLISHED[key][0]


_UNICODE_MATH = {"²": "^2", "·": r"\cdot ", "Θ": r"\Theta", "≤": r"\le ", "×": r"\times "}


def texify(text):
    """A fragment as Markdown: the chapter's \\( \\) math as $ $, its Unicode
    math (N², N·d) as TeX math, code-like fragments as code."""
    if re.fullmatch(r"[\w ]+ = [\w.]+\(.*\)", text) or text.startswith("# "):
        return f"`{text}`"              # code, or a comment in the chapter's code
    text = re.sub(r"\\\((.*?)\\\)", lambda mo: "$" + mo.group(1) + "$", text)

    def uni(mo):
        s = mo.group(0)
        for u, tex in _UNICODE_MATH.items():
            s = s.replace(u, tex)
        return "$" + s.strip() + "$"
    # runs of a formula written with Unicode: letters, digits, ², ·, + (a
    # trailing space stays outside the math)
    text = re.sub(r"~?[0-9N](?:[0-9N·²+d]| (?=[0-9N·²+d]))*[²·](?:[0-9N·²+d]| (?=[0-9N·²+d]))*",
                  lambda mo: uni(mo).replace("$~", "$\\sim "), text)
    return text


# ---------------------------------------------------------------------------
# Reading the data
# ---------------------------------------------------------------------------
def path(*p):
    return os.path.join(ROOT, *p)


def read_csv(rel):
    """Rows of a CSV with '#' provenance lines on top, as dicts; None if absent."""
    full = rel if os.path.isabs(rel) else path(rel)
    if not os.path.exists(full):
        return None
    with open(full, newline="") as f:
        lines = [ln for ln in f if not ln.startswith("#") and ln.strip()]
    return list(csv.DictReader(lines))


def num(row, key):
    v = row.get(key, "")
    return float(v) if v not in ("", None) else None


def select(rows, **want):
    return [r for r in rows if all(str(r.get(k)) == str(v) for k, v in want.items())]


def one(rows, **want):
    got = select(rows, **want)
    return got[0] if got else None


def slope(xs, ys):
    """Least-squares slope of log y against log x (nan with fewer than 2 distinct x)."""
    if len(set(xs)) < 2:
        return float("nan")
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sxx


def sci(x, digits=1):
    return f"{x:.{digits}e}"


def grouped(n):
    return f"{int(n):,}"


def tex_sci(x, digits=1):
    """2.2e-16 as $2.2 \\times 10^{-16}$."""
    m, e = f"{x:.{digits}e}".split("e")
    return f"${m} \\times 10^{{{int(e)}}}$"


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------
class Table:
    def __init__(self, out):
        self.out = out
        self.rows = []
        self.values = {}

    def value(self, key, text):
        self.values[key] = str(text)
        return str(text)

    def row(self, claim, says, measured, data, erratum=""):
        self.rows.append((claim, says, measured, codify(data), erratum))


CLAIMS = []


def claim(fn):
    CLAIMS.append(fn)
    return fn


# In the data column, file paths and commands are set as code, so that a
# reader can copy them: outside code, Pandoc's smart typography would turn a
# flag's "--" into an en-dash.
SOURCE_TOKEN = re.compile(r"(\./[\w.]+(?: --[\w-]+(?: [\w.]+)?)*|(?:[\w.-]+/)+[\w.-]*|[\w-]+\.(?:py|csv|h|c|md|cu|json|npy))")


def codify(text):
    parts = str(text).split("`")
    for i in range(0, len(parts), 2):          # outside existing code spans
        parts[i] = SOURCE_TOKEN.sub(lambda mo: f"`{mo.group(1)}`", parts[i])
    return "`".join(parts)


def absent(t, claim_text, quote, what):
    t.row(claim_text, QUOTES[quote].markdown(), f"not measured in this build: {what} is absent", what)


def rows_or_absent(t, src, claim_text, quote):
    """The rows of src, or None after a row saying it is absent."""
    rows = read_csv(src)
    if rows is None:
        absent(t, claim_text, quote, src)
    return rows


# ---------------------------------------------------------------------------
# Exactness (data/cpu/exactness.csv, data/cpu/chapter_example.csv)
# ---------------------------------------------------------------------------
def exactness_rows():
    src = "data/cpu/exactness.csv"
    rows = read_csv(src)
    if rows is None:                  # this build's own run (paper/paper.mk)
        src = "build/paper/exactness.csv"
        rows = read_csv(src)
    return src, rows


def exactness_check(t, check, keys, claim_text, quote):
    """The exactness.csv rows of one stage-3 check, after setting `keys` to
    'not measured'; None (with a row saying so) when there are none."""
    src, rows = exactness_rows()
    for k in keys:
        t.value(k, "not measured")
    got = select(rows or [], stage="stage3", check=check)
    if not got:
        absent(t, claim_text, quote, src)
        return src, None, None
    return src, rows, got


@claim
def real_input(t):
    """The shape of the default input (data/input/q.npy's header)."""
    shape = None
    try:
        with open(path("data", "input", "q.npy"), "rb") as f:
            head = f.read(512).decode("latin-1")
        shape = [int(x) for x in head[head.index("'shape':") + 8:].split(")")[0].strip(" (").split(",")
                 if x.strip()]
    except (OSError, ValueError):
        pass
    H, N, d = (shape[-3], shape[-2], shape[-1]) if shape and len(shape) >= 3 else ("?", "?", "?")
    t.value("input_H", str(H))
    t.value("input_N", str(N))
    t.value("input_d", str(d))


@claim
def online_softmax(t):
    src, rows = exactness_rows()
    ex = read_csv("data/cpu/chapter_example.csv")
    claim_text = ("Online softmax equals the two-pass softmax (the chapter's case: 37 logits "
                  "from $N(0, 5^2)$, $d = 8$, blocks of 4)")
    mx = one(rows or [], stage="stage2", check="online_vs_two_pass_max_abs")
    md = one(rows or [], stage="stage2", check="online_vs_two_pass_median_row")
    t.value("eps", sci(EPS))
    for k in ("online_err", "online_err_eps", "online_tol", "online_median", "online_median_eps",
              "chapter_row_err", "chapter_row_eps", "online_eps_units", "online_eps_N",
              "online_eps_err"):
        t.value(k, "not measured")
    # the random row that came nearest its bound (2 sqrt(N) eps, src/tolerances.h)
    units = one(rows or [], stage="stage2", check="online_random_rows_eps_units")
    if units:
        t.value("online_eps_units", f"{num(units, 'tolerance'):.1f}")
        t.value("online_eps_N", units["N"])
        t.value("online_eps_err", f"{num(units, 'error'):.1f}")
    if not mx:
        absent(t, claim_text, "q_online_err", src)
        return
    e, tol = num(mx, "error"), num(mx, "tolerance")
    t.value("online_err", sci(e))
    t.value("online_err_eps", f"{e / EPS:.1f}")
    t.value("online_tol", sci(tol))
    parts = []
    if ex:
        ce = num(ex[0], "max_abs_error")
        t.value("chapter_row_err", sci(ce))
        t.value("chapter_row_eps", f"{ce / EPS:.1f}")
        parts.append(f"the chapter's own row (its seed and draws, NumPy reference): {sci(ce)} "
                     f"= {ce / EPS:.1f} $\\varepsilon$")
    if md:
        m = num(md, "error")
        t.value("online_median", sci(m))
        t.value("online_median_eps", f"{m / EPS:.1f}")
        parts.append(f"our C, 1000 fresh rows: median row {sci(m)}")
    parts.append(f"largest of the 1000 {sci(e)} = {e / EPS:.1f} $\\varepsilon$ (bound "
                 f"{sci(tol)}, `src/tolerances.h`)")
    t.row(claim_text, QUOTES["q_online_err"].markdown(), "; ".join(parts),
          f"data/cpu/chapter_example.csv; {src}",
          f"None for one row: $\\varepsilon = 2^{{-52}}$ = {sci(EPS)}, so one row at about "
          f"$10^{{-16}}$ is 1 to 2 $\\varepsilon$, like with like. Over many rows the error "
          f"reaches {e / EPS:.0f} $\\varepsilon$ ({sci(e)} / {sci(EPS)}): a test needs a bound "
          "of a few $\\varepsilon \\max|V|$, not $10^{-16}$")


@claim
def tiled_exact(t):
    claim_text = "Tiled forward equals naive attention"
    src, rows, tf = exactness_check(t, "forward_O_max_abs", ("tiled_err", "tiled_err_shapes",
                                    "tiled_bwd_err", "tiled_tol", "tiled_tol_tex", "tiled_bwd_tol"),
                                    claim_text, "q_tiled_err")
    if not tf:
        return
    e = max(num(r, "error") for r in tf)
    ns = sorted({int(r["N"]) for r in tf})
    t.value("tiled_err", sci(e))
    t.value("tiled_err_shapes", str(len(tf)))
    t.value("tiled_tol", f"{num(tf[0], 'tolerance'):.0e}")
    t.value("tiled_tol_tex", tex_sci(num(tf[0], "tolerance"), 0))
    tb = select(rows, stage="stage3", check="backward_max_abs")
    if tb:
        t.value("tiled_bwd_err", sci(max(num(r, "error") for r in tb)))
        t.value("tiled_bwd_tol", f"{num(tb[0], 'tolerance'):.0e}")
    t.row(f"{claim_text} ({len(tf)} shapes, $N$ = {ns[0]}..{ns[-1]}, causal and not)",
          QUOTES["q_tiled_err"].markdown(), f"max abs {sci(e)} on $O$ (bound "
          f"{t.values['tiled_tol']})", src, "")


@claim
def gradient_check(t):
    claim_text = "Tiled backward passes a central-difference check (step $10^{-5}$)"
    src, _, gc = exactness_check(t, "gradcheck_rel", ("gradcheck", "gradcheck_tol", "gradcheck_step",
                                 "gradcheck_trunc", "gradcheck_round"), claim_text, "q_gradcheck")
    if not gc:
        return
    e = max(num(r, "error") for r in gc)
    t.value("gradcheck", sci(e))
    t.value("gradcheck_tol", f"{num(gc[0], 'tolerance'):.0e}")
    step = 1e-5
    trunc, rnd = step ** 2, UNIT_ROUNDOFF / step
    t.value("gradcheck_step", sci(step, 0))
    t.value("gradcheck_trunc", sci(trunc, 0))
    t.value("gradcheck_round", sci(rnd))
    t.row(f"{claim_text}, {len(gc)} shapes", QUOTES["q_gradcheck"].markdown(),
          f"max relative (to $\\max|\\mathrm{{grad}}|$) {sci(e)}", src,
          f"The expected precision is about the larger of the truncation error "
          f"$h^2$ = ({sci(step, 0)})$^2$ = {sci(trunc, 0)} and the rounding error "
          f"$u/h$ = {sci(UNIT_ROUNDOFF)} / {sci(step, 0)} = {sci(rnd)}, "
          f"so near $10^{{-10}}$: $10^{{-7}}$ is a loose bound, not the fp64 precision. "
          "(The chapter compares three entries, absolute; we compare every entry, relative)")


# ---------------------------------------------------------------------------
# IO (data/cpu/io_sweep.csv, data/cpu/formulas.csv)
# ---------------------------------------------------------------------------
def by_int(rows, key):
    return sorted(((int(r[key]), r) for r in rows), key=lambda kv: kv[0])


@claim
def naive_io(t):
    src = "data/cpu/io_sweep.csv"
    claim_text = "Naive attention moves $\\Theta(N^2)$ elements"
    rows = rows_or_absent(t, src, claim_text, "q_naive_io")
    if rows is None:
        return
    nf = by_int(select(rows, algorithm="naive", **{"pass": "forward"}), "N")
    nf = list(dict(nf).items())
    tfw = list(dict(by_int(select(rows, algorithm="tiled", M="16384", **{"pass": "forward"}), "N")).items())
    exact = all(r["counted_elements"] == r["formula_elements"] for r in rows)
    t.value("io_rows", str(len(rows)))
    t.value("io_exact", "every" if exact else "NOT every")
    big_nf = [(n, r) for n, r in nf if n >= 4 * int(r["d"])]
    big_tf = [(n, r) for n, r in tfw if n >= 4 * int(r["d"])]
    s_naive = slope([n for n, _ in big_nf], [num(r, "counted_elements") for _, r in big_nf])
    s_tiled = slope([n for n, _ in big_tf], [num(r, "counted_elements") for _, r in big_tf])
    t.value("slope_N_from", str(big_nf[0][0]))
    t.value("slope_naive_N", f"{s_naive:.2f}")
    t.value("slope_tiled_N", f"{s_tiled:.2f}")
    t.value("io_N_min", str(nf[0][0]))
    t.value("io_N_max", str(nf[-1][0]))
    t.value("io_M_default", grouped(tfw[0][1]["M"]))
    t.value("io_M_kib", f"{int(tfw[0][1]['M']) * 8 // 1024}")     # fp64 elements
    t.value("io_d", tfw[0][1]["d"])
    t.row(f"{claim_text} ($N$ = {nf[0][0]}..{nf[-1][0]}, $d$ = {nf[0][1]['d']})",
          QUOTES["q_naive_io"].markdown(),
          f"log-log slope {s_naive:.2f} over $N$ = {big_nf[0][0]}..{big_nf[-1][0]} (tiled: "
          f"{s_tiled:.2f}); counted = $4N^2 + 4Nd + N$ in {'every' if exact else 'NOT every'} row",
          src,
          "None. The table's bytes add up to $(2N^2 + 4Nd) + 4N^2 + (2N^2 + 4Nd) = 8N^2 + 8Nd$ "
          "in fp16, $4N^2 + 4Nd$ elements. Stage 1 counts $N$ more because it also writes $L$, "
          "to compare it with stage 3's; the chapter's naive kernel keeps $P$ for its backward "
          "and never stores $L$, so leaving $L$ out is right for it")
    hw = sorted({r["sram_high_water"] for _, r in tfw})
    t.value("hw_over_N", ", ".join(grouped(h) for h in hw))
    nb_big = one(rows, algorithm="naive", N=str(nf[-1][0]), **{"pass": "backward"})
    tb = dict(by_int(select(rows, algorithm="tiled", M="16384", **{"pass": "backward"}), "N"))
    if nb_big and nf[-1][0] in tb:
        t.value("bwd_naive_over_tiled_default_M",
                f"{num(nb_big, 'counted_elements') / num(tb[nf[-1][0]], 'counted_elements'):.2f}")
        t.value("bwd_default_M_N", str(nf[-1][0]))
        t.value("fwd_naive_over_tiled_default_M",
                f"{num(nf[-1][1], 'counted_elements') / num(tfw[-1][1], 'counted_elements'):.2f}")


@claim
def block_sweep(t):
    """The square-tile sweep's setting, for the figure's caption."""
    rows = read_csv("data/cpu/block_sweep.csv") or []
    tiled = [r for r in rows if r["algorithm"] == "tiled"]
    bs = sorted({int(r["Br"]) for r in tiled})
    t.value("blocks_B_lo", str(bs[0]) if bs else "?")
    t.value("blocks_B_hi", str(bs[-1]) if bs else "?")
    t.value("blocks_N", tiled[0]["N"] if tiled else "?")
    t.value("blocks_d", tiled[0]["d"] if tiled else "?")
    t.value("blocks_repeats", (tiled[0].get("repeats") or "1") if tiled else "?")


def m_sweep(rows, algorithm, pas, N="2048"):
    return list(dict(by_int([r for r in select(rows, algorithm=algorithm, N=N, **{"pass": pas})
                             if r["M"]], "M")).items())


@claim
def tiled_io(t):
    src = "data/cpu/io_sweep.csv"
    claim_text = "Tiling saves about an order of magnitude of traffic when $M/d^2 \\sim 10$"
    rows = rows_or_absent(t, src, claim_text, "q_order")
    if rows is None:
        return
    fw, bw = m_sweep(rows, "tiled", "forward"), m_sweep(rows, "tiled", "backward")
    thin_f, thin_b = m_sweep(rows, "tiled-io", "forward"), m_sweep(rows, "tiled-io", "backward")
    naive_f = num(one(rows, algorithm="naive", N="2048", **{"pass": "forward"}), "counted_elements")
    naive_b = num(one(rows, algorithm="naive", N="2048", **{"pass": "backward"}), "counted_elements")
    d = int(fw[0][1]["d"])
    t.value("sweep_N", "2048")
    grow = [(m, r) for m, r in fw if int(r["Br"]) < d]
    flat = [m for m, r in fw if int(r["Br"]) == d]
    s_fwd = slope([m for m, _ in grow], [num(r, "counted_elements") for _, r in grow])
    s_bwd = slope([m for m, _ in bw], [num(r, "counted_elements") for _, r in bw])
    mmax = fw[-1][0]
    t.value("slope_bwd_M", f"{s_bwd:.2f}")
    t.value("slope_fwd_M", f"{s_fwd:.2f}")
    t.value("fwd_flat_from_M", grouped(flat[0]) if flat else "never")
    t.value("fwd_flat_over_d2", f"{flat[0] / d ** 2:g}" if flat else "never")
    t.value("four_d2", grouped(4 * d * d))
    t.value("M_max", grouped(mmax))
    t.value("M_max_over_d2", f"{mmax / d ** 2:g}")
    t.value("M_min", grouped(fw[0][0]))
    t.value("fwd_tiled_over_naive_Mmin", f"{num(fw[0][1], 'counted_elements') / naive_f:.1f}")
    t.value("ratio_fwd_Mmax", f"{naive_f / num(fw[-1][1], 'counted_elements'):.1f}")
    t.value("ratio_bwd_Mmax", f"{naive_b / num(bw[-1][1], 'counted_elements'):.1f}")
    t.value("Mmax_bwd_Bc", bw[-1][1]["Bc"])
    t.value("Mmax_bwd_Br", bw[-1][1]["Br"])
    t.value("Mmax_over_4d", grouped(mmax // (4 * d)))
    by_m = dict(thin_f)
    thin_note = ""
    for k in ("thin_M", "thin_fwd_Br", "thin_fwd_Bc", "thin_bwd_Br", "thin_bwd_Bc", "thin_ratio_fwd",
              "thin_ratio_bwd", "thin_slope_fwd", "thin_M16", "thin_ratio_fwd_16", "thin_ratio_fwd_32"):
        t.value(k, "(not in this sweep)")
    if thin_f and thin_b:
        tf_, tb_ = thin_f[-1][1], thin_b[-1][1]
        t.value("thin_M", grouped(thin_f[-1][0]))
        t.value("thin_fwd_Br", tf_["Br"])
        t.value("thin_fwd_Bc", tf_["Bc"])
        t.value("thin_bwd_Br", tb_["Br"])
        t.value("thin_bwd_Bc", tb_["Bc"])
        t.value("thin_ratio_fwd", f"{naive_f / num(tf_, 'counted_elements'):.1f}")
        t.value("thin_ratio_bwd", f"{naive_b / num(tb_, 'counted_elements'):.1f}")
        t.value("thin_slope_fwd", f"{slope([m for m, _ in thin_f], [num(r, 'counted_elements') for _, r in thin_f]):.2f}")
        m16, m32 = 16 * d * d, 32 * d * d
        if m16 in by_m and m32 in by_m:
            r16 = naive_f / num(by_m[m16], "counted_elements")
            r32 = naive_f / num(by_m[m32], "counted_elements")
            t.value("thin_M16", grouped(m16))
            t.value("thin_ratio_fwd_16", f"{r16:.1f}")
            t.value("thin_ratio_fwd_32", f"{r32:.1f}")
            thin_note = (f"Tall/thin tiles (`derive_blocks_io`): forward {r16:.1f}$\\times$ at "
                         f"$M/d^2$ = 16, {r32:.1f}$\\times$ at 32; backward "
                         f"{t.values['thin_ratio_bwd']}$\\times$ at 32. ")
    t.row(f"{claim_text} ($N$ = 2048, $d$ = {d}, $M$ = {grouped(fw[0][0])}..{grouped(mmax)}; "
          "elements counted while running)",
          QUOTES["q_order"].markdown() + "; " + QUOTES["q_chapter_br"].markdown(),
          thin_note + f"The paper's rule (`derive_blocks`): forward "
          f"{t.values['ratio_fwd_Mmax']}$\\times$ at $M/d^2$ = {mmax / d ** 2:g}, flat from "
          f"$M$ = {t.values['fwd_flat_from_M']}; backward {t.values['ratio_bwd_Mmax']}$\\times$, "
          f"slope {s_bwd:.2f} in $M$",
          src,
          "None with the chapter's own reading, $B_r = \\Theta(M/d)$ for the block that is "
          "re-read: the data support an order of magnitude. The shortfall belongs to the "
          "FlashAttention paper's rule (next rows), whose $B_r$ stops at $d$, applied to a "
          "queries-outer forward pass")


@claim
def block_rules(t):
    """The three block-size rules side by side (OUT/block_rules.md) and their rows."""
    src = "data/cpu/formulas.csv"
    rows = read_csv(src)
    sweep = read_csv("data/cpu/io_sweep.csv") or []
    for k in ("paper_Br", "paper_Bc", "paper_blocks_need", "paper_blocks_over", "paper_blocks_worst",
              "paper_blocks_worst_M", "derived_Br", "derived_Bc", "derived_hw", "rules_M"):
        t.value(k, "not computed")
    out_md = os.path.join(t.out, "block_rules.md")
    if rows is None:
        absent(t, "The paper's block sizes fit in SRAM", "q_fa1_blocks", src)
        with open(out_md, "w") as f:
            f.write(f"*(No `{src}` in this build.)*\n")
        return
    d, M = 64, 16384
    fp = {(r["rule"], r["pass"]): r for r in select(rows, quantity="footprint", M=str(M), d=str(d))}
    paper = fp[("paper", "forward")]
    need = int(paper["value"])
    worst = one(rows, quantity="footprint_over_M_max", rule="paper")
    t.value("rules_M", grouped(M))
    t.value("paper_Br", paper["Br"])
    t.value("paper_Bc", paper["Bc"])
    t.value("paper_blocks_need", grouped(need))
    t.value("paper_blocks_over", f"{need / M:.2f}")
    t.value("paper_blocks_worst", f"{float(worst['value']):.2f}")
    t.value("paper_blocks_worst_M", grouped(worst["M"]))
    der = fp[("derive_blocks", "forward")]
    hw = one(sweep, algorithm="tiled", M=str(M), N="2048", **{"pass": "forward"})
    t.value("derived_Br", der["Br"])
    t.value("derived_Bc", der["Bc"])
    t.value("derived_hw", grouped(hw["sram_high_water"]) if hw else "not measured")
    t.row(f"The paper's block sizes fit in SRAM ($M$ = {grouped(M)}, $d$ = {d})",
          QUOTES["q_fa1_blocks"].markdown() + "; " + QUOTES["q_fa1_sram"].markdown(),
          f"$B_r$ = {paper['Br']}, $B_c$ = {paper['Bc']} need {grouped(need)} elements = "
          f"{need / M:.2f} $M$ (forward); stage 3 fits $B_r$ = {der['Br']}, $B_c$ = {der['Bc']}, "
          f"high-water {t.values['derived_hw']}",
          f"{src}; data/cpu/io_sweep.csv",
          f"Erratum (paper, constants): $K_j, V_j$ ($2B_c d = M/2$) and $Q_i, O_i$ "
          f"($2B_r d \\le M/2$) alone fill $M$; the score tile $B_r B_c$ and $\\ell_i, m_i$ come on "
          f"top, and the ceiling rounds up: {grouped(need)} / {grouped(M)} = {need / M:.2f}; over "
          f"every $M$ from $4d$ to $2^{{18}}$ the overrun peaks at {float(worst['value']):.2f} "
          f"$M$ ($M$ = {grouped(worst['M'])}). Harmless to the $\\Theta$ bound; a kernel must "
          "round down, as stage 3 does")
    t.row("How big the tiles should be: the chapter's rule",
          QUOTES["q_chapter_blocks"].markdown(),
          "see the three rules side by side in the chapter on tiling (table of block rules)",
          src,
          "Imprecise: $B_r = B_c = \\Theta(M/d)$ makes the score tile $\\Theta(M^2/d^2)$, which "
          "stays $\\le M$ only while $M = O(d^2)$. Beyond that only one block can be "
          "$\\Theta(M/d)$; the bound then makes the other $O(d)$. Read that way (tall $B_r$, "
          "thin $B_c$, as its IO count needs) it is the IO-optimal rule, not the paper's")

    # the table of the rules side by side, at two sizes of M
    def cell(rule, pas, m):
        f = one(rows, quantity="footprint", rule=rule, M=str(m), d=str(d), **{"pass": pas})
        io = one(rows, quantity="io_elements", rule=rule, M=str(m), d=str(d), **{"pass": pas})
        return f, io
    naive = {p: num(one(sweep, algorithm="naive", N="2048", **{"pass": p}) or {}, "counted_elements")
             for p in ("forward", "backward")} if sweep else {}
    Ms = [M, 131072]
    head = "| rule | pass | " + " | ".join(
        f"tiles at $M$ = {grouped(m)} | footprint / $M$ | naive / tiled" for m in Ms) + " |"
    # dashes set the relative column widths of the PDF table
    lines = [head, "|:" + "-" * 26 + "|:" + "-" * 8 + "|" + ("-" * 13 + ":|" + "-" * 9 + ":|" + "-" * 9 + ":|") * len(Ms),
             "| textbook (l. 408), read tall/thin | both | " + " | ".join(
                 "$\\Theta(M/d) \\times O(d)$ | $\\le 1$ | as IO-optimal" for _ in Ms) + " |"]
    spec = [("FlashAttention paper (Alg. 1)", "paper"),
            ("stage 3's fit of it (`derive_blocks`)", "derive_blocks"),
            ("IO-optimal (`derive_blocks_io`)", "derive_blocks_io")]
    for name, rule in spec:
        for pas in ("forward", "backward"):
            cells = []
            for m in Ms:
                f, io = cell(rule, pas, m)
                ratio = f"{naive[pas] / int(io['value']):.1f}" if naive.get(pas) and io else "-"
                cells += ([f"{f['Br']} $\\times$ {f['Bc']}", f"{int(f['value']) / m:.2f}", ratio]
                          if f else ["-", "-", "-"])
            lines.append(f"| {name if pas == 'forward' else ''} | {pas} | " + " | ".join(cells) + " |")
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n\n")
        f.write(f": The block-size rules side by side at $d$ = {d}, $N$ = 2048: the tiles, their "
                "SRAM footprint over $M$ (above 1: they do not fit) and naive/tiled traffic from "
                "the IO formulas (the sweeps count the same). The textbook's rule is asymptotic; "
                "read as a tall query block and a thin key block it is the IO-optimal one, up to "
                "constants. Data: `data/cpu/formulas.csv`, `data/cpu/io_sweep.csv`.\n")


@claim
def extra_memory(t):
    """Run stage3 once, saving L into OUT, and read the saved file's shape."""
    probe = os.path.join(t.out, "lse_probe.npy")
    n = 512
    claim_text = "Extra slow memory is $O(N)$: only $O$ and $L$"
    t.value("lse_entries", "not measured")
    t.value("lse_N", str(n))
    try:
        subprocess.run([path("stage3"), "--random", "--n", str(n), "--d", "64", "--lse", probe],
                       check=True, capture_output=True, timeout=120)
        with open(probe, "rb") as f:
            head = f.read(256).decode("latin-1")
        shape = head[head.index("'shape':") + 8:].split(")")[0].strip(" (")
        per_head = [int(x) for x in shape.split(",") if x.strip()][-1]
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        t.row(claim_text, QUOTES["q_extra_mem"].markdown(), f"not measured ({e})", "./stage3 --lse")
        return
    t.value("lse_entries", str(per_head))
    t.row(claim_text, QUOTES["q_extra_mem"].markdown(),
          f"`./stage3 --lse` at $N$ = {n} saves {per_head} entries per head; the SRAM high-water "
          f"mark is {t.values.get('hw_over_N', '?')} elements at every $N$ ($M$ = 16,384); naive "
          "keeps $S, P, \\mathrm{d}P, \\mathrm{d}S$, $4N^2$",
          "./stage3 --lse; data/cpu/io_sweep.csv",
          "None (the backward's workspace $D$ adds $N$ more, still $O(N)$)")


@claim
def causal(t):
    full_src = causal_src = "data/cpu/causal_sweep.csv"
    rows = read_csv(causal_src)
    if rows is None:
        causal_src = "build/paper/causal_sweep.csv"
        rows = read_csv(causal_src)
    formulas = read_csv("data/cpu/formulas.csv") or []
    claim_text = "Causal masking roughly halves the work"
    for k in ("causal_N", "causal_B", "causal_kv_frac", "causal_tiles_code", "causal_tiles_prose",
              "causal_tiles_all", "causal_time_ratio", "causal_time_ratios", "causal_repeats"):
        t.value(k, "not measured")
    pairs = []
    for c in select(rows or [], algorithm="tiled", causal="1", **{"pass": "forward"}):
        f = one(rows, algorithm="tiled", causal="0", N=c["N"], d=c["d"], Br=c["Br"], Bc=c["Bc"],
                **{"pass": "forward"})
        if f:
            pairs.append((c, f))
    if not pairs:
        absent(t, claim_text, "q_causal", causal_src)
        return
    c, f = min(pairs, key=lambda p: abs(int(p[0]["Br"]) - 64))
    N, d, B = int(c["N"]), int(c["d"]), int(c["Br"])
    fixed = 2 * N * d + N                     # Q read, O written, L written: the same either way
    frac = (num(c, "counted_elements") - fixed) / (num(f, "counted_elements") - fixed)
    tiles = {r["rule"]: int(r["value"]) for r in select(formulas, quantity="causal_tiles",
                                                       N=str(N), Br=str(B))}
    measured_tiles = c.get("tiles_visited") or "?"
    ratio = num(c, "wall_s") / num(f, "wall_s")
    ratios = sorted(num(p[0], "wall_s") / num(p[1], "wall_s") for p in pairs)
    t.value("causal_N", str(N))
    t.value("causal_B", str(B))
    t.value("causal_kv_frac", f"{frac:.3f}")
    t.value("causal_tiles_code", str(measured_tiles))
    t.value("causal_tiles_prose", str(tiles.get("chapter", "?")))
    t.value("causal_tiles_all", str(tiles.get("all", "?")))
    t.value("causal_time_ratio", f"{ratio:.2f}")
    t.value("causal_time_ratios", f"{ratios[0]:.2f} to {ratios[-1]:.2f}")
    t.value("causal_repeats", c.get("repeats") or "1")
    agree = "" if str(tiles.get("code")) == str(measured_tiles) else \
        f" (DISAGREES with the closed form's {tiles.get('code')})"
    t.row(f"{claim_text} ($N$ = {N}, $d$ = {d}, $B_r = B_c$ = {B})",
          QUOTES["q_causal"].markdown() + "; " + QUOTES["q_causal_i1"].markdown(),
          f"tiles computed: {measured_tiles} of {tiles.get('all')}{agree}; $K, V$ elements read: "
          f"{frac:.3f} of the non-causal count; forward wall time ratio {ratio:.2f} (median of "
          f"{t.values['causal_repeats']}, causal and non-causal timed in alternation; "
          f"{ratios[0]:.2f} to {ratios[-1]:.2f} over the block sizes)",
          f"{causal_src}; data/cpu/formulas.csv",
          f"With $i_1$ the exclusive end of the query block, as in the chapter's code, "
          f"$j_0 > i_1$ also visits the block that starts at $i_1$, which is all future: "
          f"{tiles.get('chapter')} tiles instead of {tiles.get('code')}. The test is "
          "$j_0 \\ge i_1$. The chapter's NumPy forward skips nothing when causal (it masks "
          "every tile), and the diagonal tiles still pay for the mask, so not \"free\"; "
          "\"roughly halves\" holds")


# ---------------------------------------------------------------------------
# Masks (chapter 3b, stage 6): data/cpu/window_sweep.csv, memory_vs_n.csv,
# lse_error.csv, masks_property.csv, and one run of ./stage6
# ---------------------------------------------------------------------------
EX4_W = 256      # exercise 4's closing question: N = 4096, W = 256, Br = Bc = 64
                 # (exercises/ex4/statement.md), one row of the window sweep


@claim
def window_sweep(t):
    """The sliding-window sweep (make sweep-masks: N = 4096, d = 64, 64 x 64
    tiles), and exercise 4's row of it."""
    src = "data/cpu/window_sweep.csv"
    claim_text = "A sliding window skips the key blocks outside it"
    for k in ("win_N", "win_d", "win_B", "win_points", "win_formula_ok", "win_tiles_all",
              "win_tiles_causal", "win_tiles_256", "win_saving_256", "win_tiles_min", "win_io_fwd_256",
              "win_io_bwd_256", "win_time_fwd_256", "win_time_bwd_256", "win_W_min", "win_W_max",
              "win_W_ex4"):
        t.value(k, "not measured")
    rows = rows_or_absent(t, src, claim_text, "q_ex4_skip")
    if rows is None:
        return
    full, causal = one(rows, mask="full"), one(rows, mask="causal")
    w256 = one(rows, mask="window", W=str(EX4_W))
    wins = select(rows, mask="window")
    if not (full and causal and w256 and wins):
        absent(t, claim_text, "q_ex4_skip", src + f" (full, causal or W = {EX4_W} rows)")
        return
    t_all, t_c, t_w = (int(r["tiles_fwd"]) for r in (full, causal, w256))
    ok = all(r["tiles_fwd"] == r["tiles_fwd_formula"] and r["io_fwd"] == r["io_fwd_formula"]
             and r["io_bwd"] == r["io_bwd_formula"] for r in rows)
    ws = sorted(int(r["W"]) for r in wins)
    t.value("win_N", full["N"])
    t.value("win_d", full["d"])
    t.value("win_B", full["Br_fwd"])
    t.value("win_W_ex4", str(EX4_W))
    t.value("win_W_min", str(ws[0]))
    t.value("win_W_max", str(ws[-1]))
    t.value("win_points", str(len(rows)))
    t.value("win_formula_ok", "all" if ok else "NOT all")
    t.value("win_tiles_all", str(t_all))
    t.value("win_tiles_causal", str(t_c))
    t.value("win_tiles_256", str(t_w))
    t.value("win_saving_256", f"{1 - t_w / t_c:.2f}")
    t.value("win_tiles_min", str(min(int(r["tiles_fwd"]) for r in wins)))
    t.value("win_io_fwd_256", f"{num(w256, 'io_fwd') / num(causal, 'io_fwd'):.2f}")
    t.value("win_io_bwd_256", f"{num(w256, 'io_bwd') / num(causal, 'io_bwd'):.2f}")
    t.value("win_time_fwd_256", f"{num(w256, 'fwd_s') / num(causal, 'fwd_s'):.2f}")
    t.value("win_time_bwd_256", f"{num(w256, 'bwd_s') / num(causal, 'bwd_s'):.2f}")
    t.row(f"{claim_text} ($N$ = {full['N']}, $d$ = {full['d']}, $W$ = {EX4_W}, $B_r = B_c$ = "
          f"{full['Br_fwd']})", QUOTES["q_ex4_skip"].markdown(),
          f"{t_w} of {t_c} causal tiles visited (saves {1 - t_w / t_c:.2f}; {t_all} without a "
          f"mask); forward traffic {t.values['win_io_fwd_256']} and time "
          f"{t.values['win_time_fwd_256']} of causal; counted == formula in "
          f"{'all' if ok else 'NOT all'} {len(rows)} rows", src, "")


@claim
def memory_vs_n(t):
    """Peak resident memory of whole runs against N, naive and tiled."""
    src = "data/cpu/memory_vs_n.csv"
    claim_text = "Memory linear in N (peak resident memory of a whole forward and backward run, fp64)"
    for k in ("mem_d", "mem_naive_N", "mem_naive_mib", "mem_tiled_same_mib", "mem_tiled_N",
              "mem_tiled_mib", "mem_tiled_wall", "mem_slope_naive", "mem_slope_tiled", "mem_window",
              "mem_window_keys"):
        t.value(k, "not measured")
    rows = rows_or_absent(t, src, claim_text, "q_memory")
    if rows is None:
        return
    nv = sorted((int(r["N"]), int(r["peak_rss_kib"])) for r in select(rows, algorithm="naive")
                if int(r["peak_rss_kib"]) > 0)
    tv = sorted((int(r["N"]), int(r["peak_rss_kib"])) for r in select(rows, algorithm="tiled")
                if int(r["peak_rss_kib"]) > 0)
    if not (nv and tv):
        absent(t, claim_text, "q_memory", src + " (naive and tiled rows)")
        return
    n_max, n_peak = nv[-1]
    t_same = dict(tv).get(n_max)
    big = [(n, k) for n, k in tv if n >= 16384]
    s_naive = slope([n for n, _ in nv if n >= 2048], [k for n, k in nv if n >= 2048])
    s_tiled = slope([n for n, _ in big], [k for _, k in big])
    last_tiled = max(select(rows, algorithm="tiled"), key=lambda r: int(r["N"]))
    t.value("mem_d", rows[0]["d"])
    t.value("mem_window", f"({rows[0]['window_left']}, {rows[0]['window_right']})")
    if rows[0]["window_right"] == "0" and int(rows[0]["window_left"]) >= 0:
        t.value("mem_window_keys", str(int(rows[0]["window_left"]) + 1))
    t.value("mem_naive_N", str(n_max))
    t.value("mem_naive_mib", f"{n_peak / 1024:.0f}")
    t.value("mem_tiled_same_mib", f"{t_same / 1024:.1f}" if t_same else "n/a")
    t.value("mem_tiled_N", str(tv[-1][0]))
    t.value("mem_tiled_mib", f"{tv[-1][1] / 1024:.0f}")
    t.value("mem_tiled_wall", f"{num(last_tiled, 'wall_s'):.0f}")
    t.value("mem_slope_naive", f"{s_naive:.2f}")
    t.value("mem_slope_tiled", f"{s_tiled:.2f}")
    t.row(f"{claim_text}, $d$ = {rows[0]['d']}", QUOTES["q_memory"].markdown(),
          f"naive: {n_peak / 1024:.0f} MiB at $N$ = {n_max}, log-log slope {s_naive:.2f}; "
          f"tiled: {t.values['mem_tiled_same_mib']} MiB at $N$ = {n_max}, "
          f"{tv[-1][1] / 1024:.0f} MiB at $N$ = {tv[-1][0]}, slope {s_tiled:.2f}", src, "")


@claim
def lse_error(t):
    """The backward's error against |L| (P rebuilt from a rounded L)."""
    src = "data/cpu/lse_error.csv"
    claim_text = "The backward's $P = \\exp(S - L)$ is exact"
    for k in ("lse_ratio", "lse_naive_max", "lse_L_max", "lse_tiled_max", "lse_L_75", "lse_tiled_75",
              "lse_eps_L_75", "bwd_tol_base", "bwd_tol_L_factor", "lse_fp32_at_max", "lse_N", "lse_d"):
        t.value(k, "not measured")
    rows = rows_or_absent(t, src, claim_text, "q_exact")
    if rows is None:
        return
    tiled = [r for r in select(rows, algorithm="tiled") if num(r, "max_abs_L") >= 100]
    naive = select(rows, algorithm="naive")
    if not (tiled and naive):
        absent(t, claim_text, "q_exact", src + " (rows with |L| >= 100)")
        return
    ratio = max(num(r, "err_bwd") / num(r, "eps_max_abs_L") for r in tiled)
    worst = max(tiled, key=lambda r: num(r, "max_abs_L"))
    at75 = [r for r in tiled if num(r, "offset") == -75000 and num(r, "softmax_scale") == 1.0]
    n_worst = max(num(r, "err_bwd") for r in naive)
    t_worst = max(num(r, "err_bwd") for r in tiled)
    # the checks' bound, 1e-12 + 16 eps max|L| (src/tolerances.h), as the
    # sweep wrote it: the constant from the |L| = 0 end, the factor from the
    # largest |L|
    lo = min(rows, key=lambda r: num(r, "eps_max_abs_L"))
    base = num(lo, "tolerance_bwd") - num(lo, "eps_max_abs_L")
    factor = (num(worst, "tolerance_bwd") - base) / num(worst, "eps_max_abs_L")
    t.value("bwd_tol_base", tex_sci(base, 0))
    t.value("bwd_tol_L_factor", f"{factor:.0f}")
    t.value("lse_ratio", f"{ratio:.2f}")
    t.value("lse_naive_max", sci(n_worst))
    t.value("lse_L_max", tex_sci(num(worst, "max_abs_L")))
    t.value("lse_N", worst.get("N") or "?")
    t.value("lse_d", worst.get("d") or "?")
    # binary32 rounds L to half an ulp, 2^-24 |L| relative (IEEE 754)
    t.value("lse_fp32_at_max", tex_sci(2.0 ** -24 * num(worst, "max_abs_L")))
    t.value("lse_tiled_max", sci(t_worst))
    tol_text = f"{t.values['bwd_tol_base']} + {factor:.0f} $\\varepsilon \\max|L|$"
    at_text = ""
    if at75:
        t.value("lse_L_75", tex_sci(num(at75[0], "max_abs_L")))
        t.value("lse_tiled_75", sci(num(at75[0], "err_bwd")))
        t.value("lse_eps_L_75", sci(num(at75[0], "eps_max_abs_L")))
        at_text = (f" ($|L|$ = {t.values['lse_L_75']}: $\\varepsilon |L|$ = {t.values['lse_eps_L_75']})")
    t.row(claim_text, QUOTES["q_exact"].markdown(),
          f"tiled backward error up to {ratio:.2f} $\\varepsilon \\max|L|$ (relative; "
          f"{sci(t_worst)} at $|L|$ = {t.values['lse_L_max']}); the naive backward stays at "
          f"{sci(n_worst)} at every $|L|$", src,
          "Exact in real arithmetic only: $L$ is rounded to about $\\varepsilon |L|$ when stored, "
          f"and each rebuilt $P$ inherits that relative error{at_text}; the bound is stated and held "
          f"(tolerance {tol_text}, `src/tolerances.h`)")


@claim
def masks_property(t):
    """The masks' property test summary (build/test_masks --csv)."""
    src = "data/cpu/masks_property.csv"
    for k in ("prop_draws", "prop_fwd", "prop_bwd", "prop_seed", "prop_empty_rows", "prop_skipped",
              "prop_fwd_tol"):
        t.value(k, "not measured")
    by = {r["check"]: r for r in (read_csv(src) or [])}
    if "forward_rel_err" not in by or "backward_rel_err" not in by:
        return
    t.value("prop_draws", by["forward_rel_err"]["draws"])
    t.value("prop_fwd", sci(num(by["forward_rel_err"], "value")))
    t.value("prop_fwd_tol", tex_sci(num(by["forward_rel_err"], "tolerance"), 0))
    t.value("prop_bwd", sci(num(by["backward_rel_err"], "value")))
    t.value("prop_seed", by["forward_rel_err"]["seed"])
    if "empty_rows" in by:
        t.value("prop_empty_rows", f"{int(num(by['empty_rows'], 'value'))}")
    if "tiles_all" in by:
        ta = by["tiles_all"]
        t.value("prop_skipped", f"{int(num(ta, 'count')) / num(ta, 'value'):.2f}")


def write_npy_column(name, vals):
    """A float64 .npy of shape (len(vals), 1), format 1.0."""
    import struct
    hdr = "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, 1), }" % len(vals)
    hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
    with open(name, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode("latin1"))
        f.write(struct.pack("<%dd" % len(vals), *vals))


def read_npy_f8(name):
    """The float64 values of a C-order .npy file (format 1.0)."""
    import struct
    with open(name, "rb") as f:
        data = f.read()
    hl = struct.unpack("<H", data[8:10])[0]
    body = data[10 + hl:]
    return struct.unpack("<%dd" % (len(body) // 8), body)


@claim
def mask_guard(t):
    """Exercise 4's -inf guard, on the case of tests/test_masks.c: N = 8,
    d = 1, row i sees keys i - 1 and i (window (1, 0)), every visible logit
    -1000, V_j = j + 1. One run of ./stage6, inputs and output in OUT."""
    claim_text = "Exercise 4's -inf guard: rows whose first visited tile is all masked"
    says = QUOTES["q_ex4_guard"].markdown() + "; " + QUOTES["q_guard_code"].markdown()
    t.value("guard_O3", "not measured")
    t.value("guard_L3", "not measured")
    files = {k: os.path.join(t.out, f"guard_{k}.npy") for k in ("q", "k", "v", "o", "lse")}
    try:
        write_npy_column(files["q"], [1.0] * 8)
        write_npy_column(files["k"], [-1000.0] * 8)
        write_npy_column(files["v"], [float(j + 1) for j in range(8)])
        subprocess.run([path("stage6"), "--q", files["q"], "--k", files["k"], "--v", files["v"],
                        "--window", "1,0", "--scale", "1", "--br", "8", "--bc", "2",
                        "--out", files["o"], "--lse", files["lse"]],
                       check=True, capture_output=True, timeout=120)
        O, L = read_npy_f8(files["o"]), read_npy_f8(files["lse"])
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        t.row(claim_text, says, f"not measured ({e})", "./stage6")
        return
    # the textbook's guard: the max of an all -inf tile becomes 0 and stays,
    # so the next tile's exp(-1000 - 0) underflows in fp64 (below about -745)
    under = math.exp(-1000.0 - 0.0)
    t.value("guard_O3", f"{O[3]:g}")
    t.value("guard_L3", f"${L[3]:.2f}$")
    t.row(claim_text, says,
          f"`./stage6 --window 1,0 --br 8 --bc 2` on $N$ = 8, logits $-1000$, $V_j = j + 1$: "
          f"$O_3$ = {O[3]:g} (the mean of $V_2, V_3$), $L_3$ = {L[3]:.2f}",
          "./stage6; tests/test_masks.c",
          f"The guard replaces the max of an all $-\\infty$ tile by 0 and keeps it: the next "
          f"tile's $\\exp(-1000 - 0)$ = {under:g} in fp64, so $\\ell = 0$ and the row ends with "
          f"$O_3 = 0$, $L_3 = 0$ instead of {O[3]:g} and {L[3]:.2f}; keep $m = -\\infty$ and skip "
          "the update (stage 2's `online_softmax_update`)")


# ---------------------------------------------------------------------------
# The exercises (data/cpu/online_trace.csv; exercise 3 and 5 are arithmetic)
# ---------------------------------------------------------------------------
@claim
def exercise2(t):
    src = "data/cpu/online_trace.csv"
    rows = read_csv(src)
    for k in ("ex2_l", "ex2_L", "ex2_alpha", "ex2_l7", "ex2_lnl"):
        t.value(k, "not measured")
    if rows is None:
        absent(t, "Exercise 2: $[3, 1, 6, 2]$ in blocks of 2", "q_ex2", src)
        return
    b2, st, tp = one(rows, step="2"), one(rows, step="streamed"), one(rows, step="two_pass")
    a, l, L = num(b2, "alpha"), num(st, "l"), num(st, "L")
    t.value("ex2_alpha", f"{a:.6f}")
    t.value("ex2_l", f"{l:.6f}")
    t.value("ex2_l7", f"{l:.7f}")
    t.value("ex2_L", f"{L:.7f}")
    t.value("ex2_lnl", f"{math.log(l):.7f}")
    same = "equal" if (num(tp, "l"), num(tp, "L")) == (l, L) else \
        f"two-pass l = {num(tp, 'l')}, L = {num(tp, 'L')}"
    t.row("Exercise 2: $[3, 1, 6, 2]$ in blocks of 2", QUOTES["q_ex2"].markdown() +
          " (the exercise gives no values)",
          f"$\\alpha$ = {a:.6f}, $\\ell$ = {l:.6f}, $L$ = {L:.7f}; two-pass: {same}",
          f"{src} (./stage2 --trace --csv)", "")


@claim
def exercise3(t):
    N, d, M = 16384, 128, 131072         # the exercise's own setting
    s_bytes, o_bytes, l_bytes = N * N * 2, N * d * 2, N * 4
    ratio = s_bytes / (o_bytes + l_bytes)
    t.value("ex3_N", grouped(N))
    t.value("ex3_d", str(d))
    t.value("ex3_M", grouped(M))
    t.value("ex3_S", grouped(s_bytes))
    t.value("ex3_O", grouped(o_bytes))
    t.value("ex3_L", grouped(l_bytes))
    t.value("ex3_ratio", f"{ratio:.1f}")
    t.value("ex3_Md2", f"{M / d ** 2:g}")
    t.row("Exercise 3: $N$ = 16384, $d$ = 128, fp16, $L$ in fp32; $M$ = 131072",
          QUOTES["q_ex3"].markdown() + " (no values given)",
          f"$S$: $N^2 \\cdot 2$ = {grouped(s_bytes)} B; $O + L$: $2Nd + 4N$ = {grouped(o_bytes)} + "
          f"{grouped(l_bytes)} B; ratio {ratio:.1f}; $M/d^2$ = {M / d ** 2:g}",
          "arithmetic", "$M/d^2$ = 8 is an asymptotic factor; the counted ratios of the IO rows "
          "above are what tiles of a given shape achieve")


@claim
def exercise5(t):
    N, d = 16384, 128
    p_bytes, l_bytes = N * N * 2, N * 4
    recompute = 2 * N * N * d
    t.value("ex5_P", grouped(p_bytes))
    t.value("ex5_saved", grouped(p_bytes - l_bytes))
    t.value("ex5_recompute_gflop", f"{recompute / 1e9:.1f}")
    t.row("Exercise 5(b): store $L$ instead of $P$ ($N$ = 16384, $d$ = 128)",
          QUOTES["q_ex5"].markdown() + " (no values given)",
          f"$P$: $2N^2$ = {grouped(p_bytes)} B against $L$: $4N$ = {grouped(l_bytes)} B, "
          f"{grouped(p_bytes - l_bytes)} B saved per head; cost: $S = QK^\\top$ again, "
          f"$2N^2 d$ = {recompute / 1e9:.1f} GFLOP per head", "arithmetic", "")


# ---------------------------------------------------------------------------
# The FlashAttention paper's Figure 2, and the H200
# ---------------------------------------------------------------------------
@claim
def figure2_flops(t):
    B, H, N, d = 64, 16, 1024, 64        # the figure's setting
    fwd = 4 * B * H * N * N * d
    std = 3 * fwd                        # backward of standard attention: 4 products = 2x forward
    fa = 3.5 * fwd                       # FlashAttention: S recomputed, backward 2.5x forward
    gs, gf, ms = pub("fig2_gflops_std"), pub("fig2_gflops_fa"), pub("fig2_ms_fa")
    for k, v in PUBLISHED.items():
        t.value("pub_" + k, f"{v[0]:g}")
    t.value("fig2_fwd_gflop", f"{fwd / 1e9:.1f}")
    t.value("fig2_std_gflop", f"{std / 1e9:.1f}")
    t.value("fig2_fa_gflop", f"{fa / 1e9:.1f}")
    t.value("fig2_std_factor", f"{std / 1e9 / gs:.1f}")
    t.value("fig2_fa_factor", f"{fa / 1e9 / gf:.1f}")
    t.value("fig2_ratio_paper", f"{gf / gs:.3f}")
    t.value("fig2_ratio_count", f"{fa / std:.3f}")
    t.value("fig2_fa_tflops", f"{fa / (ms * 1e-3) / 1e12:.0f}")
    t.value("fig2_paper_tflops", f"{gf / ms:.1f}")
    t.row("FlashAttention paper, Figure 2: GFLOPs of standard attention and FlashAttention "
          "($B$ = 64, $H$ = 16, $N$ = 1024, $d$ = 64, forward + backward)",
          QUOTES["q_fa1_fig2"].markdown(),
          f"$4BHN^2 d$ = {fwd / 1e9:.1f} GFLOP forward; forward + backward {std / 1e9:.1f} "
          f"(standard, $3\\times$) and {fa / 1e9:.1f} (recomputing, $3.5\\times$)",
          "arithmetic (the matrix products only)",
          f"Erratum (paper): {std / 1e9:.1f} / {gs:g} = {std / 1e9 / gs:.1f} and "
          f"{fa / 1e9:.1f} / {gf:g} = {fa / 1e9 / gf:.1f}: the printed GFLOPs are not the "
          f"matrix-product count; only their ratio ({gf / gs:.3f} against {fa / std:.3f}) is "
          f"close. At face value {gf:g} GFLOP in {ms:g} ms is {gf / ms:.1f} TFLOP/s on an A100")


def l2_bytes():
    """The H200's L2 size as the device reported it to Nsight Compute
    (device__attribute_l2_cache_size in data/gpu/io_fwd_ncu_raw.csv)."""
    full = path("data/gpu/io_fwd_ncu_raw.csv")
    if not os.path.exists(full):
        return None
    with open(full, newline="") as f:
        lines = [ln for ln in f if not ln.startswith("==")]
    for r in csv.DictReader(lines):
        v = (r.get("device__attribute_l2_cache_size") or "").replace(",", "")
        if v.isdigit():
            return int(v)
    return None


@claim
def h200(t):
    """The H200: datasheet rates (quoted), its L2 (as it reported itself) and
    the IO model at Figure 2's shape against Nsight's bytes (data/gpu/io_fwd.csv)."""
    dense = pub("h200_sparse_tflops") / 2
    t.value("h200_peak_tflops", f"{dense:g}")
    t.value("h200_hbm_tbs", f"{pub('h200_hbm_tbs'):g}")
    t.value("h200_ridge", f"{dense / pub('h200_hbm_tbs'):.0f}")
    for dd in (64, 128):
        t.value(f"ai_d{dd}", f"{4 * dd / 8:g}")     # 4 N^2 d FLOP over 8 N^2 bytes (fp16)
    # the softmax alone, per element of S: compare, subtract, exp, add, divide,
    # over one fp16 element read (S) and one written (P)
    ops, nbytes = 5, 2 + 2
    t.value("softmax_ops", str(ops))
    t.value("softmax_bytes", str(nbytes))
    t.value("softmax_ai", f"{ops / nbytes:g}")
    l2 = l2_bytes()
    t.value("l2_bytes", grouped(l2) if l2 else "not recorded")
    t.value("l2_mib", f"{l2 / 2 ** 20:g}" if l2 else "not recorded")
    io = read_csv(paper_gpu.IO) or []
    fig = [r for r in io if (paper_gpu.fnum(r, "B"), paper_gpu.fnum(r, "H"), paper_gpu.fnum(r, "N"),
                             paper_gpu.fnum(r, "d")) == (64.0, 16.0, 1024.0, 64.0)]
    keys = ("h200_tensor_gb", "h200_compulsory_gb", "h200_compulsory_noL_gb", "h200_naive_gb",
            "h200_tiled_gb", "h200_tiled_Br", "h200_kv_head_kib", "v0_dram_over_model_lo",
            "v0_dram_over_model_hi", "v0_sweep_N_lo", "v0_sweep_N_hi", "gap_mat_gb", "gap_tiled_gb")
    for k in keys:
        t.value(k, "n/a")
    by = {paper_gpu.col(r, "impl"): r for r in fig}
    v0, v1 = by.get("ours_v0_materialized"), by.get("ours_v1_tiled")
    claim_text = "The IO model predicts a GPU's DRAM bytes (H200, Figure 2's shape, fp16, forward)"
    if not (v0 and v1):
        t.row(claim_text, "our model (chapters 1 and 3)",
              f"not measured in this build: no Figure 2 rows in {paper_gpu.IO}", "data/gpu/")
        return
    B, H, N, d = 64, 16, 1024, 64
    comp = paper_gpu.fnum(v1, "compulsory")
    tensor = B * H * N * d * 2                       # one of Q, K, V, O in fp16
    t.value("h200_tensor_gb", f"{tensor / 1e9:.3f}")
    t.value("h200_compulsory_gb", f"{comp / 1e9:.3f}")
    t.value("h200_compulsory_noL_gb", f"{4 * tensor / 1e9:.3f}")
    t.value("h200_naive_gb", f"{paper_gpu.fnum(v0, 'model') / 1e9:.2f}")
    t.value("h200_tiled_gb", f"{paper_gpu.fnum(v1, 'model') / 1e9:.2f}")
    t.value("h200_tiled_Br", "64")
    t.value("h200_kv_head_kib", f"{2 * N * d * 2 / 1024:.0f}")
    t.value("gap_mat_gb", f"{paper_gpu.dram_of(v0) / 1e9:.2f}")
    t.value("gap_tiled_gb", f"{paper_gpu.dram_of(v1) / 1e9:.2f}")
    sweep = [r for r in io if (r.get("label") or "") == "sweep" and
             paper_gpu.col(r, "impl") == "ours_v0_materialized"]
    ratios = sorted((paper_gpu.dram_of(r) / paper_gpu.fnum(r, "model"), int(paper_gpu.fnum(r, "N")))
                    for r in sweep if paper_gpu.fnum(r, "model"))
    if ratios:
        t.value("v0_dram_over_model_lo", f"{ratios[0][0]:.2f}")
        t.value("v0_dram_over_model_hi", f"{ratios[-1][0]:.2f}")
        ns = sorted(n for _, n in ratios)
        t.value("v0_sweep_N_lo", str(ns[0]))
        t.value("v0_sweep_N_hi", str(ns[-1]))
    l2sm = paper_gpu.fnum(v1, "l2_sm")
    t.row(claim_text, "our IO model (chapters 1 and 3); " + QUOTES["q_fa1_theorem2"].markdown(),
          f"version 0: DRAM {paper_gpu.dram_of(v0) / 1e9:.2f} GB, model "
          f"{paper_gpu.fnum(v0, 'model') / 1e9:.2f} GB (DRAM/model {t.values['v0_dram_over_model_lo']} "
          f"to {t.values['v0_dram_over_model_hi']} over $N$ = {t.values['v0_sweep_N_lo']}.."
          f"{t.values['v0_sweep_N_hi']}); version 1: DRAM {paper_gpu.dram_of(v1) / 1e9:.2f} GB = "
          f"compulsory {comp / 1e9:.3f} GB ($Q, K, V$ read, $O, L$ written once), requested from L2 "
          f"{(l2sm or float('nan')) / 1e9:.2f} GB against a model of "
          f"{paper_gpu.fnum(v1, 'model') / 1e9:.2f} GB",
          paper_gpu.IO + "; data/gpu/io_fwd_ncu_raw.csv",
          f"The tiled model's $K, V$ re-reads land in the L2 ({t.values['l2_mib']} MiB, "
          f"{t.values['l2_bytes']} bytes as the device reports it), not in DRAM: for tiled "
          "kernels the model predicts what the SMs request from L2, and DRAM sees the "
          "compulsory bytes, whatever $M$ is")


@claim
def gpu_speed_and_traffic(t):
    """Peers measured in the same run (data/gpu/*.csv), beside what the paper published."""
    for k in ("gpu_shape", "gpu_mat_tflops", "gpu_mat_name", "gpu_ours_name", "gpu_ours_tflops",
              "gpu_ours_speedup", "gpu_sdpa_flash_tflops", "gpu_sdpa_flash_speedup",
              "gpu_fig2_mat_gb", "gpu_fig2_best_gb", "gpu_fig2_best"):
        t.value(k, "n/a")
    for impl in ("ours_v0_materialized", "ours_v1_tiled", "ours_v2_mma", "sdpa_flash", "sdpa_cudnn"):
        for q in ("dram", "l2", "l2sm", "model", "ms"):
            t.value(f"fig2_{impl}_{q}", "n/a")
    io = [r for r in (read_csv(paper_gpu.IO) or []) if (r.get("label") or "") == "sweep"]
    bench = read_csv(paper_gpu.BENCH) or []

    def setting(rows, f):
        got = sorted({f(r) for r in rows if None not in (paper_gpu.fnum(r, "B"), paper_gpu.fnum(r, "N"),
                                                         paper_gpu.fnum(r, "H"), paper_gpu.fnum(r, "d"))})
        return ", ".join(grouped(g) for g in got) if got else "n/a"
    t.value("gpu_sweep_tokens", setting(io, lambda r: paper_gpu.fnum(r, "B") * paper_gpu.fnum(r, "N")))
    t.value("gpu_sweep_H", setting(io, lambda r: paper_gpu.fnum(r, "H")))
    t.value("gpu_bench_tokens", setting(bench, lambda r: paper_gpu.fnum(r, "B") * paper_gpu.fnum(r, "N")))
    hidden = sorted({int(paper_gpu.fnum(r, "H") * paper_gpu.fnum(r, "d")) for r in bench
                     if None not in (paper_gpu.fnum(r, "H"), paper_gpu.fnum(r, "d"))})
    t.value("gpu_bench_hidden", ", ".join(str(h) for h in hidden) or "n/a")   # H d, no grouping: H = 2048/d
    summary = paper_gpu.summary()
    if not summary:
        t.value("gpu_status", "absent")
        t.row("FlashAttention is faster on a GPU (H200)", QUOTES["q_fa1_speed"].markdown(),
              "not measured in this build: no usable data/gpu/bench_fwd.csv or io_fwd.csv",
              "data/gpu/", "")
        return
    t.value("gpu_status", "present")
    for k, v in summary["values"].items():
        t.value(k, v)
    v = t.values
    if v["gpu_fig2_best"] != "n/a":
        t.row("Tiling cuts DRAM traffic (H200, Figure 2's shape, forward only, fp16)",
              QUOTES["q_fa1_fig2_hbm"].markdown(),
              f"materialized (version 0) {v['gpu_fig2_mat_gb']} GB; {v['gpu_fig2_best']} "
              f"{v['gpu_fig2_best_gb']} GB; every tiled kernel, ours and PyTorch's, at the "
              f"compulsory {v['h200_compulsory_gb']} GB",
              paper_gpu.IO,
              "The gap is materialized against compulsory bytes, not the $\\Theta(N^2d^2/M)$ "
              "factor: the tiled kernels' DRAM bytes do not depend on $M$ (their re-reads hit "
              f"the {v['l2_mib']} MiB L2)")
    if v["gpu_shape"] != "n/a":
        t.row(f"Tiled attention beats the materialized path on a GPU (H200, {v['gpu_shape']}, "
              "forward, same run, same tensors)", QUOTES["q_fa1_speed"].markdown() + " (A100)",
              f"{v['gpu_mat_name']} {v['gpu_mat_tflops']} TFLOP/s; {v['gpu_ours_name']} "
              f"{v['gpu_ours_tflops']} ({v['gpu_ours_speedup']}$\\times$); PyTorch's flash kernel "
              f"{v['gpu_sdpa_flash_tflops']} ({v['gpu_sdpa_flash_speedup']}$\\times$)",
              paper_gpu.BENCH,
              "The speed-up belongs to kernels whose products use tensor cores; a tiled kernel "
              "on CUDA cores (version 1) is slower than a materialized one built on cuBLAS")


# ---------------------------------------------------------------------------
# The fault inputs of stage 5's tests (chapter 4b): what the rounding of an
# fp32 L does to P there, from the generators' own constants
# ---------------------------------------------------------------------------
def _fp32_half_ulp_log2(x):
    """log2 of half an ulp of an fp32 number of magnitude x (IEEE 754
    binary32: 24-bit significand, so an ulp is 2^(e - 23) for 2^e <= x < 2^(e+1))."""
    return math.floor(math.log2(abs(x))) - 24


@claim
def fault_inputs(t):
    """Chapter 4b's arithmetic on two of the fault inputs stage 5 tests:
    Q, K ~ -A U[0,1) and Q, K ~ U[lo, lo + w] (src/gpu_host.c, GH_IN_NEG900
    and GH_IN_HUGE), at the d of their cases in src/stage5_main.c, with the
    default softmax_scale 1/sqrt(d). The typical scaled score is
    tau d E[q] E[k] (entries independent); an fp32 L of that size is rounded
    by up to half an ulp, which enters every exponent of the row: P is off
    by a factor of up to e^(half ulp)."""
    with open(path("src", "gpu_host.c")) as f:
        gen = f.read()
    with open(path("src", "stage5_main.c")) as f:
        cases = f.read()
    neg = re.search(r"in->Q\[i\] = -([\d.e]+) \* rng_uniform", gen)
    huge = re.search(r"in->Q\[i\] = ([\d.e]+) \+ ([\d.e]+) \* rng_uniform", gen)
    dm = re.search(r'\{"fault: [^"]*",(?: *\d+,){5} *(\d+),[^}]*GH_IN_NEG900\}', cases)
    if not (neg and huge and dm):
        sys.exit("claims.py: the fault inputs' generators (src/gpu_host.c) or their cases "
                 "(src/stage5_main.c) are not where fault_inputs() looks for them")
    A, lo, w, d = float(neg.group(1)), float(huge.group(1)), float(huge.group(2)), int(dm.group(1))
    root = math.isqrt(d)
    tau_tex = f"\\tfrac1{{{root}}}" if root * root == d else f"\\tfrac1{{\\sqrt{{{d}}}}}"
    t.value("fault_d", str(d))

    def num_tex(x):          # 900 as 900, 4e4 as 4 \times 10^4, 6.5e4 as 6.5 \times 10^4
        if x == int(x) and abs(x) < 1e4:
            return str(int(x))
        m, e = f"{x:.1e}".split("e")
        return f"{m.rstrip('0').rstrip('.')} \\times 10^{{{int(e)}}}"
    # -A U[0,1): mean entry -A/2, so q.k is about d (A/2)^2
    s_neg = d * (A / 2) ** 2 / math.sqrt(d)
    h_neg = _fp32_half_ulp_log2(s_neg)
    t.value("fault_neg_dist", f"$-{num_tex(A)}\\,U[0,1)$")
    t.value("fault_neg_score", f"${tau_tex} \\cdot {d} \\cdot {num_tex(A / 2)}^2 \\approx "
                               f"{tex_sci(s_neg)[1:-1]}$")
    t.value("fault_neg_half_ulp", f"$2^{{{h_neg}}}$")
    t.value("fault_neg_p_err", f"{100 * math.expm1(2.0 ** h_neg):.0f}\u00a0%")
    # U[lo, lo + w]: mean entry lo + w/2
    s_huge = d * (lo + w / 2) ** 2 / math.sqrt(d)
    t.value("fault_huge_dist", f"$U[{num_tex(lo)}, {num_tex(lo + w)}]$")
    t.value("fault_huge_score", tex_sci(s_huge))
    t.value("fault_huge_half_ulp", f"$2^{{{_fp32_half_ulp_log2(s_huge)}}}$")


# ---------------------------------------------------------------------------
# The PyTorch op (chapter 4b2) and version 3 (chapter 4c): the settings their
# scripts run, and data/gpu/v3_steps.csv when present
# ---------------------------------------------------------------------------
@claim
def torch_op(t):
    """The training comparison's model and run (scripts/train_compare.py's
    DEFAULTS), and what the op saves for the backward at that size."""
    import train_compare
    c = train_compare.DEFAULTS
    B, H, N = c["batch"], c["heads"], c["context"]
    for k in ("steps", "layers", "d_model", "heads", "context", "batch"):
        t.value("train_" + k, str(c[k]))
    t.value("train_head_dim", str(c["d_model"] // c["heads"]))

    def power(n):          # 2^k when n is a power of two, else grouped digits
        return f"$2^{{{n.bit_length() - 1}}}$" if n & (n - 1) == 0 else grouped(n)
    t.value("train_P_elems", power(B * H * N * N))
    t.value("train_L_elems", power(B * H * N))

    # the first training run, judged by the first rule (data/gpu/train_loss_first.csv)
    first = path("data", "gpu", "train_loss_first.csv")
    for k in ("train_first_commit", "train_first_dev", "train_first_spread", "train_first_ratio",
              "train_first_rerun", "train_rerun"):
        t.value(k, "n/a")
    cur = path("data", "gpu", "train_loss.csv")
    if os.path.exists(cur):
        summ = train_compare.summarize(train_compare.read_csv(cur)[0])
        s = summ["final"]
        if "sdpa_flash_rerun" in s and "sdpa_flash" in s:
            t.value("train_rerun", f"{abs(s['sdpa_flash_rerun'] - s['sdpa_flash']):.4f}")
        if summ["verdict"] in ("PASS", "FAIL"):
            t.row(f"Training with our op ends where PyTorch's kernels do ({c['steps']} steps, bf16)",
                  "not in the chapter",
                  f"largest drift of our runs from the fp32-attention run {summ['drift'][summ['worst']]:.4f} "
                  f"= {summ['ratio']:.2f} x the largest of PyTorch's bf16 runs: {summ['verdict']} (rule: <= 2 x); "
                  "one draw, not a distribution", "data/gpu/train_loss.csv; scripts/train_compare.py")
    else:
        t.row("Training with our op ends where PyTorch's kernels do", "not in the chapter",
              "not measured in this build: no data/gpu/train_loss.csv", "data/gpu/train_loss.csv")
    if os.path.exists(first):
        losses, pv = train_compare.read_csv(first)
        s = train_compare.summarize(losses)
        dev = abs(s["final"]["ours"] - s["final"][train_compare.REF])
        t.value("train_first_commit", pv.get("commit", "?"))
        t.value("train_first_dev", f"{dev:.4f}")
        t.value("train_first_spread", f"{s['spread']:.4f}")
        t.value("train_first_ratio", f"{dev / s['spread']:.1f}")
        f = s["final"]
        t.value("train_first_rerun", f"{abs(f['sdpa_flash_rerun'] - f['sdpa_flash']):.5f}")


@claim
def v3_steps(t):
    """The setting of the version-3 step figure: the N figures/v3_steps.gp
    draws, and the tokens and hidden size of data/gpu/v3_steps.csv's rows there."""
    for k in ("v3_fig_N", "v3_fig_tokens", "v3_fig_hidden"):
        t.value(k, "n/a")
    with open(path("kernels", "stage4_v3_hopper.h")) as f:
        ds = re.search(r"#define FA_V3_DEFAULT_STEP (\d+)", f.read())
    t.value("v3_default_step", ds.group(1) if ds else "n/a")
    with open(path("figures", "v3_steps.gp")) as f:
        mo = re.search(r"NN = (\d+)", f.read())
    rows = [r for r in (read_csv("data/gpu/v3_steps.csv") or []) if mo and r.get("N") == mo.group(1)]
    if not rows:
        return
    t.value("v3_fig_N", grouped(rows[0]["N"]))
    t.value("v3_fig_tokens", ", ".join(grouped(x) for x in sorted({int(r["B"]) * int(r["N"]) for r in rows})))
    t.value("v3_fig_hidden", ", ".join(str(x) for x in sorted({int(r["H"]) * int(r["d"]) for r in rows})))


@claim
def v3_measured(t):
    """What the device run of data/gpu/v3_steps.csv and v3_ncu.txt measured
    (scripts/paper_v3.py): the default step against SDPA cuDNN and flash,
    each step's gain, the counters that say what limits it."""
    import paper_v3
    for k, v in paper_v3.values().items():
        t.value(k, v)


@claim
def bwd_measured(t):
    """What the final device run measured of the GPU backward (chapter 04b,
    scripts/paper_bwd.py): ratios to SDPA flash and cuDNN, determinism's
    cost, the bytes beside the IO model."""
    import paper_bwd
    v = paper_bwd.values()
    for k, x in v.items():
        t.value(k, x)
    src = "data/gpu/bench_bwd.csv; data/gpu/io_bwd.csv; data/gpu/bwd_opcodes_v3.txt"
    if v["bwd_status"] != "present":
        t.row("The tiled backward on a GPU (stage 5)", "not in the chapter",
              "not measured in this build: no data/gpu/bench_bwd.csv", src)
        return
    t.row(f"The tiled backward on a GPU (stage 5; H200, bf16, $N \\ge$ {v['bwd_N_lo']}, {v['bwd_nshapes']} shapes)",
          "not in the chapter (its backward is NumPy on the CPU)",
          f"version 3: {v['bwd_v3_flash']} x SDPA flash (mean {v['bwd_v3_flash_gm']}), {v['bwd_v3_cudnn']} x cuDNN; "
          f"version 2: {v['bwd_v2_flash']} x flash; the goal, version 2 >= 1.0 x flash, not met. "
          f"L2 bytes {v['bwd_io_v3_ratio']} x the IO model (v3), {v['bwd_io_v2_ratio']} x (v2)", src)


@claim
def ring(t):
    """Stage 7 (chapter 04d): exercise 2 by the merge rule, and data/gpu/ring.csv
    when present (scripts/paper_ring.py)."""
    import paper_ring
    for k, v in paper_ring.values().items():
        t.value(k, v)
    t.row(*paper_ring.claim_row())


@claim
def dq_accuracy(t):
    """Chapter 04b's section on dQ when every logit is far from zero
    (scripts/paper_accuracy.py): the CPU model's values, the GPU table
    (build/paper/dq_accuracy.md, only when data/gpu/dq_accuracy.csv exists)
    and cuDNN's NaN where ours is finite."""
    import paper_accuracy
    v = paper_accuracy.values()
    for k, x in v.items():
        t.value(k, x)
    paper_accuracy.write_table(t.out)
    src = "data/gpu/dq_accuracy.csv"
    if v["acc_gpu_status"] != "present":
        t.row("The backward on logits near -120: cuDNN's dQ against ours", "not in the chapter",
              "not measured in this build: no data/gpu/dq_accuracy.csv", src)
        return
    t.row("The backward on logits near -120 (q = (1, 0.1 z), k = (-120 sqrt(d), 0.1 z), d = 64; "
          f"{v['acc_gpu_gpu']}): cuDNN's dQ against ours",
          "not in the chapter",
          f"cuDNN's dQ is NaN on {v['acc_gpu_cudnn_nan']} (dtype, seqlen, mask) points where ours is finite; "
          f"every flash kernel's dQ error is at least {v['acc_gpu_flash_min']} x max|dQ| (SDPA flash), ours "
          f"centered at most {v['acc_gpu_ours_max']} ({v['acc_gpu_over_math']} x math's at most)", src)


# ---------------------------------------------------------------------------
def main(argv):
    out = path("build", "paper")
    if "--out" in argv:
        out = argv[argv.index("--out") + 1]
    os.makedirs(out, exist_ok=True)
    t = Table(out)
    for fn in CLAIMS:
        fn(t)
    for key, q in QUOTES.items():
        t.value(key, q.markdown())

    def cell(s):
        # a zero-width space after each '/' of the prose lets it wrap in the
        # PDF (paper/metadata.yaml maps U+200B to \allowbreak); never inside
        # code (it would be copied with a path: paper/include-code.lua adds
        # the break points there for LaTeX only) or math
        # A '|' ends a cell unless escaped, and inside math an escaped one
        # would be TeX's '\|' (a double bar): math gets \vert instead.
        parts = re.split(r"(`[^`]*`|\$[^$]*\$)", str(s).replace("\n", " "))
        return "".join(p.replace("|", "\\vert{}") if p[:1] == "$" else
                       p.replace("|", "\\|") if p[:1] == "`" else
                       p.replace("/", "/\u200b").replace("|", "\\|") for p in parts)

    with open(os.path.join(out, "claims.md"), "w") as f:
        f.write("| claim | the source says | measured here | data | erratum |\n")
        # dashes set the relative column widths of the PDF table
        f.write("|:" + "-" * 16 + "|:" + "-" * 21 + "|:" + "-" * 24 + "|:" + "-" * 15 + "|:"
                + "-" * 24 + "|\n")
        for r in t.rows:
            f.write("| " + " | ".join(cell(c) for c in r) + " |\n")
    with open(os.path.join(out, "values.tsv"), "w") as f:
        for k in sorted(t.values):
            f.write(f"{k}\t{t.values[k]}\n")
    print(f"claims.py: {len(t.rows)} claims, {len(t.values)} values -> {out}/claims.md, "
          "values.tsv, block_rules.md")


if __name__ == "__main__":
    main(sys.argv)
