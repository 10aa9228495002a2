#!/bin/sh
# tests/emulate_decode.sh -- stage 8's GPU kernels run on the CPU
# (tests/emulate_decode.cpp says how and what is held): the regions
# decode-split-kernel and decode-combine-kernel of kernels/stage8_decode.cu
# through tests/emulate.sh (cut into build/emulate/, compiled with g++,
# C++20: one std::thread per CUDA thread, std::barrier for __syncthreads,
# and run; SKIP where g++ cannot build it). The GPU itself is tested by
# tests/gpu/stage8.sh.
exec sh "$(dirname "$0")/emulate.sh" "emulated decode kernels" kernels/stage8_decode.cu \
    tests/emulate_decode.cpp decode-split-kernel decode-combine-kernel
