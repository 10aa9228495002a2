# figures/blocks.gp -- the block-size sweep at N = 2048, d = 64: square tiles
# Br = Bc = B, SRAM sized to fit them. Left: slow-memory bytes (counted);
# right: wall time on this CPU. Naive attention as horizontal lines.
# Input: data/cpu/block_sweep.csv (or csv=...).
if (!exists("csv")) csv = "data/cpu/block_sweep.csv"
W = 6.5
Hgt = 3.3
load "figures/style.gp"
tiled(p) = (strcol(1) eq "tiled" && strcol(2) eq p)
stats csv using ((strcol(1) eq "naive" && strcol(2) eq "forward") ? $9*8 : NaN) name "NFB" nooutput
stats csv using ((strcol(1) eq "naive" && strcol(2) eq "backward") ? $9*8 : NaN) name "NBB" nooutput
stats csv using ((strcol(1) eq "naive" && strcol(2) eq "forward") ? $13 : NaN) name "NFT" nooutput
stats csv using ((strcol(1) eq "naive" && strcol(2) eq "backward") ? $13 : NaN) name "NBT" nooutput
# Each series tells itself apart in grey print as well as in colour, by its
# point shape, the same as in the other CPU figures (naive forward and
# backward filled circles and squares, on their lines every 20 samples;
# tiled, up and down triangles), and the tiled backward is dashed.
# one legend for both panels, below them, off the curves
set bmargin 6
set key at screen 0.5, screen 0.01 center bottom maxrows 1 maxcols 4 font ",9" samplen 3 box opaque
set multiplot layout 1, 2
set logscale x 2
set xrange [3:700]
set xtics (4, 8, 16, 32, 64, 128, 256, 512)
set xlabel "block size Br = Bc (rows)"
set logscale y 10
set format y "10^{%T}"
set ylabel "slow-memory traffic (bytes, fp64)"
plot \
  NFB_max with linespoints pi 20 pt 7 ps 0.6 lc rgb c_naive_f lw 1 title "naive fwd", \
  NBB_max with linespoints pi 20 pt 5 ps 0.6 lc rgb c_naive_b lw 1 title "naive bwd", \
  csv using (tiled("forward") ? $7 : NaN):($9*8) smooth unique with linespoints pt 9 ps 0.8 lc rgb c_tiled_f title "tiled fwd", \
  csv using (tiled("backward") ? $7 : NaN):($9*8) smooth unique with linespoints pt 11 ps 0.8 dt 2 lc rgb c_tiled_b title "tiled bwd"
unset logscale y
set format y "%g"
set yrange [0:*]
set ylabel "wall time on this CPU\n(s, median of the runs)"
unset key
plot \
  NFT_max with linespoints pi 20 pt 7 ps 0.6 lc rgb c_naive_f lw 1 title "naive fwd", \
  NBT_max with linespoints pi 20 pt 5 ps 0.6 lc rgb c_naive_b lw 1 title "naive bwd", \
  csv using (tiled("forward") ? $7 : NaN):13 smooth unique with linespoints pt 9 ps 0.8 lc rgb c_tiled_f title "tiled fwd", \
  csv using (tiled("backward") ? $7 : NaN):13 smooth unique with linespoints pt 11 ps 0.8 dt 2 lc rgb c_tiled_b title "tiled bwd"
unset multiplot
