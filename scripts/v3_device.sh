#!/bin/bash
# scripts/v3_device.sh -- one call on a Hopper GPU machine that builds
# version 3 (kernels/stage4_v3_hopper.cu), checks every step of it against
# the fp64 reference, times every step beside SDPA flash and cuDNN, and runs
# compute-sanitizer and Nsight Compute on it; a compact summary comes last.
#
# Usage (repository root, on the GPU machine; files go to $OUT, default
# build/v3_out):
#     FA_COMMIT=<commit> bash scripts/v3_device.sh
# Stages (each under a time limit; a later one is skipped, with a line saying
# so, once V3_BUDGET_S seconds, default 280, have passed):
#   build      make build/v3_check (v3 for sm_90a only; ptxas report kept)
#   sass       HGMMA / UTMALDG / SYNCS / USETMAXREG / LDL / STL per kernel
#   pieces     TMA swizzle and wgmma fragment layouts, alone (exact integers)
#   small      each step once on a small masked GQA problem, one process per
#              step, so a step that deadlocks is named and left out after
#   tests      the suite: every step in bf16, step 5 in fp16 too
#   time       TFLOP/s of every step, bf16, N = 2048, 8192, 16384, d 64/128,
#              causal and not, and each step's output against step 1's
#   peers      SDPA flash and cuDNN at the same shapes (PyTorch)
#   ncu        SpeedOfLight, warp stall reasons, pipe use: each step once at
#              N = 8192, d = 128
#   sanitize   memcheck, racecheck, synccheck on the small problem, steps 1, 5
# Files in $OUT (8): v3_run.log (everything), v3_build.log, v3_ptxas.txt,
# v3_sass.txt, v3_tests.log, v3_steps.csv, v3_ncu.txt, v3_sanitize.log.
set -u
OUT=${OUT:-build/v3_out}
mkdir -p "$OUT"
BUDGET=${V3_BUDGET_S:-280}
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

say "v3_device.sh: commit ${FA_COMMIT:-unknown}, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
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
sh scripts/v3_sass.sh build/stage4_v3_hopper.o > "$OUT/v3_sass.txt" 2>&1
grep -v '^v3_test' "$OUT/v3_sass.txt" | tee -a "$LOG" | sed 's/^/[sass] /' >> "$SUMMARY"

# ---- pieces
STEPS_OK=""
if stage pieces; then
    timeout 60 build/v3_check --pieces > "$OUT/pieces.tmp" 2>&1
    rc=$?
    cat "$OUT/pieces.tmp" >> "$LOG"
    grep -E '^(PASS|FAIL|SKIP)|^  ' "$OUT/pieces.tmp" | head -40 >> "$SUMMARY"
    note "[pieces] exit $rc"
    rm -f "$OUT/pieces.tmp"
fi

# ---- small: one process per step, so that a deadlock names its step
if stage small; then
    for k in 1 2 3 4 5; do
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
    timeout 200 build/v3_check --time --steps "$STEPS_OK" --csv "$OUT/v3_steps.csv" > "$OUT/time.tmp" 2>&1
    rc=$?
    cat "$OUT/time.tmp" >> "$LOG"
    note "[time] exit $rc"
    grep -E '^ *[0-9]+ +(64|128) ' "$OUT/time.tmp" >> "$SUMMARY"
    grep '^FAIL' "$OUT/time.tmp" | head -10 >> "$SUMMARY"
    rm -f "$OUT/time.tmp"
fi
if [ -s "$OUT/v3_steps.csv" ] && stage peers; then
    timeout 150 python3 scripts/v3_peers.py --csv "$OUT/v3_steps.csv" > "$OUT/peers.tmp" 2>&1
    rc=$?
    cat "$OUT/peers.tmp" >> "$LOG"
    note "[peers] exit $rc"
    grep -E '^sdpa|^peers' "$OUT/peers.tmp" >> "$SUMMARY"
    rm -f "$OUT/peers.tmp"
fi

# ---- ncu: one launch of each step at N = 8192, d = 128, non-causal
if [ -n "$STEPS_OK" ] && command -v ncu > /dev/null && stage ncu; then
    timeout 150 ncu --clock-control none -k regex:v3_kernel --section SpeedOfLight \
        --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        build/v3_check --one 8192,128,0 --steps "$STEPS_OK" > "$OUT/v3_ncu.txt" 2>&1
    note "[ncu] sections exit $?"
    timeout 90 ncu --clock-control none -k regex:v3_kernel --metrics \
        sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,lts__t_bytes.sum,dram__bytes.sum \
        build/v3_check --one 8192,128,0 --steps "$STEPS_OK" >> "$OUT/v3_ncu.txt" 2>&1
    note "[ncu] metrics exit $?"
    # per kernel: duration, SM / DRAM throughput, the tensor-pipe and XU
    # (exponential) use, stall shares
    grep -E 'v3_kernel|Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Cache Throughput|gmma_cycles|pipe_xu|stalled|lts__t_bytes|dram__bytes|Warp Cycles Per Issued|Issue Slots Busy|Issued Ipc' \
        "$OUT/v3_ncu.txt" | sed 's/  */ /g' | head -90 >> "$SUMMARY"
fi

# ---- sanitizers on the small problem, the two extremes of the schedule
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$SAN" ] && [ -n "$STEPS_OK" ]; then
    : > "$OUT/v3_sanitize.log"
    for tool in memcheck racecheck synccheck; do
        stage "sanitize $tool" || break
        ss=$(echo "$STEPS_OK" | tr ',' '\n' | grep -E '^(1|5)$' | paste -sd,)
        [ -n "$ss" ] || ss=$STEPS_OK
        timeout 100 "$SAN" --tool $tool --error-exitcode 9 build/v3_check --small --steps "$ss" \
            >> "$OUT/v3_sanitize.log" 2>&1
        rc=$?
        note "[sanitize] $tool steps $ss: exit $rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$OUT/v3_sanitize.log" | tail -1)"
        [ $rc -ne 0 ] && grep -m6 -E 'Error|Hazard|Invalid|barrier' "$OUT/v3_sanitize.log" >> "$SUMMARY"
    done
fi

say ""
say "==== summary (${FA_COMMIT:-unknown}, $(elapsed) s)"
cat "$SUMMARY"
cat "$SUMMARY" >> "$LOG"
rm -f "$SUMMARY"
