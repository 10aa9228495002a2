#!/bin/sh
# scripts/device/accuracy.sh -- the backward's dQ accuracy on logits near -120
# and the cost of centering K, on one GPU, in one device call (about three
# minutes with the GPU targets built, add the build's time otherwise). Run
# from the repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/accuracy.sh
#
#   1. build   build/libfa_gpu.so and stage5, unless both are there and load
#   2. make accuracy-gpu GPU_DATA=$OUT (kernels/gpu_data.mk):
#              scripts/dq_accuracy.py: every backward version (with K centered,
#              FA_BWD_CENTER_K, and as given) beside SDPA flash, cuDNN,
#              efficient and math; bf16 and fp16, seqlen 64, 192, 704, 1024,
#              causal and not; then the centering's cost, the backward with and
#              without it for every tensor-core version at the shapes of
#              data/gpu/bench_bwd.csv (bf16, B N = 16384, d = 64 and 128,
#              N = 512 to 16384, causal and not) beside the cost
#              fa_bwd_center_cost predicts for each version and the auto mode's choice
#              -> $OUT/dq_accuracy.csv (copy to data/gpu/dq_accuracy.csv)
#              ./stage5 --sweep accuracy (the far-logit tests of make gpu-test)
#              -> $OUT/dq_accuracy_stage5.log (copy to data/gpu/)
#   3. the op's checks, tests/gpu/test_flash_op.py -> $OUT/flash_op.log, its
#      accurate_dq lines also in $OUT/flash_op_accuracy.log
# $OUT/env.txt holds nvidia-smi, nvcc and torch's versions.
set -u
OUT=${OUT:-/tmp}
export PYTHONUNBUFFERED=1
{ nvidia-smi; nvcc --version;
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"; } \
    > "$OUT/env.txt" 2>&1
# carried builds are used when they load here (same CUDA major version)
if ! ./stage5 --help > /dev/null 2>&1 ||
   ! python3 -c "import ctypes; ctypes.CDLL('build/libfa_gpu.so')" > /dev/null 2>&1; then
    timeout 250 make -j"$(nproc)" stage5 build/libfa_gpu.so > "$OUT/build.log" 2>&1
    echo "build exit $?"
fi
timeout 420 make -s accuracy-gpu GPU_DATA="$OUT" > "$OUT/dq_accuracy.log" 2>&1
echo "make accuracy-gpu exit $?"
timeout 240 python3 tests/gpu/test_flash_op.py > "$OUT/flash_op.log" 2>&1
rc=$?
grep -i 'accura' "$OUT/flash_op.log" > "$OUT/flash_op_accuracy.log"
echo "test_flash_op exit $rc: $(grep -c '^PASS' "$OUT/flash_op.log") passed, $(grep -c '^FAIL' "$OUT/flash_op.log") failed"
echo "stage5 --sweep accuracy: $(grep -c '^PASS' "$OUT/dq_accuracy_stage5.log") passed, $(grep -c '^FAIL' "$OUT/dq_accuracy_stage5.log") failed, $(tail -n 1 "$OUT/dq_accuracy_stage5.log")"
cat "$OUT/dq_accuracy.log"
grep '^FAIL' "$OUT/dq_accuracy_stage5.log" "$OUT/flash_op.log" | cut -c1-600
