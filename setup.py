"""setup.py -- what pyproject.toml cannot say: make the library, tag the wheel.

`pip install .` builds build/libfa_gpu.so with the repository's Makefile
(kernels/gpu.mk: nvcc, sm_90 and the GPU's own target) and copies it into
the package, beside fa.py, where fa.library_path() looks after $FA_GPU_LIB;
`pip install -e .` builds it too and leaves it in build/, where the editable
package (python/flashattn_stages itself) finds it. Without nvcc a library
built before is taken as it is; without either, the build stops with one
line saying so, unless FA_GPU_LIB names the library the package will load
at run time (then none is copied). The wheel carries a native library, so
it is tagged for this platform (BinaryDistribution), never py3-none-any.
Everything else is in pyproject.toml.
"""
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(ROOT, "build", "libfa_gpu.so")


class BinaryDistribution(Distribution):
    """A distribution with a platform's binary in it: the wheel's tag says the platform."""

    def has_ext_modules(self):
        return True


class BuildWithMake(build_py):
    def run(self):
        if shutil.which(os.environ.get("NVCC", "nvcc")) is not None:
            if subprocess.call(["make", "-C", ROOT, "build/libfa_gpu.so"]) != 0:
                sys.exit("flashattn_stages: make build/libfa_gpu.so failed (see above)")
        elif not os.path.exists(LIB) and not os.environ.get("FA_GPU_LIB"):
            sys.exit("flashattn_stages: nvcc not found: the build needs the CUDA toolkit "
                     "(make build/libfa_gpu.so), or FA_GPU_LIB naming a library built elsewhere")
        try:
            import torch  # noqa: F401
        except ImportError:
            print("flashattn_stages: torch is not installed: the PyTorch entries need it "
                  "(pip install torch); flashattn_stages.fa runs without it", file=sys.stderr)
        super().run()
        if not getattr(self, "editable_mode", False) and os.path.exists(LIB):
            dst = os.path.join(self.build_lib, "flashattn_stages")
            os.makedirs(dst, exist_ok=True)
            shutil.copy2(LIB, os.path.join(dst, "libfa_gpu.so"))


setup(cmdclass={"build_py": BuildWithMake}, distclass=BinaryDistribution)
