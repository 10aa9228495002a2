#!/usr/bin/env python3
"""paper/gen/data_sources.py -- the data-provenance table of the book's appendix.

    python3 paper/gen/data_sources.py --out build/paper

Writes OUT/provenance.md: one row per CSV file under data/ that the programs
and scripts wrote, per CSV file of a study (data/gpu/studies/, any depth) that
the chapters, the generators or the figure scripts read or name, and per
text file of a study (Nsight Compute's pages, logs) that they name by path,
with the commit, date and command that wrote it, read from
the file itself and nowhere else. A CPU file carries them in its '#' lines
(`# commit: ...`, `# date: ...`, `# command: ...`, as src/harness/outputs.c writes
them); a GPU table carries them in the columns `commit`, `date` and `command`
of every row, and may hold rows of several runs: each distinct commit is
listed with the span of its dates and its rows' commands. A file with neither
is listed with "not recorded", so that the table shows what is missing
rather than hiding it. The main text names commits only in captions
(tests/paper_history.py); this table is where a reader finds them all.

Errors: a data/ directory that cannot be read stops the script (exit 2).
"""
import argparse
import csv
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cell(text, limit=90):
    """Markdown table cell: code span, pipes escaped, long commands cut with an ellipsis."""
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[:limit - 1] + "…"
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`" if text else ""


def header_facts(lines):
    facts = {}
    for line in lines:
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].partition(":")
        if sep:
            facts.setdefault(key.strip().lower(), value.strip())
    return facts


def rows_of(path):
    """[(commit, date, command)] for one CSV file (one entry per distinct commit)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    facts = header_facts(lines)
    if "commit" in facts:
        return [(facts["commit"], facts.get("date", ""), facts.get("command", ""))]
    # a study's file may say it in a sentence of its '#' lines instead:
    # "# source: ... at commit bf2e6a9 ..." (the first such commit stands)
    for line in lines:
        if not line.startswith("#"):
            break
        m = re.search(r"\bcommit ([0-9a-f]{7,40})\b", line)
        if m:
            return [(m.group(1), "", "")]
    body = [line for line in lines if not line.startswith("#")]
    reader = csv.DictReader(body)
    if not reader.fieldnames or "commit" not in reader.fieldnames:
        return [("not recorded", "", "")]
    runs = {}
    for r in reader:
        c = (r.get("commit") or "").strip() or "not recorded"
        run = runs.setdefault(c, {"dates": [], "commands": []})
        if r.get("date"):
            run["dates"].append(r["date"].strip())
        cmd = (r.get("command") or "").strip()
        if cmd and cmd not in run["commands"]:
            run["commands"].append(cmd)
    out = []
    for c, run in runs.items():
        dates = sorted(run["dates"])
        span = dates[0] if dates and dates[0] == dates[-1] else (f"{dates[0]} to {dates[-1]}" if dates else "")
        cmd = run["commands"][0] if run["commands"] else ""
        if len(run["commands"]) > 1:
            cmd += f" (and {len(run['commands']) - 1} more)"
        out.append((c, span, cmd))
    return out


SOURCES = ("chapters/*.md", "paper/gen/*.py", "figures/*.gp")
# a study's files other than CSV that numbers come from: tool output
# (Nsight Compute's text pages, a run's log), listed where named by path
TEXT_KINDS = (".txt", ".log")


def text_rows(path):
    """[(commit, date, command)] for a study's text file (an Nsight Compute
    page, a log): the first commit its opening lines state, as "commit: X"
    or "commit X" (a '#' line written with the file) or in a Python dict the
    benchmark printed ('commit': '14c4a21', ...), with the date and command
    beside it where stated;
    "not recorded" where none is."""
    with open(path, encoding="utf-8", errors="replace") as f:
        head = [next(f, "") for _ in range(40)]
    for i, line in enumerate(head):
        m = re.search(r"'commit': '([0-9a-f]{7,40})'", line)
        if m:
            get = lambda k, line=line: (re.search(r"'" + k + r"': '([^']*)'", line) or [None, ""])[1]  # noqa: E731
            return [(m.group(1), get("date"), get("command"))]
        m = re.search(r"\bcommit:? ([0-9a-f]{7,40})\b", line)
        if m:
            near = " ".join(head[i:i + 2])
            date = re.search(r"\bdate: ([^;\s]+)", near)
            cmd = re.search(r"\bcommand: ([^\n]*)", near)
            return [(m.group(1), date.group(1) if date else "", cmd.group(1).strip() if cmd else "")]
    return [("not recorded", "", "")]


def sources_text(root=ROOT):
    """The chapters, the generators and the figure scripts as one text,
    paths joined in Python ("studies", "dq_pass", "dq_pass.csv") written as
    one path."""
    text = ""
    for pat in SOURCES:
        for f in sorted(glob.glob(os.path.join(root, pat))):
            with open(f, encoding="utf-8", errors="replace") as fh:
                text += fh.read() + "\n"
    return re.sub(r"""["']\s*,\s*["']""", "/", text)   # os.path.join("a", "b") -> a/b


def cited_studies(text, root=ROOT):
    """The CSV files of data/gpu/studies/ (at any depth: a study may keep a
    tool's pages in a folder of its own, studies/varlen/ncu/) that the book
    reads or names: the chapters, the generators and the figure scripts,
    each path written out ("studies/dq_pass/dq_pass.csv"), joined in Python
    or its folder named whole ("studies/hopper_ncu/"), which cites every
    CSV file in it. text: sources_text()."""
    out = []
    for path in sorted(glob.glob(os.path.join(root, "data", "gpu", "studies", "**", "*.csv"), recursive=True)):
        rel = os.path.relpath(path, os.path.join(root, "data", "gpu"))   # studies/DIR/.../FILE.csv
        folder = os.path.dirname(rel) + "/"
        if rel in text or re.search(re.escape(folder) + r"(?![\w.{*])", text):
            out.append(path)
    return out


def cited_study_texts(text, root=ROOT):
    """The text files of data/gpu/studies/ (TEXT_KINDS, any depth) that the
    book reads or names by their path: Nsight Compute's pages and the logs
    that numbers of the text are counted from. text: sources_text()."""
    out = []
    for path in sorted(glob.glob(os.path.join(root, "data", "gpu", "studies", "**", "*"), recursive=True)):
        rel = os.path.relpath(path, os.path.join(root, "data", "gpu"))
        if path.endswith(TEXT_KINDS) and os.path.isfile(path) and rel in text:
            out.append(path)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for provenance.md")
    args = ap.parse_args()
    data = os.path.join(ROOT, "data")
    if not os.path.isdir(data):
        print(f"data_sources.py: error: no directory {data}", file=sys.stderr)
        return 2
    files = sorted(glob.glob(os.path.join(data, "*", "*.csv")))
    text = sources_text()
    studies, texts = cited_studies(text), cited_study_texts(text)
    lines = ["| file | commit | date | command |",
             "|:--------------------|:-------|:------------|:--------------------------------------|"]
    for path in files + studies + texts:
        rel = os.path.relpath(path, ROOT)
        name = cell(rel) + (" (study)" if path in studies else " (study, text)" if path in texts else "")
        got = text_rows(path) if path in texts else rows_of(path)
        for i, (commit, date, command) in enumerate(got):
            lines.append(f"| {name if i == 0 else ''} | {commit} | {date} | {cell(command)} |")
    lines += ["", f": Where each data file of the book comes from: {len(files)} CSV files under "
              f"`data/`, then the {len(studies)} CSV files of studies (`data/gpu/studies/` at any depth, "
              "marked \"(study)\": measurements made once, for one question, which the text, a figure or a "
              f"generator reads or names), then the {len(texts)} text files of studies that the text or a "
              "generator names by path and counts numbers from (marked \"(study, text)\": Nsight "
              "Compute's pages, logs of a run), each row read from the file's own provenance lines or "
              "columns (`paper/gen/data_sources.py`). A file that states none, as a raw Nsight Compute "
              "page does not, reads \"not recorded\"; its study's folder says how it was taken. A GPU "
              "table that holds rows of several runs has one line per commit; long commands are cut (the "
              "file holds them whole)."]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "provenance.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"data_sources.py: {len(files)} data files, {len(studies)} study files and {len(texts)} study text files -> "
          f"{os.path.join(args.out, 'provenance.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
