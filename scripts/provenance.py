"""scripts/provenance.py -- where a GPU measurement was made, for every CSV row.

One place for what bench_gpu.py, ncu_io.py and ncu_layout.py all record:
the commit (FA_COMMIT in the environment, set where the copy of the tree has
no .git, as on the lent GPU machine; else git; else "unknown"), the GPU's
name and driver from nvidia-smi ("unknown" without one), and the UTC date.
"""
import datetime
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the provenance columns that open every row of a measured CSV, in this order
COLUMNS = ["gpu", "driver", "cuda", "torch", "commit", "date", "command"]


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
