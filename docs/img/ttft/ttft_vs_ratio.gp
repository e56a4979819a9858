set terminal pngcairo size 900,560
set output 'docs/img/ttft/ttft_vs_ratio.png'
set title 'TTFT vs recompute ratio per KV tier'
set xlabel 'recompute ratio r (%)'
set ylabel 'TTFT p50 (ms)'
set yrange [0:*]
set key top left
set grid
plot 'docs/img/ttft/ttft_vs_ratio.dat' index 0 with linespoints lw 2 title 'ram', 'docs/img/ttft/ttft_vs_ratio.dat' index 1 with linespoints lw 2 title 'ssd', 'docs/img/ttft/ttft_vs_ratio.dat' index 2 with linespoints lw 2 title 'redis', 'docs/img/ttft/ttft_vs_ratio.dat' index 3 with linespoints lw 2 dt 3 title 'ram via gRPC (engine)', 'docs/img/ttft/ttft_vs_ratio.dat' index 4 with linespoints lw 2 dt 3 title 'ssd via gRPC (engine)', 'docs/img/ttft/ttft_vs_ratio.dat' index 5 with linespoints lw 2 dt 3 title 'redis via gRPC (engine)', 3877.76 with lines dt 3 lw 2 title 'full prefill via gRPC', 4060.83 with lines dt 2 lw 2 title 'full prefill'
