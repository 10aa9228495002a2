#!/bin/sh
# tests/cli.sh -- bad input gets one clear line on stderr and exit status 2,
# never a crash. Run from the repository root after `make cpu`.
# Each case: expect_error NAME KEYWORD COMMAND...; the error line must start
# with "<program>: error:" and contain KEYWORD.
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
python3 tests/make_bad_npy.py "$tmp" || { echo "FAIL make_bad_npy: could not write test files"; exit 1; }

expect_error() {
    name=$1 keyword=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    lines=$(wc -l <"$tmp/err")
    prog=$(basename "$1")
    if [ "$rc" -ne 2 ]; then
        echo "FAIL $name: exit status $rc, expected 2 ($(head -c 200 "$tmp/err"))"
    elif [ "$lines" -ne 1 ]; then
        echo "FAIL $name: $lines lines on stderr, expected 1"
    elif ! grep -q "^$prog: error: .*$keyword" "$tmp/err"; then
        echo "FAIL $name: message lacks '$keyword': $(cat "$tmp/err")"
    else
        echo "PASS $name ($(cat "$tmp/err"))"
    fi
}

B=$tmp
for s in ./stage1 ./stage2 ./stage3 ./stage6; do
    expect_error "$s unknown flag" "unknown flag '--bogus'" $s --bogus
    expect_error "$s missing value" "missing value" $s --seed
    expect_error "$s non-numeric value" "expected an integer, got 'abc'" $s --seed abc
done
for s in ./stage1 ./stage2 ./stage3 ./stage6; do
    expect_error "$s flag given twice" "--seed is given twice" $s --seed 1 --seed 2
done
# stage 2 has no backward: a dO file is refused, not read and ignored
expect_error "stage2 takes no --do" "unknown flag '--do'" ./stage2 --do $B/good_16x8.npy
expect_error "stage6 window given twice" "--window is given twice" ./stage6 --random --n 8 --window 3,0 --window 2,0
expect_error "stage3 input flag given twice" "--q is given twice" ./stage3 --q $B/good_16x8.npy --q $B/good_16x8.npy
expect_error "stage2 switch given twice" "--trace is given twice" ./stage2 --trace --trace
for s in ./stage1 ./stage3; do
    expect_error "$s N = 0" "out of range" $s --n 0
    expect_error "$s negative d" "out of range" $s --d -4
    expect_error "$s fractional N" "expected an integer" $s --n 12.5
    expect_error "$s value glued to flag" "expected an integer" $s --n=12x
    expect_error "$s missing value before next flag" "missing value before '--d'" $s --n --d 8
    expect_error "$s missing file" "No such file" $s --q $B/absent.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s only --q given" "must be given together" $s --q $B/good_16x8.npy
    expect_error "$s int64 dtype" "dtype '<i8' is not supported" $s --q $B/int64.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s big-endian dtype" "dtype '>f8' is not supported" $s --q $B/bigendian.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s rank 1" "rank 1 array" $s --q $B/rank1.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s rank 5" "rank 5 array" $s --q $B/rank5.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s empty dimension" "empty" $s --q $B/empty_dim.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s NaN in input" "NaN" $s --q $B/nan.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s data too short" "shorter than the shape" $s --q $B/short_data.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s header claims more than the file" "shorter than the shape" $s --q $B/huge_claim.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s data too long" "beyond what the shape" $s --q $B/long_data.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s truncated header" "truncated header" $s --q $B/truncated_header.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s corrupt header" "not a dict literal" $s --q $B/not_a_dict.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s header without shape" "no 'shape'" $s --q $B/no_shape.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s bad magic" "not a .npy file" $s --q $B/bad_magic.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s implausible header length" "truncated header" $s --q $B/huge_header_len.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s unknown format version" "version 9" $s --q $B/version9.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s K and V lengths differ" "shape mismatch: K is (1, 1, 20, 8) but V is (1, 1, 16, 8)" $s --q $B/good_16x8.npy --k $B/good_20x8.npy --v $B/good_16x8.npy
    expect_error "$s V has other d" "shape mismatch: K is (1, 1, 16, 8) but V is (1, 1, 16, 4)" $s --q $B/good_16x8.npy --k $B/good_16x8.npy --v $B/good_16x4.npy
    expect_error "$s dO has other shape" "but dO is" $s --q $B/good_16x8.npy --k $B/good_16x8.npy --v $B/good_16x8.npy --do $B/good_20x8.npy
    expect_error "$s files and --random" "cannot be combined" $s --random --q $B/good_16x8.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s zero softmax scale" "must be positive" $s --scale 0
    expect_error "$s output to a missing directory" "cannot create" $s --random --n 8 --d 4 --out $B/no/such/dir/o.npy
    expect_error "$s output is a directory" "is a directory" $s --random --n 8 --d 4 --out $B
    expect_error "$s two outputs, one file" "name the same file" $s --random --n 8 --d 4 --out $B/o.npy --lse $B/o.npy
    expect_error "$s output over an input" "would overwrite the input --q" $s --q $B/good_16x8.npy --k $B/good_16x8.npy --v $B/good_16x8.npy --out $B/good_16x8.npy
    expect_error "$s input is a directory" "is a directory" $s --q $B --k $B/good_16x8.npy --v $B/good_16x8.npy
    expect_error "$s random shape too large" "at most" $s --random --batch 1000 --heads 1000 --n 16 --d 16
    expect_error "$s N too large for the naive reference" "--n 20000: naive attention needs four N x N" $s --random --n 20000 --d 1
    expect_error "$s N of a file too large" "the input's N = 20000" $s --q $B/long_20000x1.npy --k $B/long_20000x1.npy --v $B/long_20000x1.npy
    expect_error "$s scores overflow fp64" "overflow fp64" $s --q $B/huge_values.npy --k $B/huge_values.npy --v $B/huge_values.npy
    [ -e $B/o.npy ] && echo "FAIL $s refused run left a file behind" || echo "PASS $s refused run writes no output"
done
# The problem's shape and mask: one line and exit 2 before any work, in every
# stage that takes them (stage 6 included).
for s in ./stage1 ./stage3 ./stage6; do
    expect_error "$s K and V lengths differ" "shape mismatch: K is (1, 1, 20, 8) but V is (1, 1, 16, 8)" $s --q $B/good_16x8.npy --k $B/good_20x8.npy --v $B/good_16x8.npy
    expect_error "$s K has other d than Q" "shape mismatch: Q is (1, 1, 16, 8) but K is (1, 1, 16, 4)" $s --q $B/good_16x8.npy --k $B/good_16x4.npy --v $B/good_16x4.npy
    expect_error "$s Q heads not a multiple of K heads" "Q is (1, 3, 16, 8) but K is (1, 2, 16, 8)" $s --q $B/heads3_1x3x16x8.npy --k $B/heads2_1x2x16x8.npy --v $B/heads2_1x2x16x8.npy
    expect_error "$s window side below -1" "each side is -1 (unbounded)" $s --random --n 8 --window -2,0
    expect_error "$s window of one number" "expected two integers L,R" $s --window 5
    expect_error "$s window and causal" "causal is --window -1,0" $s --random --n 8 --causal --window 3,0
    expect_error "$s heads not a multiple of kv heads" "the 6 query heads must be a multiple" $s --random --n 8 --heads 6 --kv-heads 4
    expect_error "$s --seqlen-k with files" "the --k file gives seqlen_k" $s --q $B/good_16x8.npy --k $B/good_20x8.npy --v $B/good_20x8.npy --seqlen-k 20
    expect_error "$s --kv-heads against a file" "the --k file has 2 heads" $s --q $B/heads2_1x2x16x8.npy --k $B/heads2_1x2x16x8.npy --v $B/heads2_1x2x16x8.npy --kv-heads 1
    expect_error "$s --seqlen-k past the real input" "the real input has 148 keys" $s --seqlen-k 200
    expect_error "$s --kv-heads not dividing the real input" "the 12 query heads must be a multiple" $s --kv-heads 5
    expect_error "$s output over an input" "would overwrite the input --q" $s --q $B/good_16x8.npy --k $B/good_16x8.npy --v $B/good_16x8.npy --out $B/good_16x8.npy
    [ -e $B/o.npy ] && echo "FAIL $s refused run left a file behind" || echo "PASS $s refused run writes no output"
done
expect_error "stage6 bad --check" "expected 'naive' or 'rows'" ./stage6 --check all
expect_error "stage6 bad sweep name" "expected 'window', 'memory' or 'lse'" ./stage6 --sweep nope --csv $B/x.csv
expect_error "stage6 sweep without csv" "needs --csv" ./stage6 --sweep window
expect_error "stage6 naive reference too large" "naive attention needs four" ./stage6 --random --n 20000 --d 1
expect_error "stage3 sweeps square problems only" "masks and lengths are swept by ./stage6" ./stage3 --sweep io --csv $B/x.csv --window 3,0
./stage2 --trace --logits=-inf,-inf >"$tmp/out" 2>&1 && grep -q "l = 0.000000" "$tmp/out" && ! grep -qi nan "$tmp/out" \
    && echo "PASS stage2 --trace with every logit -inf: exit 0, l = 0, L = -inf, no NaN" \
    || echo "FAIL stage2 --trace with every logit -inf: $(cat "$tmp/out")"
expect_error "stage1 bad dtype" "runs fp64 or fp32, not 'fp8'" ./stage1 --dtype fp8
expect_error "stage1 fp16 refused on the CPU" "runs fp64 or fp32" ./stage1 --dtype bf16
expect_error "stage3 M too small for one tile" "M is too small for one tile at d = 64" ./stage3 --random --n 16 --d 64 --sram 300
expect_error "stage3 default M too small names the default, not --sram" "the default M = 16384 elements is too small" ./stage3 --random --n 5 --d 4096
grep -q -- "--sram 16384" "$tmp/err" && echo "FAIL stage3 default M error names a flag never given" || echo "PASS stage3 default M error names no flag the user did not give"
expect_error "stage3 tiles larger than M" "need" ./stage3 --random --n 16 --d 8 --br 8 --bc 8 --sram 100
expect_error "stage3 --br without --bc" "go together" ./stage3 --random --n 16 --br 8
expect_error "stage3 unknown block rule" "expected 'paper' or 'io'" ./stage3 --rule best
expect_error "stage3 --rule with --br/--bc" "does not go with --br/--bc" ./stage3 --random --n 16 --br 8 --bc 8 --rule io
expect_error "stage3 bad sweep name" "expected 'io', 'blocks' or 'formulas'" ./stage3 --sweep nope --csv $B/x.csv
expect_error "stage3 --repeats without --sweep" "--repeats times the points of a --sweep" ./stage3 --repeats 3
expect_error "stage2 --csv without --trace" "--csv is written by --trace" ./stage2 --csv $B/x.csv
./stage2 --trace --csv $B/trace.csv >/dev/null 2>&1 && grep -q '^two_pass,,6,,1.07484065' $B/trace.csv && grep -q '^2,6;2,6,0.04978706' $B/trace.csv \
    && echo "PASS stage2 --trace --csv writes the trace at full precision" || echo "FAIL stage2 --trace --csv writes the trace at full precision"
./stage3 --sweep formulas --csv $B/f.csv >/dev/null 2>&1 && grep -q '^causal_tiles,code,forward,2048,64,,64,64,528$' $B/f.csv \
    && grep -q '^footprint,paper,forward,,64,16384,64,64,20608$' $B/f.csv \
    && echo "PASS stage3 --sweep formulas writes the closed forms" || echo "FAIL stage3 --sweep formulas writes the closed forms"
expect_error "stage3 sweep without csv" "needs --csv" ./stage3 --sweep io
expect_error "stage2 logits not numbers" "expected a finite number" ./stage2 --trace --logits 1,x,3
expect_error "stage2 --logits without --trace" "used with --trace" ./stage2 --logits 1,2
expect_error "stage2 empty logits item" "empty item" ./stage2 --trace --logits 1,,2
expect_error "stage2 --trace with --n" "--trace streams --logits" ./stage2 --trace --n 5
expect_error "stage2 bad input file before any output" "cannot open" ./stage2 --q $B/absent.npy --k $B/good_16x8.npy --v $B/good_16x8.npy
[ ! -s "$tmp/out" ] && echo "PASS stage2 reports a bad file before printing results" || echo "FAIL stage2 printed results before the file error"
./stage2 --trace --logits=-inf,3,1,6 --block 2 >"$tmp/out" 2>&1 && grep -q "L = m + log l = 6.0" "$tmp/out" \
    && echo "PASS stage2 --trace accepts -inf (a masked logit)" || echo "FAIL stage2 --trace accepts -inf (a masked logit)"

# A Fortran-order file (np.save of a transposed array) is read as the array
# it holds: the same outputs, bit for bit, as from its C-order twin.
for s in ./stage1 ./stage3 ./stage6; do
    $s --q $B/ramp_16x8_fortran.npy --k $B/good_20x8.npy --v $B/good_20x8.npy --out $B/of.npy >/dev/null 2>&1 &&
        $s --q $B/ramp_16x8.npy --k $B/good_20x8.npy --v $B/good_20x8.npy --out $B/oc.npy >/dev/null 2>&1 &&
        cmp -s $B/of.npy $B/oc.npy \
        && echo "PASS $s reads a Fortran-order .npy as its C-order twin" \
        || echo "FAIL $s reads a Fortran-order .npy as its C-order twin"
    rm -f $B/of.npy $B/oc.npy
done
if [ -x ./stage4 ]; then
    expect_error "stage4 refuses a malformed window" "expected two integers L,R" ./stage4 --window 3
    expect_error "stage4 refuses fp64" "runs fp32, fp16 or bf16, not 'fp64'" ./stage4 --dtype fp64
fi
# Stage 7 reads and checks its flags and files before it looks for a GPU, so
# these hold on a machine without one (it is built where nvcc and NCCL are).
if [ -x ./stage7 ]; then
    G=$B/good_16x8.npy
    expect_error "stage7 missing file" "nope.npy: cannot open" ./stage7 --q nope.npy --k $G --v $G
    expect_error "stage7 a folder for a file" "is a directory" ./stage7 --q /tmp --k $G --v $G
    expect_error "stage7 only --q given" "must be given together" ./stage7 --q $G
    expect_error "stage7 bad .npy" "not a .npy file" ./stage7 --q $B/bad_magic.npy --k $G --v $G
    expect_error "stage7 keys of another length" "shards one sequence" ./stage7 --q $G --k $B/good_20x8.npy --v $B/good_20x8.npy
    expect_error "stage7 --gpus given twice" "--gpus is given twice" ./stage7 --gpus 2 --gpus 2
    expect_error "stage7 --virtual given twice" "--virtual is given twice" ./stage7 --virtual --virtual
    expect_error "stage7 --budget given twice" "--budget is given twice" ./stage7 --budget 5 --budget 6
    expect_error "stage7 --virtual with a value" "takes no value" ./stage7 --virtual=1
    expect_error "stage7 --gpus out of range" "out of range" ./stage7 --gpus 9
    expect_error "stage7 --sweep scale with input files" "makes its own inputs" ./stage7 --sweep scale --csv $B/r.csv --q $G --k $G --v $G
fi

# Good files in every accepted rank work, and --help exits 0.
./stage3 --q $B/good_1x2x16x8_v2.npy --k $B/good_1x2x16x8_v2.npy --v $B/good_1x2x16x8_v2.npy >/dev/null 2>&1 \
    && echo "PASS stage3 reads a format 2.0 (B,H,N,d) file" || echo "FAIL stage3 reads a format 2.0 (B,H,N,d) file"
stage4=""
[ -x ./stage4 ] && stage4=./stage4   # built where nvcc is; --help needs no GPU
stage7=""
[ -x ./stage7 ] && stage7=./stage7   # built where nvcc and NCCL are
for s in ./stage1 ./stage2 ./stage3 ./stage6 $stage4 $stage7; do
    $s --help >"$tmp/out" 2>&1 && grep -q -- "--seed" "$tmp/out" \
        && echo "PASS $s --help lists the flags" || echo "FAIL $s --help lists the flags"
    # every flag --help lists is one the program takes (no "unknown flag")
    bad=""
    for f in $(grep -o '^  --[a-z-]*' "$tmp/out" | grep -v -- '--help'); do
        $s $f --help >"$tmp/o2" 2>&1 </dev/null   # a value flag stops at "missing value", a switch at --help
        grep -q "unknown flag" "$tmp/o2" && bad="$bad $f"
    done
    [ -z "$bad" ] && echo "PASS $s --help lists only flags it takes" || echo "FAIL $s --help lists flags it refuses:$bad"
done
./stage1 --help | grep -q -- "--dtype T .*fp64 or fp32 (default fp64)" && ! ./stage1 --help | grep -q "as the stage" \
    && echo "PASS stage1 --help names the dtypes it runs" || echo "FAIL stage1 --help names the dtypes it runs"
if [ -n "$stage4" ]; then
    ./stage4 --help | grep -q -- "--dtype T .*: fp32, fp16 or bf16$" && ./stage4 --help | grep -q -- "--causal" \
        && echo "PASS stage4 --help names the dtypes it runs, and --causal, which it takes" \
        || echo "FAIL stage4 --help names the dtypes it runs, and --causal, which it takes"
fi
# A shape flag without --random (--n, --d, --batch, --heads) cannot shape the
# real input, so it implies random input: the run says so in one line on
# stdout naming the flags, --help says so, and with --random no note is printed.
stage5=""
[ -x ./stage5 ] && stage5=./stage5
for s in ./stage1 ./stage3 ./stage6 $stage4 $stage5; do
    $s --n 16 --d 8 >"$tmp/out" 2>&1
    rc=$?
    notes=$(grep -c "^$(basename $s): note: --n, --d imply --random: random N(0,1) input (seed 1234), not the real model input" "$tmp/out")
    $s --random --n 16 --d 8 >"$tmp/o2" 2>&1
    if [ "$rc" -ne 0 ]; then
        echo "FAIL $s --n alone: exit status $rc ($(head -c 200 "$tmp/out"))"
    elif [ "$notes" -ne 1 ]; then
        echo "FAIL $s --n alone: $notes lines say that --n, --d imply --random, expected 1: $(head -c 200 "$tmp/out")"
    elif grep -q "imply --random" "$tmp/o2"; then
        echo "FAIL $s --random --n: a note about an implied --random where --random was given"
    elif ! $s --help | grep -q -- "--n N .*(implies --random)"; then
        echo "FAIL $s --help: --n does not say that it implies --random"
    else
        echo "PASS $s --n alone says it implies --random (stdout and --help; no note with --random)"
    fi
done
./stage3 --random --n 64 --d 16 --sram 4096 --rule io 2>&1 | grep -q "why these tiles (--rule io)" \
    && echo "PASS stage3 --rule io says why its tiles are thin" || echo "FAIL stage3 --rule io says why its tiles are thin"
# stage 8: its own flags follow the same rules, and a decoding problem that
# cannot be is refused before any work
expect_error "stage8 unknown flag" "unknown flag '--bogus'" ./stage8 --bogus
expect_error "stage8 own flag given twice" "--splits is given twice" ./stage8 --splits 2 --splits 3
expect_error "stage8 own flag missing value" "--page-size: missing value" ./stage8 --page-size
# Refused input frees what it read first: under LeakSanitizer the run is one
# line and exit 2, not a leak report and exit 1.
if [ -x build/asan/stage8 ]; then
    expect_error "stage8 (ASan) refuses a length past the capacity and leaks nothing" "cache_seqlens\[3\] = 99999" \
        build/asan/stage8 --lens 1,2,3,99999
else
    echo "SKIP stage8 (ASan) refuses a length past the capacity and leaks nothing: build/asan/stage8 not built (make sanitize)"
fi
expect_error "stage8 page size not a power of two" "--page-size 24: must be a power of two" ./stage8 --page-size 24
expect_error "stage8 page size out of range" "--page-size 8192" ./stage8 --page-size 8192
expect_error "stage8 page size 0" "--page-size 0" ./stage8 --page-size 0
expect_error "stage8 split count 0" "--splits 0: must be in" ./stage8 --splits 0
expect_error "stage8 split count too large" "--splits 129: must be in" ./stage8 --splits 129
expect_error "stage8 split count not a number" "--splits 'x'" ./stage8 --splits x
expect_error "stage8 length past the capacity" "cache_seqlens\[1\] = 2000" ./stage8 --batch 2 --lens 5,2000
expect_error "stage8 negative length" "cache_seqlens\[0\] = -1" ./stage8 --batch 2 --lens -1,5
expect_error "stage8 lengths miscounted" "--lens: more than the 2 entries expected" ./stage8 --batch 2 --lens 1,2,3
expect_error "stage8 lengths too few" "--lens: 1 entries, expected 2" ./stage8 --batch 2 --lens 1
expect_error "stage8 block table entry past the pool" "block_table\[0\]\[1\] = 9" ./stage8 --batch 1 --seqlen-k 32 --page-size 16 --block-table 0,9 --num-pages 4
expect_error "stage8 negative block table entry" "block_table\[0\]\[0\] = -2" ./stage8 --batch 1 --seqlen-k 32 --page-size 16 --block-table -2,1 --num-pages 4
expect_error "stage8 block table miscounted" "--block-table: 1 entries, expected 2" ./stage8 --batch 1 --seqlen-k 32 --page-size 16 --block-table 0
expect_error "stage8 too many query rows" "--n 17: query rows per sequence" ./stage8 --n 17
expect_error "stage8 heads not a multiple" "--kv-heads 3" ./stage8 --heads 8 --kv-heads 3
expect_error "stage8 causal and window" "--causal and --window" ./stage8 --causal --window 3,0
expect_error "stage8 sweep without csv" "--sweep needs --csv" ./stage8 --sweep io
./stage8 --batch 1 --seqlen-k 32 --page-size 16 --block-table 2,-1 --lens 16 --num-pages 4 >/dev/null 2>&1 \
    && echo "PASS stage8 reads no block-table entry past a sequence's keys (-1 there is fine)" \
    || echo "FAIL stage8 reads no block-table entry past a sequence's keys (-1 there is fine)"

# Output files: every path (--out --lse --dq --dk --dv --csv) is checked before
# any work, one line naming the flag and exit 2; a failed run (a bad later
# path, a failed check) leaves every output file byte for byte as it was and
# no temporary file behind; a good run replaces them.
O=$tmp/outs
mkdir -p $O
printf 'old O\n' >$O/o.keep; printf 'old L\n' >$O/l.keep; printf 'old dQ\n' >$O/dq.keep
printf 'old csv\n' >$O/c.keep
reset_outs() { for f in o l dq c; do cp $O/$f.keep $O/$f.out; done; }
outs_unchanged() {   # NAME: every file as it was, nothing else in the folder
    ok=1
    for f in o l dq c; do cmp -s $O/$f.keep $O/$f.out || ok=0; done
    [ "$(ls -A $O | wc -l)" -eq 8 ] || ok=0
    [ $ok = 1 ] && echo "PASS $1: every output file as it was, no file left behind" \
        || echo "FAIL $1: output folder changed: $(ls -A $O | tr '\n' ' ')"
}
expect_early_error() {   # NAME KEYWORD COMMAND...: expect_error, with nothing on stdout (no work done)
    name=$1
    expect_error "$@"
    [ -s "$tmp/out" ] && echo "FAIL $name: printed results before refusing: $(head -c 200 "$tmp/out")" \
        || echo "PASS $name: refused before any work"
}
for s in ./stage1 ./stage3 ./stage6; do
    for flag in --out --lse --dq --dk --dv; do   # the bad path last, after good ones
        goods="--out $O/o.out --lse $O/l.out"
        [ $flag = --out ] && goods="--lse $O/l.out --dq $O/dq.out"
        [ $flag = --lse ] && goods="--out $O/o.out --dq $O/dq.out"
        reset_outs
        expect_early_error "$s $flag in an unwritable folder" "$flag /proc/x.npy: cannot create" \
            $s --random --n 32 --d 8 $goods $flag /proc/x.npy
        outs_unchanged "$s $flag unwritable"
    done
    reset_outs
    expect_early_error "$s later output in a missing folder" "--dq $O/none/dq.npy: cannot create" \
        $s --random --n 32 --d 8 --out $O/o.out --lse $O/l.out --dq $O/none/dq.npy
    outs_unchanged "$s later output in a missing folder"
    reset_outs
    expect_early_error "$s later output is a directory" "--dq $O: is a directory" \
        $s --random --n 32 --d 8 --out $O/o.out --lse $O/l.out --dq $O
    outs_unchanged "$s later output is a directory"
    # a run whose exactness check fails (exit 1) renames nothing
    reset_outs
    $s --q $B/near_tie_q.npy --k $B/near_tie_k.npy --v $B/near_tie_v.npy --scale 1e12 \
        --out $O/o.out --lse $O/l.out --dq $O/dq.out >"$tmp/out" 2>&1
    rc=$?
    [ $rc -eq 1 ] && grep -q "central differences.*FAIL" "$tmp/out" \
        && echo "PASS $s near-tie input fails its gradient check (exit 1)" \
        || echo "FAIL $s near-tie input fails its gradient check: exit $rc, $(grep -i fail "$tmp/out" | head -2)"
    outs_unchanged "$s failed check"
    # a good run replaces every output, each a .npy, and leaves no temporary file
    reset_outs
    if $s --random --n 32 --d 8 --out $O/o.out --lse $O/l.out --dq $O/dq.out >/dev/null 2>&1 &&
        for f in o l dq; do head -c 6 $O/$f.out | grep -q NUMPY || exit 1; done &&
        cmp -s $O/c.keep $O/c.out && [ "$(ls -A $O | wc -l)" -eq 8 ]; then
        echo "PASS $s good run replaces its outputs and leaves no temporary file"
    else
        echo "FAIL $s good run replaces its outputs and leaves no temporary file: $(ls -A $O | tr '\n' ' ')"
    fi
done
reset_outs
expect_early_error "stage3 --csv in an unwritable folder" "--csv /proc/x.csv: cannot create" \
    ./stage3 --sweep formulas --csv /proc/x.csv
expect_early_error "stage6 --csv in an unwritable folder" "--csv /proc/x.csv: cannot create" \
    ./stage6 --sweep window --csv /proc/x.csv
expect_early_error "stage2 --csv in an unwritable folder" "--csv /proc/x.csv: cannot create" \
    ./stage2 --trace --csv /proc/x.csv
expect_early_error "stage3 --csv is a directory" "--csv $O: is a directory" ./stage3 --sweep formulas --csv $O
expect_early_error "stage6 --csv beside an unwritable --out" "--out /proc/x.npy: cannot create" \
    ./stage6 --random --n 32 --d 8 --csv $O/c.out --out /proc/x.npy
outs_unchanged "csv refusals"
./stage3 --sweep formulas --csv $O/c.out >/dev/null 2>&1 && grep -q '^causal_tiles,code' $O/c.out \
    && [ "$(ls -A $O | wc -l)" -eq 8 ] \
    && echo "PASS stage3 --sweep formulas replaces an existing --csv, no temporary file left" \
    || echo "FAIL stage3 --sweep formulas replaces an existing --csv: $(ls -A $O | tr '\n' ' ')"
# The GPU stages check their output paths before looking for a GPU: without
# one, a bad path is still exit 2, not the "no GPU" exit 0.
for s in ./stage4 ./stage5; do
    if [ ! -x $s ]; then echo "SKIP $s output-path checks: $s not built (no nvcc)"; continue; fi
    flags="--out --lse"; [ $s = ./stage5 ] && flags="--out --lse --dq --dk --dv"
    for flag in $flags; do
        goods="--out $O/o.out"
        [ $flag = --out ] && goods="--lse $O/l.out"
        reset_outs
        expect_early_error "$s $flag unwritable, with or without a GPU" "$flag /proc/x.npy: cannot create" \
            $s --random --n 64 --d 64 --kernel 1 --dtype fp16 $goods $flag /proc/x.npy
        outs_unchanged "$s $flag unwritable"
    done
    expect_early_error "$s --csv is a directory" "--csv $O: is a directory" $s --csv $O
done

# The measurement targets without what they need (a GPU, ncu): one line that
# says what is missing, exit 0, nothing built.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "SKIP GPU make targets without a GPU: this machine has one"
else
    for t in gpu-data gpu-data-bench-fwd gpu-data-op v3-check gpu-data-ncu ring-gpu; do
        make -s --no-print-directory $t >"$tmp/out" 2>&1
        rc=$?
        if [ $rc -eq 0 ] && [ "$(wc -l <"$tmp/out")" -eq 1 ] && grep -q "^$t: .*\(not found\|no GPU\)" "$tmp/out"; then
            echo "PASS make $t without a GPU: one line, exit 0 ($(cat "$tmp/out"))"
        else
            echo "FAIL make $t without a GPU: exit $rc, $(wc -l <"$tmp/out") lines: $(head -c 300 "$tmp/out")"
        fi
    done
    # gpu-data-ncu on a GPU machine without Nsight Compute (GPU_MISSING emptied)
    if [ -n "$(command -v nvcc)" ]; then
        make -s --no-print-directory gpu-data-ncu GPU_MISSING= NCU= >"$tmp/out" 2>&1
        rc=$?
        [ $rc -eq 0 ] && [ "$(wc -l <"$tmp/out")" -eq 1 ] && grep -q "^gpu-data-ncu: skipped: ncu .* not found" "$tmp/out" \
            && echo "PASS make gpu-data-ncu without ncu: one line, exit 0" \
            || echo "FAIL make gpu-data-ncu without ncu: exit $rc: $(head -c 300 "$tmp/out")"
    fi
fi

# A problem too long for the naive reference is refused from the flags, before
# the inputs are drawn (2 GB of them at N = 2^20): under a 400 MB address-space
# limit the refusal must still be the one line that points to --check rows.
(ulimit -v 400000 2>/dev/null; exec ./stage6 --random --n 1048576) >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -s "$tmp/out" ] \
    && grep -q "^stage6: error: --n 1048576: naive attention needs four .*limit is 8.6 GB.*give --check rows" "$tmp/err" \
    && echo "PASS stage6 --n 2^20 without --check rows refused before allocating ($(cat "$tmp/err"))" \
    || echo "FAIL stage6 --n 2^20 without --check rows: exit $rc: $(head -c 300 "$tmp/err")"
# Blocks derived from M are cut to the sequence: at N = 64 no Br = 124, and
# the output says why.
./stage3 --random --n 64 --rule io >"$tmp/out" 2>&1
grep -q "rule io; forward Br = 64, Bc = 1 " "$tmp/out" && ! grep -q "rule io; forward Br = 124" "$tmp/out" \
    && grep -q "M alone gives forward Br = 124, Bc = 1" "$tmp/out" && grep -q "cut" "$tmp/out" \
    && grep -q "(Br = 64, all the query rows)" "$tmp/out" \
    && echo "PASS stage3 --rule io at N = 64 cuts Br = 124 to the 64 rows and says why" \
    || echo "FAIL stage3 --rule io at N = 64 cuts Br to the rows there are: $(grep 'Br =' "$tmp/out" | head -3)"

# README's examples work as copied: every input file they name exists, and
# the CPU stages' examples with files run (exit 0) from a copy of the root.
missing=""
for f in $(grep -E '^    \./stage[0-9]' README.md | grep -oE -- '--(q|k|v|do) [^ ]+' | cut -d' ' -f2 | sort -u); do
    [ -f "$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && echo "PASS README's example input files exist" || echo "FAIL README's examples name missing files:$missing"
mkdir -p $tmp/readme && ln -s "$PWD/data" $tmp/readme/data
for s in stage1 stage2 stage3 stage6; do ln -s "$PWD/$s" $tmp/readme/$s; done
grep -E '^    \./stage[1236] .*--q ' README.md | sed 's/ *#.*//' >$tmp/readme.sh
n=$(wc -l <$tmp/readme.sh)
if [ "$n" -lt 1 ]; then
    echo "FAIL README has no CPU example with input files (tests/cli.sh looks for one)"
else
    (cd $tmp/readme && sh -e ../readme.sh) >"$tmp/out" 2>&1 \
        && echo "PASS README's $n CPU example(s) with files run as copied" \
        || echo "FAIL README's CPU examples with files, as copied: $(tail -c 300 "$tmp/out")"
fi
# README's stage 4 and stage 5 rows name every version core/versions.def lists.
for pair in fwd:stage4 bwd:stage5; do
    pass=${pair%:*} st=${pair#*:}
    row=$(grep "^| \`$st\` |" README.md)
    absent=""
    for v in $(grep -oE "^FA_ROW\(${pass}_v[0-9]+\)" core/versions.def | grep -oE 'v[0-9]+'); do
        printf '%s' "$row" | grep -q " $v " || absent="$absent $v"
    done
    [ -n "$row" ] && [ -z "$absent" ] && echo "PASS README's $st row names every $pass version of core/versions.def" \
        || echo "FAIL README's $st row lacks$absent (core/versions.def lists them)"
done

# What the stages print is for a learner: no function name of the sources in
# the prose, a count of one not in the plural, every column of a table said
# once, and a count that is not a check not worded as one.
{
    ./stage1 --random --n 32; ./stage2; ./stage3; ./stage3 --random --n 64 --rule io; ./stage6
    ./stage6 --random --n 64; ./stage6 --random --n 4096 --d 8 --window 15,0 --check rows
    for s in build/tests/gpu/stage4_tests build/tests/gpu/stage5_tests; do [ -x $s ] && $s --sweep model; done
} >"$tmp/prose" 2>&1
leaks=""
for f in $(grep -ohE '\b[a-z][a-z0-9]*_[a-z0-9_]+\(' src/*/*.h core/*.h | tr -d '(' | sort -u); do
    grep -qw "$f" "$tmp/prose" && leaks="$leaks $f"
done
[ -z "$leaks" ] && echo "PASS the stages' output names no function of the sources ($(wc -l <"$tmp/prose") lines read)" \
    || echo "FAIL the stages' output names functions of the sources:$leaks"
grep -nE "\ball 1 [a-z/ ]*heads|\b1 (query |key )?(heads|rows|streams|queries|keys)\b" "$tmp/prose" >"$tmp/plural"
[ ! -s "$tmp/plural" ] && echo "PASS no count of one in the plural" || echo "FAIL a count of one in the plural: $(head -3 "$tmp/plural")"
grep -q "gradchk" "$tmp/prose" && echo "FAIL stage6 table heads a column 'gradchk'" || echo "PASS no 'gradchk' abbreviation"
unsaid=""
for col in "fwd err" "bwd err" gradcheck empty IO tiles row; do
    grep -q "^ .*[ (]$col, " "$tmp/prose" || unsaid="$unsaid '$col'"
done
grep -q "^  problem .*fwd err.*bwd err.*gradcheck.*empty.*IO.*tiles.*row$" "$tmp/prose" && [ -z "$unsaid" ] \
    && echo "PASS stage6's table says once what each column is" \
    || echo "FAIL stage6's table leaves columns unsaid:$unsaid"
grep -q "streams within 1e-15" "$tmp/prose" && echo "FAIL stage2 words the 1e-15 count like a check" \
    || { grep -q "all 7104 streams within the bound; [0-9]* of them also below 1e-15 absolute" "$tmp/prose" \
        && echo "PASS stage2 says every stream is within the bound and counts those below 1e-15 apart" \
        || echo "FAIL stage2's stream count: $(grep streams "$tmp/prose" | head -2)"; }
expect_error "stage3 output over the real input" "would overwrite the real input" ./stage3 --out data/input/q.npy
# A run stopped by a signal (SIGTERM half a second into a sweep of minutes)
# leaves the old --csv and no temporary file.
reset_outs
./stage3 --sweep io --csv $O/c.out >/dev/null 2>&1 &
pid=$!
sleep 0.5
kill -TERM $pid 2>/dev/null
wait $pid 2>/dev/null
rc=$?
[ $rc -gt 128 ] && echo "PASS stage3 --sweep io stopped by SIGTERM (exit $rc)" \
    || echo "FAIL stage3 --sweep io was to be stopped by SIGTERM, exit $rc"
outs_unchanged "stage3 stopped by a signal"

# Every program that writes an output file (csv_open, save_*, gh_save) ends
# through outputs_finish, which renames its staged files into place: one that
# does not would lose what it wrote.
lost=""
for f in $(grep -l "int main(" src/*/*.c tests/*/*.c exercises/*/*.c 2>/dev/null); do
    if grep -qE "csv_open\(|gh_csv_open\(|save_(q_like|kv_like|rows|tensor)\(|gh_save\(" "$f" &&
        ! grep -q "outputs_finish(" "$f"; then lost="$lost $f"; fi
done
[ -z "$lost" ] && echo "PASS every program that writes an output file ends through outputs_finish" \
    || echo "FAIL programs that write output files without outputs_finish (their files would be removed at exit):$lost"
