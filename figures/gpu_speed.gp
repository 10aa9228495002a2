# figures/gpu_speed.gp -- forward TFLOP/s (4 B H N^2 d per pass) of every path
# measured on the H200, by sequence length, one panel per head dimension, in
# bf16 and without a mask (fp32 rows, where the file has them, are left out:
# the SDPA kernels do not run in fp32; causal rows are left out too: at one N
# smooth unique would average a causal and a non-causal run into one point). Input: build/paper/gpu_speed.dat, which
# paper/gen/paper_gpu.py writes from data/gpu/bench_fwd.csv.
if (!exists("dat")) dat = "build/paper/gpu_speed.dat"
W = 6.5
Hgt = 4.0
load "figures/style.gp"
set datafile separator whitespace
set datafile missing NaN
set termoption noenhanced
impls = system("awk '!/^#/ && $5 == \"bf16\" && $4 == 0 {gsub(/\"/, \"\", $1); print $1}' " . dat . " | sort -u | tr '\\n' ' '")
dims = system("awk '!/^#/ && $5 == \"bf16\" && $4 == 0 {print $3}' " . dat . " | sort -n -u | tr '\\n' ' '")
set logscale x 2
set logscale y 10
set xlabel "sequence length N (tokens)"
set ylabel "forward throughput (TFLOP/s)"
set yrange [10:1000]
# one legend for all panels, below them, at the text's size (first panel only)
set bmargin 8
set key at screen 0.5, screen 0.01 center bottom maxrows 3 width 1 font ",9" spacing 1.1 box opaque
set multiplot layout 1, words(dims)
first = 1
do for [dd in dims] {
    if (!first) { unset key }
    first = 0
    set title sprintf("d = %s, bf16, no mask", dd)
    plot for [k=1:words(impls)] dat using ((strcol(1) eq word(impls, k) && $3 == dd+0 && $4 == 0 && strcol(5) eq "bf16") ? $2 : NaN):6 \
         smooth unique with linespoints pt impl_lt(word(impls, k)) ps 0.9 lc rgb impl_lc(word(impls, k)) title word(impls, k)
}
unset multiplot
