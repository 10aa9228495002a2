#!/bin/sh
# scripts/device/final.sh -- the measurements the paper and data/gpu/ rest on,
# in one device call on the two-GPU machine (nvidia-h200-x2): make targets of
# kernels/gpu_data.mk, two lanes at once so that the tests never share a GPU
# with a timing. Run from the repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> [OLD_STAGE5=<binary>] sh scripts/device/final.sh
#
#   build   make stage4 stage5 stage7 build/libfa_gpu.so build/v3_check
#   ring    make gpu-env ring-gpu                       (both GPUs, alone)
#   GPU 0   make bench-gpu io-gpu opcodes-gpu
#   GPU 1   make final-tests-gpu [bitwise-gpu] train-gpu
# Everything lands in $OUT/final.tgz (the device tool returns at most 8
# files), with a summary printed last. NVLink multicast stays off.
set -u
OUT=${OUT:-/tmp}
D=$OUT/final
mkdir -p "$D"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$D/summary.txt"; }
run() { tag=$1; shift; timeout "$@" > "$D/$tag.log" 2>&1; say "$tag exit $?"; }
run build 200 make -j"$(nproc)" stage4 stage5 stage7 build/libfa_gpu.so build/v3_check
run ring 120 make GPU_DATA="$D" gpu-env ring-gpu
( export CUDA_VISIBLE_DEVICES=0
  run bench 330 make GPU_DATA="$D" bench-gpu
  run io 160 make GPU_DATA="$D" io-gpu
  run opcodes 120 make GPU_DATA="$D" opcodes-gpu ) &
( export CUDA_VISIBLE_DEVICES=1
  run tests 330 make GPU_DATA="$D" final-tests-gpu
  [ -n "${OLD_STAGE5:-}" ] && run bitwise 300 make GPU_DATA="$D" OLD_STAGE5="$OLD_STAGE5" bitwise-gpu
  run train 150 make GPU_DATA="$D" train-gpu ) &
wait
for f in final_stage4_tests final_stage5_tests final_flash_op; do
    echo "$f: $(grep -c '^PASS' "$D/$f.log" 2>/dev/null) PASS, $(grep -c '^FAIL' "$D/$f.log" 2>/dev/null) FAIL" >> "$D/summary.txt"
    grep '^FAIL' "$D/$f.log" 2>/dev/null | head -n 6 | cut -c1-300 >> "$D/summary.txt"
done
grep -E '^  (pass|fwd|bwd) |largest N' "$D/final_ring_scale.log" >> "$D/summary.txt" 2>/dev/null
tail -n 6 "$D/final_train.log" >> "$D/summary.txt" 2>/dev/null
cd "$OUT" && tar czf final.tgz final && rm -rf final
echo "== summary"
tar xzf final.tgz final/summary.txt -O
