"""setup.py -- the one build step pyproject.toml cannot say: make the library.

`pip install .` builds build/libfa_gpu.so with the repository's Makefile
(kernels/gpu.mk: nvcc, sm_90 and the GPU's own target) and copies it into
the package, beside fa.py, where fa.library_path() looks first; `pip
install -e .` builds it too and leaves it in build/, where the editable
package (python/ itself) finds it. Without nvcc the build stops with one
line saying so. Everything else is in pyproject.toml.
"""
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(ROOT, "build", "libfa_gpu.so")


class BuildWithMake(build_py):
    def run(self):
        if shutil.which(os.environ.get("NVCC", "nvcc")) is not None:
            if subprocess.call(["make", "-C", ROOT, "build/libfa_gpu.so"]) != 0:
                sys.exit("flashattn_stages: make build/libfa_gpu.so failed (see above)")
        elif not os.path.exists(LIB):   # without nvcc a library built before is taken as it is
            sys.exit("flashattn_stages: nvcc not found: the build needs the CUDA toolkit "
                     "(make build/libfa_gpu.so)")
        super().run()
        if not getattr(self, "editable_mode", False):
            dst = os.path.join(self.build_lib, "flashattn_stages")
            os.makedirs(dst, exist_ok=True)
            shutil.copy2(LIB, os.path.join(dst, "libfa_gpu.so"))


setup(cmdclass={"build_py": BuildWithMake})
