# scripts/gpu/ncu_prof.sh -- sourced (`. scripts/gpu/ncu_prof.sh`) by the
# scripts that profile one call under Nsight Compute (ncu_hopper.sh,
# ncu_decode.sh). Defines
#
#     ncu_prof DIR TAG METRICS COMMAND...
#
# COMMAND run under ncu with --profile-from-start off (the program brackets
# the call to profile with cudaProfilerStart/Stop) and --clock-control none
# (the clocks left alone), METRICS on the raw page as CSV, a row per kernel,
# into DIR/ncu_TAG.csv: written under a temporary name and moved into place
# only when ncu succeeds, so a failed profile leaves the old file as it was
# and sets rc=1. A line says how many kernels were profiled, or FAILED;
# ncu's first 300 bytes of stderr follow. NCU names ncu (found on PATH by
# default); NCU_TIMEOUT seconds per call (default 90).
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
rc=${rc:-0}
ncu_prof() {
    _d=$1 _tag=$2 _met=$3; shift 3
    if timeout "${NCU_TIMEOUT:-90}" "$NCU" --profile-from-start off --clock-control none --csv --page raw \
        --metrics "$_met" "$@" > "$_d/.ncu_$_tag.tmp" 2> "$_d/.err"; then
        mv "$_d/.ncu_$_tag.tmp" "$_d/ncu_$_tag.csv"
        echo "ncu $_tag: $(grep -c '^"[0-9]' "$_d/ncu_$_tag.csv") kernels"
    else
        rc=1; rm -f "$_d/.ncu_$_tag.tmp"; echo "ncu $_tag: FAILED, ncu_$_tag.csv left as it was"
    fi
    head -c 300 "$_d/.err"; rm -f "$_d/.err"
}
