"""flash_attn.flash_attn_interface of the shim: the package's functions, and
the one private name FlashAttention's tests import, _get_block_size_n,
which they use only to read FlashAttention's dropout mask (the cases with
dropout are left out: tests/fa_suite/fa_plugin.py)."""
from flashattn_stages.flash_attn_interface import (flash_attn_func, flash_attn_kvpacked_func,  # noqa: F401
                                                   flash_attn_qkvpacked_func, flash_attn_varlen_func,
                                                   flash_attn_varlen_kvpacked_func,
                                                   flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache)

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache",
           "_get_block_size_n"]


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    """FlashAttention's kernel tile width, which its tests need to unpack its
    dropout mask; there is no dropout here, so no test that runs asks."""
    raise NotImplementedError("_get_block_size_n: FlashAttention's dropout-mask layout; this package has "
                              "no dropout (the suite leaves those cases out)")
