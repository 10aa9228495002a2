#!/usr/bin/env python3
"""tests/paper_numbers.py -- no number in chapters/ that is not generated or cited.

    python3 tests/paper_numbers.py [--list]

Every measured number in the text is a [key]{.m} value (paper/gen/claims.py
reads it from data/), and every number others published is inside a
[key]{.q} quotation, which carries its source. What is left in the prose
(outside code, those spans and figure paths) are numbers that define the
setting: a shape the text chooses, a constant of IEEE 754. Each of those
must be listed in paper/numbers.txt with the reason it may stand there.

A "number" here is what a measurement or a citation would look like: a
decimal (9.09), a power (10^{-16}, 2^{18}), a number in e-notation (1e-7),
or an integer of three or more digits (1024, 16,384). Small integers (2, 4,
64) are left alone: they are coefficients and indices, not data.

Prints one PASS/FAIL line (tests/run.sh protocol); --list prints every
number found with its file and line, for writing paper/numbers.txt.
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUMBER = re.compile(r"(?<![\w.^{-])(?:\d+\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|"
                    r"\d+\^\{?-?\d+\}?|\d{1,3}(?:,\d{3})+|\d{3,})(?![\w])")


def prose_lines(path):
    """(line number, text) of the prose: fenced code, inline code, [..]{.m}
    and [..]{.q} spans, Div fences and image targets taken out."""
    fenced = False
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced or line.startswith(":::"):
                continue
            line = re.sub(r"`[^`]*`", "", line)
            line = re.sub(r"\[[A-Za-z0-9_]+\]\{\.[mq]\}", "", line)
            line = re.sub(r"\]\(build/figures/[^)]*\)(\{[^}]*\})?", "]", line)
            yield i, line


def main(argv):
    allow = {}
    with open(os.path.join(ROOT, "paper", "numbers.txt")) as f:
        for ln in f:
            if ln.strip() and not ln.startswith("#"):
                tok, _, why = ln.rstrip("\n").partition("\t")
                allow[tok.strip()] = why.strip()
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "chapters", "*.md"))):
        for i, line in prose_lines(path):
            for mo in NUMBER.finditer(line):
                found.append((os.path.relpath(path, ROOT), i, mo.group(0)))
    if "--list" in argv:
        for p, i, tok in found:
            print(f"{p}:{i}\t{tok}\t{allow.get(tok, '(not listed)')}")
        return 0
    bad = [(p, i, tok) for p, i, tok in found if tok not in allow]
    unused = sorted(set(allow) - {tok for _, _, tok in found})
    if bad:
        where = "; ".join(f"{tok} at {p}:{i}" for p, i, tok in bad[:6])
        print(f"FAIL paper: numbers in chapters/ neither generated nor cited: {where}"
              f"{' ...' if len(bad) > 6 else ''} (make it a [key]{{.m}} value or a [key]{{.q}} "
              "quotation, or list it in paper/numbers.txt with why it may stand)")
    elif unused:
        print(f"FAIL paper: paper/numbers.txt lists numbers no chapter uses any more: {', '.join(unused)}")
    else:
        print(f"PASS paper: every number in chapters/ is generated from data/, quoted with its "
              f"source, or a listed setting ({len(found)} setting numbers, {len(allow)} listed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
