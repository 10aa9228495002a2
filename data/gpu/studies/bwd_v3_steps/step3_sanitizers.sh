#!/bin/sh
# data/gpu/studies/bwd_v3_steps/step3_sanitizers.sh -- one device call (one H200, under ten minutes)
# on prebuilt binaries (see final1.sh for how they are built and carried):
#   1. backward version 3's step 3 (FA_BWD3_STEP=3) under every
#      compute-sanitizer tool, FA_SAN_RUNS (5) runs each on fresh seeds, the
#      commands of tests/gpu/run_gpu_tests.sh's stage5-v3-sanitizers; and the
#      stage-5 suite on version 3 under step 3: what making it the default
#      needs;
#   2. Nsight Compute on the Hopper passes beside cuDNN's (scripts/gpu/ncu_hopper.sh)
#      -> $OUT/ncu.tgz;
#   3. the decode bandwidth at this commit (make decode-gpu's script, on
#      the budget left).
# Run from the repository root: FA_COMMIT=<c> OUT=<dir> sh data/gpu/studies/bwd_v3_steps/step3_sanitizers.sh
set -u
OUT=${OUT:-/tmp}
D=$OUT/probe
mkdir -p "$D"
export PYTHONUNBUFFERED=1 FA_COMMIT=${FA_COMMIT:-unknown}
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$D/summary.txt"; }
sh scripts/device/env.sh "sh data/gpu/studies/bwd_v3_steps/step3_sanitizers.sh" > "$D/env.txt"
cat "$D/env.txt" >> "$D/summary.txt"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

# 1. step 3: the suite and the repeated sanitizers, 8 programs at a time
( FA_BWD3_STEP=3 timeout -k 5 80 build/tests/gpu/stage5_tests --sweep tests --kernel 3 > "$D/step3_tests.log" 2>&1
  echo "exit $?" >> "$D/step3_tests.log" ) &
BWD3='build/tests/gpu/stage5_tests --sweep small --kernel 3 --seed $S && ./stage5 --kernel 3 --random --seed $S --heads 2 --kv-heads 1 --n 200 --seqlen-k 330 --d 64 --window 10,0 --repeats 1'
n=0
for tool in memcheck racecheck synccheck initcheck; do
    r=1
    while [ "$r" -le "${FA_SAN_RUNS:-5}" ]; do
        S=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
        f=$D/.san_${tool}_$r.log
        ( S=$S FA_BWD3_STEP=3 timeout -k 5 150 "$SAN" --tool $tool --error-exitcode 9 sh -c "$BWD3" > "$f" 2>&1
          rc=$?
          echo "$tool run $r seed $S: exit $rc; $(grep -m1 'SUMMARY' "$f" | sed 's/^=* *//'); $(grep -c '^PASS' "$f") PASS, $(grep -c '^FAIL' "$f") FAIL" >> "$D/step3_sanitizers.log"
          [ "$rc" -ne 0 ] && grep -m3 -i 'hazard\|race\|barrier\|uninit\|invalid\|^FAIL' "$f" >> "$D/step3_sanitizers.log" ) &
        n=$((n + 1)); [ $((n % 7)) -eq 0 ] && wait
        r=$((r + 1))
    done
done
wait
rm -f "$D"/.san_*.log
say "step 3 suite: $(tail -n 1 "$D/step3_tests.log"), $(grep -c '^PASS' "$D/step3_tests.log") PASS, $(grep -c '^FAIL' "$D/step3_tests.log") FAIL"
say "step 3 sanitizers: $(grep -c 'exit 0;' "$D/step3_sanitizers.log") of $n clean"
grep -v 'exit 0;' "$D/step3_sanitizers.log" | head -n 12 | tee -a "$D/summary.txt"

# 2. Nsight Compute (scripts/gpu/ncu_hopper.sh)
sh scripts/gpu/ncu_hopper.sh "$D/ncu" | tee -a "$D/summary.txt"
cd "$D" && tar czf ../ncu.tgz ncu && rm -rf ncu && cd - > /dev/null

# 3. the decode bandwidth in what is left of 560 s
left=$(( 560 - ($(date +%s) - t0) ))
[ "$left" -gt 40 ] && { timeout "$left" python3 scripts/gpu/bench_decode.py --csv "$D/decode.csv" --budget-s $((left - 25)) > "$D/decode.log" 2>&1
    say "decode exit $? (budget $((left - 25)) s)"; }
say "done"
