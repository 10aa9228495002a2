"""tests/rooms.py -- no room too big for a newcomer to read.

A file holds one concern and a function one step, so that a reader can hold
either in mind. Two limits, on the host code and the tools (the kernels that
the chapters walk through step by step keep their own shape):
    files      no source file over MAX_LINES lines
    functions  no C function (src/, tests/, core/, exercises/) and no Python
               function (python/, scripts/, examples/, exercises/, figures/) over
               MAX_FUNCTION lines, signature to closing brace or last line;
               the paper's region markers (//> NAME, //< NAME lines, see
               paper/include-code.lua) are not counted: they cut listings
               out of a function and are nothing a reader of it must hold
Covered: src/, core/, tests/ (its C files), python/, scripts/, examples/,
exercises/, figures/. Files are read from git's list (tracked and new, not ignored).

OVER lists the rooms known to be too big, each to be split: one listed and
no longer over its limit fails too, so the list only shrinks. The test first
checks on made-up files that it catches a long file and a long function and
passes short ones.

    python3 tests/rooms.py       PASS/FAIL lines (tests/run.sh protocol)
"""
import ast
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import repo_files  # noqa: E402  (tests/repo_files.py)

MAX_LINES = 700
MAX_FUNCTION = 120
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".py", ".sh", ".gp", ".cpp")
COVERED = ("src/", "core/", "python/", "scripts/", "examples/", "exercises/", "figures/")

# Rooms over a limit, to be split (file, or file:function).
OVER = set()


def covered(rel):
    if rel.startswith("tests/"):
        return rel.endswith((".c", ".h"))
    return rel.startswith(COVERED) and rel.endswith(SOURCE_EXT)


MARKER = re.compile(r"^\s*//[<>]\s+[\w.-]+\s*$")


def c_functions(text):
    """(name, first line, lines) of each function of a C file: a '{' in
    column 0 opens a body, the unindented line above it starts the signature
    and the next '}' in column 0 closes it. Region marker lines are not
    counted."""
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        if not line.startswith("{"):
            continue
        start = i - 1
        while start > 0 and (lines[start][:1] in (" ", "\t") or not lines[start].strip()):
            start -= 1
        end = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("}")), len(lines) - 1)
        m = re.search(r"(\w+)\s*\(", lines[start])
        if m:
            markers = sum(1 for k in range(start, end + 1) if MARKER.match(lines[k]))
            out.append((m.group(1), start + 1, end - start + 1 - markers))
    return out


def py_functions(text):
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [(n.name, n.lineno, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def too_big(sources):
    """{path: text} -> ['path: N lines', 'path:function: N lines']."""
    big = []
    for rel, text in sorted(sources.items()):
        n = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if n > MAX_LINES:
            big.append((rel, f"{rel}: {n} lines"))
        funcs = (py_functions(text) if rel.endswith(".py")
                 else c_functions(text) if rel.endswith((".c", ".h", ".cpp")) else [])
        for name, first, length in funcs:
            if length > MAX_FUNCTION:
                big.append((f"{rel}:{name}", f"{rel}:{first} {name}: {length} lines"))
    return big


def self_check():
    body = "    x++;\n" * (MAX_FUNCTION + 5)
    fake = {
        "src/cpu/long.c": "int x;\n" * (MAX_LINES + 1),
        "src/cpu/longfn.c": "static int f(int a,\n          int b)\n{\n" + body + "}\n",
        "scripts/longfn.py": "def f():\n" + "    x = 1\n" * (MAX_FUNCTION + 1),
        "src/cpu/short.c": "int g(void)\n{\n    return 0;\n}\n",
        # at the limit once its region markers are left out
        "src/cpu/marked.c": "int h(void)\n{\n    //> r\n    //> r-inner\n" + "    x++;\n" * (MAX_FUNCTION - 3)
                            + "    //< r-inner\n    //< r\n}\n",
        "scripts/short.py": "def g():\n    return 0\n",
    }
    found = {k for k, _ in too_big(fake)}
    want = {"src/cpu/long.c", "src/cpu/longfn.c:f", "scripts/longfn.py:f"}
    return found == want, found


def main():
    ok, found = self_check()
    print(("PASS" if ok else "FAIL") + f" rooms self-check: a long file and long C and Python functions caught, "
          f"short ones passed (region markers not counted){'' if ok else ': ' + str(sorted(found))}")
    files = repo_files.listed()
    if files is None:
        print("SKIP rooms: not a git checkout (the file list comes from git)")
        return 0 if ok else 1
    sources = repo_files.texts(rel for rel in files if covered(rel))
    big = too_big(sources)
    new = [why for key, why in big if key not in OVER]
    gone = sorted(OVER - {key for key, _ in big})
    repo_files.report(new, f"rooms: over {MAX_LINES} lines a file or {MAX_FUNCTION} a function (split by concern):",
                      f"rooms: {len(sources)} files read, none over {MAX_LINES} lines and no function over "
                      f"{MAX_FUNCTION} but the {len(OVER)} listed in OVER")
    if gone:
        print("FAIL rooms' list: within the limits now, remove from OVER: " + ", ".join(gone))
    else:
        print(f"PASS rooms' list: each of the {len(OVER)} rooms in OVER is still over its limit")
    return 0 if ok and not new and not gone else 1


if __name__ == "__main__":
    sys.exit(main())
