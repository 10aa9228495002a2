# figures/bwd_hopper_steps.gp -- backward version 3 (Hopper) step by step
# beside version 4 and PyTorch's backends: each path's backward TFLOP/s over
# cuDNN's backward at the same shape in the same run (so cuDNN is the line at
# 1), by sequence length, bf16; one panel per (mask, head dimension), causal
# and non-causal never in one panel. Input: build/paper/bwd_hopper_steps.dat
# (paper/gen/paper_bwd3.py, from data/gpu/bench_bwd.csv or
# data/gpu/studies/bwd_v3_steps/bench.csv, and steps the main file lacks from
# data/gpu/studies/bwd_v3_steps/bench_steps_1_2.csv), columns
#   curve d causal N over_cudnn tflops
# curve names have '_' for spaces.
if (!exists("dat")) dat = "build/paper/bwd_hopper_steps.dat"
W = 6.5
Hgt = 5.8
load "figures/style.gp"
set datafile separator whitespace
set datafile missing NaN
set termoption noenhanced
curves = system("awk '!/^#/ {gsub(/\"/, \"\", $1); if (!seen[$1]++) printf \"%s \", $1}' " . dat)
spaced(s) = strstrt(s, "_") ? s[1:strstrt(s, "_") - 1] . " " . spaced(s[strstrt(s, "_") + 1:]) : s
set logscale x 2
set xrange [1448:23170]
set xtics ("2048" 2048, "4096" 4096, "8192" 8192, "16384" 16384)
set yrange [0:*]   # autoscaled above: no point clipped
# room above the highest point, so that cuDNN's line at 1 is not drawn on
# the frame where a panel's highest value is 1 (d = 128)
set offsets 0, 0, graph 0.06, 0
set ytics 0.2
set ylabel "backward TFLOP/s / cuDNN's"
set bmargin 0
set key at screen 0.5, screen 0.01 center bottom maxrows 3 width 1 font ",8" spacing 1.1 box opaque
set multiplot layout 2, 2 margins screen 0.10, 0.98, 0.19, 0.93 spacing screen 0.06, 0.11
first = 1
do for [c = 0:1] {
    do for [dd in "64 128"] {
        set title sprintf("d = %s, %s", dd, c ? "causal" : "no mask")
        set ylabel (dd eq "64" ? "backward TFLOP/s / cuDNN's" : "")
        set xlabel (c ? "sequence length N (tokens)" : "")
        if (!first) { unset key }
        first = 0
        # only the curves with a point in this panel (a peer whose CUDA graph was
        # not captured has none at some shapes); each keeps its place k in
        # `curves`, so its colour and shape are the same in every panel
        here = system(sprintf("awk '!/^#/ && $2 == %s && $3 == %d {gsub(/\"/, \"\", $1); printf \" %%s \", $1}' %s", dd, c, dat))
        cmd = "plot 1 with lines lw 1.2 dt 2 lc rgb \"#b2182b\" title \"SDPA cuDNN (1.0)\""
        do for [k = 1:words(curves)] {
            if (strstrt(here, " " . word(curves, k) . " ")) {
                cmd = cmd . sprintf(", dat using ((strcol(1) eq \"%s\" && $2 == %s && $3 == %d) ? $4 : NaN):5 with linespoints pt %d ps 0.6 lc %d title \"%s\"", word(curves, k), dd, c, k, k, spaced(word(curves, k)))
            }
        }
        eval cmd
    }
}
unset multiplot
