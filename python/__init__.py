"""flashattn_stages -- the project's CUDA kernels (libfa_gpu.so, core/fa_gpu.h)
as a PyTorch package: the op with autograd, torch.compile and CUDA graph support.

    from flashattn_stages import flash_attention     # SDPA's layout (B, H, seqlen, d)
    from flashattn_stages import flash_attn_func     # FlashAttention's (B, seqlen, H, d)
    from flashattn_stages import fa                  # the C interface through ctypes (no torch)

Installed by `pip install .` from the repository (pyproject.toml; the build
runs make for the library and puts it inside the package). In the
repository this folder is python/, importable as plain modules (flash_op,
flash_attn_interface, fa) with python/ on sys.path. The torch parts load on
first use, so `from flashattn_stages import fa` needs no torch.
"""
from . import fa  # noqa: F401

_LAZY = {
    "flash_attention": ("flash_op", "flash_attention"),
    "visible_mask": ("flash_op", "visible_mask"),
    "flash_attn_func": ("flash_attn_interface", "flash_attn_func"),
    "flash_attn_qkvpacked_func": ("flash_attn_interface", "flash_attn_qkvpacked_func"),
    "flash_attn_kvpacked_func": ("flash_attn_interface", "flash_attn_kvpacked_func"),
    "flash_attn_varlen_func": ("flash_attn_interface", "flash_attn_varlen_func"),
}
__all__ = ["fa", "flash_op", "flash_attn_interface", "varlen_op"] + list(_LAZY)


def __getattr__(name):
    import importlib
    if name in ("flash_op", "flash_attn_interface", "varlen_op"):
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(f"{__name__}.{mod}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
