#!/bin/sh
# data/gpu/studies/bwd_v3_steps/bwd_step3.sh -- backward version 3's step 3 (FA_BWD3_STEP=3:
# the consumer warpgroups in ping-pong) beside step 2, the default, in about
# 90 s of one device call, on prebuilt binaries (./stage5 and
# build/libfa_gpu.so; nothing is built here):
#   1. the stage-5 suite on versions 3 and 0 under step 3 (0 is the measure
#      of the twice-version-0 rule), with racecheck and synccheck on small
#      masked problems under step 3 at the same time, each under timeout so
#      that a hang ends as exit 124;
#   2. dK, dV of step 3 against step 2 bit for bit (the same products in
#      the same order), d 64 and 128, causal GQA;
#   3. steps 2 and 3 timed on the same shapes (bf16, d 64 and 128, N 2048
#      and 8192, causal and not; B N = 16384, H d = 2048 as bench_gpu.py),
#      into $OUT/bwd_step3.csv with a step column beside bench_gpu.py's
#      provenance columns.
# $OUT gets bwd_step3_tests.log, bwd_step3_san_*.log, bwd_step3_bitwise.log,
# bwd_step3.csv and bwd_step3.log (the summary). Run from the repository root:
#     FA_COMMIT=<commit> OUT=<dir> sh data/gpu/studies/bwd_v3_steps/bwd_step3.sh
set -u
cd "$(dirname "$0")/../.." || exit 2
top=${OUT:-/tmp}
mkdir -p "$top"
log=$top/bwd_step3.log
for f in ./stage5 build/libfa_gpu.so; do
    [ -e "$f" ] || { echo "bwd_step3.sh: $f is missing (build it before the call: make stage5 build/libfa_gpu.so)" | tee -a "$log"; exit 2; }
done
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$log"; }
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit ${FA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> "$log" 2>&1

# 1. the suite and the sanitizers at once (all check, none times)
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
( FA_BWD3_STEP=3 timeout -k 5 55 build/tests/gpu/stage5_tests --sweep tests --kernel 3 > "$top/bwd_step3_tests.log" 2>&1
  echo "exit $?" >> "$top/bwd_step3_tests.log" ) &
SMALL='./stage5 --kernel 3 --dtype bf16 --random --seed $S --batch 2 --heads 4 --kv-heads 2 --n 200 --seqlen-k 330 --d 64 --window 10,0 --repeats 1 && ./stage5 --kernel 3 --dtype fp16 --random --seed $S --heads 2 --n 333 --d 128 --causal --repeats 1'
for tool in racecheck synccheck; do
    S=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
    ( S=$S FA_BWD3_STEP=3 timeout -k 5 55 "$SAN" --tool $tool --error-exitcode 9 sh -c "$SMALL" > "$top/bwd_step3_san_$tool.log" 2>&1
      echo "exit $? seed $S" >> "$top/bwd_step3_san_$tool.log" ) &
done
wait
stamp "tests: $(tail -n 1 "$top/bwd_step3_tests.log"), $(grep -c '^PASS' "$top/bwd_step3_tests.log") PASS, $(grep -c '^FAIL' "$top/bwd_step3_tests.log") FAIL, $(grep -c '^SKIP' "$top/bwd_step3_tests.log") SKIP"
grep '^FAIL' "$top/bwd_step3_tests.log" | cut -c1-300 | head -n 10 | tee -a "$log"
for tool in racecheck synccheck; do
    f=$top/bwd_step3_san_$tool.log
    stamp "$tool: $(tail -n 1 "$f"); $(grep -m1 'SUMMARY' "$f" | sed 's/^=* *//')"
    grep -m2 -i 'hazard\|barrier\|invalid\|error' "$f" | cut -c1-300 | tee -a "$log"
done

# 2. dK, dV bit for bit, step 3 against step 2
tmp=$(mktemp -d)
for d in 64 128; do
    for st in 2 3; do
        FA_BWD3_STEP=$st timeout -k 5 20 ./stage5 --kernel 3 --dtype bf16 --random --seed 11 --batch 2 --heads 4 --kv-heads 2 \
            --n 400 --d $d --causal --repeats 1 --dk "$tmp/dk$st.npy" --dv "$tmp/dv$st.npy" >> "$top/bwd_step3_bitwise.log" 2>&1
        echo "# d $d step $st: exit $?" >> "$top/bwd_step3_bitwise.log"
    done
    for x in dk dv; do
        if cmp -s "$tmp/${x}2.npy" "$tmp/${x}3.npy"; then r="bitwise equal"; else r="DIFFER (or missing)"; fi
        stamp "d $d $x, step 3 against step 2: $r"
    done
    rm -f "$tmp"/*.npy
done
rm -rf "$tmp"

# 3. steps 2 and 3 timed on the same shapes, one after the other
hdr=""
for st in 2 3; do
    FA_BWD3_STEP=$st timeout -k 5 30 python3 scripts/gpu/bench_gpu.py --bwd-csv "$top/.bwd_step3_$st.csv" --dtypes bf16 --ns 2048,8192 \
        --passes bwd --dims 64,128 --causal 0,1 --repeats 10 --impls ours_v3_hopper > "$top/bwd_step3_bench$st.log" 2>&1
    stamp "bench step $st: exit $?"
    [ -s "$top/.bwd_step3_$st.csv" ] || continue
    if [ -z "$hdr" ]; then hdr=$(head -n 1 "$top/.bwd_step3_$st.csv"); echo "step,$hdr" > "$top/bwd_step3.csv"; fi
    tail -n +2 "$top/.bwd_step3_$st.csv" | sed "s/^/$st,/" >> "$top/bwd_step3.csv"
    rm -f "$top/.bwd_step3_$st.csv"
done
[ -s "$top/bwd_step3.csv" ] && python3 - "$top/bwd_step3.csv" <<'EOF' | tee -a "$log"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
col = next((c for c in ("tflops", "TFLOP/s") if rows and c in rows[0]), None)
key = lambda r: (r["d"], r["causal"], r["N"])
t = {}
for r in rows:
    t.setdefault(key(r), {})[r["step"]] = float(r[col]) if col and r[col] else float("nan")
print("d causal N: step 2, step 3 TFLOP/s, step 3 / step 2 (%s)" % col)
for k in sorted(t, key=lambda k: (int(k[0]), k[1], int(k[2]))):
    a, b = t[k].get("2", float("nan")), t[k].get("3", float("nan"))
    print(" ".join(k), "%.1f %.1f %.3f" % (a, b, b / a if a else float("nan")))
EOF
stamp "done"
