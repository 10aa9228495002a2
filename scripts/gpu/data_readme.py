#!/usr/bin/env python3
"""scripts/gpu/data_readme.py -- data/gpu/README.md, generated from the files.

    python3 scripts/gpu/data_readme.py [--out data/gpu/README.md]   (make gpu-data-readme)

Reads the list of canonical files and the part (make target) that writes
each from kernels/gpu_data.mk (GPU_DATA_PARTS, GPU_DATA_FILES_<part>,
GPU_DATA_TYPED: one list, there), then each file itself: its commit and date
(the CSV columns `commit` and `date`, or the `# provenance:` line that opens a
log, or a `# commit:` line), its rows and its columns; the studies of
data/gpu/studies/ by the question their README.md opens with; and the result
tables of scripts/gpu/bench_gpu.py --tables. Nothing in the page is typed by
hand. No GPU needed. Exit 0, or 2 with one line when kernels/gpu_data.mk
lacks the lists.

canonical_files() and commits_of() are the reading tests/gpu_data.py shares.
"""
import argparse
import csv
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MK = os.path.join(ROOT, "kernels", "gpu_data.mk")
DATA = os.path.join(ROOT, "data", "gpu")


def mk_lists(mk_text):
    """{name: [words]} of the `NAME := words` lines of gpu_data.mk (with
    continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", mk_text)
    return {m.group(1): m.group(2).split() for m in re.finditer(r"^(GPU_DATA_\S+)\s*:=\s*(.*)$", text, re.M)}


def target_help(mk_text):
    """{target: its `## ` description} of gpu_data.mk."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^([a-z0-9-]+):[^\n#]*## (.*)$", mk_text, re.M)}


def canonical_files(mk_path=MK):
    """[(part, file)] in the order of gpu_data.mk: every canonical file of
    data/gpu/ (a name ending in / is a folder), the ring's included (part
    'ring'); the typed files are not among them. Raises ValueError when the
    lists are missing."""
    lists = mk_lists(open(mk_path).read())
    parts = lists.get("GPU_DATA_PARTS")
    if not parts:
        raise ValueError(f"{os.path.relpath(mk_path, ROOT)}: no GPU_DATA_PARTS list")
    out = []
    for part in parts + ["ring"]:
        if f"GPU_DATA_FILES_{part}" not in lists:
            raise ValueError(f"{os.path.relpath(mk_path, ROOT)}: no GPU_DATA_FILES_{part} list")
        out += [(part, f) for f in lists[f"GPU_DATA_FILES_{part}"]]
    return out


def typed_files(mk_path=MK):
    return mk_lists(open(mk_path).read()).get("GPU_DATA_TYPED", [])


PROV_RE = re.compile(r"^# provenance: (.*)$")
COMMIT_LINE_RE = re.compile(r"^#? ?(?:source )?commit(?: \(FA_COMMIT\))?[:=] *([0-9a-f]{7,40}|unknown)\b", re.M)


def _header_and_rows(path):
    """(columns, rows) of a CSV whose leading `#` lines are comments; None
    when the first non-comment line is not a CSV header with a comma."""
    with open(path, newline="", errors="replace") as f:
        lines = [ln for ln in f if not ln.startswith(("#", "=="))]   # ncu's own notes start with ==
    if not lines or "," not in lines[0]:
        return None
    rows = list(csv.reader(lines))
    return rows[0], rows[1:]


def commits_of(path):
    """(set of commits, set of dates) a file or folder says it was measured
    at: a CSV's `commit` and `date` columns over every row, else the
    `# provenance:` line (or a `commit: X` line) of a text file; a folder's
    env.txt. Empty sets when the file names none."""
    if os.path.isdir(path):
        env = os.path.join(path, "env.txt")
        return commits_of(env) if os.path.exists(env) else (set(), set())
    commits, dates = set(), set()
    if path.endswith(".csv"):
        hr = _header_and_rows(path)
        if hr and "commit" in hr[0]:
            ci = hr[0].index("commit")
            di = hr[0].index("date") if "date" in hr[0] else None
            for r in hr[1]:
                if len(r) > ci:
                    commits.add(r[ci])
                if di is not None and len(r) > di:
                    dates.add(r[di])
            return commits, dates
    with open(path, errors="replace") as f:
        head = f.read(4000)
    for ln in head.splitlines():
        m = PROV_RE.match(ln)
        if m:
            fields = dict(p.partition("=")[::2] for p in m.group(1).split("; "))
            return {fields.get("commit", "")} - {""}, {fields.get("date", "")} - {""}
    found = COMMIT_LINE_RE.findall(head)
    known = [c for c in found if c != "unknown"]
    return set(known[-1:]) if known else set(found[:1]), set()


def describe(path):
    """(rows, columns) cells of the file table."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith("."))
        return f"{len(names)} files", ", ".join(f"`{n}`" for n in names[:6]) + (" ..." if len(names) > 6 else "")
    if path.endswith(".csv"):
        hr = _header_and_rows(path)
        if hr:
            return str(len(hr[1])), ", ".join(hr[0]) if len(hr[0]) <= 40 else f"{len(hr[0])} columns (ncu's)"
    if path.endswith(".json"):
        return "-", "JSON: marker tag -> shape"
    with open(path, errors="replace") as f:
        n = sum(1 for _ in f)
    return f"{n} lines", "text"


def study_question(readme):
    """The first paragraph of a study's `## Question` section, on one line."""
    try:
        text = open(readme).read()
    except OSError:
        return "(no README.md)"
    m = re.search(r"^## Question\s*\n+((?:.+\n?)+)", text, re.M)
    return " ".join(m.group(1).split()) if m else "(no Question section)"


def page(mk_path=MK, data=DATA):
    mk_text = open(mk_path).read()
    helps = target_help(mk_text)
    out = ["# data/gpu: the GPU stages measured on an H200", "",
           "<!-- generated by `make gpu-data-readme` (scripts/gpu/data_readme.py) from the files and",
           "     kernels/gpu_data.mk; do not edit by hand -->", "",
           "Every file below is written by the make target beside it (kernels/gpu_data.mk), on one H200,",
           "at one commit: `make gpu-data` runs every part, each under ten minutes. Every CSV carries",
           "the provenance columns gpu, driver, cuda, torch, cudnn, commit, date, command on every row;",
           "every log and text file opens with a `# provenance:` line of the same fields. How the files",
           "are measured and how to read them: `methods.md` (typed). One-off investigations, each with",
           "the script that made it and a README (question, answer, commit), are in `studies/`.", "",
           "## Targets", "", "| target | writes |", "|---|---|"]
    for t in ["gpu-data"] + [f"gpu-data-{p}" for p in mk_lists(mk_text)["GPU_DATA_PARTS"]] + ["ring-gpu"]:
        out.append(f"| `make {t}` | {helps.get(t, 'mk/stage7.mk: the ring on two GPUs, outside gpu-data')} |")
    out += ["", "## Files", "",
            "| file | target | commit | date | rows | columns |", "|---|---|---|---|---|---|"]
    for part, f in canonical_files(mk_path):
        p = os.path.join(data, f)
        target = "ring-gpu" if part == "ring" else f"gpu-data-{part}"
        if not os.path.exists(p):
            out.append(f"| `{f}` | {target} | (not written yet) | | | |")
            continue
        commits, dates = commits_of(p)
        rows, cols = describe(p)
        date = (min(dates)[:10] + ("" if len(dates) == 1 else f" .. {max(dates)[:10]}")) if dates else ""
        out.append(f"| `{f}` | {target} | {', '.join(sorted(commits)) or '(none)'} | {date} | {rows} | {cols} |")
    out += ["", "Typed by hand, with no target: " +
            ", ".join(f"`{f}`" for f in typed_files(mk_path) if f != "README.md") +
            " (the predictions were written before the runs that tested them).", "",
            "## Studies", "", "| study | question |", "|---|---|"]
    sdir = os.path.join(data, "studies")
    for name in sorted(os.listdir(sdir)) if os.path.isdir(sdir) else []:
        if os.path.isdir(os.path.join(sdir, name)):
            out.append(f"| `studies/{name}/` | {study_question(os.path.join(sdir, name, 'README.md'))} |")
    tables = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu", "bench_gpu.py"), "--tables"],
                            capture_output=True, text=True)
    if tables.returncode == 0 and tables.stdout.strip():
        out += ["", "## Results", "", "Generated by `python3 scripts/gpu/bench_gpu.py --tables` from the files "
                "above.", "", tables.stdout.rstrip()]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description="write data/gpu/README.md from the files")
    ap.add_argument("--out", default=os.path.join(DATA, "README.md"), help="where to write (default data/gpu/README.md)")
    a = ap.parse_args()
    try:
        text = page()
    except (OSError, ValueError, KeyError) as e:
        print(f"data_readme.py: {e}", file=sys.stderr)
        return 2
    with open(a.out + ".tmp", "w") as f:
        f.write(text)
    os.replace(a.out + ".tmp", a.out)
    print(f"data_readme.py: wrote {os.path.relpath(a.out, ROOT) if a.out.startswith(ROOT) else a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
