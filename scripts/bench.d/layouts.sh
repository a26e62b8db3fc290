# shellcheck shell=bash
# The simulated-cluster layouts of scripts/bench and scripts/bench-torch (sourced
# by both), so that both benchmark the same clusters.

# simcluster up arguments.
layout_up() {
  case $1 in
    a) echo "--nodes 4 --slots 2 --bw 250mbit --delay 100us" ;;
    b) echo "--nodes 2 --slots 4 --bw 250mbit --delay 100us" ;;
    c) echo "--nodes 4 --slots 2 --racks 2 --bw 250mbit --trunk-bw 100mbit --delay 100us" ;;
    d) echo "--nodes 4 --slots 2 --bw 1gbit --delay 100us" ;;
    e) echo "--nodes 2 --slots 4 --bw 1gbit --delay 100us" ;;
    f) echo "--nodes 8 --slots 2 --bw 250mbit --delay 100us" ;;
  esac
}
# name np nodes racks link_bits trunk_bits(0: no trunks) description
layout_row() {
  case $1 in
    a) printf 'a\t8\t4\t1\t250000000\t0\t4 nodes x 2 ranks, 250 Mbit/s links, 100 us delay\n' ;;
    b) printf 'b\t8\t2\t1\t250000000\t0\t2 nodes x 4 ranks, 250 Mbit/s links, 100 us delay\n' ;;
    c) printf 'c\t8\t4\t2\t250000000\t100000000\t2 racks x 2 nodes x 2 ranks, node links 250 Mbit/s, trunks 100 Mbit/s, 100 us delay\n' ;;
    d) printf 'd\t8\t4\t1\t1000000000\t0\t4 nodes x 2 ranks, 1 Gbit/s links, 100 us delay\n' ;;
    e) printf 'e\t8\t2\t1\t1000000000\t0\t2 nodes x 4 ranks, 1 Gbit/s links, 100 us delay\n' ;;
    f) printf 'f\t16\t8\t1\t250000000\t0\t8 nodes x 2 ranks, 250 Mbit/s links, 100 us delay\n' ;;
  esac
}
layout_known() { case $1 in a | b | c | d | e | f) return 0 ;; *) return 1 ;; esac; }
