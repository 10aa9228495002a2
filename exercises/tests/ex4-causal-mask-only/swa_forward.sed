# exercises/tests/ex4-causal-mask-only/swa_forward.sed -- applied to the
# reference solution's swa_forward.c to make this fixture, wrong on purpose:
# the tiles skipped are right, but inside a tile only the causal mask is
# applied (the window's left edge is forgotten). The checker must reject it.
s/if (mask_visible(mask, row, key)) {/if (mask_visible(mask_causal(N, N), row, key)) {/
