#!/bin/sh
# paper/gen/paper_figures.sh OUTDIR -- draw every figure of the paper from data/.
#
# Each figure is a gnuplot script in figures/ drawn twice: OUTDIR/NAME.pdf
# (for pdflatex) and OUTDIR/NAME.svg (for the HTML page). A figure whose data
# file is absent (exactness data not yet written, no GPU data on a machine
# without a GPU) is skipped with a line saying so, never failed.
# OUTDIR/MANIFEST lists what was drawn, one line per figure:
#     NAME <TAB> script <TAB> data file
# which the paper's test suite uses to check that every figure is newer than
# the data it was drawn from.
set -eu
out=${1:-build/figures}
mkdir -p "$out"
manifest="$out/MANIFEST.tmp"
: > "$manifest"

# draw NAME DATAFILE VAR: figures/NAME.gp with VAR=DATAFILE
draw() {
    name=$1 data=$2 var=$3
    if [ ! -s "$data" ]; then
        echo "figures: $name skipped: $data is absent"
        rm -f "$out/$name.pdf" "$out/$name.svg"
        return 0
    fi
    for term in pdf svg; do
        gnuplot -e "term='$term'; out='$out/$name.$term'; $var='$data'" "figures/$name.gp"
    done
    printf '%s\t%s\t%s\n' "$name" "figures/$name.gp" "$data" >> "$manifest"
    echo "figures: $name <- $data"
}

# the exactness data: committed by the tests, or this build's own run
exact=data/cpu/exactness.csv
[ -s "$exact" ] || exact=build/paper/exactness.csv

draw io_vs_n   data/cpu/io_sweep.csv    csv
draw io_vs_m   data/cpu/io_sweep.csv    csv
draw blocks    data/cpu/block_sweep.csv csv
draw exactness "$exact"                 csv
draw window_sweep data/cpu/window_sweep.csv csv
draw lse_error   data/cpu/lse_error.csv   csv
draw memory_vs_n data/cpu/memory_vs_n.csv csv
draw gpu_fig2  build/paper/gpu_fig2.dat dat
draw gpu_speed build/paper/gpu_speed.dat dat
draw gpu_io_vs_n build/paper/gpu_io_sweep.dat dat
draw v3_steps  data/gpu/v3_steps.csv     csv
draw train_loss data/gpu/train_loss.csv csv
draw ring      data/gpu/ring.csv        csv
draw gpu_bwd_speed data/gpu/bench_bwd.csv csv
draw bwd_hopper_steps build/paper/bwd_hopper_steps.dat dat
draw decode_bw build/paper/decode_bw.csv dat
mv "$manifest" "$out/MANIFEST"
