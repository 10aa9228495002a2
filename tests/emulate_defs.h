/*
 * tests/emulate_defs.h -- the CUDA keywords a kernel's source spells, made
 * into nothing (or their host meaning) so that g++ compiles the source, and
 * the one vector type the kernels load by. Shared by tests/emulate_cuda.h
 * (the threads, barriers and launch) and tests/emulate_decode.cpp, whose
 * emulation keeps its own warp model beside the mma and byte_perm it needs.
 */
#ifndef FA_EMULATE_DEFS_H
#define FA_EMULATE_DEFS_H
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__
#define __align__(n) __attribute__((aligned(n)))
struct uint4 { unsigned x, y, z, w; };
#endif
