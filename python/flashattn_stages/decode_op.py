"""decode_op.py -- stage 8's decode kernels as a PyTorch entry, shaped like
FlashAttention's flash_attn_with_kvcache.

    from flashattn_stages import flash_attn_with_kvcache
    out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                  block_table=table, causal=True)

Shapes are FlashAttention's:
  q                 (B, seqlen_q, H, d), seqlen_q 1 to 16
  k_cache, v_cache  paged: (num_pages, page_size, H_kv, d) with block_table
                    (B, pages_per_seq) int32, page_size a power of two in
                    [16, 256]; or, without block_table, (B, seqlen_cache, H_kv,
                    d), which is the same cache with pages of the largest such
                    power of two that divides seqlen_cache, in order
  cache_seqlens     an int or a (B,) int32 tensor: the keys of each sequence
  out               (B, seqlen_q, H, d) in q's dtype; with
                    return_softmax_lse=True also softmax_lse (B, H, seqlen_q)
                    fp32 (natural log, -inf for a row that sees no key, whose
                    out row is 0)
dtypes float16 and bfloat16, d = 64 or 128, H a multiple of H_kv (grouped
heads). The mask is core/mask.h's per sequence, aligned bottom-right: query i
of sequence b sits at key i + cache_seqlens[b] - seqlen_q; causal=True is
window_size right = 0. num_splits=0 takes the split count of
decode_num_splits (core/decode_plan.h) for this GPU's SMs and the kernel's CTAs
per SM; 1 runs without the
combine. Not supported (as FlashAttention's k=, v=, rotary arguments): appending
new keys to the cache; the caller writes them into its pages first.

How: the kernels of kernels/stage8_decode.cu in build/libfa_gpu.so, loaded
once by fa.library() (one handle for every entry), called
through ctypes on torch's current stream with the tensors' device pointers
and a workspace for the partials from torch's allocator. Inference only: no
autograd (decoding needs none).

Errors: a ValueError of one line starting "flash_attn_with_kvcache:" naming
what is wrong (shape, dtype, page size, a block-table entry outside the pool,
a cache length past the table's capacity, a split count out of range),
raised before any launch; checking the tables reads cache_seqlens and
block_table on the host (one synchronization; check_tables=False skips it for
callers that guarantee them). fa.FaError when a CUDA call fails.
"""
import contextlib
import ctypes
import math

from . import fa, flash_op   # flash_op first: it says in one line when torch is missing

import torch

NAME = "flash_attn_with_kvcache"
DTYPES = {torch.float16: fa.FP16, torch.bfloat16: fa.BF16}
MAX_SPLITS = 128      # DECODE_MAX_SPLITS
PAGE_SIZES = (256, 128, 64, 32, 16)


DecodeParams, DecodePtrs = fa.DecodeParams, fa.DecodePtrs


def _new_output(shape, dtype, device):
    return flash_op.new_output(shape, dtype, device)


def library():
    """The library (fa.library(), the handle every entry shares), which must carry the decode kernels."""
    lib = fa.library()
    if not lib.has_decode:
        _fail(f"{fa.library_path()} has no decode kernels (rebuild it: make build/libfa_gpu.so)")
    return lib


def _fail(msg):
    raise ValueError(f"{NAME}: {msg}")


def _as_pages(k_cache, v_cache, block_table):
    """(k_pages, v_pages, block_table) in the paged layout."""
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        _fail(f"k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)}: expected two equal 4-d shapes")
    if block_table is not None:
        return k_cache, v_cache, block_table
    B, S = k_cache.shape[0], k_cache.shape[1]
    page = next((p for p in PAGE_SIZES if S % p == 0), None)
    if page is None:
        _fail(f"k_cache of {S} keys per sequence and no block_table: {S} must be a multiple of 16 "
              "(pages of 16 to 256 keys)")
    n = S // page
    kc = k_cache.contiguous().view(B * n, page, *k_cache.shape[2:])
    vc = v_cache.contiguous().view(B * n, page, *v_cache.shape[2:])
    table = torch.arange(B * n, dtype=torch.int32, device=k_cache.device).view(B, n)
    return kc, vc, table


def flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), num_splits=0, return_softmax_lse=False,
                            check_tables=True):
    """One decoding step against a (paged) KV cache; see the module's text for shapes and rules."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or not t.is_cuda:
            _fail(f"{name} must be a CUDA tensor")
    if q.dtype not in DTYPES or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        _fail(f"dtypes q {q.dtype}, k_cache {k_cache.dtype}, v_cache {v_cache.dtype}: expected one of "
              "float16, bfloat16 for all three")
    if q.dim() != 4:
        _fail(f"q {tuple(q.shape)}: expected (B, seqlen_q, H, d)")
    B, Sq, H, d = q.shape
    kc, vc, table = _as_pages(k_cache, v_cache, block_table)
    num_pages, page, H_kv, dk = kc.shape
    if dk != d:
        _fail(f"k_cache head dimension {dk} != q's {d}")
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or table.shape[0] != B or \
            table.dtype != torch.int32 or table.device != q.device:
        _fail(f"block_table: expected a ({B}, pages_per_seq) int32 tensor on {q.device}")
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=q.device)
    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.shape != (B,) or \
            cache_seqlens.dtype != torch.int32 or cache_seqlens.device != q.device:
        _fail(f"cache_seqlens: expected an int or a ({B},) int32 tensor on {q.device}")
    left, right = flash_op.window_of(causal, window_size)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    p = DecodeParams(B, H, H_kv, d, Sq, page, table.shape[1], num_pages, scale, left, right)
    lib = library()
    lens = None
    if check_tables or num_splits == 0:
        lens = cache_seqlens.cpu()
    if check_tables:
        cap = table.shape[1] * page
        bad = ((lens < 0) | (lens > cap)).nonzero()
        if len(bad):
            b = int(bad[0])
            _fail(f"cache_seqlens[{b}] = {int(lens[b])}: must be in [0, {cap}] ({table.shape[1]} pages of {page} keys)")
        t = table.cpu()
        used = torch.arange(t.shape[1])[None, :] < ((lens + page - 1) // page)[:, None]
        bad = (((t < 0) | (t >= num_pages)) & used).nonzero()
        if len(bad):
            b, j = (int(x) for x in bad[0])
            _fail(f"block_table[{b}][{j}] = {int(t[b, j])}: must be a page in [0, {num_pages})")
    if num_splits == 0:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        num_splits = lib.fa_decode_num_splits(DTYPES[q.dtype], ctypes.byref(p), int(lens.max()) if B else 0, sms)
    if not isinstance(num_splits, int) or not 1 <= num_splits <= MAX_SPLITS:
        _fail(f"num_splits={num_splits!r}: expected 0 (the rule) or 1 to {MAX_SPLITS}")
    dtype_code = DTYPES[q.dtype]
    if lib.fa_decode_check(dtype_code, ctypes.byref(p), num_splits) != fa.OK:
        _fail(fa.error_text(lib))
    qh = q.transpose(1, 2).contiguous()                       # (B, H, seqlen_q, d)
    kc, vc = kc.contiguous(), vc.contiguous()
    table, cache_seqlens = table.contiguous(), cache_seqlens.contiguous()
    o = _new_output(qh.shape, qh.dtype, qh.device)
    lse = _new_output((B, H, Sq), torch.float32, qh.device)
    nbytes = lib.fa_decode_workspace_bytes(ctypes.byref(p), num_splits)
    ws = torch.empty(nbytes, dtype=torch.uint8, device=q.device) if nbytes else None
    ptrs = DecodePtrs(qh.data_ptr(), kc.data_ptr(), vc.data_ptr(), table.data_ptr(), cache_seqlens.data_ptr(),
                      o.data_ptr(), lse.data_ptr(), ws.data_ptr() if ws is not None else None, nbytes)
    with torch.cuda.device(q.device):
        stream = torch.cuda.current_stream(q.device).cuda_stream
        fa.check(lib, lib.fa_decode(dtype_code, ctypes.byref(p), num_splits, ctypes.byref(ptrs), stream))
    out = o.transpose(1, 2).contiguous()                      # (B, seqlen_q, H, d)
    return (out, lse) if return_softmax_lse else out


def dense_from_pages(cache, block_table, b, length):
    """(length, H_kv, d): the keys (or values) of sequence b gathered from its pages."""
    page = cache.shape[1]
    n = (length + page - 1) // page
    pages = cache[block_table[b, :n].long()]                  # (n, page, H_kv, d)
    return pages.reshape(n * page, *cache.shape[2:])[:length]


def reference_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale=None, causal=False,
                      window_size=(-1, -1), dtype=torch.float64):
    """The same step by PyTorch's SDPA math, per sequence, in `dtype` (float64: the
    reference; q's dtype: PyTorch's own error in that dtype), on the dense K, V
    gathered from the pages, with core/mask.h's mask (flash_op.visible_mask).
    Returns out (B, seqlen_q, H, d) in `dtype` and lse (B, H, seqlen_q) float64."""
    import torch.nn.functional as F
    B, Sq, H, d = q.shape
    H_kv = k_cache.shape[2]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    out = torch.zeros(B, Sq, H, d, dtype=dtype, device=q.device)
    lse = torch.full((B, H, Sq), -math.inf, dtype=torch.float64, device=q.device)
    lens = cache_seqlens.tolist()
    for b in range(B):
        n = lens[b]
        if n == 0:
            continue
        k = dense_from_pages(k_cache, block_table, b, n).transpose(0, 1).to(dtype)   # (H_kv, n, d)
        v = dense_from_pages(v_cache, block_table, b, n).transpose(0, 1).to(dtype)
        k = k.repeat_interleave(H // H_kv, dim=0)
        v = v.repeat_interleave(H // H_kv, dim=0)
        qb = q[b].transpose(0, 1).to(dtype)                                          # (H, Sq, d)
        m = flash_op.visible_mask(Sq, n, causal, window_size, device=q.device)
        rows = m.any(dim=1)
        s = (qb.double() @ k.double().transpose(1, 2)) * scale
        s = s.masked_fill(~m, -math.inf)
        lse[b] = torch.where(rows, torch.logsumexp(s, dim=-1), torch.tensor(-math.inf, device=q.device,
                                                                           dtype=torch.float64))
        # float64 runs only in the math backend; another dtype takes whichever
        # fused backend SDPA picks for a masked problem (PyTorch's own kernel)
        ctx = (torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH) if dtype == torch.float64
               else contextlib.nullcontext())
        with ctx:
            o = F.scaled_dot_product_attention(qb[None], k[None], v[None], attn_mask=m, scale=scale)[0]
        o = torch.where(rows[None, :, None], o, torch.zeros((), dtype=dtype, device=q.device))
        out[b] = o.transpose(0, 1)
    return out, lse
