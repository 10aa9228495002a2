# figures/memory_vs_n.gp -- peak resident memory of a whole run (forward and
# backward, fp64, d = 16, window (255, 0)) against N, log-log: stage 1
# (naive, S, P, dP, dS materialized) and stage 6 --check rows (tiled, checked
# on sampled rows). Dashed: the model's bytes, the tensors in and out
# (Q, K, V, dO, O, dQ, dK, dV, L) plus each algorithm's extra (4 N^2 for the
# naive, L and D for the tiled). Input: data/cpu/memory_vs_n.csv.
if (!exists("csv")) csv = "data/cpu/memory_vs_n.csv"
Hgt = 3.6
load "figures/style.gp"
set logscale xy 2
set format x "2^{%L}"
set format y "10^{%T}"
set logscale y 10
set xlabel "sequence length N (tokens)"
set ylabel "peak resident memory (MiB)"
# the legend below the plot, under the axis label: at the top left it
# covered the naive curve's last points
set bmargin 8
set key at screen 0.5, screen 0.01 center bottom horizontal maxrows 2 font ",9" box opaque
alg(a) = (strcol(1) eq a && $6 > 0)
MiB = 1048576.0
plot \
  csv using (alg("naive") ? $2 : NaN):(($7 + $8) / MiB) smooth unique with lines lc rgb c_naive_f dt 2 notitle, \
  csv using (alg("naive") ? $2 : NaN):($6 / 1024.0) with linespoints pt 7 ps 0.7 lc rgb c_naive_f title "naive (stage 1)", \
  csv using (alg("tiled") ? $2 : NaN):(($7 + $8) / MiB) smooth unique with lines lc rgb c_tiled_f dt 2 notitle, \
  csv using (alg("tiled") ? $2 : NaN):($6 / 1024.0) with linespoints pt 9 ps 0.8 lc rgb c_tiled_f title "tiled (stage 6, --check rows)", \
  NaN with lines lc rgb c_other dt 2 title "model: tensors + extra"
