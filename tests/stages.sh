#!/bin/sh
# tests/stages.sh [BINDIR] -- run each stage's demonstration the way a learner
# does; each must exit 0 (its own checks passed) and print what it promises.
# BINDIR (default .) lets the sanitizer build run the same list.
bin=${1:-.}
seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
run() {  # run NAME COMMAND... : PASS when the command exits 0
    name=$1
    shift
    if out=$("$@" 2>&1); then
        echo "PASS $name"
    else
        echo "FAIL $name: exit $? [seed $seed]"
        echo "$out" | tail -15
    fi
}
run "stage1 on the real input" $bin/stage1
run "stage1 fp32 arithmetic vs fp64" $bin/stage1 --dtype fp32
run "stage1 random causal" $bin/stage1 --random --n 77 --d 24 --causal --seed $seed
run "stage2 random rows and real input" $bin/stage2 --seed $seed
run "stage3 on the real input" $bin/stage3
run "stage3 real input, causal, small M" $bin/stage3 --causal --sram 3000
run "stage3 N = 1" $bin/stage3 --random --n 1 --d 5 --seed $seed
run "stage3 N below one tile" $bin/stage3 --random --n 7 --d 16 --br 32 --bc 32 --seed $seed
run "stage3 tails, B x H" $bin/stage3 --random --batch 2 --heads 3 --n 113 --d 40 --br 17 --bc 23 --causal --seed $seed
run "stage3 other softmax_scale" $bin/stage3 --random --n 50 --d 8 --scale 0.9 --seed $seed
run "stage3 --rule io, causal" $bin/stage3 --random --n 150 --d 16 --sram 3000 --rule io --causal --seed $seed
run "stage1 masked, keys cut, grouped heads" $bin/stage1 --window 23,0 --seqlen-k 100 --kv-heads 4
run "stage3 masked, keys cut, grouped heads" $bin/stage3 --window 23,0 --seqlen-k 100 --kv-heads 4 --br 16 --bc 24
run "stage6 tour of masks on the real input" $bin/stage6 --seed $seed
run "stage6 random, Sq != Sk, grouped heads, window" $bin/stage6 --random --batch 2 --heads 4 --kv-heads 2 --n 90 --seqlen-k 61 --d 12 --window 20,3 --br 13 --bc 9 --seed $seed
run "stage6 causal with more queries than keys" $bin/stage6 --random --n 70 --seqlen-k 30 --causal --br 16 --bc 8 --seed $seed
run "stage6 --check rows, 20000 queries, window" $bin/stage6 --random --n 20000 --d 8 --window 63,0 --br 64 --bc 64 --check rows --seed $seed

run "stage8 default (lengths 0, 1, random, full; rule's splits)" $bin/stage8 --seed $seed
run "stage8 causal, 4 query rows, pages of 64, 3 splits" $bin/stage8 --n 4 --causal --page-size 64 --splits 3 --seed $seed
run "stage8 window across pages, 8 rows, 2 sequences" $bin/stage8 --batch 2 --lens 700,33 --seqlen-k 1024 --window 100,0 --n 8 --page-size 32 --seed $seed
run "stage8 multi-query (H_kv = 1), pages of 1 key, shared pool" $bin/stage8 --heads 6 --kv-heads 1 --page-size 1 --seqlen-k 90 --num-pages 50 --n 3 --causal --splits 5 --seed $seed
run "stage8 16 query rows, more rows than keys" $bin/stage8 --batch 3 --lens 0,5,9 --seqlen-k 16 --n 16 --causal --splits 2 --seed $seed
trace=$($bin/stage2 --trace 2>&1)
if echo "$trace" | grep -q "alpha = exp(3 - 6) = 0.049787   l = 1.074841" &&
   echo "$trace" | grep -q "L = m + log l = 6.0721724"; then
    echo "PASS stage2 --trace shows alpha = 0.049787, l = 1.074841, L = 6.0721724"
else
    echo "FAIL stage2 --trace: expected l = 1.074841 and L = 6.0721724"
    echo "$trace"
fi
