# gnuplot docs/data/budget_curve/plot.gp (from the repository root)
set terminal pngcairo size 1200,520
set output 'docs/figures/budget_curve.png'
set title "Dev split, inside llama.cpp, stories260K: KL x full reuse at mean r 0.10, by what the allocation knows\n(the budget rule online and measured; the four right-hand bars set their lambda in hindsight)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "KL / full reuse's KL"
set yrange [0:0.25]
set grid ytics
set key outside right
set arrow 1 from graph 0, first 0.15 to graph 1, first 0.15 nohead dt 2 lc rgb "red" lw 2
plot 'docs/data/budget_curve/plot.dat' using 2:xtic(1) title "fixed r = 0.10", \
     '' using 3 title "the budget rule", \
     '' using 4 title "one-layer contrast curve", \
     '' using 5 title "true KL at r = 0 and 0.05", \
     '' using 6 title "true curve, exp fit", \
     '' using 7 title "true curve (bound)"
