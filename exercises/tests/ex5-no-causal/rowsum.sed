# exercises/tests/ex5-no-causal/rowsum.sed -- applied to the reference
# solution's rowsum.c to make this fixture, wrong on purpose: it sums over
# every key even when the problem is causal. The checker must reject it.
s|attn_mask mask = causal ? mask_causal(N, N) : mask_full(N, N);|attn_mask mask = mask_full(N, N); (void)causal;|
