#!/usr/bin/env python3
"""tests/paper_tables.py -- no number in the PDF is cut in two by a line break.

    python3 tests/paper_tables.py PAPER.txt      (pdftotext -layout of the PDF)

A table column narrower than its numbers wraps them where LaTeX may break a
line, and inside a number that is the hyphen of an exponent: "4.1e-" on one
line of a table and "04" on the next. In the text
that pdftotext writes such a cell leaves a mantissa with its "e" (and sign)
but no exponent digits, which no whole number has; this test fails on any.

Prints PASS/FAIL lines (tests/run.sh protocol).
"""
import re
import sys

# a mantissa, then e or e- / e+, then no exponent digit (end of the cell or line)
CUT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?[eE][-+\u2212]?)(?=\s|$)")


def cut_numbers(text):
    """[(line number, the line)] of each line that ends a number before its exponent."""
    hits = []
    for no, line in enumerate(text.splitlines(), 1):
        if CUT.search(line):
            hits.append((no, line.strip()))
    return hits


def main(argv):
    if len(argv) < 2:
        print("usage: paper_tables.py PAPER.txt", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        hits = cut_numbers(f.read())
    if hits:
        shown = "; ".join(f"line {no}: {re.sub(r' {2,}', ' | ', ln)[:90]}" for no, ln in hits[:3])
        print(f"FAIL paper: no number cut by a line break: {len(hits)} line(s) end a number "
              f"before its exponent (a table column too narrow for it): {shown}")
    else:
        print("PASS paper: no number cut by a line break (no mantissa left without its exponent "
              "in the PDF text)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
