"""flash_attn -- a shim of ours for FlashAttention's test suite: its `from
flash_attn import ...` lines get flashattn_stages' functions (FlashAttention
2.8.3's interface, python/flashattn_stages/flash_attn_interface.py). Only
the suite (tests/fa_suite/) puts this folder on the path; the functions
are the package's, nothing is reimplemented here."""
from flashattn_stages import (flash_attn_func, flash_attn_kvpacked_func,  # noqa: F401
                              flash_attn_qkvpacked_func, flash_attn_varlen_func,
                              flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func,
                              flash_attn_with_kvcache)

__version__ = "2.8.3"
__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache"]
