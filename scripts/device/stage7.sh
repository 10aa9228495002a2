#!/bin/sh
# scripts/device/stage7.sh -- stage 7 on the two-GPU machine (nvidia-h200-x2)
# in one device call: make stage7-gpu (build/test_ring, tests/gpu/stage7.sh:
# NCCL on both GPUs, four virtual shards on one) and make ring-gpu (the
# measurement, data/gpu/ring.csv to be), logs and CSV under $OUT. Run from
# the repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/stage7.sh
#
# NVLink multicast stays off (the device notes: a program that uses it can
# take the shared GPUs out of service).
set -u
cd "$(dirname "$0")/../.." || exit 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
OUT=${OUT:-/tmp}
mkdir -p "$OUT" || exit 2
{ nvidia-smi -L; nvidia-smi topo -m; nvcc --version | tail -n 2
  echo "NCCL found: $(sh scripts/find_nccl.sh "$(command -v nvcc)")"; } > "$OUT/env.txt" 2>&1
timeout 300 make -j"$(nproc)" GPU_LOGS="$OUT" stage7-gpu > "$OUT/make_tests.log" 2>&1
echo "make stage7-gpu: exit $?; $(tail -n 1 "$OUT/stage7_tests.log" 2>/dev/null)"
grep -E '^(FAIL|SKIP) ' "$OUT/stage7_tests.log" 2>/dev/null | cut -c1-400
timeout 200 make GPU_DATA="$OUT" ring-gpu > "$OUT/make_ring.log" 2>&1
echo "make ring-gpu: exit $?"
grep -E '^  (pass|fwd|bwd) |largest N' "$OUT/ring_scale.log" 2>/dev/null
