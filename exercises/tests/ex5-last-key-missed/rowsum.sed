# exercises/tests/ex5-last-key-missed/rowsum.sed -- applied to the reference
# solution's rowsum.c to make this fixture, wrong on purpose: it stops one key
# short of the last key each row sees (a causal row 0 sums nothing). The
# checker must fail the row sums, and only them: L is used the right way, so
# rowsum_uses_L stays right (its hint is about L, not about the keys).
s|j <= last; j++|j < last; j++|
