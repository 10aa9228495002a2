#!/bin/sh
# scripts/device/varlen.sh -- packed sequences (flash_attn_varlen_func) on the
# lent H200 in one call of under two minutes, from the repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/varlen.sh [prebuilt.tgz]
#
# With a tarball (build/libfa_gpu.so, stage4, stage5 built on the build
# machine in the same absolute path; see docs: the binaries bake DATA_DIR)
# it unpacks that instead of building; else make builds them here.
#   1. the machine (env.txt);
#   2. scripts/gpu/bench_varlen.py --csv $OUT/varlen.csv (one of make
#      gpu-data-apps's commands), alone on the GPU;
#   3. at the same time, since they time nothing: tests/gpu/test_varlen_op.py,
#      tests/gpu/test_flash_op.py (every part but the pip install), ./stage4
#      --sweep tests and build/tests/gpu/stage5_tests --sweep tests, each through tests/run.sh
#      (its closing counts line).
# Files under ${OUT:-/tmp}: varlen.csv, varlen_device.log (every command's
# output in order, with exit codes and seconds), env.txt.
set -u
OUT=${OUT:-/tmp}
mkdir -p "$OUT" || exit 2
if [ -z "${FA_COMMIT:-}" ]; then
    FA_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
fi
export FA_COMMIT PYTHONUNBUFFERED=1
log="$OUT/varlen_device.log"
t0=$(date +%s)
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); commit: $FA_COMMIT; command: sh scripts/device/varlen.sh $*"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt" > "$log"
if [ $# -ge 1 ] && [ -f "$1" ]; then
    tar xzf "$1" && echo "== prebuilt: $1 unpacked" >> "$log"
else
    make -j16 build/libfa_gpu.so stage4 stage5 build/tests/gpu/stage4_tests build/tests/gpu/stage5_tests >> "$log" 2>&1; echo "== build: exit $?" >> "$log"
fi
echo "== bench ($(( $(date +%s) - t0 )) s)" >> "$log"
# (make gpu-data-apps's command, called directly: with prebuilt binaries make
# would see sources newer than them and rebuild)
timeout 45 python3 scripts/gpu/bench_varlen.py --csv "$OUT/varlen.csv" >> "$log" 2>&1
echo "== bench: exit $? ($(( $(date +%s) - t0 )) s)" >> "$log"
PARTS=grad_tests,deterministic_tests,plumbing_tests,op_path_tests,compile_tests,graph_tests,strided_tests,empty_tests,stream_value_tests,flash_attn_func_tests
( timeout 75 sh tests/run.sh "python3 tests/gpu/test_varlen_op.py" > "$OUT/.varlen_op.log" 2>&1; echo "exit $?" >> "$OUT/.varlen_op.log" ) &
( FA_OP_PARTS=$PARTS timeout 75 sh tests/run.sh "python3 tests/gpu/test_flash_op.py" > "$OUT/.flash_op.log" 2>&1; echo "exit $?" >> "$OUT/.flash_op.log" ) &
( timeout 75 sh tests/run.sh "build/tests/gpu/stage4_tests --sweep tests" "build/tests/gpu/stage5_tests --sweep tests" > "$OUT/.sweeps.log" 2>&1; echo "exit $?" >> "$OUT/.sweeps.log" ) &
wait
for part in varlen_op flash_op sweeps; do
    echo "== $part (FA_OP_PARTS=$PARTS for flash_op)" >> "$log"
    cat "$OUT/.$part.log" >> "$log"
    rm -f "$OUT/.$part.log"
done
echo "== done in $(( $(date +%s) - t0 )) s" >> "$log"
grep -E '^(FAIL|SKIP) |passed|^== |^ours|^sdpa' "$log" | cut -c1-220
