set terminal pngcairo size 900,560
set output 'docs/img/ttft/speedup_vs_context.png'
set title 'TTFT speedup over full prefill vs context length (RAM tier)'
set xlabel 'context tokens'
set ylabel 'speedup (x)'
set yrange [0:*]
set key top left
set grid
plot 'docs/img/ttft/speedup_vs_context.dat' using 1:2 with linespoints lw 2 title 'full reuse', '' using 1:3 with linespoints lw 2 title 'CacheBlend r=0.15'
