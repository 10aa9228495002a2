#!/bin/sh
# data/gpu/studies/fwd_v3_race/v3_bitwise.sh OLD_STAGE4 -- version 3's outputs from this
# build and from an earlier build of stage4, compared byte for byte: O and L
# (--out, --lse) of ./stage4 --kernel 3 on the same random inputs (--seed 7),
# for the steps whose code differs between the two builds' kernels
# (FA_V3_STEP = 6, 7, 8 in bf16, 6 and 8 in fp16; 8 is the default), on shapes with
# and without masks, grouped heads, seqlen_q != seqlen_k and more tiles than
# SMs. One line per (shape, dtype, step): SAME, or DIFFERENT with cmp's first
# difference; a last line counts them. The question: does a change that
# should leave the arithmetic alone leave every output bit alone?
#
# Usage (repository root, on a Hopper GPU machine, ./stage4 built):
#     sh data/gpu/studies/fwd_v3_race/v3_bitwise.sh path/to/old/stage4 > $OUT/v3_bitwise.log
# Exit status: 0 when every pair is SAME, 1 otherwise, 2 on bad usage.
set -u
OLD=${1:?usage: sh data/gpu/studies/fwd_v3_race/v3_bitwise.sh OLD_STAGE4}
NEW=${STAGE4:-./stage4}
TMP=$(mktemp -d) || exit 2
trap 'rm -rf "$TMP"' EXIT
echo "# data/gpu/studies/fwd_v3_race/v3_bitwise.sh: commit ${FA_COMMIT:-unknown} against $OLD (${OLD_COMMIT:-its commit not given}), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n1)"
echo "# each line: FA_V3_STEP=K stage4 --kernel 3 --dtype T --random --seed 7 SHAPE --repeats 1 --out O.npy --lse L.npy, both builds, cmp O and L"
same=0 diff=0
while read -r shape; do
    for run in bf16:6 bf16:7 bf16:8 fp16:6 fp16:8; do
        dt=${run%:*} step=${run#*:}
        {
            ok=1 why=
            for b in new old; do
                prog=$NEW; [ "$b" = old ] && prog=$OLD
                if ! FA_V3_STEP=$step "$prog" --kernel 3 --dtype $dt --random --seed 7 $shape --repeats 1 \
                    --out "$TMP/o_$b.npy" --lse "$TMP/l_$b.npy" < /dev/null > "$TMP/log_$b" 2>&1; then
                    ok=0 why="$b build: $(grep -m1 -i 'error\|FAIL' "$TMP/log_$b")"
                fi
            done
            if [ "$ok" -eq 1 ]; then
                why=$(cmp "$TMP/o_new.npy" "$TMP/o_old.npy" 2>&1; cmp "$TMP/l_new.npy" "$TMP/l_old.npy" 2>&1)
                [ -n "$why" ] && ok=0
            fi
            if [ "$ok" -eq 1 ]; then
                echo "SAME $dt step $step $shape ($(wc -c < "$TMP/o_new.npy") + $(wc -c < "$TMP/l_new.npy") bytes)"
                same=$((same + 1))
            else
                echo "DIFFERENT $dt step $step $shape: $why"
                diff=$((diff + 1))
            fi
            rm -f "$TMP"/o_*.npy "$TMP"/l_*.npy
        }
    done
done <<'SHAPES'
--batch 2 --heads 4 --kv-heads 2 --n 150 --seqlen-k 90 --d 64 --causal
--batch 4 --heads 72 --kv-heads 8 --n 150 --seqlen-k 90 --d 128 --causal
--batch 2 --heads 8 --n 1000 --d 128
--batch 1 --heads 8 --kv-heads 2 --n 500 --seqlen-k 700 --d 64 --window 64,0
--batch 1 --heads 4 --n 2048 --d 64 --causal
SHAPES
echo "result: $same SAME, $diff DIFFERENT"
[ "$diff" -eq 0 ]
