#!/usr/bin/env python3
"""tests/python/test_package.py -- the package flashattn_stages as a user gets it.

    python3 tests/python/test_package.py      (make test runs it; PYTHONPATH=python)

One PASS/FAIL/SKIP line per check (tests/run.sh's protocol). Needs neither
torch nor a GPU; the checks that need torch say SKIP without it.

  package-source     no file of python/ edits sys.path; each module imports
                     its siblings relatively (one copy whatever the path)
  package-repo       from /tmp with PYTHONPATH=python: flashattn_stages and
                     fa import, FaError is one class, library_path() follows
                     $FA_GPU_LIB; with torch also the module check below
  package-no-torch   without torch (or with torch hidden), asking for a
                     PyTorch entry raises ImportError of one line naming torch
  package-install    `pip install --no-deps --no-index --no-build-isolation
                     --target DIR .` (no network, no nvcc: the build takes
                     build/libfa_gpu.so as it is, or FA_GPU_LIB), the wheel's
                     tag names a platform, numpy is declared, the library is
                     inside the package when build/ has one
  package-installed  from /tmp with PYTHONPATH=DIR only: every module comes
                     from DIR; with torch, importing flashattn_stages, its
                     decode and varlen entries (and FlashAttention's
                     functions) loads each module once -- no module named
                     plain fa or flash_op, decode_op.flash_op the package's
                     own, one FaError class
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "python", "flashattn_stages")
MODULES = ("fa", "dispatch", "flash_op", "varlen_op", "decode_op", "flash_attn_interface")

# Run in a fresh interpreter from /tmp: prints one "ok ..." line or raises.
PROBE = r"""
import importlib, sys
where = sys.argv[1]
import flashattn_stages
from flashattn_stages import fa, FaError
assert flashattn_stages.__file__.startswith(where), ("flashattn_stages from", flashattn_stages.__file__)
assert FaError is fa.FaError and issubclass(FaError, RuntimeError)
try:
    import torch  # noqa: F401
except ImportError:
    print("ok no-torch")
    sys.exit(0)
from flashattn_stages import flash_attn_with_kvcache, flash_attn_varlen_func, flash_attn_func  # noqa: F401
from flashattn_stages import decode_op, varlen_op, flash_op, flash_attn_interface
mine = sorted(n for n, m in sys.modules.items()
              if m is not None and getattr(m, "__file__", None) and m.__file__.startswith(where))
plain = [n for n in ("fa", "dispatch", "flash_op", "varlen_op", "decode_op", "flash_attn_interface") if n in sys.modules]
assert not plain, ("modules loaded a second time under plain names", plain)
for n in mine:
    assert n == "flashattn_stages" or n.startswith("flashattn_stages."), ("a module outside the package", n)
files = [sys.modules[n].__file__ for n in mine]
assert len(set(files)) == len(files), ("one file loaded as two modules", mine)
for m in (decode_op, varlen_op, flash_op):
    assert m.fa is fa, (m.__name__, "has its own fa")
    assert m.fa.FaError is FaError
for m in (decode_op, varlen_op, flash_attn_interface):
    assert m.flash_op is flash_op, (m.__name__, "has its own flash_op")
assert flash_attn_with_kvcache is decode_op.flash_attn_with_kvcache or \
    flash_attn_with_kvcache is flash_attn_interface.flash_attn_with_kvcache
print("ok torch", len(mine), "modules")
"""

NO_TORCH = r"""
import sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
sys.meta_path.insert(0, Hide())
import flashattn_stages
try:
    flashattn_stages.flash_attn_func
except ImportError as e:
    msg = str(e)
    assert "\n" not in msg and "torch" in msg, msg
    print("ok", msg)
else:
    raise SystemExit("a PyTorch entry imported without torch")
"""


def result(ok, name, why=""):
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}")


def probe(code, path, where, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FA_GPU_LIB")}
    env["PYTHONPATH"] = path
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, "-c", code, where], cwd=tempfile.gettempdir(), env=env,
                       capture_output=True, text=True, timeout=300)
    last = (r.stdout + r.stderr).strip().splitlines()
    return r.returncode == 0, (last[-1] if last else f"exit {r.returncode}")[:300]


def source_check():
    bad = []
    for name in sorted(os.listdir(PKG)):
        if not name.endswith(".py"):
            continue
        text = open(os.path.join(PKG, name)).read()
        if "sys.path" in text:
            bad.append(f"{name} edits sys.path")
        for mod in MODULES:
            for line in text.splitlines():
                s = line.strip()
                if s in (f"import {mod}",) or s.startswith(f"from {mod} import") or s.startswith(f"import {mod} "):
                    bad.append(f"{name}: '{s}' (plain import of a sibling)")
    result(not bad, "package-source", "; ".join(bad[:3]))


def repo_check(lib):
    ok, why = probe(PROBE, os.path.join(ROOT, "python"), PKG)
    result(ok, "package-repo", why)
    code = ("import sys\nfrom flashattn_stages import fa\n"
            "assert fa.library_path() == '/nowhere/libfa_gpu.so', fa.library_path()\n"
            "try:\n    fa.library()\nexcept fa.FaError as e:\n"
            "    assert '\\n' not in str(e) and 'FA_GPU_LIB' in str(e), str(e)\n    print('ok')\n"
            "else:\n    raise SystemExit('a library that is not there loaded')\n")
    ok, why = probe(code, os.path.join(ROOT, "python"), PKG, {"FA_GPU_LIB": "/nowhere/libfa_gpu.so"})
    result(ok, "package-library-path", why)
    ok, why = probe(NO_TORCH, os.path.join(ROOT, "python"), PKG)
    result(ok, "package-no-torch", why)


def install_check(lib):
    try:
        import setuptools
        ver = tuple(int(x) for x in setuptools.__version__.split(".")[:2])
        if ver < (70, 1):
            import wheel  # noqa: F401  (setuptools before 70.1 builds wheels through it)
    except ImportError as e:
        for name in ("package-install", "package-installed"):
            print(f"SKIP {name}: {e.name} is not installed (pip builds without isolation and "
                  "without an index here)")
        return
    with tempfile.TemporaryDirectory(prefix="fa_pkg_") as tmp:
        target = os.path.join(tmp, "site")
        env = dict(os.environ, NVCC="/nonexistent/nvcc")   # the test builds no kernel
        if not os.path.exists(lib):
            env["FA_GPU_LIB"] = "/nonexistent/libfa_gpu.so"
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                            "--no-index", "--no-cache-dir", "--target", target, ROOT],
                           capture_output=True, text=True, timeout=600, env=env, cwd=tmp)
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
            result(False, "package-install", f"pip install exited {r.returncode}: {tail[0][:200]}")
            print("SKIP package-installed: nothing installed")
            return
        bad = []
        info = [d for d in os.listdir(target) if d.endswith(".dist-info")]
        if len(info) != 1:
            bad.append(f"dist-info folders: {info}")
        else:
            wheel_meta = open(os.path.join(target, info[0], "WHEEL")).read()
            tags = [ln.split(":", 1)[1].strip() for ln in wheel_meta.splitlines() if ln.startswith("Tag:")]
            if not tags or any(t.endswith("-any") for t in tags):
                bad.append(f"wheel tags {tags}: expected a platform's")
            meta = open(os.path.join(target, info[0], "METADATA")).read()
            if "Requires-Dist: numpy" not in meta:
                bad.append("numpy is not declared")
        inside = os.path.join(target, "flashattn_stages", "libfa_gpu.so")
        if os.path.exists(lib) != os.path.exists(inside):
            bad.append(f"library inside the package: {os.path.exists(inside)}, in build/: {os.path.exists(lib)}")
        result(not bad, "package-install", "; ".join(bad))
        ok, why = probe(PROBE, target, os.path.join(target, "flashattn_stages"))
        result(ok, "package-installed", why)


def main():
    lib = os.path.join(ROOT, "build", "libfa_gpu.so")
    source_check()
    repo_check(lib)
    install_check(lib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
