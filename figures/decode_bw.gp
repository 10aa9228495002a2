# figures/decode_bw.gp -- stage 8 on the H200: decode bandwidth (cache bytes
# over time) as a fraction of the device-to-device copy bandwidth measured in
# the same run, by keys per sequence; one line per batch size. Solid: the
# decode kernel with the rule's split count; dashed: SDPA's fastest backend on
# the same rows. Each side's bandwidth at the faster of its two clocks
# (graph-replayed or eager: paper_decode.decode_table says why). Left H_kv = 8
# (groups of 4), right H_kv = 32. Input:
# build/paper/decode_bw.csv (paper/gen/paper_decode.py, from data/gpu/decode.csv).
if (!exists("dat")) dat = "build/paper/decode_bw.csv"
W = 6.5
Hgt = 4.2
load "figures/style.gp"
set multiplot layout 1, 2
set logscale x 2
set format x "2^{%L}"
set xlabel "keys per sequence (seqlen\\_k)"
set ylabel "fraction of copy bandwidth"
set yrange [0:*]   # autoscaled above: no point clipped
# one legend for both panels, below them, outside the data, at the text's
# size, naming both kinds of line: the left panel draws it, the right none
set bmargin 10
set key at screen 0.5, screen 0.01 center bottom vertical maxrows 4 font ",9" spacing 1.1 samplen 3 box opaque
sel(h, b) = ($1 == h && $2 == b)
# each batch size a colour and a shape (circle, square, triangle, diamond),
# filled for ours and open for SDPA, so that the eight lines part in grey too
pt_ours = "7 5 9 13"
pt_sdpa = "6 4 8 12"
do for [h in "8 32"] {
    hh = int(h)
    set title sprintf("H = 32, H_{kv} = %d", hh) font ",9"
    plot for [i = 1:4] dat using (sel(hh, word("1 4 16 64", i) + 0) ? $3 : NaN):4 with linespoints \
             pt (word(pt_ours, i) + 0) ps 0.6 lt i dt 1 title sprintf("ours B = %s", word("1 4 16 64", i)), \
         for [i = 1:4] dat using (sel(hh, word("1 4 16 64", i) + 0) ? $3 : NaN):5 with linespoints \
             pt (word(pt_sdpa, i) + 0) ps 0.6 lt i dt 2 title sprintf("SDPA B = %s", word("1 4 16 64", i))
    unset key
}
unset multiplot
