#!/usr/bin/python3
"""Turns one benchmark output folder into a small summary CSV: the columns a
reader needs, one row per measurement, with the run's date, commit, command and
machine as '#' lines at the top. The benchmark scripts call it at their end;
docs/results/ holds the summaries that docs/BENCHMARKS.md publishes, and
scripts/bench-tables makes the page's tables and plots from them.

Usage: summarize.py DIR [--run N] [--out CSV] [--append] [--command TEXT]
  DIR      a folder written by scripts/bench, scripts/bench-node or scripts/bench-torch
           (which one is told by the files in it)
  --run N  the run's number in the CSV (default 1); --append adds to an existing CSV,
           so that separate runs of one command share a file
  --out    default DIR/summary.csv
  --command  the command that made DIR, where DIR does not record it itself

All-reduce rows (scripts/bench, scripts/bench-node):
  run,job,layout,nranks,path,library,config,size_bytes,time_us,pct_bound,wrong,route,predicted_us
  job       the job (one mpirun) that measured the row: rows of one run, job and size
            were measured side by side, and their ratio is the one to quote
  layout    a-f (scripts/bench --help), or 'node' for one node
  path      api (bc_allreduce), pmpi (MPI_Allreduce under the preload), torch
            (dist.all_reduce through torch.distributed)
  library   blueconnect, openmpi or gloo
  config    Open MPI's configuration (default, ring, rabenseifner, han); for
            BlueConnect the configuration of the run it was measured in
  time_us   time per call: the loop's time / calls on the slowest rank (back to back,
            bc_bench's default), the median of the run's rounds
  pct_bound 100 * link bound / time, bound = max(2(N-1)/N S/BW, 2(R-1)/R S/TRUNK_BW);
            empty on one node
  route     under the preload, the library the learned route gave the size
  predicted_us  the cost model's prediction for BlueConnect's plan (bc_bench --plan), else empty
  plan      BlueConnect's plan for the size in BC_PLAN's terms (bc_bench --plan: the learned
            winner where the plan is learned), else empty
  min_us    the fastest call of the timed loop (per call, slowest rank), where the run gives it
  (files written before plan and min_us existed lack those columns; --append keeps a file's
  own columns)
DDP rows (scripts/bench-torch):
  run,layout,nranks,backend,comm_hook,step_median_ms,step_mean_ms,comm_span_ms,comm_only_ms,
  exposed_ms,samples_per_s,identical,bucket,bucket_bytes,hook_ms,done_ms,bucket_mb_per_s,
  bucket_link_pct
  (one row per backend and bucket; bucket and comm_hook empty for compute only; comm_only_ms is
  the same buckets reduced with no compute, exposed_ms = step - compute only's step,
  bucket_link_pct the bucket's link bound / its time; --append keeps a file's own columns)
Standard library only (Debian's python3).
"""
import csv
import json
import os
import re
import sys

from report import Layout, read_jsonl, read_tsv  # scripts/bench's report: layouts, its files


def read_layouts():
    """{name: Layout} from layout_row in layouts.sh, the one list of the simulated layouts."""
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "layouts.sh")).read()
    rows = re.findall(r"^\s*(\w)\) printf '([^']*)\\n' ;;", text, re.M)
    return {name: Layout(row.split("\\t") + ["", ""]) for name, row in rows}


LAYOUTS = read_layouts()
ALLREDUCE_COLUMNS = ["run", "job", "layout", "nranks", "path", "library", "config", "size_bytes", "time_us",
                     "pct_bound", "wrong", "route", "predicted_us", "plan", "min_us"]
DDP_COLUMNS = ["run", "layout", "nranks", "backend", "comm_hook", "step_median_ms", "step_mean_ms", "comm_span_ms",
               "comm_only_ms", "exposed_ms", "samples_per_s", "identical", "bucket", "bucket_bytes", "hook_ms",
               "done_ms", "bucket_mb_per_s", "bucket_link_pct"]


def bound_s(layout, nbytes):
    """The link bound of an all-reduce of nbytes per rank on a simulated layout, in seconds."""
    return LAYOUTS[layout].bound_s(nbytes)


def pct(layout, nbytes, us):
    if layout not in LAYOUTS or not us:
        return ""
    return "%.1f" % (100.0 * bound_s(layout, nbytes) / (us * 1e-6))


def head_of(meta_tsv):
    """Where a run's numbers came from, from the meta.tsv that scripts/bench and bench-torch write."""
    meta = dict((r + [""])[:2] for r in read_tsv(meta_tsv, header=False)) if os.path.exists(meta_tsv) else {}
    return meta, {"date": meta.get("date", ""), "commit": meta.get("git", ""), "command": meta.get("command", ""),
                  "load": meta.get("load", ""), "nproc": meta.get("nproc", "")}


def row(run, job, layout, nranks, path, library, config, size, us, wrong="", route="", predicted=None, plan="",
        min_us=None):
    return {"run": run, "job": job, "layout": layout, "nranks": nranks, "path": path, "library": library,
            "config": config, "size_bytes": size, "time_us": "%.1f" % us, "pct_bound": pct(layout, size, us),
            "wrong": wrong, "route": route,
            "predicted_us": "%.1f" % predicted if predicted is not None and predicted >= 0 else "",
            "plan": plan or "", "min_us": "%.1f" % min_us if min_us is not None else ""}


def from_bench(d, run):
    """scripts/bench: DIR/raw/{meta,layouts,runs}.tsv and raw/LAYOUT/CONFIG-rN.jsonl."""
    raw = os.path.join(d, "raw")
    meta, head = head_of(os.path.join(raw, "meta.tsv"))
    path = meta.get("path", "pmpi")
    rows = []
    for r in read_tsv(os.path.join(raw, "runs.tsv")):
        # runs.tsv names the folder the run wrote in; the folder may since have moved.
        base = os.path.join(raw, r["layout"], os.path.basename(r["base"]))
        config, job = r["config"], r["layout"] + "-" + os.path.basename(r["base"])
        for j in read_jsonl(base + ".jsonl"):
            size, np_ = j["bytes"], j["nranks"]
            other = "gloo" if config == "gloo" else "mpi"
            bc_path = "torch" if config == "gloo" else path
            if "bc" in j:
                rows.append(row(run, job, r["layout"], np_, bc_path, "blueconnect", config, size, j["bc"]["avg_us"],
                                j["bc"].get("wrong", ""), predicted=j.get("predicted_us"), plan=j.get("plan"),
                                min_us=j["bc"].get("min_us")))
            if other in j:
                rows.append(row(run, job, r["layout"], np_, "torch" if other == "gloo" else "mpi",
                                "gloo" if other == "gloo" else "openmpi", config, size, j[other]["avg_us"],
                                j[other].get("wrong", ""), min_us=j[other].get("min_us")))
    return rows, head


def stats_routes(prefix):
    """[(lo, hi, library)] from a preload run's rank-0 BC_PMPI_STATS file (its busiest communicator)."""
    f = prefix + ".stats.0"
    if not os.path.exists(f):
        return []
    blocks, cur = [], None
    for l in open(f):
        if l.startswith("MPI_Allreduce route"):
            cur = []
            blocks.append(cur)
            continue
        m = re.match(r"bytes (\d+)-(\d+): blueconnect (\d+), mpi (\d+); (\w+)", l)
        if m and cur is not None:
            cur.append((int(m[1]), int(m[2]), int(m[3]) + int(m[4]), m[5]))
    if not blocks:
        return []
    return [(lo, hi, lib) for lo, hi, _, lib in max(blocks, key=lambda b: sum(x[2] for x in b))]


def from_node(d, run):
    """scripts/bench-node: DIR/sections.tsv, DIR/meta.txt, DIR/raw/KEY-PATH.jsonl (+ .stats.R under the preload)."""
    rows = []
    # The per-run files are in DIR/raw; folders written before that, in DIR itself.
    files = os.path.join(d, "raw") if os.path.isdir(os.path.join(d, "raw")) else d
    for key in (l.split("\t")[0] for l in open(os.path.join(d, "sections.tsv")) if l.strip()):
        layout = key if key in LAYOUTS else "node"
        for path in ("api", "pmpi"):
            job = "%s-%s" % (key, path)
            prefix = os.path.join(files, job)
            routes = stats_routes(prefix) if path == "pmpi" else []
            for j in read_jsonl(prefix + ".jsonl"):
                size = j["bytes"]
                route = next((lib for lo, hi, lib in routes if lo <= size <= hi), "")
                route = {"mpi": "openmpi"}.get(route, route)
                rows.append(row(run, job, layout, j["nranks"], path, "blueconnect", "model", size, j["bc"]["avg_us"],
                                j["bc"].get("wrong", ""), route, j.get("predicted_us")))
                rows.append(row(run, job, layout, j["nranks"], "mpi", "openmpi", "default", size, j["mpi"]["avg_us"],
                                j["mpi"].get("wrong", "")))
    head = {}
    meta = os.path.join(d, "meta.txt")
    if os.path.exists(meta):
        lines = open(meta).read().splitlines()
        m = re.match(r"# (\S+) (\S+) load: ([\d. ]+?) repeats: (\d+)", lines[0] if lines else "")
        if m:
            head = {"date": m[1], "commit": m[2], "load": m[3], "repeats": m[4]}
        command = [l[len("# command: "):] for l in lines if l.startswith("# command: ")]
        if command:
            head["command"] = command[0]
    return rows, head


def from_ddp(d, run):
    """scripts/bench-torch: DIR/raw/{meta,runs}.tsv and raw/LAYOUT.jsonl (tools/torch_bench.py --mode ddp)."""
    raw = os.path.join(d, "raw")
    rows = []
    for r in read_tsv(os.path.join(raw, "runs.tsv")):
        for j in read_jsonl(os.path.join(raw, r["layout"] + ".jsonl")):
            common = {"run": run, "layout": r["layout"], "nranks": j.get("nranks", r["np"]),
                      "backend": j["backend"], "comm_hook": j.get("hook", "allreduce") if j.get("buckets") else "",
                      "step_median_ms": "%.1f" % j["step_median_ms"],
                      "step_mean_ms": "%.1f" % j["step_mean_ms"],
                      "comm_span_ms": "%.1f" % j["comm_span_ms"] if "comm_span_ms" in j else "",
                      "comm_only_ms": "%.1f" % j["comm_only_ms"] if "comm_only_ms" in j else "",
                      "exposed_ms": "%.1f" % j["exposed_ms"] if "exposed_ms" in j else "",
                      "samples_per_s": "%.2f" % j["samples_per_s"] if "samples_per_s" in j else "",
                      "identical": j.get("identical", "")}
            buckets = j.get("buckets") or [None]
            for i, b in enumerate(buckets):
                x = dict(common, bucket="", bucket_bytes="", hook_ms="", done_ms="", bucket_mb_per_s="",
                         bucket_link_pct="")
                if b:
                    x.update(bucket=i, bucket_bytes=b["bytes"], hook_ms="%.1f" % b["hook_ms"],
                             done_ms="%.1f" % b["done_ms"],
                             bucket_mb_per_s="%.2f" % b["mb_per_s"] if b.get("mb_per_s") else "",
                             bucket_link_pct="%.0f" % b["bound_pct"] if b.get("bound_pct") else "")
                rows.append(x)
    return rows, head_of(os.path.join(raw, "meta.tsv"))[1]


def summarize(d, run):
    """(rows, columns, head) of the output folder d, whichever script wrote it."""
    if os.path.exists(os.path.join(d, "sections.tsv")):
        return from_node(d, run) + (ALLREDUCE_COLUMNS,)
    runs = os.path.join(d, "raw", "runs.tsv")
    if not os.path.exists(runs):
        raise SystemExit("summarize.py: %s has neither sections.tsv (bench-node) nor raw/runs.tsv" % d)
    cols = open(runs).readline().rstrip("\n").split("\t")
    if "config" in cols:
        return from_bench(d, run) + (ALLREDUCE_COLUMNS,)
    return from_ddp(d, run) + (DDP_COLUMNS,)


def main(argv):
    args, run, out, append, command = [], 1, None, False, None
    it = iter(argv)
    for a in it:
        if a == "--run":
            run = int(next(it))
        elif a == "--out":
            out = next(it)
        elif a == "--append":
            append = True
        elif a == "--command":
            command = next(it)
        else:
            args.append(a)
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    d = args[0]
    rows, head, columns = summarize(d, run)
    if command:
        head["command"] = command
    out = out or os.path.join(d, "summary.csv")
    new = not (append and os.path.exists(out))
    if not new:  # the file's own columns: one written before a column existed stays one table
        with open(out) as f:
            columns = next(l for l in f if not l.startswith("#")).strip().split(",")
    with open(out, "w" if new else "a") as f:
        # One '#' line per run: where its numbers came from.
        f.write("# run %d: %s\n" % (run, "; ".join("%s %s" % (k, v) for k, v in head.items() if v)))
        w = csv.DictWriter(f, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
