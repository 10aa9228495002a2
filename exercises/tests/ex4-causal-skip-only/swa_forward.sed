# exercises/tests/ex4-causal-skip-only/swa_forward.sed -- applied to the
# reference solution's swa_forward.c to make this fixture, wrong on purpose:
# right O and L, but only future key blocks are skipped, not those left of
# the window. The checker must reject it.
s|int j_hi = j_end - 1;|int j_hi = j_end - 1; j_lo = 0;|
