# tests/mutants/reread_k.sed -- stage 1 with a wrong schedule: the S pass
# reads all of K again for every query row (what a kernel without room for K
# does), so it moves Sq Sk d elements of K instead of Sk d. test_io must fail.
0,/^        LOAD(vec, Q + (size_t)i \* d, 1, d, d, io, T_Q);$/s//        LOAD(vec, Q + (size_t)i * d, 1, d, d, io, T_Q); LOAD(kv, K, Sk, d, d, io, T_K);/
