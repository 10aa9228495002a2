"""flash_attn.bert_padding of the shim: padded batches to packed rows and back,
as FlashAttention's tests use them to build varlen inputs.

unpad_input(hidden_states (B, S, ...), attention_mask (B, S) bool,
unused_mask=None) -> (rows (total, ...), indices (total,) int64 into the
flattened B * S, cu_seqlens (B + 1,) int32, max_seqlen int, seqused (B,)
int32): the rows where attention_mask (or unused_mask) is set, in order;
cu_seqlens counts both masks, seqused the attention_mask alone.
pad_input(rows, indices, batch, seqlen) -> (batch, seqlen, ...) with rows
put back at indices and zeros elsewhere. Both differentiable (indexing).
"""
import torch
import torch.nn.functional as F


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    kept = attention_mask.bool() if unused_mask is None else (attention_mask.bool() | unused_mask.bool())
    seqlens = kept.sum(dim=-1, dtype=torch.int32)
    seqused = attention_mask.bool().sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(kept.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    rows = hidden_states.reshape(-1, *hidden_states.shape[2:])[indices]
    return rows, indices, cu_seqlens, int(seqlens.max()) if seqlens.numel() else 0, seqused


def pad_input(hidden_states, indices, batch, seqlen):
    out = hidden_states.new_zeros((batch * seqlen, *hidden_states.shape[1:]))
    out = out.index_put((indices,), hidden_states)
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])
