"""flashattn_stages -- the project's CUDA kernels (libfa_gpu.so, core/fa_gpu.h)
as a PyTorch package: the op with autograd, torch.compile and CUDA graph
support, and FlashAttention 2's Python interface over it.

    from flashattn_stages import flash_attention     # SDPA's layout (B, H, seqlen, d)
    from flashattn_stages import flash_attn_func     # FlashAttention's (B, seqlen, H, d)
    from flashattn_stages import fa                  # the C interface through ctypes (no torch)

Installed by `pip install .` from the repository (pyproject.toml; the build
runs make for the library and puts it inside the package); in the
repository, python/ on PYTHONPATH (the Makefile sets it). The modules:
fa (the ctypes binding and the one library loader, no torch), dispatch
(what every entry shares on the way to a launch: version chooser, plan
caches, workspace), flash_op (the dense op, the output allocator),
varlen_op (packed sequences), decode_op (a KV cache), flash_attn_interface
(FlashAttention's functions). The torch parts load on
first use, so `from flashattn_stages import fa` needs no torch; without
torch, asking for one of them raises ImportError of one line saying so.
"""
from . import fa  # noqa: F401
from .fa import FaError  # noqa: F401

_INTERFACE = ("flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
              "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
              "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache")
_LAZY = dict({name: ("flash_attn_interface", name) for name in _INTERFACE},
             flash_attention=("flash_op", "flash_attention"),
             visible_mask=("flash_op", "visible_mask"))
_MODULES = ("dispatch", "flash_op", "flash_attn_interface", "varlen_op", "decode_op")
__all__ = ["fa", "FaError", *_MODULES, *_LAZY]


def __getattr__(name):
    import importlib
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(f"{__name__}.{mod}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
