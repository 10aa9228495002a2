#!/bin/sh
# scripts/device/varlen_bwd3.sh -- packed sequences through backward version 3
# (kernels/stage5_bwd_hopper.cu, VL) on the lent H200, in one call of about
# three minutes, from the repository root:
#
#     FA_COMMIT=<commit> OUT=<dir> sh scripts/device/varlen_bwd3.sh [prebuilt.tgz]
#
# With a tarball (build/libfa_gpu.so and stage5, built on the build machine
# from the same commit) it unpacks that; else make builds them here.
#   1. scripts/bench_varlen.py --csv $OUT/varlen.csv alone on the GPU (the
#      backward's ours_varlen_equal against ours_dense: the varlen plumbing's
#      cost, both on backward 3 now);
#   2. at the same time, since they time nothing: tests/gpu/test_varlen_op.py
#      with backward 3 in its default step (2), in step 3 (FA_BWD3_STEP=3)
#      and in step 1 (FA_BWD3_STEP=1: the 16-byte reductions of the
#      deterministic mode without the turns), and ./stage5 --sweep tests (the
#      dense path), each through tests/run.sh;
#   3. compute-sanitizer memcheck, racecheck and synccheck on the suite's
#      small C-level calls (FA_VARLEN_PARTS=poison_tests: d 64 and 128, every
#      varlen backward, both modes).
# Files under ${OUT:-/tmp}: varlen.csv, varlen_bwd3.log (every command's
# output in order, with exit codes and seconds), env.txt.
set -u
OUT=${OUT:-/tmp}
mkdir -p "$OUT" || exit 2
if [ -z "${FA_COMMIT:-}" ]; then
    FA_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
fi
export FA_COMMIT PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
log="$OUT/varlen_bwd3.log"
t0=$(date +%s)
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); commit: $FA_COMMIT; command: sh scripts/device/varlen_bwd3.sh $*"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
    compute-sanitizer --version 2>&1 | tail -1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt" > "$log"
if [ $# -ge 1 ] && [ -f "$1" ]; then
    tar xzf "$1" && echo "== prebuilt: $1 unpacked" >> "$log"
else
    make -j16 build/libfa_gpu.so stage5 >> "$log" 2>&1; echo "== build: exit $?" >> "$log"
fi
echo "== bench ($(( $(date +%s) - t0 )) s)" >> "$log"
timeout 60 python3 scripts/bench_varlen.py --csv "$OUT/varlen.csv" >> "$log" 2>&1
echo "== bench: exit $? ($(( $(date +%s) - t0 )) s)" >> "$log"
T="python3 tests/gpu/test_varlen_op.py"
( timeout 80 sh tests/run.sh "$T" > "$OUT/.s2.log" 2>&1; echo "exit $?" >> "$OUT/.s2.log" ) &
( FA_BWD3_STEP=3 timeout 80 sh tests/run.sh "$T" > "$OUT/.s3.log" 2>&1; echo "exit $?" >> "$OUT/.s3.log" ) &
( FA_BWD3_STEP=1 timeout 80 sh tests/run.sh "$T" > "$OUT/.s1.log" 2>&1; echo "exit $?" >> "$OUT/.s1.log" ) &
( timeout 80 sh tests/run.sh "./stage5 --sweep tests" > "$OUT/.sweep.log" 2>&1; echo "exit $?" >> "$OUT/.sweep.log" ) &
wait
for part in s2 s3 s1 sweep; do
    echo "== $part (s2: default step, s3, s1: FA_BWD3_STEP; sweep: ./stage5 --sweep tests)" >> "$log"
    cat "$OUT/.$part.log" >> "$log"
    rm -f "$OUT/.$part.log"
done
for tool in memcheck racecheck synccheck; do
    echo "== sanitizer $tool ($(( $(date +%s) - t0 )) s)" >> "$log"
    FA_VARLEN_PARTS=poison_tests timeout 60 compute-sanitizer --tool "$tool" --error-exitcode 3 $T >> "$log" 2>&1
    echo "== sanitizer $tool: exit $?" >> "$log"
done
echo "== done in $(( $(date +%s) - t0 )) s" >> "$log"
grep -E '^(FAIL|SKIP) |passed|^== |ERROR SUMMARY|RACECHECK SUMMARY|^ours|^sdpa' "$log" | cut -c1-220
