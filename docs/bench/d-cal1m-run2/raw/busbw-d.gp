set terminal pngcairo size 900,560 font 'sans,10'
set output '/tmp/bench-d2/busbw-d.png'
set datafile missing '-'
set datafile separator '\t'
set title "Layout d: 4 nodes x 2 ranks, 1 Gbit/s links, 100 us delay" noenhanced
set logscale x 2
set xrange [838861:8.38861e+07]
set xtics ('1M' 1048576, '2M' 2097152, '4M' 4194304, '8M' 8388608, '16M' 16777216, '32M' 33554432, '64M' 67108864)
set xlabel 'message size (bytes)'
set ylabel 'bus bandwidth, Mbit/s (2(p-1)/p S/t, p = 8)' noenhanced
set yrange [0:1516.67]
set grid
set key top left opaque box
plot '/tmp/bench-d2/raw/busbw-d.dat' using 1:2 with linespoints lw 3 lc rgb '#d62728' pt 7 title 'BlueConnect (median)', \
     '/tmp/bench-d2/raw/busbw-d.dat' using 1:3 with linespoints lw 2 lc rgb '#1f77b4' pt 5 title 'Open MPI default (tuned)', \
     '/tmp/bench-d2/raw/busbw-d.dat' using 1:4 with linespoints lw 2 lc rgb '#2ca02c' pt 9 title 'Open MPI ring', \
     '/tmp/bench-d2/raw/busbw-d.dat' using 1:5 with linespoints lw 2 lc rgb '#9467bd' pt 11 title 'Open MPI Rabenseifner', \
     '/tmp/bench-d2/raw/busbw-d.dat' using 1:6 with linespoints lw 2 lc rgb '#8c564b' pt 13 title 'Open MPI han', \
     '/tmp/bench-d2/raw/busbw-d.dat' using 1:7 with lines dt 2 lw 2 lc rgb 'black' title 'link bound'
