# figures/ring.gp -- stage 7 on the H200s: one sequence on G GPUs against one.
# Left: throughput (TFLOP/s, FLOPs as fa_flops counts them: 4 B H N^2 d
# forward, halved under the causal mask, 2.5 times that backward) of the
# single-GPU kernel and of the ring, by sequence length. Right: the ring's
# scaling efficiency (single-GPU time / (G x ring time)) and the share of its
# communication that overlapped computation ((compute-only + comm-only -
# ring) / comm-only, unclamped). Solid: no mask; dashed: causal. Input:
# data/gpu/ring.csv (./stage7 --sweep scale; or csv=...).
if (!exists("csv")) csv = "data/gpu/ring.csv"
W = 6.5
Hgt = 4.0
load "figures/style.gp"
# columns: 10 causal, 13 pass, 16 N, 24 single TFLOP/s, 25 ring TFLOP/s,
#          26 efficiency, 23 hidden share, 9 G
row(p, c) = (strcol(13) eq p && $10 == c)
# the hidden share only where the transfers alone take at least min_comm of
# the ring's time (22 comm_only_ms, 20 ring_ms): below that it is the small
# difference of two nearly equal times and jumps between 0 and 1 with noise
min_comm = 0.05
hid(p, c) = (row(p, c) && $22 >= min_comm * $20)
# the share as the three times give it, not the clamped column 23 (which
# stage7 clips to [0, 1]): a share above 1, the ring faster than its
# computation alone, is timing noise and is drawn as such, not as 1.0
share = "($21 + $22 - $20) / $22"
stats csv using ($9) name "GG" nooutput
G = int(GG_max)
# the communication hidden, backward: purple, apart from the forward's grey
c_hid_b = "#762a83"
set multiplot layout 1, 2
set logscale x 2
set format x "2^{%L}"
set xlabel "sequence length N (tokens)"
set ylabel sprintf("throughput (TFLOP/s;\n%d GPUs: their total)", G)
set yrange [0:*]
# legends below the panels, at the text's size: inside they covered the
# points at the largest N (and efficiency 0)
set key below maxcols 1 font ",8" spacing 1.1 box
set bmargin 9.5
set xlabel offset 0, 0.4
plot \
  csv using (row("fwd", 0) ? $16 : NaN):24 with linespoints pt 7 ps 0.5 lc rgb c_tiled_f dt 1 title "1 GPU fwd", \
  csv using (row("fwd", 0) ? $16 : NaN):25 with linespoints pt 5 ps 0.5 lc rgb c_naive_f dt 1 title sprintf("%d GPUs fwd, total", G), \
  csv using (row("bwd", 0) ? $16 : NaN):24 with linespoints pt 6 ps 0.5 lc rgb c_tiled_b dt 1 title "1 GPU bwd", \
  csv using (row("bwd", 0) ? $16 : NaN):25 with linespoints pt 4 ps 0.5 lc rgb c_naive_b dt 1 title sprintf("%d GPUs bwd, total", G), \
  csv using (row("fwd", 1) ? $16 : NaN):24 with linespoints pt 7 ps 0.5 lc rgb c_tiled_f dt 2 notitle, \
  csv using (row("fwd", 1) ? $16 : NaN):25 with linespoints pt 5 ps 0.5 lc rgb c_naive_f dt 2 notitle, \
  csv using (row("bwd", 1) ? $16 : NaN):24 with linespoints pt 6 ps 0.5 lc rgb c_tiled_b dt 2 notitle, \
  csv using (row("bwd", 1) ? $16 : NaN):25 with linespoints pt 4 ps 0.5 lc rgb c_naive_b dt 2 notitle, \
  NaN with lines lc rgb "#000000" dt 1 title "no mask", \
  NaN with lines lc rgb "#000000" dt 2 title "causal"
set ylabel "fraction (efficiency, share hidden)"
# room above the largest point drawn, whatever it is (no point clipped)
stats csv using ($22 >= min_comm * $20 ? @share : $26) name "YY" nooutput
stats csv using 26 name "EE" nooutput
ytop = (YY_max > EE_max ? YY_max : EE_max)
set yrange [0:(ytop > 1 ? ytop + 0.06 : 1.05)]
# the line a share cannot pass but by noise
set arrow from graph 0, first 1 to graph 1, first 1 nohead lc rgb "#999999" dt 3 back
plot \
  csv using (row("fwd", 0) ? $16 : NaN):26 with linespoints pt 5 ps 0.5 lc rgb c_naive_f dt 1 title "efficiency fwd", \
  csv using (row("bwd", 0) ? $16 : NaN):26 with linespoints pt 4 ps 0.5 lc rgb c_naive_b dt 1 title "efficiency bwd", \
  csv using (hid("fwd", 0) ? $16 : NaN):(@share) with linespoints pt 9 ps 0.5 lc rgb c_other dt 1 title "comm hidden fwd", \
  csv using (hid("bwd", 0) ? $16 : NaN):(@share) with linespoints pt 8 ps 0.5 lc rgb c_hid_b dt 1 title "comm hidden bwd", \
  csv using (row("fwd", 1) ? $16 : NaN):26 with linespoints pt 5 ps 0.5 lc rgb c_naive_f dt 2 notitle, \
  csv using (row("bwd", 1) ? $16 : NaN):26 with linespoints pt 4 ps 0.5 lc rgb c_naive_b dt 2 notitle, \
  csv using (hid("fwd", 1) ? $16 : NaN):(@share) with linespoints pt 9 ps 0.5 lc rgb c_other dt 2 notitle, \
  csv using (hid("bwd", 1) ? $16 : NaN):(@share) with linespoints pt 8 ps 0.5 lc rgb c_hid_b dt 2 notitle, \
  NaN with lines lc rgb "#000000" dt 1 title "no mask", \
  NaN with lines lc rgb "#000000" dt 2 title "causal"
unset multiplot
