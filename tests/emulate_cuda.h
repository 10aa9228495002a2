/*
 * tests/emulate_cuda.h -- enough of CUDA to run a kernel's source on the CPU,
 * for the emulation suites (tests/emulate.sh): one std::thread per CUDA
 * thread of a block (launch(), blocks one after another), a std::barrier
 * for __syncthreads and one per warp for __syncwarp and the shuffles, static
 * arrays for __shared__ memory (one block runs at a time), bf16 as its bits
 * and fp16 as _Float16, both rounded to nearest even. What it checks is the
 * arithmetic and indexing of the source, never the GPU's memory ordering or
 * timing. tests/emulate_center.cpp and tests/emulate_decode.cpp include it;
 * the decode emulation adds the pieces its kernels need beyond these (mma,
 * byte_perm).
 */
#ifndef FA_EMULATE_CUDA_H
#define FA_EMULATE_CUDA_H
#include <barrier>
#include <memory>
#include <thread>
#include <vector>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
/* the CUDA keywords a kernel's source spells, made into nothing (or their
 * host meaning) so that g++ compiles the source, and the one vector type the
 * kernels load by */
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__
#define __align__(n) __attribute__((aligned(n)))
struct uint4 { unsigned x, y, z, w; };
struct D3 { int x, y, z; };
thread_local D3 threadIdx, blockIdx, gridDim;
static std::barrier<> *g_bar;
static void __syncthreads() { g_bar->arrive_and_wait(); }
static std::vector<std::unique_ptr<std::barrier<>>> *g_warp_bar;
static void __syncwarp() { (*g_warp_bar)[threadIdx.x / 32]->arrive_and_wait(); }
/* a shuffle: each lane posts its value in its warp's slots, then reads its partner's */
template <class X> static X emu_shfl_xor(X v, int o)
{
    static X slots[32][32];
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    slots[w][lane] = v;
    __syncwarp();
    X r = slots[w][lane ^ o];
    __syncwarp();
    return r;
}
static float __shfl_xor_sync(unsigned, float v, int o) { return emu_shfl_xor(v, o); }
static double __shfl_xor_sync(unsigned, double v, int o) { return emu_shfl_xor(v, o); }
template <class T> static T __ldg(const T *p) { return *p; }
using std::isfinite;
using std::min;

struct bf16 { uint16_t x; };
static float to_f(float v) { return v; }
static float to_f(bf16 v) { uint32_t u = (uint32_t)v.x << 16; float f; memcpy(&f, &u, 4); return f; }
static float to_f(_Float16 v) { return (float)v; }
template <class T> T from_f(float x);
template <> float from_f<float>(float x) { return x; }
template <> bf16 from_f<bf16>(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return {0x7fc0};
    u += 0x7fff + ((u >> 16) & 1);
    return {(uint16_t)(u >> 16)};
}
template <> _Float16 from_f<_Float16>(float x) { return (_Float16)x; }

/* f() on every thread of every block of grid, `threads` to a block */
template <class F> void launch(D3 grid, int threads, F f)
{
    for (int z = 0; z < grid.z; z++)
        for (int y = 0; y < grid.y; y++)
            for (int x = 0; x < grid.x; x++) {
                std::barrier<> bar(threads);
                g_bar = &bar;
                std::vector<std::unique_ptr<std::barrier<>>> wb;
                for (int w = 0; w < (threads + 31) / 32; w++)
                    wb.push_back(std::make_unique<std::barrier<>>(std::min(32, threads - 32 * w)));
                g_warp_bar = &wb;
                std::vector<std::thread> ts;
                for (int t = 0; t < threads; t++)
                    ts.emplace_back([&, t] {
                        threadIdx = {t, 0, 0};
                        blockIdx = {x, y, z};
                        gridDim = grid;
                        f();
                    });
                for (auto &th : ts) th.join();
            }
}
#endif /* FA_EMULATE_CUDA_H */
