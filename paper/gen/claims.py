#!/usr/bin/env python3
"""paper/gen/claims.py -- the paper's claims table and every number its text quotes.

    python3 paper/gen/claims.py [--out build/paper]

Reads only what this repository's programs wrote:
  data/cpu/*.csv      stages 2, 3 and 6 and the property tests (make sweep)
  data/gpu/*.csv      the H200 runs (make gpu-data-bench-fwd, make gpu-data-ncu), ring.csv
                      through paper/gen/paper_ring.py, v3_steps.csv and
                      v3_ncu.txt through paper/gen/paper_v3.py
  src/gpu/gpu_host.c, src/programs/stage5_main.c
                      the constants of stage 5's fault inputs (chapters/21-gpu-backward.md's
                      arithmetic on them), and kernels/stage4_fwd_v3_hopper.h's
                      default step: settings the text must follow
  OUT/lse_probe.npy   the L that one run of ./stage3 --lse saves here
  OUT/guard_o.npy     the O of one run of ./stage6 on exercise 4's guard case,
                      whose inputs are written here too
and writes, into OUT only,
  claims.md       the table of the closing chapter: claim | what the source
                  says (quoted, with where) | measured here | data | erratum;
                  the exercises' answers left to claims-solutions.md, the
                  instructor's edition's table
  block_rules.md  the three block-size rules side by side (chapters/12-tiled.md),
                  without exercise 1's answer; block_rules-solutions.md
                  with it, for the instructor's edition
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
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "scripts", "gpu"))   # train_report.py
from claimlib import CLAIMS, QUOTES, Table, path  # noqa: E402
import claims_cpu  # noqa: E402,F401  (registers the CPU claims first)
import claims_gpu  # noqa: E402,F401  (then the GPU's)

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

    # the learner's table, then the instructor's with the exercises' answers
    for name, solved in (("claims.md", False), ("claims-solutions.md", True)):
        with open(os.path.join(out, name), "w") as f:
            f.write("| claim | the source says | measured here | data | erratum |\n")
            # dashes set the relative column widths of the PDF table
            f.write("|:" + "-" * 16 + "|:" + "-" * 21 + "|:" + "-" * 24 + "|:" + "-" * 15 + "|:"
                    + "-" * 24 + "|\n")
            for *r, (answer_of, learner) in t.rows:
                if answer_of and not solved and learner is not None:
                    r[2] = learner
                elif answer_of and not solved:
                    r[2] = (f"exercise {answer_of}'s answer: in the instructor's edition "
                            "(make paper-solutions)")
                    r[4] = ""
                f.write("| " + " | ".join(cell(c) for c in r) + " |\n")
    with open(os.path.join(out, "values.tsv"), "w") as f:
        for k in sorted(t.values):
            f.write(f"{k}\t{t.values[k]}\n")
    print(f"claims.py: {len(t.rows)} claims, {len(t.values)} values -> {out}/claims.md "
          "(and claims-solutions.md, with the exercises' answers), values.tsv, block_rules.md "
          "(and block_rules-solutions.md)")


if __name__ == "__main__":
    main(sys.argv)
