#!/bin/sh
# tests/emulate_center.sh -- the backward's centering pre-pass run on the CPU
# (tests/emulate_center.cpp says how and what is held): the regions bwd-dot
# of kernels/stage5_bwd_prepass.cu and bwd-center of
# kernels/stage5_bwd_center.cu through tests/emulate.sh. The GPU itself is
# tested by ./stage5 --sweep accuracy and test_flash_op.py.
exec sh "$(dirname "$0")/emulate.sh" "emulated centering pre-pass" kernels/stage5_bwd_prepass.cu \
    tests/emulate_center.cpp bwd-dot kernels/stage5_bwd_center.cu#bwd-center
