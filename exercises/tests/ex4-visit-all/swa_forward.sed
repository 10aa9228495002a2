# exercises/tests/ex4-visit-all/swa_forward.sed -- applied to the reference
# solution's swa_forward.c to make this fixture, wrong on purpose: right O and
# L, but every key block is visited (no skipping). The checker must reject it.
s|int j_hi = j_end - 1;|int j_hi = Tc - 1; j_lo = 0; (void)j_end;|
