# figures/train_loss.gp -- the small causal transformer of scripts/gpu/train_compare.py
# trained from one initialization on one sequence of batches, once per
# attention path. Top: the training loss per step with our op and with
# PyTorch's SDPA flash backend. Bottom: each run's loss minus sdpa_flash's at
# the same step: our op beside PyTorch's other runs (flash again, cuDNN,
# memory-efficient), whose spread is the bf16 noise. Input: csv =
# data/gpu/train_loss.csv (columns run, step, loss, loss_minus_sdpa_flash, lr,
# then provenance); paper/gen/paper_figures.sh skips the figure when it is absent.
if (!exists("csv")) csv = "data/gpu/train_loss.csv"
W = 6.5
Hgt = 5.2
load "figures/style.gp"
set termoption noenhanced
others = system("awk -F, 'NR > 1 && !/^#/ && $1 != \"ours\" && $1 != \"sdpa_flash\" {print $1}' " . csv . " | sort -u | tr '\\n' ' '")
set multiplot layout 2, 1
# the same margins in both panels (the legends stand in the right one),
# so that their step axes line up
set rmargin at screen 0.72
set lmargin at screen 0.12
set xlabel "training step"
set ylabel "training loss (nats per byte)"
# both legends outside the plots, in the right margin the two panels share;
# samples long enough to show each dash pattern
set key at screen 0.735, graph 1.0 left top vertical Left reverse font ",8" spacing 1.1 samplen 3 box opaque
# Every series tells itself apart in grey print as well as in colour: a
# colour, a dash pattern and a point shape of its own. The 500 steps of a
# run are too many to mark each; a run's marks stand every 50 steps, each
# run's from its own first step (7 apart), so that no two runs' marks fall
# on the same step. A series is therefore three plot elements: its line
# (every row), its marks (every 50th row) and an empty one that is its
# legend entry, showing line and mark together.
# Ours in both panels: line type 4, dashes, filled circles.
set dashtype 11 (10, 4)
set dashtype 12 (16, 4, 4, 4)
mark_every = 50
plot csv using (strcol(1) eq "sdpa_flash" ? $2 : NaN):3 with lines lt 3 lw 1.2 title "SDPA flash (PyTorch)", \
     csv using (strcol(1) eq "ours" ? $2 : NaN):3 with lines lt 4 lw 1.0 dt 2 notitle, \
     csv using (strcol(1) eq "ours" ? $2 : NaN):3 every mark_every::3 with points lt 4 pt 7 ps 0.7 notitle, \
     NaN with linespoints lt 4 lw 1.0 dt 2 pt 7 ps 0.7 title "our op (flash_op.py)"
# Bottom: the per-step differences swing by about +-0.015 from one batch to
# the next, ten times the drifts the text compares, so each run's
# difference is shown as its trailing mean over the `win` steps up to each
# step (awk below: one output row per step from the win-th on, per run, in
# the file's order; column 1 run, 2 step, 3 the mean of loss_minus_sdpa_flash).
win = 50
mean_rows = sprintf("< awk -F, -v W=%d 'NR > 1 && !/^#/ { if ($1 != r) { r = $1; n = 0; s = 0 } " . \
    "i = n %% W; if (n >= W) s -= a[i]; a[i] = $4; s += $4; n++; " . \
    "if (n >= W) printf \"%%s,%%s,%%.9g\\n\", $1, $2, s / W }' %s", win, csv)
set ylabel sprintf("loss minus SDPA flash's,\nmean of %d steps\n(nats per byte)", win)
# The other runs (our op's reruns and PyTorch's) in the distinct colours of
# figures/style.gp (line types 1, 2, 3, 5, 7, 8: 4 is ours, 6 is black), each
# with the dash pattern and the open point shape (or cross) of its place in the list;
# ours' line over theirs, and every run's marks over all the lines.
others_lt = "1 2 3 5 7 8"
others_dt = "1 3 4 5 11 12"
others_pt = "4 6 8 10 12 2"
ix(k) = (k - 1) % 6 + 1
lt_of(k) = word(others_lt, ix(k)) + 0
dt_of(k) = word(others_dt, ix(k)) + 0
pt_of(k) = word(others_pt, ix(k)) + 0
plot for [k=1:words(others)] mean_rows using (strcol(1) eq word(others, k) ? $2 : NaN):3 \
         with lines lt lt_of(k) dt dt_of(k) lw 0.7 notitle, \
     mean_rows using (strcol(1) eq "ours" ? $2 : NaN):3 with lines lt 4 lw 1.2 dt 2 notitle, \
     for [k=1:words(others)] mean_rows using (strcol(1) eq word(others, k) ? $2 : NaN):3 every mark_every::(7 * k) \
         with points lt lt_of(k) pt pt_of(k) ps 0.7 notitle, \
     mean_rows using (strcol(1) eq "ours" ? $2 : NaN):3 every mark_every::3 with points lt 4 pt 7 ps 0.7 notitle, \
     for [k=1:words(others)] NaN with linespoints lt lt_of(k) dt dt_of(k) \
         lw 0.7 pt pt_of(k) ps 0.7 title word(others, k), \
     NaN with linespoints lt 4 lw 1.2 dt 2 pt 7 ps 0.7 title "ours", \
     0 with lines lc rgb "#999999" lw 0.5 notitle
unset multiplot
