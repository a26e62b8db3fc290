#!/usr/bin/python3
"""scripts/bench's report: reads DIR/raw (written by scripts/bench) and writes
DIR/results.md and DIR/busbw-LAYOUT.png (gnuplot).

Usage: report.py DIR
Exit status: 0 all right; 1 some result was wrong; 3 some run failed (and none
was wrong); 4 this script failed. Standard library only (Debian's python3).
"""
import json
import os
import statistics
import subprocess
import sys

CONFIG_TITLES = {
    "default": "Open MPI default (tuned)",
    "ring": "Open MPI ring",
    "rabenseifner": "Open MPI Rabenseifner",
    "han": "Open MPI han",
    "gloo": "Gloo (torch)",
}
SHORT = {"default": "default", "ring": "ring", "rabenseifner": "Rabenseifner", "han": "han", "gloo": "Gloo (torch)"}
# Configuration gloo is tools/torch_bench.py: its JSON rows have "gloo" where bc_bench's have "mpi", and
# its "bc" is the blueconnect torch backend, shown beside Gloo as "BC (torch)" and kept out of the
# BlueConnect median and best (bc_bench's), since it pays torch's per-call overhead.
TORCH_BC = "BC (torch)"


def other(config):
    """The JSON key of the compared implementation in a run of config."""
    return "gloo" if config == "gloo" else "mpi"


def read_tsv(path, header=True):
    rows = []
    with open(path) as f:
        lines = [l.rstrip("\n") for l in f if l.strip()]
    if not lines:
        return rows
    if header:
        keys = lines[0].split("\t")
        for l in lines[1:]:
            rows.append(dict(zip(keys, l.split("\t"))))
    else:
        rows = [l.split("\t") for l in lines]
    return rows


def read_jsonl(path):
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass  # a line cut short by a killed run
    return rows


# bc_bench's timing modes (its "mode" JSON field): how the MPI side is placed,
# what "time" is, and when -c checks. Rows without "mode" come from bc_bench
# before the modes existed, which interleaved.
TIMING = {
    "back-to-back": {
        "compare": "each library in its own back-to-back loop of calls, BlueConnect's first, on the same buffers",
        "time": "the time of a back-to-back loop of calls / the calls, on the slowest rank",
        "check": "the results checked bit for bit after every timed loop",
        "bc": "in its own loop before that run's MPI configuration's",
    },
    "interleave": {
        "compare": "MPI_Allreduce on the same buffers, alternating with BlueConnect call by call",
        "time": "each rank's mean time per call, each call timed alone after a barrier, then the maximum over "
                "the ranks",
        "check": "every timed call checked bit for bit",
        "bc": "alternating call by call with that run's MPI configuration",
    },
    "app": {
        "compare": "each library alone, a fixed compute time and a barrier before every call, on the same buffers",
        "time": "each rank's mean time per call (the call alone), then the maximum over the ranks",
        "check": "every timed call checked bit for bit",
        "bc": "alone, before that run's MPI configuration",
    },
}


def timing_modes(data):
    """The timing modes of all rows in data[layout][config][repeat][size]."""
    return sorted({row.get("mode", "interleave") for c in data.values() for reps in c.values()
                   for rows in reps.values() for row in rows.values()})


def timing_text(modes, key):
    """TIMING[mode][key] for the one mode of the runs, or one per mode, named."""
    known = [m for m in modes if m in TIMING] or ["interleave"]
    if len(known) == 1:
        return TIMING[known[0]][key]
    return "; ".join("%s: %s" % (m, TIMING[m][key]) for m in known)


def fmt_size(b):
    for unit, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= mult and b % mult == 0:
            return "%d%s" % (b // mult, unit)
    return str(b)


def fmt_ms(us):
    ms = us / 1000.0
    if ms < 10:
        return "%.2f" % ms
    if ms < 100:
        return "%.1f" % ms
    return "%.0f" % ms


def cell(us, bound_s):
    if us is None:
        return "—"
    return "%s ms (%.0f%%)" % (fmt_ms(us), 100.0 * bound_s / (us * 1e-6))


class Layout:
    def __init__(self, row):
        self.name, np_, nodes, racks, bw, trunk, self.desc, self.han = row[:8]
        self.np, self.nodes, self.racks = int(np_), int(nodes), int(racks)
        self.bw, self.trunk = float(bw), float(trunk)

    def bound_s(self, nbytes):
        """max(2(N-1)/N S/BW, 2(R-1)/R S/TRUNK_BW) in seconds."""
        n, r = self.nodes, self.racks
        t = 2.0 * (n - 1) / n * nbytes * 8 / self.bw
        if r > 1 and self.trunk > 0:
            t = max(t, 2.0 * (r - 1) / r * nbytes * 8 / self.trunk)
        return t

    def bound_formula(self):
        n, r = self.nodes, self.racks
        s = "2(N−1)/N · S/BW = %.3g · S / %g Mbit/s" % (2.0 * (n - 1) / n, self.bw / 1e6)
        if r > 1 and self.trunk > 0:
            s = "max(%s, 2(R−1)/R · S/TRUNK_BW = %.3g · S / %g Mbit/s)" % (
                s, 2.0 * (r - 1) / r, self.trunk / 1e6)
        return s

    def busbw_factor(self):
        return 2.0 * (self.np - 1) / self.np


def link_deltas(base):
    """Per-link byte deltas of one traffic run: {link: (kind, tx, rx)}."""
    with open(base + ".before.json") as f:
        a = json.load(f)["links"]
    with open(base + ".after.json") as f:
        b = json.load(f)["links"]
    out = {}
    for name, v in b.items():
        w = a.get(name, {})
        out[name] = (v["kind"], v["tx_bytes"] - w.get("tx_bytes", 0), v["rx_bytes"] - w.get("rx_bytes", 0))
    return out


def sub(x, y, k):
    return {l: (x[l][0], (x[l][1] - y[l][1]) / k, (x[l][2] - y[l][2]) / k) for l in x if l in y}


def summarize_links(per_call, size):
    nodes = [v for v in per_call.values() if v[0] == "node"]
    trunks = [v for v in per_call.values() if v[0] == "trunk"]
    r = {
        "node_tx_max": max(v[1] for v in nodes) / size,
        "node_tx_mean": sum(v[1] for v in nodes) / len(nodes) / size,
        "node_rx_max": max(v[2] for v in nodes) / size,
    }
    if trunks:
        r["trunk_max"] = max(max(v[1], v[2]) for v in trunks) / size
    return r


def main():
    out = os.path.abspath(sys.argv[1])
    raw = os.path.join(out, "raw")
    meta = dict((r[0], r[1] if len(r) > 1 else "") for r in read_tsv(os.path.join(raw, "meta.tsv"), header=False))
    layouts = [Layout(r + [""] * (8 - len(r))) for r in read_tsv(os.path.join(raw, "layouts.tsv"), header=False)]
    runs = read_tsv(os.path.join(raw, "runs.tsv"))
    traffic = read_tsv(os.path.join(raw, "traffic.tsv"))
    configs = [c for c in meta.get("configs", "").split(",") if c]

    wrong, failed, notes = [], [], []
    busy_runs = 0
    # data[layout][config][repeat] = {size: row}
    data = {}
    for r in runs:
        rows = read_jsonl(r["base"] + ".jsonl")
        rel = os.path.relpath(r["base"], out)
        if float(r["load"]) > 1.0:
            busy_runs += 1
        for row in rows:
            for impl in ("bc", other(r["config"])):
                w = row.get(impl, {}).get("wrong")
                if w:
                    wrong.append("layout %s, %s, repeat %s, size %s: %s #wrong = %s (%s.log)" % (
                        r["layout"], r["config"], r["repeat"], fmt_size(row["size"]),
                        {"bc": "BlueConnect", "mpi": "MPI", "gloo": "Gloo"}[impl], w, rel))
        if r["rc"] != "0":
            why = {"124": "timed out", "137": "killed after the timeout"}.get(r["rc"], "exit status " + r["rc"])
            failed.append("layout %s, %s, repeat %s: %s, %d size(s) done (%s.log)" % (
                r["layout"], r["config"], r["repeat"], why, len(rows), rel))
        data.setdefault(r["layout"], {}).setdefault(r["config"], {})[r["repeat"]] = {
            row["size"]: row for row in rows}

    # Traffic (per-link bytes per call).
    traffic_res = {}  # layout -> [(label, summary)]
    for lay in layouts:
        t = [x for x in traffic if x["layout"] == lay.name]
        if not t:
            continue
        res = []
        try:
            for x in t:
                for row in read_jsonl(x["base"] + ".jsonl"):
                    for impl in ("bc", "mpi"):
                        w = (row.get(impl) or {}).get("wrong")
                        if w:
                            wrong.append("layout %s, traffic run %s %s: %s #wrong = %s" % (
                                lay.name, x["kind"], x["config"], impl, w))
                if x["rc"] != "0":
                    failed.append("layout %s, traffic run %s %s (%s calls): exit status %s (%s.log)" % (
                        lay.name, x["kind"], x["config"], x["calls"], x["rc"], os.path.relpath(x["base"], out)))
            ok = {(x["kind"], x["config"], int(x["calls"])): x for x in t if x["rc"] == "0"}
            bcs = sorted(k for k in ok if k[0] == "bc")
            if len(bcs) == 2:
                (_, _, k1), (_, _, k2) = bcs
                size = int(ok[bcs[0]]["size"])
                d1, d2 = link_deltas(ok[bcs[0]]["base"]), link_deltas(ok[bcs[1]]["base"])
                res.append(("BlueConnect", summarize_links(sub(d2, d1, k2 - k1), size)))
                for c in configs:
                    key = ("mpi", c, k1)  # none for gloo: no traffic runs
                    if key in ok:
                        dm = link_deltas(ok[key]["base"])
                        res.append((CONFIG_TITLES[c], summarize_links(sub(dm, d1, k1), size)))
                traffic_res[lay.name] = (size, k1, k2, res)
        except (OSError, ValueError, KeyError, ZeroDivisionError) as e:
            notes.append("layout %s: traffic numbers unavailable: %s" % (lay.name, e))

    # --- results.md ---
    md = []
    md.append("# BlueConnect against Open MPI's MPI_Allreduce on simulated clusters")
    md.append("")
    if meta.get("quick") == "1":
        md.append("**Smoke test (`--quick`): tiny sizes and one repeat; these numbers measure nothing.**")
        md.append("")
    md.append("- date: %s (took %s s)" % (meta.get("date", "?"), meta.get("duration_s", "?")))
    md.append("- machine: nproc %s, %s" % (meta.get("nproc", "?"), meta.get("kernel", "?")))
    md.append("- load at start: `%s`" % meta.get("uptime", "?").strip())
    md.append("- load at end: %s (1, 5, 15 min)" % meta.get("load_end", "?"))
    md.append("- command: `%s`" % meta.get("command", "?"))
    md.append("- source: git %s; %s" % (meta.get("git", "?"), meta.get("bc_bench", "?")))
    md.append("- MPI: %s; every run: `%s` (and scripts/simcluster run's `--bind-to none`, "
              "`--oversubscribe`)" % (meta.get("mpi", "?"), meta.get("common_mca", "")))
    for c in configs:
        if c == "gloo":
            md.append("  - Gloo (torch): `tools/torch_bench.py --mode allreduce` under the same mpirun flags, "
                      "`GLOO_SOCKET_IFNAME=eth0`")
        else:
            md.append("  - %s: `%s`" % (SHORT[c], meta.get("mca_" + c) or "(nothing more)"))
    md.append("- BlueConnect environment (`mpirun -x`): %s" % (meta.get("bc_env", "").strip() or "(none)"))
    modes = timing_modes(data)
    md.append("- bc_bench: all-reduce, float32 sum, out-of-place, `-c` (%s), `--compare mpi` (%s); timing mode %s; "
              "sizes %s; iterations %s; repeats %s" % (
                  timing_text(modes, "check"), timing_text(modes, "compare"), ", ".join(modes) or "?",
                  meta.get("sizes", "?"), meta.get("iters", "?"), meta.get("repeats", "?")))
    md.append("")
    if float(meta.get("load", "0 0 0").split()[0]) > 1.0 or busy_runs:
        md.append("**Warning: the machine was busy** (1-minute load %s at the start; %d of %d runs started with "
                  "load > 1.0). Other work inflates times by up to 16%% on this machine: treat these numbers as "
                  "noise." % (meta.get("load", "?").split()[0], busy_runs, len(runs)))
        md.append("")
    md.append("How to read the tables:")
    md.append("")
    md.append("- time = bc_bench's avg: %s." % timing_text(modes, "time"))
    md.append("- bound = max(2(N−1)/N · S/BW, 2(R−1)/R · S/TRUNK_BW) with N nodes, R racks, S bytes; the "
              "trunk term only with racks. % = bound / time. The bound counts payload at the link's rate; "
              "TCP carries at most 95.6% of it over simcluster's links (tbf charges every 1448-byte segment "
              "66 bytes of headers), so about 95% is as fast as the links allow.")
    md.append("- Open MPI columns: the best (lowest time) of the %s repeat(s) of that configuration." % meta.get("repeats", "?"))
    if meta.get("path", "api") == "pmpi":
        md.append("- BlueConnect is called as an unmodified MPI program calls it: MPI_Allreduce under the PMPI "
                  "preload (LD_PRELOAD=libblueconnect_mpi.so; bc_bench --via mpi); the MPI side calls "
                  "PMPI_Allreduce, the library underneath, in the same run.")
    else:
        md.append("- BlueConnect is called through its C API (bc_allreduce).")
    md.append("- BlueConnect is measured in every run, %s. "
              "\"BlueConnect\" = per run configuration the best of its repeats (as for MPI), then the **median** "
              "over the %d configuration(s); \"BC best\" = the best over all runs." % (
                  timing_text(modes, "bc"), len([c for c in configs if c != "gloo"])))
    if "gloo" in configs:
        md.append("- Gloo (torch) = `dist.all_reduce` on a Gloo group through torch.distributed "
                  "(tools/torch_bench.py --mode allreduce: in place, float32 sum, its own back-to-back loop, "
                  "slowest rank, checked bit for bit after the loop); %s = the blueconnect torch backend in the "
                  "same runs (its own loop, the backend order alternating per size). Both pay torch's per-call "
                  "overhead, so compare Gloo with %s; best of the repeats. %s is not in the BlueConnect median "
                  "or best." % (TORCH_BC, TORCH_BC, TORCH_BC))
    md.append("- Plots: bus bandwidth as in nccl-tests, 2(p−1)/p · S / time with p = ranks, in Mbit/s; the dashed "
              "line is the bound in the same units.")
    md.append("")

    for lay in layouts:
        md.append("## Layout %s: %s" % (lay.name, lay.desc))
        md.append("")
        ld = data.get(lay.name)
        if not ld:
            md.append("No results (the cluster did not come up, or every run failed).")
            md.append("")
            continue
        md.append("p = %d ranks; bound = %s." % (lay.np, lay.bound_formula()))
        if "han" in configs:
            md.append("han selected (coll_base_verbose check, raw/%s/han-check.log): %s." % (lay.name, lay.han))
        md.append("")
        sizes = sorted({s for c in ld.values() for rep in c.values() for s in rep})
        tb = ["gloo"] if "gloo" in configs else []  # the torch columns: Gloo, then BC (torch)
        head = ["size", "bound", "BlueConnect (median)", "BC best"] + [SHORT[c] for c in configs] + (
            [TORCH_BC] if tb else [])
        md.append("| " + " | ".join(head) + " |")
        md.append("|" + "---:|" * len(head))
        plot_rows = []
        for s in sizes:
            nbytes = None
            bc_per_cfg, mpi = [], {}
            bc_all = []
            bc_torch = None
            for c in configs:
                reps = ld.get(c, {})
                rows = [rep[s] for rep in reps.values() if s in rep]
                if not rows:
                    mpi[c] = None
                    continue
                nbytes = rows[0]["bytes"]
                mpi[c] = min(r[other(c)]["avg_us"] for r in rows)
                if c == "gloo":
                    bc_torch = min(r["bc"]["avg_us"] for r in rows)
                    continue
                bc_per_cfg.append(min(r["bc"]["avg_us"] for r in rows))
                bc_all += [r["bc"]["avg_us"] for r in rows]
            if nbytes is None:
                continue
            bound = lay.bound_s(nbytes)
            bc_med = statistics.median(bc_per_cfg) if bc_per_cfg else None
            bc_best = min(bc_all) if bc_all else None
            line = [fmt_size(s), fmt_ms(bound * 1e6) + " ms", cell(bc_med, bound), cell(bc_best, bound)]
            line += [cell(mpi[c], bound) for c in configs] + ([cell(bc_torch, bound)] if tb else [])
            md.append("| " + " | ".join(line) + " |")
            f = lay.busbw_factor() * nbytes * 8 / 1e6  # Mbit per call at busbw
            times = [bc_med] + [mpi[c] for c in configs] + ([bc_torch] if tb else [])
            plot_rows.append([s] + [f / (t * 1e-6) if t else None for t in times]
                             + [f / bound if bound > 0 else None])
        md.append("")
        if meta.get("plot_term") and plot_rows:
            png = plot(out, raw, lay, configs, plot_rows, meta["plot_term"], notes)
            if png:
                md.append("![bus bandwidth, layout %s](%s)" % (lay.name, png))
                md.append("")
        tr = traffic_res.get(lay.name)
        if tr:
            size, k1, k2, res = tr
            md.append("Bytes on the links per call at S = %s, in multiples of S (Ethernet/IP/TCP headers and "
                      "ACKs included). BlueConnect: (bytes of %d calls − bytes of %d calls) / %d; MPI: (a "
                      "`--compare` run of %d calls − BlueConnect's run of %d) / %d." % (
                          fmt_size(size), k2, k1, k2 - k1, k1, k1, k1))
            md.append("")
            th = ["implementation", "node tx, max", "node tx, mean", "node rx, max"]
            if lay.racks > 1:
                th.append("trunk, max (either way)")
            md.append("| " + " | ".join(th) + " |")
            md.append("|---|" + "---:|" * (len(th) - 1))
            ideal = 2.0 * (lay.nodes - 1) / lay.nodes
            row = ["minimum for any all-reduce", "%.3f" % ideal, "%.3f" % ideal, "%.3f" % ideal]
            if lay.racks > 1:
                row.append("%.3f" % (2.0 * (lay.racks - 1) / lay.racks))
            md.append("| " + " | ".join(row) + " |")
            for label, v in res:
                row = [label, "%.3f" % v["node_tx_max"], "%.3f" % v["node_tx_mean"], "%.3f" % v["node_rx_max"]]
                if lay.racks > 1:
                    row.append("%.3f" % v.get("trunk_max", float("nan")))
                md.append("| " + " | ".join(row) + " |")
            md.append("")

    md.append("## Problems")
    md.append("")
    if not (wrong or failed or notes):
        md.append("None: every run finished and every checked result was right.")
    for w in wrong:
        md.append("- WRONG RESULT: " + w)
    for f in failed:
        md.append("- RUN FAILED: " + f)
    for n in notes:
        md.append("- " + n)
    md.append("")
    md.append("Summary: `summary.csv` (scripts/bench.d/summarize.py). Raw data: `raw/` (bc_bench JSON lines, "
              "output and command line of every run; runs.tsv; link counters of the traffic runs; han checks), "
              "kept only with --keep-raw.")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")

    print("\n".join(md))
    for w in wrong:
        print("bench: WRONG RESULT: " + w, file=sys.stderr)
    for f in failed:
        print("bench: RUN FAILED: " + f, file=sys.stderr)
    if wrong:
        return 1
    if failed:
        return 3
    return 0


def plot(out, raw, lay, configs, rows, term, notes):
    dat = os.path.join(raw, "busbw-%s.dat" % lay.name)
    titles = ["BlueConnect (median)"] + [CONFIG_TITLES[c] for c in configs] + (
        [TORCH_BC] if "gloo" in configs else [])
    with open(dat, "w") as f:
        f.write("# size_bytes\t" + "\t".join(titles) + "\tbound (Mbit/s, bus bandwidth)\n")
        for r in rows:
            f.write("\t".join(str(r[0]) if i == 0 else ("-" if v is None else "%.4f" % v)
                              for i, v in enumerate(r)) + "\n")
    png = "busbw-%s.png" % lay.name
    font = "font 'sans,10'" if term == "pngcairo" else ""
    styles = ["lw 3 lc rgb '#d62728' pt 7", "lw 2 lc rgb '#1f77b4' pt 5", "lw 2 lc rgb '#2ca02c' pt 9",
              "lw 2 lc rgb '#9467bd' pt 11", "lw 2 lc rgb '#8c564b' pt 13", "lw 2 lc rgb '#ff7f0e' pt 3",
              "lw 2 dt 3 lc rgb '#d62728' pt 6"]
    plots = []
    for i, t in enumerate(titles):
        plots.append("'%s' using 1:%d with linespoints %s title '%s'" % (dat, i + 2, styles[i % len(styles)], t))
    plots.append("'%s' using 1:%d with lines dt 2 lw 2 lc rgb 'black' title 'link bound'" % (dat, len(titles) + 2))
    gp = "\n".join([
        "set terminal %s size 900,560 %s" % (term, font),
        "set output '%s'" % os.path.join(out, png),
        "set datafile missing '-'",
        "set datafile separator '\\t'",
        "set title \"Layout %s: %s\" noenhanced" % (lay.name, lay.desc),
        "set logscale x 2",
        "set xrange [%g:%g]" % (rows[0][0] / 1.25, rows[-1][0] * 1.25),
        "set xtics (%s)" % ", ".join("'%s' %d" % (fmt_size(r[0]), r[0]) for r in rows),
        "set xlabel 'message size (bytes)'",
        "set ylabel 'bus bandwidth, Mbit/s (2(p-1)/p S/t, p = %d)' noenhanced" % lay.np,
        "set yrange [0:%g]" % (1.3 * max([r[-1] or 0 for r in rows] + [v or 0 for r in rows for v in r[1:]])),
        "set grid",
        "set key top left opaque box",
        "plot " + ", \\\n     ".join(plots),
    ]) + "\n"
    gpfile = os.path.join(raw, "busbw-%s.gp" % lay.name)
    with open(gpfile, "w") as f:
        f.write(gp)
    r = subprocess.run(["gnuplot", gpfile], capture_output=True, text=True)
    if r.returncode != 0:
        notes.append("layout %s: gnuplot failed: %s" % (lay.name, r.stderr.strip()[-300:]))
        return None
    return png


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 -- any failure here is status 4
        import traceback
        traceback.print_exc()
        sys.exit(4)
