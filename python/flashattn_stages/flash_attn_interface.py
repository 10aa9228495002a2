"""flash_attn_interface.py -- FlashAttention 2's Python interface over the project's op.

    # from flash_attn import flash_attn_func                  # FlashAttention's package
    from flashattn_stages import flash_attn_func              # this one: the same call
    out = flash_attn_func(q, k, v, causal=True)               # q (B, seqlen_q, H, d)

Every public function of FlashAttention 2's flash_attn_interface (release
2.8.3), with its argument names, order and defaults: flash_attn_func, its
qkv- and kv-packed forms, the three varlen forms and flash_attn_with_kvcache
(decode_op.py). The layout is FlashAttention's: q (B, seqlen_q, H, d), k and
v (B, seqlen_k, H_kv, d), H a multiple of H_kv; out (B, seqlen_q, H, d)
contiguous. The masks and the bottom-right alignment when seqlen_q !=
seqlen_k are the same (core/mask.h): window_size any pair of ints (tuple,
list, a tensor of two), -1 unbounded; causal=True sets right = 0 whatever
right was, as FlashAttention does. The (B, seqlen, H, d) tensors reach the
kernels as (B, H, seqlen, d) views, without a copy where the chosen version
reads strides (flash_op.py). What this project does not compute -- dropout
(dropout_p > 0), soft-capping (softcap > 0), ALiBi (alibi_slopes) -- is
refused with a ValueError of one line naming the argument, never ignored.

Returns out; with return_attn_probs also softmax_lse (B, H, seqlen_q) fp32
and a third value None where FlashAttention gives its dropout mask (there is
no dropout here, and no probabilities are kept); return_lse, a keyword of
this package, returns (out, softmax_lse).

The varlen forms take sequences packed along the rows (q (total_q, H, d),
cu_seqlens_q int32 (B + 1,)); their softmax_lse is (H, total_q). They run
the varlen kernels at every head dimension and dtype the dense passes take
(varlen_op.varlen_any: d padded with zero columns where the kernels need
it, else the dense op per sequence), and read k and v from a paged cache
with block_table (k, v then (num_pages, page_size, H_kv, d)).
"""
from . import decode_op, flash_op, varlen_op

flash_attn_with_kvcache = decode_op.flash_attn_with_kvcache


def _refuse(fn, msg):
    raise ValueError(f"{fn}: {msg}")


def check_extras(fn, dropout_p=0.0, softcap=0.0, alibi_slopes=None):
    """One line naming the first FlashAttention argument asking for what this project does not compute."""
    if dropout_p != 0.0:
        _refuse(fn, f"dropout_p={dropout_p!r}: dropout is not implemented, only 0.0 runs")
    if softcap is not None and softcap > 0:
        _refuse(fn, f"softcap={softcap!r}: soft-capping is not implemented, only 0.0 runs")
    if alibi_slopes is not None:
        _refuse(fn, "alibi_slopes: ALiBi is not implemented, only None runs")


def window(fn, causal, window_size):
    """(left, right) of flash_op.window_of, its error worded for `fn`."""
    try:
        return flash_op.window_of(causal, window_size)
    except ValueError as e:
        _refuse(fn, str(e).replace("flash_attention: ", ""))


def _returns(out, lse, return_attn_probs, return_lse):
    if return_attn_probs:
        return out, lse, None
    if return_lse:
        return out, lse
    return out


def _run(fn, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
         deterministic, return_attn_probs, return_lse):
    check_extras(fn, dropout_p, softcap, alibi_slopes)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if getattr(t, "dim", lambda: 0)() != 4:
            _refuse(fn, f"{name} has shape {tuple(getattr(t, 'shape', ()))}: expected (B, seqlen, heads, d)")
    left, right = window(fn, causal, window_size)
    o, lse = flash_op.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                softmax_scale, left, right, True, None, deterministic)
    return _returns(o.transpose(1, 2), lse, return_attn_probs, return_lse)   # (B, seqlen_q, H, d)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                    return_lse=False):
    """FlashAttention's flash_attn_func: q (B, seqlen_q, H, d), k, v (B,
    seqlen_k, H_kv, d) CUDA tensors of one dtype -> out (B, seqlen_q, H, d);
    softmax_scale defaults to 1/sqrt(d); window_size (left, right), -1
    unbounded; causal sets right = 0. Errors: ValueError of one line."""
    return _run("flash_attn_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                alibi_slopes, deterministic, return_attn_probs, return_lse)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                              return_lse=False):
    """qkv (B, seqlen, 3, H, d), one packed projection: q, k, v are its
    slices along dimension 2, read in place where the version takes strides."""
    fn = "flash_attn_qkvpacked_func"
    if getattr(qkv, "dim", lambda: 0)() != 5 or qkv.shape[2] != 3:
        _refuse(fn, f"qkv has shape {tuple(getattr(qkv, 'shape', ()))}: expected (B, seqlen, 3, heads, d)")
    return _run(fn, qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal,
                window_size, softcap, alibi_slopes, deterministic, return_attn_probs, return_lse)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             return_lse=False):
    """q (B, seqlen_q, H, d), kv (B, seqlen_k, 2, H_kv, d)."""
    fn = "flash_attn_kvpacked_func"
    if getattr(kv, "dim", lambda: 0)() != 5 or kv.shape[2] != 2:
        _refuse(fn, f"kv has shape {tuple(getattr(kv, 'shape', ()))}: expected (B, seqlen_k, 2, heads, d)")
    return _run(fn, q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size,
                softcap, alibi_slopes, deterministic, return_attn_probs, return_lse)


def _run_varlen(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs,
                block_table, return_lse, check_cu_seqlens=False):
    check_extras(fn, dropout_p, softcap, alibi_slopes)
    left, right = window(fn, causal, window_size)
    try:
        if block_table is not None:
            for name, t in (("k", k), ("v", v)):
                if getattr(t, "dim", lambda: 0)() != 4:
                    _refuse(fn, f"{name} has shape {tuple(getattr(t, 'shape', ()))} with block_table: "
                            "expected (num_pages, page_size, heads, d)")
            decode_op.check_block_table(block_table, cu_seqlens_q.shape[0] - 1, k.shape[1], k.shape[0],
                                        cu_seqlens_k)
            k = varlen_op.gather_pages(k, block_table, cu_seqlens_k)
            v = varlen_op.gather_pages(v, block_table, cu_seqlens_k)
        out, lse = varlen_op.varlen_any(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                        softmax_scale, left, right, deterministic, check_cu_seqlens)
    except ValueError as e:
        raise ValueError(str(e).replace("flash_attn_varlen_func: ", f"{fn}: ", 1)
                         .replace("flash_attn_with_kvcache: ", f"{fn}: ", 1)) from None
    return _returns(out, lse, return_attn_probs, return_lse)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None, *,
                           return_lse=False, check_cu_seqlens=False):
    """FlashAttention's flash_attn_varlen_func: q (total_q, H, d), k, v
    (total_k, H_kv, d) CUDA tensors of one dtype, sequence b's rows at
    cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1 (int32 CUDA tensors of B + 1
    entries; cu_seqlens_k for k, v), max_seqlen_q, max_seqlen_k the longest
    -> out (total_q, H, d); each sequence masked as its own problem (causal
    aligned bottom-right per sequence, window_size, grouped heads). With
    block_table (B, pages_per_seq) int32, k and v are a paged cache
    (num_pages, page_size, H_kv, d), sequence b's keys in its pages in
    order. With return_attn_probs also softmax_lse (H, total_q) fp32.
    check_cu_seqlens=True also reads cu_seqlens on the host (one
    synchronization a call) and refuses bad contents; by default they are
    the caller's guarantee, as in FlashAttention.
    Errors: ValueError of one line (varlen_op.py says what is checked)."""
    return _run_varlen("flash_attn_varlen_func", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                       max_seqlen_k, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                       deterministic, return_attn_probs, block_table, return_lse, check_cu_seqlens)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                                     causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                     deterministic=False, return_attn_probs=False, *, return_lse=False,
                                     check_cu_seqlens=False):
    """qkv (total, 3, H, d) of packed sequences, cu_seqlens for queries and keys alike."""
    fn = "flash_attn_varlen_qkvpacked_func"
    if getattr(qkv, "dim", lambda: 0)() != 4 or qkv.shape[1] != 3:
        _refuse(fn, f"qkv has shape {tuple(getattr(qkv, 'shape', ()))}: expected (total, 3, heads, d)")
    return _run_varlen(fn, qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                       dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                       return_attn_probs, None, return_lse, check_cu_seqlens)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                    softcap=0.0, alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False, *, return_lse=False, check_cu_seqlens=False):
    """q (total_q, H, d), kv (total_k, 2, H_kv, d) of packed sequences."""
    fn = "flash_attn_varlen_kvpacked_func"
    if getattr(kv, "dim", lambda: 0)() != 4 or kv.shape[1] != 2:
        _refuse(fn, f"kv has shape {tuple(getattr(kv, 'shape', ()))}: expected (total_k, 2, heads, d)")
    return _run_varlen(fn, q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                       dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                       return_attn_probs, None, return_lse, check_cu_seqlens)
