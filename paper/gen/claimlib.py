"""paper/gen/claimlib.py -- what every claim of the paper's claims table uses.

The quotations (QUOTES: the textbook and the papers, word for word, each
with where it stands), the published numbers, reading data/ (read_csv,
select, one), formatting numbers for the text, and the table the claims
write into (Table, with the @claim decorator that registers a claim in the
order its module defines it). paper/gen/claims_cpu.py and claims_gpu.py
hold the claims; paper/gen/claims.py runs them. Standard library only.
"""
import csv
import math
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    "chapter_gradcheck": (1e-7, "q_gradcheck"),   # the chapter's "~1e-7", absolute, three entries
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
    """Rows of a CSV with '#' provenance lines on top, as dicts; None if absent
    (rel under the repository root, or an absolute path): paper_gpu's reader."""
    return paper_gpu.read(rel)


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
    return statistics.linear_regression([math.log(x) for x in xs], [math.log(y) for y in ys]).slope


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
# What a claim sets a value to before it has read its data; a later value
# replaces these without complaint.
PLACEHOLDERS = ("not measured", "(not in this sweep)", "not computed", "n/a", "?")


class Table:
    def __init__(self, out):
        self.out = out
        self.rows = []
        self.values = {}

    def value(self, key, text):
        """Set a value of the text. A key holds one value: set again with a
        different one (two claims writing the same key about different runs)
        is an error, except over a placeholder (PLACEHOLDERS) a claim sets
        before it reads its data."""
        old = self.values.get(key)
        if old is not None and old not in PLACEHOLDERS and old != str(text):
            raise SystemExit(f"claims.py: value '{key}' set twice, to '{old}' and then '{text}': "
                             "two claims describe different data under one key")
        self.values[key] = str(text)
        return str(text)

    def row(self, claim, says, measured, data, erratum="", answer_of=None, learner=None):
        """One row of the table. answer_of = n when the measured cell (and
        the erratum) state exercise n's answer: the learner's edition's table
        (claims.md) says where to find it instead, or, when only part of the
        measured cell is the answer, shows learner in its place (the erratum
        kept); claims-solutions.md, the instructor's, has the row as given."""
        self.rows.append((claim, says, measured, codify(data), erratum, (answer_of, learner)))


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


def claim_on(src, claim_text, quote, keys=()):
    """A claim on the rows of one CSV: fn(t, rows, src, claim_text) runs when
    src has rows; without them the table gets the row saying it is absent.
    The values named in keys read "not measured" until fn sets them."""
    def wrap(fn):
        def run(t):
            for k in keys:
                t.value(k, "not measured")
            rows = rows_or_absent(t, src, claim_text, quote)
            if rows is not None:
                fn(t, rows, src, claim_text)
        run.__name__ = fn.__name__
        return claim(run)
    return wrap
