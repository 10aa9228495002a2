"""flash_attn.layers of the shim (rotary only)."""
