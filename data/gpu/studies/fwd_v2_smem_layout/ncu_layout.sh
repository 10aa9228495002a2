#!/bin/sh
# data/gpu/studies/fwd_v2_smem_layout/ncu_layout.sh OUT.csv -- why version 2 requests more L2 bytes than
# its IO model: the same kernel with padded shared-memory rows (the default)
# and with XOR-swizzled rows (-DFA_V2_SWIZZLE=1), profiled by Nsight Compute
# on the shapes of scripts/gpu/ncu_io.sh (version 2 only). Part of make io-gpu.
#
# Per kernel: LDGSTS (cp.async) warp instructions executed, L2 read requests
# and 32-byte sectors from the SMs, kernel time. Each LDGSTS of a warp moves
# 512 bytes, so 512 x instructions is what the model counts; sectors per
# request shows whether a request covers a whole 128-byte line (4) or not.
# Writes OUT.csv (default data/gpu/studies/fwd_v2_smem_layout/v2_layout_ab.csv). Cost: about a minute.
set -e
out=${1:-data/gpu/studies/fwd_v2_smem_layout/v2_layout_ab.csv}
NVCC=${NVCC:-nvcc}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
command -v "$NCU" >/dev/null 2>&1 || { echo "ncu_layout.sh: skipped: ncu (Nsight Compute) not found ($NCU)"; exit 0; }
tmp=${TMPDIR:-/tmp}/ncu_layout.$$
mkdir -p "$tmp" build
trap 'rm -rf "$tmp"' EXIT
$NVCC -O3 -lineinfo -std=c++17 -gencode arch=compute_90,code=sm_90 -DFA_V2_SWIZZLE=1 -Icore -Ikernels \
    -shared -Xcompiler -fPIC kernels/fa_api.cu kernels/stage4_fwd_v[012].cu -o build/libfa_gpu_swizzle.so -lcublas
METRICS=smsp__inst_executed_op_ldgsts.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,gpu__time_duration.sum,launch__grid_size
for layout in padded swizzle; do
    lib=build/libfa_gpu.so
    [ $layout = swizzle ] && lib=build/libfa_gpu_swizzle.so
    "$NCU" --profile-from-start off --clock-control none --csv --page raw --print-units base \
        --metrics $METRICS --log-file "$tmp/$layout.csv" \
        python3 scripts/gpu/bench_gpu.py --lib $lib --impls ours_v2_mma --profile-io "$tmp/$layout.json" >/dev/null
done
python3 data/gpu/studies/fwd_v2_smem_layout/ncu_layout.py "$tmp" "$out" "ncu --profile-from-start off --clock-control none --metrics $METRICS python3 scripts/gpu/bench_gpu.py --lib LIB --impls ours_v2_mma --profile-io MAP.json"
rm -rf "$tmp"
