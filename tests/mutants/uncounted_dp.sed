# tests/mutants/uncounted_dp.sed -- stage 1 moving a row of dP without
# counting it (the copy made by hand, not through LOAD): the count falls
# below the model. test_io must fail.
s/LOAD(row2, dP + (size_t)i \* Sk, 1, Sk, Sk, io, T_dP);/LOAD(row2, dP + (size_t)i * Sk, 1, Sk, Sk, NULL, T_dP);/
