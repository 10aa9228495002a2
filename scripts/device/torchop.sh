#!/bin/sh
# scripts/device/torchop.sh -- the PyTorch op on a GPU machine in one device
# call: make torchop-gpu (tests/gpu/test_flash_op.py against SDPA) and make
# gpu-data-op (the small transformer trained with our op and with SDPA,
# train_loss.csv with provenance), everything under $OUT. Run from the
# repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/torchop.sh
#
# Exit status: 0 when both targets pass.
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -n 1; } > "$OUT/env.txt" 2>&1
timeout 300 make -j"$(nproc)" GPU_LOGS="$OUT" torchop-gpu > "$OUT/make_tests.log" 2>&1
tests_rc=$?
echo "make torchop-gpu: exit $tests_rc; $(tail -n 1 "$OUT/torchop_tests.log" 2>/dev/null)"
grep -E '^(FAIL|SKIP) ' "$OUT/torchop_tests.log" 2>/dev/null | head -n 40
timeout 600 make GPU_DATA="$OUT" gpu-data-op > "$OUT/make_train.log" 2>&1
train_rc=$?
echo "make gpu-data-op: exit $train_rc"
tail -n 6 "$OUT/train_loss.log" 2>/dev/null
[ "$tests_rc" -eq 0 ] && [ "$train_rc" -eq 0 ]
