# figures/gpu_speed_ratio.gp -- the fast forward paths' throughput over
# PyTorch's cuDNN kernel at the same shape (bf16, no mask, graph-replayed),
# by sequence length, one panel per head dimension, on a linear axis: the
# few percent between the fast kernels, which figure gpu_speed's log axis
# squeezes into a pixel, are visible here. Input: build/paper/gpu_speed_ratio.dat,
# which paper/gen/paper_gpu.py writes from data/gpu/bench_fwd.csv.
if (!exists("dat")) dat = "build/paper/gpu_speed_ratio.dat"
W = 6.5
Hgt = 3.4
load "figures/style.gp"
set datafile separator whitespace
set datafile missing NaN
set termoption noenhanced
impls = system("awk '!/^#/ {gsub(/\"/, \"\", $1); print $1}' " . dat . " | sort -u | tr '\\n' ' '")
dims = system("awk '!/^#/ {print $3}' " . dat . " | sort -n -u | tr '\\n' ' '")
set logscale x 2
set xlabel "sequence length N (tokens)"
set ylabel "throughput / sdpa_cudnn's"
set yrange [0.4:1.2]
set ytics 0.1
# one legend for both panels, below them (first panel only)
set bmargin 6
set key at screen 0.5, screen 0.01 center bottom maxrows 2 width 1 font ",9" spacing 1.1 box opaque
set multiplot layout 1, words(dims)
first = 1
do for [dd in dims] {
    if (!first) { unset key }
    first = 0
    set title sprintf("d = %s, bf16, no mask", dd)
    plot 1 with lines lw 1 lc rgb "#000000" dt 2 notitle, \
         for [k=1:words(impls)] dat using ((strcol(1) eq word(impls, k) && $3 == dd+0) ? $2 : NaN):4 \
         smooth unique with linespoints pt impl_lt(word(impls, k)) ps 0.9 lc rgb impl_lc(word(impls, k)) title word(impls, k)
}
unset multiplot
