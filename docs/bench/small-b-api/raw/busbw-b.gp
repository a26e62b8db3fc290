set terminal pngcairo size 900,560 font 'sans,10'
set output '/tmp/small-b/busbw-b.png'
set datafile missing '-'
set datafile separator '\t'
set title "Layout b: 2 nodes x 4 ranks, 250 Mbit/s links, 100 us delay" noenhanced
set logscale x 2
set xrange [3276.8:163840]
set xtics ('4K' 4096, '8K' 8192, '16K' 16384, '32K' 32768, '64K' 65536, '128K' 131072)
set xlabel 'message size (bytes)'
set ylabel 'bus bandwidth, Mbit/s (2(p-1)/p S/t, p = 8)' noenhanced
set yrange [0:568.75]
set grid
set key top left opaque box
plot '/tmp/small-b/raw/busbw-b.dat' using 1:2 with linespoints lw 3 lc rgb '#d62728' pt 7 title 'BlueConnect (median)', \
     '/tmp/small-b/raw/busbw-b.dat' using 1:3 with linespoints lw 2 lc rgb '#1f77b4' pt 5 title 'Open MPI default (tuned)', \
     '/tmp/small-b/raw/busbw-b.dat' using 1:4 with linespoints lw 2 lc rgb '#2ca02c' pt 9 title 'Open MPI ring', \
     '/tmp/small-b/raw/busbw-b.dat' using 1:5 with lines dt 2 lw 2 lc rgb 'black' title 'link bound'
