#!/bin/sh
# scripts/gpu/stage5_bitwise.sh OLD_STAGE5 DIR -- a stage5 binary of an earlier
# commit beside this build's ./stage5: deterministic dQ, dK, dV of versions 2
# and 3 in bf16 on five shapes, compared byte for byte (a change meant to keep
# the arithmetic must give the same bits). One line SAME or DIFFERENT per
# (version, shape) in DIR/bitwise.log, the count last (make bitwise-gpu
# OLD_STAGE5=...; data/gpu/studies/bwd_v4_steps/bitwise_round2.log is one such run).
set -u
OLD_STAGE5=$1
D=$2
[ -x "$OLD_STAGE5" ] || { echo "stage5_bitwise.sh: $OLD_STAGE5 is not an executable" >&2; exit 2; }
mkdir -p "$D"
: > "$D/bitwise.log"
for shape in "--n 1000 --d 128 --causal" "--n 777 --d 80 --window 100,20" \
             "--n 300 --d 48 --seqlen-k 421 --causal" "--n 513 --d 64 --kv-heads 2 --heads 4" \
             "--n 2048 --d 128"; do
    for k in 2 3; do
        ok=1
        for b in "$OLD_STAGE5" ./stage5; do
            tag=$(basename "$b")
            # shellcheck disable=SC2086
            timeout 60 "$b" --random --seed 7 $shape --kernel $k --dtype bf16 --deterministic \
                --dq "$D/bit_${tag}_dq.npy" --dk "$D/bit_${tag}_dk.npy" --dv "$D/bit_${tag}_dv.npy" \
                > "$D/bit_${tag}.log" 2>&1 || ok=0
        done
        for t in dq dk dv; do
            cmp -s "$D/bit_$(basename "$OLD_STAGE5")_$t.npy" "$D/bit_stage5_$t.npy" || ok=0
        done
        echo "$([ $ok = 1 ] && echo SAME || echo DIFFERENT) v$k bf16 deterministic $shape" >> "$D/bitwise.log"
    done
done
rm -f "$D"/bit_*.npy "$D"/bit_*.log
echo "bitwise vs $OLD_STAGE5: $(grep -c '^SAME' "$D/bitwise.log") same, $(grep -c '^DIFFERENT' "$D/bitwise.log") different" \
    | tee -a "$D/bitwise.log"
