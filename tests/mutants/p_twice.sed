# tests/mutants/p_twice.sed -- stage 1's O pass reading each row of P twice
# (once to find its nonzero entries, say): counted, but not the model's
# schedule. test_io must fail.
s/^\(        LOAD(row, P + (size_t)i \* Sk, 1, Sk, Sk, io, T_P);\)$/\1 LOAD(row, P + (size_t)i * Sk, 1, Sk, Sk, io, T_P);/
