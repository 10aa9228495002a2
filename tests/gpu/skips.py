"""tests/gpu/skips.py -- the SKIP side of tests/run.sh's protocol for the
Python GPU suites: where what a suite needs is missing (torch, a GPU, the
library), one `SKIP group: why` line for each of its groups and exit 0, so
that a machine without a GPU counts them skipped, never passed. Imported as
`skips` by the suites beside it (run as python3 tests/gpu/NAME.py)."""
import sys


def skip_all(groups, why):
    for g in groups:
        print(f"SKIP {g}: {why}")
    sys.exit(0)


def _gpu_listed():
    """Whether nvidia-smi lists a GPU (False where there is no nvidia-smi)."""
    import shutil
    import subprocess
    if not shutil.which("nvidia-smi"):
        return False
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and any(line.startswith("GPU ") for line in r.stdout.splitlines())


def need_torch(groups):
    """The torch module, or every group skipped when torch is not installed:
    said as 'no CUDA GPU here' on a machine without one (installing torch
    would not run them), as what to install where there is a GPU."""
    try:
        import torch
    except ImportError:
        if not _gpu_listed():
            skip_all(groups, "no CUDA GPU here (nor torch, which these tests also need)")
        skip_all(groups, "torch is not installed (the GPU tests need it: pip install torch)")
    return torch
