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

# Good files in every accepted rank work, and --help exits 0.
./stage3 --q $B/good_1x2x16x8_v2.npy --k $B/good_1x2x16x8_v2.npy --v $B/good_1x2x16x8_v2.npy >/dev/null 2>&1 \
    && echo "PASS stage3 reads a format 2.0 (B,H,N,d) file" || echo "FAIL stage3 reads a format 2.0 (B,H,N,d) file"
stage4=""
[ -x ./stage4 ] && stage4=./stage4   # built where nvcc is; --help needs no GPU
for s in ./stage1 ./stage2 ./stage3 ./stage6 $stage4; do
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
./stage3 --random --n 64 --d 16 --sram 4096 --rule io 2>&1 | grep -q "why these tiles (--rule io)" \
    && echo "PASS stage3 --rule io says why its tiles are thin" || echo "FAIL stage3 --rule io says why its tiles are thin"
# stage 8: its own flags follow the same rules, and a decoding problem that
# cannot be is refused before any work
expect_error "stage8 unknown flag" "unknown flag '--bogus'" ./stage8 --bogus
expect_error "stage8 own flag given twice" "--splits is given twice" ./stage8 --splits 2 --splits 3
expect_error "stage8 own flag missing value" "--page-size: missing value" ./stage8 --page-size
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
