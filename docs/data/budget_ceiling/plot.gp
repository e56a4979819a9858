# gnuplot docs/data/budget_ceiling/plot.gp (from the repository root)
set terminal pngcairo size 1000,480
set output 'docs/figures/budget_ceiling.png'
set title "KL x full reuse inside llama.cpp, stories260K (95% bootstrap): fixed r = 0.10 vs the budget rule at 0.10 (ceiling)"
set ylabel "KL / full reuse's KL"
set yrange [0:0.35]
set xrange [-0.6:7.6]
set xtics rotate by -30
set key top left
set grid ytics
set arrow from graph 0, first 0.15 to graph 1, first 0.15 nohead dt 2 lc rgb "red"
set label "target 0.15x" at graph 0.005, first 0.157 tc rgb "red"
plot 'docs/data/budget_ceiling/plot.dat' using ($0-0.12):2:3:4:xtic(1) with yerrorbars pt 7 title "fixed r = 0.10", \
     '' using ($0+0.12):5:6:7 with yerrorbars pt 5 title "budget 0.10 (mean r 0.084-0.0998)"
