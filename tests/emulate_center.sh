#!/bin/sh
# tests/emulate_center.sh -- the backward's centering pre-pass run on the CPU
# (tests/emulate_center.cpp says how and what is held): the regions bwd-dot
# and bwd-center of kernels/stage5_backward.cu through tests/emulate.sh. The
# GPU itself is tested by build/tests/gpu/stage5_tests --sweep accuracy and test_flash_op.py.
exec sh "$(dirname "$0")/emulate.sh" "emulated centering pre-pass" kernels/stage5_backward.cu \
    tests/emulate_center.cpp bwd-dot bwd-center
