"""scripts/gpu/provenance.py -- where a GPU measurement was made, for every CSV row.

One place for what every writer of data/gpu/ records, in the columns
COLUMNS: the GPU's name and driver (nvidia-smi), the CUDA, torch and cuDNN
versions (torch's, "none" without torch), the commit (FA_COMMIT in the
environment, set where the copy of the tree has no .git, as on the lent GPU
machine; else git; else "unknown"), the UTC date and the command.

    python3 scripts/gpu/provenance.py --line "COMMAND"

prints the same record as one `# provenance: key=value; ...` line, the first
line of every log and text file that kernels/gpu_data.mk writes
(tests/gpu_data.py reads the commit from it).
"""
import argparse
import datetime
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the provenance columns that open every row of a measured CSV, in this order
COLUMNS = ["gpu", "driver", "cuda", "torch", "cudnn", "commit", "date", "command"]


def commit():
    c = os.environ.get("FA_COMMIT", "")
    if not c:
        try:
            c = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                               capture_output=True, text=True).stdout.strip()
        except OSError:
            c = ""
    return c or "unknown"


def gpu_and_driver():
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True).stdout.strip().splitlines()[0]
        gpu, driver = [x.strip() for x in q.split(",")]
        return gpu, driver
    except (OSError, IndexError, ValueError):
        return "unknown", "unknown"


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def summary_rows(prog, csv_path, md_path, what="table"):
    """The rows of a measured CSV (its `#` provenance lines skipped) for a
    summary written into md_path; None when there is no CSV, after removing
    a stale md_path and saying so in one line (the paper then says the
    measurement is pending)."""
    if not os.path.exists(csv_path):
        if os.path.exists(md_path):
            os.remove(md_path)
        print(f"{prog}: no {csv_path}; no {what}")
        return None
    import csv
    with open(csv_path, newline="") as f:
        return list(csv.DictReader(ln for ln in f if not ln.startswith("#")))


def write_summary(prog, md_path, csv_path, text):
    """A summary's Markdown `text` written to md_path (its folder made), and
    one line saying so; returns 0 (the exit status of a --summary run)."""
    os.makedirs(os.path.dirname(os.path.abspath(md_path)), exist_ok=True)
    with open(md_path, "w") as f:
        f.write(text)
    print(f"{prog}: wrote {md_path} from {csv_path}")
    return 0


def torch_versions():
    """(cuda, torch, cudnn) as torch reports them; "none" for each without torch."""
    try:
        import torch
    except ImportError:
        return "none", "none", "none"
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return str(torch.version.cuda), torch.__version__, str(cudnn) if cudnn else "none"


def command_of(argv):
    """The command line that ran, the script named from the repository root."""
    script = os.path.relpath(os.path.abspath(argv[0]), ROOT) if argv else "?"
    return " ".join(["python3", script] + list(argv[1:]))


def record(argv=None, command=None):
    """Every provenance column of COLUMNS for one run, as a dict of strings:
    argv names the script (command_of), or command gives the line as is."""
    gpu, driver = gpu_and_driver()
    cuda, torch_v, cudnn = torch_versions()
    return {"gpu": gpu, "driver": driver, "cuda": cuda, "torch": torch_v, "cudnn": cudnn,
            "commit": commit(), "date": utc_now(),
            "command": command if command is not None else command_of(argv or sys.argv)}


def line(rec):
    """The record as one comment line: `# provenance: gpu=...; driver=...; ...`."""
    return "# provenance: " + "; ".join(f"{c}={rec[c]}" for c in COLUMNS)


def parse_line(text):
    """The dict of a `# provenance:` line, or None when text is not one."""
    if not text.startswith("# provenance: "):
        return None
    out = {}
    for part in text[len("# provenance: "):].rstrip("\n").split("; "):
        k, _, v = part.partition("=")
        out[k] = v
    return out


def main():
    ap = argparse.ArgumentParser(description="print the provenance line of a GPU measurement")
    ap.add_argument("--line", metavar="COMMAND", required=True, help="the command the line names")
    a = ap.parse_args()
    print(line(record(command=a.line)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
