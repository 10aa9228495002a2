"""flash_attn_interface.py -- FlashAttention's Python interface over the project's op.

    # from flash_attn import flash_attn_func                  # FlashAttention's package
    from flashattn_stages import flash_attn_func              # this one: the same call
    out = flash_attn_func(q, k, v, causal=True)               # q (B, seqlen_q, H, d)

The layout is FlashAttention's: q (B, seqlen_q, H, d), k and v (B, seqlen_k,
H_kv, d), H a multiple of H_kv; out (B, seqlen_q, H, d) contiguous. The
arguments are flash_attn_func's (dropout_p, softmax_scale, causal,
window_size, softcap, alibi_slopes, deterministic, return_attn_probs), plus
return_lse; the masks and the bottom-right alignment when seqlen_q !=
seqlen_k are the same (core/mask.h). The (B, seqlen, H, d) tensors reach the
kernels as (B, H, seqlen, d) views, without a copy where the chosen version
reads strides (flash_op.py). What this project does not compute -- dropout,
softcap, ALiBi -- is refused with a ValueError of one line, never ignored.

Returns out; with return_lse or return_attn_probs also softmax_lse (B, H,
seqlen_q) fp32, as FlashAttention returns it; return_attn_probs adds a third
value None where FlashAttention gives its dropout mask (there is no dropout
here, and no probabilities are kept).

flash_attn_varlen_func takes sequences of different lengths packed along
the rows (q (total_q, H, d), cu_seqlens_q int32 (B + 1,)); its op is
varlen_op.py's, its softmax_lse (H, total_q).
"""
from . import flash_op, varlen_op


def _refuse(msg):
    raise ValueError("flash_attn_func: " + msg)


def _check_extras(dropout_p, softcap, alibi_slopes):
    if dropout_p != 0.0:
        _refuse(f"dropout_p={dropout_p!r}: dropout is not implemented, only 0.0 runs")
    if softcap not in (0, 0.0, None):
        _refuse(f"softcap={softcap!r}: soft-capping is not implemented, only 0.0 runs")
    if alibi_slopes is not None:
        _refuse("alibi_slopes: ALiBi is not implemented, only None runs")


def _window(causal, window_size):
    try:
        return flash_op.window_of(causal, window_size)
    except ValueError as e:
        _refuse(str(e).replace("flash_attention: ", ""))


def _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
         deterministic, return_attn_probs, return_lse):
    _check_extras(dropout_p, softcap, alibi_slopes)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if getattr(t, "dim", lambda: 0)() != 4:
            _refuse(f"{name} has shape {tuple(getattr(t, 'shape', ()))}: expected (B, seqlen, heads, d)")
    left, right = _window(causal, window_size)
    o, lse = flash_op.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                softmax_scale, left, right, True, None, deterministic)
    out = o.transpose(1, 2)   # (B, seqlen_q, H, d), contiguous
    if return_attn_probs:
        return out, lse, None
    if return_lse:
        return out, lse
    return out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False, return_lse=False):
    """FlashAttention's flash_attn_func: q (B, seqlen_q, H, d), k, v (B,
    seqlen_k, H_kv, d) CUDA tensors of one dtype -> out (B, seqlen_q, H, d);
    softmax_scale defaults to 1/sqrt(d); window_size (left, right), -1
    unbounded; causal sets right = 0. Errors: ValueError of one line."""
    return _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_attn_probs, return_lse)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False, return_lse=False):
    """qkv (B, seqlen, 3, H, d), one packed projection: q, k, v are its
    slices along dimension 2, read in place where the version takes strides."""
    if getattr(qkv, "dim", lambda: 0)() != 5 or qkv.shape[2] != 3:
        _refuse(f"qkv has shape {tuple(getattr(qkv, 'shape', ()))}: expected (B, seqlen, 3, heads, d)")
    return _run(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal,
                window_size, softcap, alibi_slopes, deterministic, return_attn_probs, return_lse)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False, return_lse=False):
    """q (B, seqlen_q, H, d), kv (B, seqlen_k, 2, H_kv, d)."""
    if getattr(kv, "dim", lambda: 0)() != 5 or kv.shape[2] != 2:
        _refuse(f"kv has shape {tuple(getattr(kv, 'shape', ()))}: expected (B, seqlen_k, 2, heads, d)")
    return _run(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size,
                softcap, alibi_slopes, deterministic, return_attn_probs, return_lse)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None,
                           return_lse=False):
    """FlashAttention's flash_attn_varlen_func: q (total_q, H, d), k, v
    (total_k, H_kv, d) CUDA tensors of one dtype, sequence b's rows at
    cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1 (int32 CUDA tensors of B + 1
    entries; cu_seqlens_k for k, v), max_seqlen_q, max_seqlen_k the longest
    -> out (total_q, H, d); each sequence masked as its own problem (causal
    aligned bottom-right per sequence, window_size, grouped heads). With
    return_lse or return_attn_probs also softmax_lse (H, total_q) fp32.
    Errors: ValueError of one line (varlen_op.py says what is checked)."""
    if dropout_p != 0.0:
        raise ValueError(f"flash_attn_varlen_func: dropout_p={dropout_p!r}: dropout is not implemented, only 0.0 runs")
    if softcap not in (0, 0.0, None):
        raise ValueError(f"flash_attn_varlen_func: softcap={softcap!r}: soft-capping is not implemented, only 0.0 runs")
    if alibi_slopes is not None:
        raise ValueError("flash_attn_varlen_func: alibi_slopes: ALiBi is not implemented, only None runs")
    if block_table is not None:
        raise ValueError("flash_attn_varlen_func: block_table: a paged cache is decode_op.py's "
                         "flash_attn_with_kvcache, only None runs here")
    try:
        left, right = flash_op.window_of(causal, window_size)
    except ValueError as e:
        raise ValueError(str(e).replace("flash_attention: ", "flash_attn_varlen_func: ")) from None
    out, lse = varlen_op.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                          softmax_scale, left, right, None, deterministic)
    if return_attn_probs:
        return out, lse, None
    if return_lse:
        return out, lse
    return out
