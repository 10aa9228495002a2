"""tests/one_mask.py -- no file but core/mask.h spells a mask.

Every stage, the IO and tile formulas, the kernels, the NumPy reference and
the exercise checkers ask core/mask.h (or build/libfa_mask.so) which keys a
query sees. This test reads the code of core/, src/, kernels/, tests/, exercises/,
scripts/, python/ and examples/ with comments and string literals removed, and fails on any
comparison between a key index and a query index (j <= i, key > row,
cols <= rows, j0 >= i0 + ...), on np.tril / np.triu, and on a window
written as i - W: the ways a mask gets written out by hand. Loop headers
(for (...; j < i; ...)) are not masks and are skipped.

    python3 tests/one_mask.py        one PASS or FAIL line (tests/run.sh protocol)
"""
import io
import os
import re
import sys
import tokenize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ("core", "src", "kernels", "tests", "exercises", "scripts", "python", "examples")
ALLOWED = {os.path.join("core", "mask.h")}
KEY = r"(?:j|j0|j1|key|keys|col|cols|jj)"
QUERY = r"(?:i|i0|i1|row|rows|r|ii)"
CMP = r"(?:<=|>=|<|>)"
PATTERNS = [
    re.compile(rf"\b{KEY}\b\s*(?:[-+]\s*\w+\s*)*{CMP}\s*\(?\s*\b{QUERY}\b"),
    re.compile(rf"\b{QUERY}\b\s*(?:[-+]\s*\w+\s*)*{CMP}\s*\(?\s*\b{KEY}\b"),
    re.compile(r"\bnp\.(?:tril|triu)\b"),
    re.compile(r"\b(?:i|row)\s*-\s*W\b"),
]
LOOP_HEADER = re.compile(r"\bfor\s*\([^;]*;[^;]*;")


def strip_c(text):
    """C or CUDA source without comments and string or character literals
    (newlines kept, so that line numbers stay right)."""
    out, i, n = [], 0, len(text)
    while i < n:
        two = text[i:i + 2]
        if two == "/*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif two == "//":
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q:
                j += 2 if text[j] == "\\" else 1
            out.append(q + q)
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def strip_py(text):
    """Python source without comments and strings (docstrings included)."""
    lines = text.split("\n")
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.COMMENT, tokenize.STRING):
                (r0, c0), (r1, c1) = tok.start, tok.end
                for r in range(r0, r1 + 1):
                    line = lines[r - 1]
                    a = c0 if r == r0 else 0
                    b = c1 if r == r1 else len(line)
                    lines[r - 1] = line[:a] + " " * (b - a) + line[b:]
    except (tokenize.TokenError, IndentationError):
        pass
    return "\n".join(lines)


def main():
    hits = []
    for top in DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT)
                if rel in ALLOWED or rel == os.path.join("tests", "one_mask.py"):
                    continue
                if name.endswith((".c", ".h", ".cu", ".cuh")):
                    code = strip_c(open(path, encoding="utf-8", errors="replace").read())
                elif name.endswith(".py"):
                    code = strip_py(open(path, encoding="utf-8", errors="replace").read())
                elif name.endswith(".sed"):
                    code = open(path, encoding="utf-8", errors="replace").read()
                    code = "\n".join("" if l.lstrip().startswith("#") else l for l in code.split("\n"))
                else:
                    continue
                for no, line in enumerate(code.split("\n"), 1):
                    probe = LOOP_HEADER.sub("", line)
                    if any(p.search(probe) for p in PATTERNS):
                        hits.append(f"{rel}:{no}: {line.strip()}")
    if hits:
        print("FAIL one mask definition: a mask written outside core/mask.h (ask mask_visible or "
              "the ranges of core/mask.h instead):")
        for h in hits:
            print("    " + h)
        return 1
    print("PASS one mask definition: no comparison of key and query indices outside core/mask.h "
          f"(code of {', '.join(DIRS)}/ searched, comments and strings left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
