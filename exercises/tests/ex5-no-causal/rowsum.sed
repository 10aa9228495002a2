# exercises/tests/ex5-no-causal/rowsum.sed -- applied to the reference
# solution's rowsum.c to make this fixture, wrong on purpose: it sums over
# every key even when the problem is causal. The checker must reject it.
s|int last = causal ? i : N - 1;|int last = N - 1; (void)causal;|
