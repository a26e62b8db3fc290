set terminal pngcairo size 900,560 font 'sans,10'
set output '/tmp/c-disc2/busbw-c.png'
set datafile missing '-'
set datafile separator '\t'
set title "Layout c: 2 racks x 2 nodes x 2 ranks, node links 250 Mbit/s, trunks 100 Mbit/s, 100 us delay" noenhanced
set logscale x 2
set xrange [3.35544e+06:8.38861e+07]
set xtics ('4M' 4194304, '8M' 8388608, '16M' 16777216, '32M' 33554432, '64M' 67108864)
set xlabel 'message size (bytes)'
set ylabel 'bus bandwidth, Mbit/s (2(p-1)/p S/t, p = 8)' noenhanced
set yrange [0:227.5]
set grid
set key top left opaque box
plot '/tmp/c-disc2/raw/busbw-c.dat' using 1:2 with linespoints lw 3 lc rgb '#d62728' pt 7 title 'BlueConnect (median)', \
     '/tmp/c-disc2/raw/busbw-c.dat' using 1:3 with linespoints lw 2 lc rgb '#1f77b4' pt 5 title 'Open MPI default (tuned)', \
     '/tmp/c-disc2/raw/busbw-c.dat' using 1:4 with linespoints lw 2 lc rgb '#2ca02c' pt 9 title 'Open MPI ring', \
     '/tmp/c-disc2/raw/busbw-c.dat' using 1:5 with lines dt 2 lw 2 lc rgb 'black' title 'link bound'
