#!/bin/bash
# scripts/gpu/v3_steps.sh -- one call on a Hopper GPU machine (make study-fwd-v3-steps) that builds
# version 3 (kernels/stage4_fwd_v3_hopper.cu), checks every step of it against
# the fp64 reference, times every step beside SDPA flash and cuDNN, and runs
# compute-sanitizer and Nsight Compute on it; a compact summary comes last.
#
# Usage (repository root, on the GPU machine; files go to $OUT, default
# build/v3_out):
#     FA_COMMIT=<commit> bash scripts/gpu/v3_steps.sh
# Stages (each under a time limit; a later one is skipped, with a line saying
# so, once V3_BUDGET_S seconds, default 240, have passed):
#   build      make build/v3_check (v3 for sm_90a only; ptxas report kept)
#   sass       HGMMA / UTMALDG / SYNCS / USETMAXREG / LDL / STL per kernel
#   pieces     TMA swizzle and wgmma fragment layouts, alone (exact integers),
#              also through step 7's descriptors and step 8's 176-key tiles
#   small      each step once on a small masked GQA problem, one process per
#              step, so a step that deadlocks is named and left out after
#   tests      the suite: every step in bf16, steps 5 and later in fp16 too
#   time       TFLOP/s of every step, bf16, N = 2048, 8192, 16384, d 64/128,
#              causal and not, and each step's output against step 1's
#   peers      SDPA flash and cuDNN at the same shapes (PyTorch); then the
#              step table (scripts/gpu/v3_summary.py)
#   sanitize   memcheck, racecheck, synccheck on the small problem: step 1,
#              step 5 and the steps after it
#   ncu        SpeedOfLight, warp state, compute workload, stall reasons and
#              pipe use at N = 8192, d = 128 and d = 64, non-causal: step 1
#              and the two steps with the best geometric mean in the timings
# Files in $OUT (8): v3_run.log (everything), v3_build.log, v3_ptxas.txt,
# v3_sass.txt, v3_tests.log, v3_steps.csv, v3_ncu.txt, v3_sanitize.log.
set -u
OUT=${OUT:-build/v3_out}
mkdir -p "$OUT"
BUDGET=${V3_BUDGET_S:-240}
# the steps of version 3 (kernels/stage4_fwd_v3_hopper.h: FA_V3_STEPS)
# (the header's name: the first kernels/stage4*_v3_hopper.h)
V3_H=$(ls kernels/stage4*_v3_hopper.h | head -n 1)
V3_O=build/$(basename "$V3_H" .h).o
ALL_STEPS=$(seq 1 "$(sed -n 's/^#define FA_V3_STEPS \([0-9]*\).*/\1/p' "$V3_H")")
T0=$(date +%s)
LOG=$OUT/v3_run.log
: > "$LOG"
SUMMARY=$(mktemp)
say() { echo "$*" | tee -a "$LOG"; }
note() { echo "$*" >> "$SUMMARY"; say "$*"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
over_budget() { [ "$(elapsed)" -ge "$BUDGET" ]; }
# stage NAME: false (with a line) when the budget is spent
stage() {
    if over_budget; then note "[$1] skipped: $(elapsed) s of the ${BUDGET} s budget spent"; return 1; fi
    say ""; say "==== [$1] at $(elapsed) s"; return 0
}

say "v3_steps.sh: commit ${FA_COMMIT:-unknown}, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv,noheader 2>&1 | tee -a "$LOG" | sed 's/^/[gpu] /' >> "$SUMMARY"
export PATH=$PATH:/usr/local/cuda/bin

# ---- build
stage build
if ! make -j"$(nproc)" build/v3_check > "$OUT/v3_build.log" 2>&1; then
    note "[build] FAILED:"; tail -30 "$OUT/v3_build.log" | tee -a "$LOG" "$SUMMARY"
    cat "$SUMMARY"; exit 1
fi
cp build/v3_ptxas.txt "$OUT/v3_ptxas.txt"
note "[build] ok in $(elapsed) s; ptxas: $(grep -o 'Used [0-9]* registers' build/v3_ptxas.txt | sort | uniq -c | tr -s ' ' | tr '\n' ';') spills: $(grep -c 'bytes spill stores, 0 bytes spill loads' build/v3_ptxas.txt) kernels with none of $(grep -c 'spill stores' build/v3_ptxas.txt)"
note "[build] ptxas notes: $(grep -c 'C75' build/v3_ptxas.txt) (C7519 'warpgroup.arrive injected' is harmless; 'serialized' fails the build)"
sh scripts/gpu/v3_sass.sh "$V3_O" > "$OUT/v3_sass.txt" 2>&1
tee -a "$LOG" < "$OUT/v3_sass.txt" | grep -v -e '^v3_test' -e 'fp16' | sed 's/^/[sass] /' >> "$SUMMARY"

# ---- pieces
STEPS_OK=""
if stage pieces; then
    timeout 60 build/v3_check --pieces > "$OUT/pieces.tmp" 2>&1
    rc=$?
    cat "$OUT/pieces.tmp" >> "$LOG"
    note "[pieces] exit $rc: $(grep -c '^PASS' "$OUT/pieces.tmp") PASS, $(grep -c '^FAIL' "$OUT/pieces.tmp") FAIL, $(grep -c '^SKIP' "$OUT/pieces.tmp") SKIP"
    grep -E '^FAIL|^  ' "$OUT/pieces.tmp" | head -30 >> "$SUMMARY"
    rm -f "$OUT/pieces.tmp"
fi

# ---- small: one process per step, so that a deadlock names its step
if stage small; then
    for k in $ALL_STEPS; do
        timeout 60 build/v3_check --small --steps $k > "$OUT/small.tmp" 2>&1
        rc=$?
        cat "$OUT/small.tmp" >> "$LOG"
        if [ $rc -eq 0 ]; then
            STEPS_OK="$STEPS_OK,$k"; note "[small] step $k: ok"
        else
            note "[small] step $k: exit $rc$([ $rc -eq 124 ] && echo ' (timeout: the process hung)')"
            grep -E '^FAIL|^  ' "$OUT/small.tmp" | head -14 >> "$SUMMARY"
            # a step that failed its checks still gets timed if it finished
            [ $rc -eq 1 ] && STEPS_OK="$STEPS_OK,$k"
        fi
    done
    rm -f "$OUT/small.tmp"
fi
STEPS_OK=${STEPS_OK#,}
[ -n "$STEPS_OK" ] || STEPS_OK=""
note "[small] steps that ran to the end: ${STEPS_OK:-none}"

# ---- tests
if [ -n "$STEPS_OK" ] && stage tests; then
    timeout 200 build/v3_check --tests --steps "$STEPS_OK" > "$OUT/v3_tests.log" 2>&1
    rc=$?
    cat "$OUT/v3_tests.log" >> "$LOG"
    np=$(grep -c '^PASS' "$OUT/v3_tests.log"); nf=$(grep -c '^FAIL' "$OUT/v3_tests.log")
    note "[tests] exit $rc: $np PASS, $nf FAIL $(grep -m1 'seed' "$OUT/v3_tests.log")"
    # the failures, each with its diagnosis, at most 60 lines
    grep -A7 '^FAIL' "$OUT/v3_tests.log" | head -60 >> "$SUMMARY"
fi

# ---- time (ours), then the peers into the same CSV
if [ -n "$STEPS_OK" ] && stage time; then
    timeout 150 build/v3_check --time --steps "$STEPS_OK" --csv "$OUT/v3_steps.csv" > "$OUT/time.tmp" 2>&1
    rc=$?
    cat "$OUT/time.tmp" >> "$LOG"
    note "[time] exit $rc (the table below has every number; v3_run.log the diff to step 1 and repeatability)"
    grep '^FAIL' "$OUT/time.tmp" | head -10 >> "$SUMMARY"
    rm -f "$OUT/time.tmp"
fi
if [ -s "$OUT/v3_steps.csv" ] && stage peers; then
    timeout 100 python3 scripts/gpu/v3_peers.py --csv "$OUT/v3_steps.csv" > "$OUT/peers.tmp" 2>&1
    rc=$?
    cat "$OUT/peers.tmp" >> "$LOG"
    note "[peers] exit $rc"
    grep -E '^peers' "$OUT/peers.tmp" >> "$SUMMARY"
    rm -f "$OUT/peers.tmp"
fi
if [ -s "$OUT/v3_steps.csv" ]; then
    python3 scripts/gpu/v3_summary.py "$OUT/v3_steps.csv" 2>&1 | tee -a "$LOG" | sed 's/^/[table] /' >> "$SUMMARY"
fi

# ---- sanitizers on the small problem, the two extremes of the schedule
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$SAN" ] && [ -n "$STEPS_OK" ]; then
    : > "$OUT/v3_sanitize.log"
    for tool in memcheck racecheck synccheck; do
        stage "sanitize $tool" || break
        ss=$(echo "$STEPS_OK" | tr ',' '\n' | awk '$1 == 1 || $1 >= 5' | paste -sd,)
        [ -n "$ss" ] || ss=$STEPS_OK
        timeout 100 "$SAN" --tool $tool --error-exitcode 9 build/v3_check --small --steps "$ss" \
            >> "$OUT/v3_sanitize.log" 2>&1
        rc=$?
        note "[sanitize] $tool steps $ss: exit $rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$OUT/v3_sanitize.log" | tail -1)"
        [ $rc -ne 0 ] && grep -m6 -E 'Error|Hazard|Invalid|barrier' "$OUT/v3_sanitize.log" >> "$SUMMARY"
    done
fi

# ---- ncu: step 1 and the two fastest steps (geometric mean of the timings),
# one launch each at N = 8192, non-causal, d = 128 then d = 64
if [ -n "$STEPS_OK" ] && command -v ncu > /dev/null && stage ncu; then
    best=$(python3 scripts/gpu/v3_summary.py "$OUT/v3_steps.csv" --best-steps 2 2>/dev/null)
    ns=$(echo "1,$best" | tr ',' '\n' | grep -xE "$(echo "$STEPS_OK" | tr ',' '|')" | sort -un | paste -sd,)
    [ -n "$ns" ] || ns=1
    note "[ncu] steps $ns"
    : > "$OUT/v3_ncu.txt"
    for shape in 8192,128,0 8192,64,0; do
        timeout 60 ncu --clock-control none -k regex:v3_kernel --section SpeedOfLight \
            --section WarpStateStats --section ComputeWorkloadAnalysis \
            build/v3_check --one $shape --steps "$ns" >> "$OUT/v3_ncu.txt" 2>&1
        note "[ncu] $shape sections exit $?"
        timeout 40 ncu --clock-control none -k regex:v3_kernel --metrics \
            'sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,lts__t_bytes.sum,dram__bytes.sum,regex:smsp__warp_issue_stalled_.*_per_warp_active\.pct,regex:sm__pipe_tensor.*_cycles_active\.avg\.pct_of_peak_sustained_active' \
            build/v3_check --one $shape --steps "$ns" >> "$OUT/v3_ncu.txt" 2>&1
        note "[ncu] $shape metrics exit $?"
    done
    # per kernel: duration, SM throughput (the tensor pipe), issue, the
    # exponential unit, L2 bytes and the stall reasons above 1%
    awk '/v3_kernel</ {print; next}
         /Duration|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued|pipe_xu|pipe_tensor|lts__t_bytes/ {print; next}
         /stalled_.*_per_warp_active/ {if ($NF + 0 >= 1) print}' "$OUT/v3_ncu.txt" \
        | sed 's/  */ /g; s/(CUtensorMap_st, CUtensorMap_st, CUtensorMap_st, v3_args)//; s/, Context 1, Stream [0-9]*, Device 0, CC 9.0//' \
        | head -120 >> "$SUMMARY"
fi

say ""
say "==== summary (${FA_COMMIT:-unknown}, $(elapsed) s)"
cat "$SUMMARY"
cat "$SUMMARY" >> "$LOG"
rm -f "$SUMMARY"
