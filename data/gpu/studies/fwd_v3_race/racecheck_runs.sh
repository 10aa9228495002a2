#!/bin/sh
# data/gpu/studies/fwd_v3_race/racecheck_runs.sh -- compute-sanitizer's racecheck, run after
# run, on version 3 of the forward: the stage-4 command below (command A) and
# the v3 sanitizer tests (command B: build/v3_check --small, every step on
# two small masked GQA problems, one with more tiles than SMs, on a fresh
# seed each run). It answers one question: does racecheck find any
# shared-memory hazard in version 3 on any of RACE_RUNS (default 20) runs?
# (Why the tile slots of step 6 on are ordered, and what racecheck can see of
# that order: kernels/stage4_fwd_v3_hopper.cu, above v3_next_tile, and
# data/gpu/studies/fwd_v3_race/race.md.)
#
# Usage (repository root, on a Hopper GPU machine, the programs built:
# make stage4 build/v3_check):
#     FA_COMMIT=<commit> OUT=<dir> sh data/gpu/studies/fwd_v3_race/racecheck_runs.sh
# writes $OUT/v3_racecheck_20.log (default OUT=build/race_out): provenance
# (GPU, driver, CUDA, sanitizer, commit, date, commands), one line per run and
# command (exit status, racecheck's summary, PASS lines, seconds), the whole
# output of any run that is not clean, and a closing count. The lead copies
# it to data/gpu/studies/fwd_v3_race/racecheck_20_runs.log.
# Settings (environment):
#   RACE_RUNS      runs (default 20)
#   RACE_JOBS      runs in flight at a time (default 1: one after another;
#                  more share the GPU, each run still a process of its own)
#   RACE_BUDGET_S  start no run after this many seconds (default: no limit);
#                  the log then says how many runs were made
#   RACE_LIMIT_S   the longest one racecheck run may take (default 600)
#   STAGE4, V3CHECK  the programs (default ./stage4, build/v3_check)
#   OLD_STAGE4     optional: a stage4 built from an earlier commit, run
#                  OLD_RUNS times (default 2) on command A and on the same
#                  problem with more tiles than SMs (command M), and this
#                  build once on command M, beside the runs above (one more
#                  process in flight), so that the log shows what racecheck
#                  says of both (informational: no effect on the exit status)
# Exit status: 0 when every run of this build is clean and all RACE_RUNS were
# made, 1 otherwise.
set -u
OUT=${OUT:-build/race_out}
mkdir -p "$OUT"
LOG=$OUT/v3_racecheck_20.log
RUNS=${RACE_RUNS:-20}
JOBS=${RACE_JOBS:-1}
BUDGET=${RACE_BUDGET_S:-0}
STAGE4=${STAGE4:-./stage4}
V3CHECK=${V3CHECK:-build/v3_check}
OLD_RUNS=${OLD_RUNS:-2}
LIMIT=${RACE_LIMIT_S:-600}
export PATH=$PATH:/usr/local/cuda/bin
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
T0=$(date +%s)
# one file per run, under $OUT so that they come back even if the call is cut short
WORK=$OUT/race_runs
rm -rf "$WORK"
mkdir -p "$WORK" || exit 2
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }
spent() { echo $(( $(date +%s) - T0 )); }
over() { [ "$BUDGET" -gt 0 ] && [ "$(spent)" -ge "$BUDGET" ]; }

# command A: the command of the report, as it was given (stage 4's default seed, 1234)
SHAPE="--kernel 3 --dtype bf16 --random --batch 2 --heads 4 --kv-heads 2 --n 150 --seqlen-k 90 --d 64 --causal --repeats 1"
# the same problem with 288 tiles (more than the 132 SMs of an H200)
MANY="--kernel 3 --dtype bf16 --random --batch 4 --heads 72 --kv-heads 8 --n 150 --seqlen-k 90 --d 64 --causal --repeats 1"

say "# data/gpu/studies/fwd_v3_race/racecheck_runs.sh: compute-sanitizer racecheck on version 3 of the forward"
say "# commit: ${FA_COMMIT:-unknown}"
say "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "# gpu, driver, compute capability: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -n1)"
say "# cuda: $(nvcc --version 2>/dev/null | tail -n1) (nvcc); as stage4 reports it: $("$STAGE4" --kernel 3 --dtype bf16 --random --n 1 --d 64 --repeats 1 2>&1 | grep -m1 ' on ')"
say "# sanitizer: $("$SAN" --version 2>&1 | tail -n1)"
say "# command A: $SAN --tool racecheck --error-exitcode 9 $STAGE4 $SHAPE"
say "# command B: $SAN --tool racecheck --error-exitcode 9 $V3CHECK --small --seed S (S fresh each run)"
say "# runs: $RUNS, $JOBS at a time$([ "$BUDGET" -gt 0 ] && echo ", none started after $BUDGET s")"

# one FILE NAME PROGRAM ARGS...: one racecheck run; one line into FILE (and
# the whole output when the run is not clean); status 0 when clean
one() {
    file=$1 name=$2; shift 2
    out=$(mktemp -p "$WORK") || return 1
    t1=$(date +%s)
    timeout "$LIMIT" "$SAN" --tool racecheck --error-exitcode 9 "$@" > "$out" 2>&1
    rc=$?
    secs=$(( $(date +%s) - t1 ))
    summary=$(grep -m1 'RACECHECK SUMMARY' "$out" | sed 's/^=* *//')
    npass=$(grep -c '^PASS ' "$out") nfail=$(grep -c '^FAIL ' "$out")
    if [ "$rc" -eq 0 ] && [ "$nfail" -eq 0 ] &&
        echo "$summary" | grep -q '0 hazards displayed (0 errors, 0 warnings)'; then
        echo "clean $name: rc 0, $summary, $npass PASS lines, $secs s" >> "$file"
        rm -f "$out"
        return 0
    fi
    n=$(wc -l < "$out")
    [ "$rc" -eq 124 ] && summary="did not finish in $LIMIT s"
    echo "NOT CLEAN $name: rc $rc, ${summary:-no summary}, $npass PASS / $nfail FAIL lines, $secs s; its output$([ "$n" -gt 120 ] && echo " (first 100 and last 20 of $n lines)"):" >> "$file"
    if [ "$n" -gt 120 ]; then
        { head -n 100 "$out"; echo "..."; tail -n 20 "$out"; } | sed 's/^/    /' >> "$file"
    else
        sed 's/^/    /' "$out" >> "$file"
    fi
    rm -f "$out"
    return 1
}
# run R: commands A and B once; its lines into $WORK/run.R
run() {
    f=$WORK/run.$1
    seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
    one "$f" "run $1/$RUNS, command A" "$STAGE4" $SHAPE
    one "$f" "run $1/$RUNS, command B (seed $seed)" "$V3CHECK" --small --seed "$seed"
}

# the earlier build, beside the runs of this one
if [ -n "${OLD_STAGE4:-}" ]; then
    (
        f=$WORK/old
        r=1
        while [ "$r" -le "$OLD_RUNS" ] && ! over; do
            one "$f" "earlier build, run $r/$OLD_RUNS, command A" "$OLD_STAGE4" $SHAPE
            one "$f" "earlier build, run $r/$OLD_RUNS, command M" "$OLD_STAGE4" $MANY
            r=$((r + 1))
        done
        over || one "$f" "this build, command M" "$STAGE4" $MANY
        over && echo "(stopped: the budget of $BUDGET s was spent)" >> "$f"
    ) &
fi

say ""
say "## $RUNS runs of this build"
j=1
while [ "$j" -le "$JOBS" ]; do
    (
        r=$j
        while [ "$r" -le "$RUNS" ] && ! over; do
            run "$r"
            r=$((r + JOBS))
        done
    ) &
    j=$((j + 1))
done
wait
made=0 clean=0 total=0 r=1
while [ "$r" -le "$RUNS" ]; do
    if [ -f "$WORK/run.$r" ]; then
        cat "$WORK/run.$r" | tee -a "$LOG" | grep -v '^    '
        made=$((made + 1))
        total=$((total + $(grep -c '^clean \|^NOT CLEAN ' "$WORK/run.$r")))
        clean=$((clean + $(grep -c '^clean ' "$WORK/run.$r")))
    else
        say "run $r: not started (the budget of $BUDGET s was spent)"
    fi
    r=$((r + 1))
done
say "result: $made of $RUNS runs made, $clean of $total racecheck runs clean, $(spent) s"
status=0
[ "$clean" -eq "$total" ] && [ "$made" -eq "$RUNS" ] || status=1

if [ -n "${OLD_STAGE4:-}" ]; then
    say ""
    say "## the earlier build ($OLD_STAGE4) beside this one: command A, and command M (the same problem with 288 tiles):"
    say "# command M: $SAN --tool racecheck --error-exitcode 9 STAGE4 $MANY"
    [ -f "$WORK/old" ] && cat "$WORK/old" | tee -a "$LOG" | grep -v '^    '
fi
say "end: $(spent) s"
rm -rf "$WORK"
exit $status
