#!/bin/sh
# tests/paper.sh -- the paper's test suite (run by `make test` through
# tests/run.sh; one PASS/FAIL/SKIP line per test).
#
#   1. the include filter: a good region is cut without its markers, a missing
#      region and a region marked twice fail and name the file and region;
#   2. `make paper` builds the PDF and the HTML;
#   3. every region the chapters name was resolved (one listing per reference,
#      no reference left in the output);
#   4. every figure was redrawn from data in this build (newer than its data
#      file and its gnuplot script), and every figure with data is in the PDF;
#   5. the claims table is in the PDF text with the measured values.
# Without pandoc or pdflatex it prints SKIP lines (`make setup` installs them).
set -u
cd "$(dirname "$0")/.." || exit 2
MAKE=${MAKE:-make}
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
skip() { echo "SKIP $1: $2"; }

missing=""
for tool in pandoc pdflatex gnuplot pdftotext python3; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    for t in "paper: include filter" "paper: build" "paper: regions resolved" \
             "paper: figures from data" "paper: claims table in PDF"; do
        skip "$t" "not installed:$missing (make setup)"
    done
    exit 0
fi

# ---- 1. the filter on its own --------------------------------------------
cat > "$tmp/demo.c" <<'EOF'
int before;
//> demo
int f(int x)
{
    //> inner
    return x + 1;
    //< inner
}
//< demo
//> twice
int a;
//< twice
//> twice
int b;
//< twice
EOF
run_filter() {   # run_filter REF -> output in $tmp/out.md, stderr in $tmp/err
    printf '```include\n%s\n```\n' "$1" > "$tmp/in.md"
    pandoc --lua-filter=paper/include-code.lua -t markdown "$tmp/in.md" -o "$tmp/out.md" 2> "$tmp/err"
}
ok=1 why=""
if ! run_filter "$tmp/demo.c#demo"; then
    ok=0 why="a good region failed: $(head -c 300 "$tmp/err")"
elif ! grep -q 'return x + 1;' "$tmp/out.md" || grep -q '//[<>]' "$tmp/out.md"; then
    ok=0 why="the region's code is missing or its markers were kept"
elif ! grep -q 'function f()' "$tmp/out.md"; then
    ok=0 why="the caption does not name the function f()"
fi
if [ "$ok" = 1 ]; then
    if run_filter "$tmp/demo.c#no-such-region"; then
        ok=0 why="a missing region did not fail the build"
    elif ! grep -q "demo.c" "$tmp/err" || ! grep -q "no-such-region" "$tmp/err"; then
        ok=0 why="the error for a missing region names neither file nor region: $(head -c 200 "$tmp/err")"
    elif run_filter "$tmp/demo.c#twice"; then
        ok=0 why="a region marked twice did not fail the build"
    elif ! grep -q "twice" "$tmp/err" || ! grep -q "demo.c" "$tmp/err"; then
        ok=0 why="the error for a doubled region names neither file nor region"
    elif run_filter "$tmp/absent.c#demo"; then
        ok=0 why="a missing file did not fail the build"
    fi
fi
cat > "$tmp/demo.py" <<'PYDEMO'
x = 1
#> pyregion
def g(y):
    # a comment, not a marker
    return y + 1
#< pyregion
PYDEMO
if [ "$ok" = 1 ]; then
    if ! run_filter "$tmp/demo.py#pyregion"; then
        ok=0 why="a Python region (#> name) failed: $(head -c 300 "$tmp/err")"
    elif ! grep -q 'return y + 1' "$tmp/out.md" || grep -q '#[<>] pyregion' "$tmp/out.md"; then
        ok=0 why="the Python region's code is missing or its markers were kept"
    elif ! grep -q 'function g()' "$tmp/out.md"; then
        ok=0 why="the Python caption does not name the function g()"
    fi
fi
[ "$ok" = 1 ] && pass "paper: include filter (cuts regions, //> in C, #> in Python; missing or doubled regions fail, naming file and region)" \
              || fail "paper: include filter" "$why"

# ---- 2. the build -----------------------------------------------------------
start="$tmp/start"
touch "$start"
sleep 1
if $MAKE -s paper > "$tmp/build.log" 2>&1; then
    pass "paper: build (build/paper/flashattention.pdf and .html)"
else
    fail "paper: build" "make paper failed: $(grep -i 'error' "$tmp/build.log" | head -n 3 | tr '\n' ' ')"
    for t in "paper: regions resolved" "paper: figures from data" "paper: claims table in PDF"; do
        fail "$t" "no paper was built"
    done
    exit 0
fi
pdf=build/paper/flashattention.pdf html=build/paper/flashattention.html

# ---- 3. regions -------------------------------------------------------------
refs=$(awk '/^```include/ {getline; print}' chapters/*.md)
nrefs=$(printf '%s\n' "$refs" | grep -c '#')
nlist=$(grep -c 'class="listing"' "$html")
if [ "$nrefs" -eq 0 ]; then
    fail "paper: regions resolved" "the chapters name no region at all"
elif [ "$nlist" -ne "$nrefs" ]; then
    fail "paper: regions resolved" "$nrefs region references in chapters/, $nlist listings in $html"
elif grep -q '```include' "$html" || grep -q '//[<>] ' "$html"; then
    fail "paper: regions resolved" "an include block or a region marker reached the HTML"
else
    pass "paper: regions resolved ($nrefs listings, all cut from the sources)"
fi

# ---- 4. figures -------------------------------------------------------------
manifest=build/figures/MANIFEST
ok=1 why="" n=0
if [ ! -s "$manifest" ]; then
    ok=0 why="no $manifest"
else
    tab=$(printf '\t')
    while IFS="$tab" read -r name script data; do
        n=$((n + 1))
        for ext in pdf svg; do
            f=build/figures/$name.$ext
            if [ ! -s "$f" ]; then ok=0 why="$f missing"
            elif [ ! "$f" -nt "$start" ]; then ok=0 why="$f was not redrawn by this build"
            elif [ ! "$f" -nt "$data" ] || [ ! "$f" -nt "$script" ]; then ok=0 why="$f is older than $data or $script"
            fi
        done
        grep -q "build/figures/$name" chapters/*.md || { ok=0; why="figure $name is drawn but no chapter shows it"; }
    done < "$manifest"
    # every figure a chapter shows is drawn, unless its data is absent (then skipped by design)
    for name in $(grep -o 'build/figures/[a-z0-9_]*' chapters/*.md | sed 's|.*/||' | sort -u); do
        if ! grep -q "^$name$tab" "$manifest"; then
            grep -q "$name skipped" "$tmp/build.log" || { ok=0; why="figure $name is neither drawn nor skipped for lack of data"; }
        fi
    done
fi
[ "$ok" = 1 ] && pass "paper: figures from data ($n figures redrawn in this build, each newer than its data and script)" \
              || fail "paper: figures from data" "$why"

# ---- 5. claims table in the PDF -----------------------------------------------
pdftotext -layout "$pdf" "$tmp/paper.txt"
v() { awk -F'\t' -v k="$1" '$1 == k {print $2}' build/paper/values.tsv; }
ok=1 why=""
grep -q "measured here" "$tmp/paper.txt" || { ok=0; why="no claims table header in the PDF text"; }
for key in ex2_L ex3_S ex3_ratio causal_kv_frac slope_bwd_M paper_blocks_need fig2_fwd_gflop; do
    val=$(v "$key")
    if [ -z "$val" ]; then ok=0 why="claims.py wrote no value '$key'"; continue; fi
    grep -qF -- "$val" "$tmp/paper.txt" || { ok=0; why="measured value $key = $val is not in the PDF text"; }
done
for key in online_err tiled_err gradcheck; do   # measured when the exactness data exists
    val=$(v "$key")
    [ "$val" = "not measured" ] && continue
    grep -qF -- "$val" "$tmp/paper.txt" || { ok=0; why="measured value $key = $val is not in the PDF text"; }
done
nrows=$(grep -c '^| ' build/paper/claims.md)
[ "$ok" = 1 ] && pass "paper: claims table in PDF ($((nrows - 1)) claims, measured values present)" \
              || fail "paper: claims table in PDF" "$why"
exit 0
