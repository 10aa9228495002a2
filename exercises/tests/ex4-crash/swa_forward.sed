# exercises/tests/ex4-crash/swa_forward.sed -- applied to the reference
# solution's swa_forward.c to make this fixture, wrong on purpose: a
# segmentation fault on the case N = 7. The checker's report must name that
# case, not just die.
s|#include <math.h>|#include <math.h>\n#include <signal.h>|
s|    sram_reset(sram);|    sram_reset(sram);\n    if (N == 7) raise(SIGSEGV);|
