set terminal pngcairo size 900,560
set output 'docs/img/ttft/ttft_cdf_load.png'
set title 'TTFT CDF under load (CacheBlend r=0.15, RAM tier)'
set xlabel 'TTFT (ms)'
set ylabel 'fraction of requests'
set yrange [0:1]
set key bottom right
set grid
plot 'docs/img/ttft/ttft_cdf_load.dat' index 0 with steps lw 2 title 'concurrency 1', 'docs/img/ttft/ttft_cdf_load.dat' index 1 with steps lw 2 title 'concurrency 4', 'docs/img/ttft/ttft_cdf_load.dat' index 2 with steps lw 2 title 'concurrency 16'
