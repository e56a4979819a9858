# gnuplot docs/data/budget_allocation/plot.gp (from the repository root)
set terminal pngcairo size 1100,800
set output 'docs/figures/budget_allocation.png'
set multiplot layout 2,2 title "Dev split, inside llama.cpp, stories260K: KL x full reuse against mean r\nfixed ratios, the budget rule at 0.10 (measured), and the per-request bound (knows each prompt's KL curve)"
titles = "'chunker 3 x 128' 'chunker 6 x 72' '--passages cut 3 x 128' '--passages cut 6 x 72'"
do for [i=1:4] {
  set title word(titles, i)
  set xlabel "mean r"
  set ylabel "KL / full reuse's KL"
  set xrange [0:0.3]
  set yrange [0:0.6]
  set grid
  set key top right
  set arrow 1 from 0, first 0.15 to 0.3, first 0.15 nohead dt 2 lc rgb "red"
  set arrow 2 from 0.10, graph 0 to 0.10, graph 1 nohead dt 3 lc rgb "gray"
  plot 'docs/data/budget_allocation/plot_curves.dat' using 1:(column(i+1)) with linespoints pt 7 ps 0.5 title "fixed r", \
       'docs/data/budget_allocation/plot_points.dat' every ::(i-1)::(i-1) using 2:3 with points pt 5 ps 1.6 title "budget 0.10 (the rule)", \
       '' every ::(i-1)::(i-1) using 4:5 with points pt 9 ps 1.6 title "per-request bound"
}
unset multiplot
