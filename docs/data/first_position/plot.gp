# gnuplot plot.gp (from this directory): docs/figures/first_position.png
set terminal pngcairo size 1100,520 font ",10"
set output "../../figures/first_position.png"
set title "Budget rule at mean r <= 0.10, inside llama.cpp: KL x full reuse, plain vs first-position records (95% bootstrap)"
set style data histogram
set style histogram errorbars gap 1 lw 1
set style fill solid 0.6 border -1
set xtics rotate by -35 nomirror
set ylabel "KL / full reuse's KL"
set yrange [0:0.32]
set grid ytics
set key top right
set arrow from graph 0, first 0.15 to graph 1, first 0.15 nohead dt 2 lc rgb "red" lw 2
set label "target 0.15x" at graph 0.01, first 0.156 tc rgb "red"
plot "plot.dat" using 2:3:4:xtic(1) title "plain records" lc rgb "#7f7f7f", \
     "" using 5:6:7 title "first-position records" lc rgb "#1f77b4"
