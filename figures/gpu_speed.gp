# figures/gpu_speed.gp -- forward TFLOP/s (4 B H N^2 d, halved when causal)
# of every path measured on the H200, by sequence length. Input:
# build/paper/gpu_speed.dat, which scripts/paper_gpu.py writes from
# data/gpu/bench_fwd.csv.
if (!exists("dat")) dat = "build/paper/gpu_speed.dat"
W = 6.5
load "figures/style.gp"
set datafile separator whitespace
set logscale x 2
set xlabel "sequence length N (tokens)"
set ylabel "forward throughput (TFLOP/s, log scale)"
set logscale y 10
set termoption noenhanced
set key outside right font ",8"
# one series per (name, d, causal): the names are read from the file
set datafile missing NaN
names = system("awk '!/^#/ {gsub(/\"/, \"\", $1); print $1\",d=\"$3\",\"$5}' " . dat . " | sort -u | tr '\\n' ' '")
plot for [k in names] dat using (sprintf("%s,d=%d,%s", strcol(1), $3, strcol(5)) eq k ? $2 : NaN):6 \
     smooth unique with linespoints ps 0.6 title k noenhanced
