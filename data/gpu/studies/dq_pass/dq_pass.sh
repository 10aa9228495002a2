#!/bin/sh
# data/gpu/studies/dq_pass/dq_pass.sh -- the dQ pass (FA_BWD_DQ_PASS,
# kernels/stage5_bwd_dq.cu) on one H200, in one device call: its accuracy on
# the far-logit inputs beside every version (build/tests/gpu/stage5_tests --sweep accuracy), the
# GPU accuracy table and its cost beside SDPA (scripts/gpu/dq_accuracy.py), and
# RUNS runs of each compute-sanitizer tool on fresh seeds. Run from the
# repository root with ./stage5 and build/libfa_gpu.so built from the
# commit named:
#
#     FA_COMMIT=<commit> OUT=<dir> RUNS=3 sh data/gpu/studies/dq_pass/dq_pass.sh
#
# Files land under $OUT/dqp/.
set -u
OUT=${OUT:-/tmp}
D=$OUT/dqp
mkdir -p "$D"
export PYTHONUNBUFFERED=1 FA_COMMIT=${FA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
RUNS=${RUNS:-3}
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$D/summary.txt"; }
sh scripts/device/env.sh "sh data/gpu/studies/dq_pass/dq_pass.sh" > "$D/env.txt"
cat "$D/env.txt" >> "$D/summary.txt"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

timeout 200 build/tests/gpu/stage5_tests --sweep accuracy > "$D/accuracy.log" 2>&1
say "stage5 --sweep accuracy exit $?: $(grep -c '^PASS' "$D/accuracy.log") PASS, $(grep -c '^FAIL' "$D/accuracy.log") FAIL"
timeout 240 python3 scripts/gpu/dq_accuracy.py --csv "$D/dq_accuracy.csv" --repeats 10 > "$D/dq_accuracy.log" 2>&1
say "dq_accuracy exit $?"

# the sanitizers: RUNS fresh seeds per tool, four at a time
CMD='./stage5 --kernel 2 --dtype bf16 --random --seed $S --heads 4 --kv-heads 2 --n 70 --seqlen-k 50 --d 64 --causal --accurate-dq=full --repeats 1 && ./stage5 --kernel 4 --dtype fp16 --random --seed $S --heads 2 --n 70 --d 128 --window 20,3 --accurate-dq=full --repeats 1 && ./stage5 --kernel 3 --dtype bf16 --random --seed $S --heads 2 --n 130 --d 64 --causal --accurate-dq=full --repeats 1'
SEED0=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
n=0
for tool in memcheck racecheck synccheck initcheck; do
    r=1
    while [ "$r" -le "$RUNS" ]; do
        S=$((SEED0 + r)) n=$((n + 1))
        ( S=$S timeout 240 "$SAN" --tool "$tool" --error-exitcode 9 sh -c "$CMD" > "$D/san_${tool}_$r.log" 2>&1
          echo "$tool run $r seed $S: exit $?, $(grep -c '^PASS' "$D/san_${tool}_$r.log") PASS, $(grep -c '^FAIL' "$D/san_${tool}_$r.log") FAIL, $(grep -m1 'SUMMARY' "$D/san_${tool}_$r.log")" >> "$D/san.txt" ) &
        [ $((n % 4)) -eq 0 ] && wait
        r=$((r + 1))
    done
done
wait
cat "$D/san.txt" >> "$D/summary.txt"
say "done"
