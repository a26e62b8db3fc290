#!/usr/bin/python3
"""scripts/bench-torch's report: reads DIR/raw (torch_bench.py --mode ddp JSON lines per layout, runs.tsv,
meta.tsv) and writes DIR/results.md. Usage: report_torch.py DIR. Exit 0 all right, 1 a run failed or a
check failed. Standard library only."""
import json
import os
import sys


def read_tsv(path):
    with open(path) as f:
        lines = [l.rstrip("\n").split("\t") for l in f if l.strip()]
    return [dict(zip(lines[0], l)) for l in lines[1:]] if lines else []


def bucket_table(rows):
    """Where DDP's buckets sit in the step (torch_bench's bucket timeline), as markdown lines."""
    lines = []
    for r in rows:
        for i, b in enumerate(r.get("buckets", [])):
            lines.append("| %s | %d | %.2f | %.1f | %.1f | %s | %s |" % (
                r["backend"], i, b["bytes"] / 1e6, b["hook_ms"], b["done_ms"],
                "%.1f" % b["mb_per_s"] if b.get("mb_per_s") else "—",
                "%.0f" % b["bound_pct"] if b.get("bound_pct") else "—"))
    if not lines:
        return []
    return ["", "DDP's buckets in the order they completed: the hook call (the bucket's gradients are ready) and "
            "the completion of its all-reduce, in ms from the step's start (slowest rank, mean over the timed "
            "steps); MB/s = bytes / (completion - the later of its hook call and the previous completion), its "
            "rate if the buckets run one at a time (blueconnect's do; Gloo's overlap, so its figure is not a rate); "
            "% of link = the bucket's link bound / that time.",
            "", "| backend | bucket | MB | hook (ms) | done (ms) | MB/s | % of link |",
            "|---|---:|---:|---:|---:|---:|---:|"] + lines


def main():
    out = os.path.abspath(sys.argv[1])
    raw = os.path.join(out, "raw")
    with open(os.path.join(raw, "meta.tsv")) as f:
        meta = dict((l.rstrip("\n").split("\t", 1) + [""])[:2] for l in f if l.strip())
    md = ["# DDP training: blueconnect against Gloo on simulated clusters (tools/torch_bench.py --mode ddp)", "",
          "- date: %s; machine: nproc %s; load at start %s" % (meta.get("date"), meta.get("nproc"), meta.get("load")),
          "- command: `%s`" % meta.get("command"),
          "- source: git %s; torch, torchvision: %s" % (meta.get("git"), meta.get("torch")),
          "- BlueConnect environment (`mpirun -x`): %s" % (meta.get("bc_env") or "(none)"), "",
          "How to read the tables: step = forward + backward + optimizer step, timed on every rank without "
          "barriers, the slowest rank's median and mean; comm sum = wall time from each DDP bucket's comm hook "
          "call to the completion of its all-reduce (DDP's allreduce_hook, or fp16_compress_hook where the layout's "
          "heading says so, wrapped), summed per step: the "
          "buckets overlap each other and the backward pass, so this is not time lost; comm span = first hook "
          "call to last completion per step; samples/s = global batch / mean step. Compute only = the same "
          "model without DDP, every rank at once. Both backends start from the same seed and see the same data; "
          "`identical` = the parameters are the same bits on every rank after training; the parameters "
          "of the two backends after the first step must agree within rtol 1e-4, atol 1e-5 (1e-3, 1e-4 with the fp16 hook: 16-bit sums).", ""]
    bad = []
    for run in read_tsv(os.path.join(raw, "runs.tsv")):
        lay = run["layout"]
        md += ["## Layout %s: %s" % (lay, run["desc"]), ""]
        rows = []
        try:
            with open(os.path.join(raw, lay + ".jsonl")) as f:
                rows = [json.loads(l) for l in f if l.strip()]
        except (OSError, ValueError):
            pass
        if run["rc"] != "0":
            bad.append("layout %s: run failed (exit status %s, raw/%s.log)" % (lay, run["rc"], lay))
        if not rows:
            md += ["No results (raw/%s.log)." % lay, ""]
            continue
        r0 = rows[0]
        md += ["p = %s ranks, %s, %dx%d images, batch %d per rank (global %d), %d timed steps after %d, comm hook %s; "
               "run took %s s."
               % (r0["nranks"], r0["model"], r0["image"], r0["image"], r0["batch"], r0["batch"] * r0["nranks"],
                  r0["steps"], r0["warmup"], r0.get("hook", "allreduce"), run["seconds"]), ""]
        md += ["| backend | step median (ms) | step mean (ms) | comm sum (ms) | comm span (ms) | comm only (ms) | "
               "exposed (ms) | samples/s | identical |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in rows:
            if "comm_sum_ms" in r:
                md.append("| %s | %.1f | %.1f | %.1f | %.1f | %s | %s | %.1f | %s |" % (
                    r["backend"], r["step_median_ms"], r["step_mean_ms"], r["comm_sum_ms"], r["comm_span_ms"],
                    "%.1f" % r["comm_only_ms"] if "comm_only_ms" in r else "—",
                    "%.1f" % r["exposed_ms"] if "exposed_ms" in r else "—",
                    r["samples_per_s"], "yes" if r["identical"] else "**NO**"))
                if not r["identical"]:
                    bad.append("layout %s: %s parameters differ across ranks" % (lay, r["backend"]))
            else:
                md.append("| %s | %.1f | %.1f | — | — | — | — | — | — |" % (r["backend"], r["step_median_ms"],
                                                                           r["step_mean_ms"]))
        bcr = next((r for r in rows if r["backend"] == "blueconnect"), {})
        if bcr.get("grad_bound_ms"):
            md += ["", "Comm only = the same buckets all-reduced with no compute, launched as DDP launched them; "
                   "exposed = step median - compute only's. Link bound of the gradients (%.1f MB): %.1f ms; "
                   "blueconnect's comm only is %.0f %% of it." % (
                       bcr["grad_bytes"] / 1e6, bcr["grad_bound_ms"],
                       100.0 * bcr["grad_bound_ms"] / bcr["comm_only_ms"] if bcr.get("comm_only_ms") else 0)]
        md += bucket_table(rows)
        st = {r["backend"]: r for r in rows}
        if "blueconnect" in st and "gloo" in st:
            md += ["", "Gloo step / blueconnect step (mean): %.2f. Parameters, blueconnect against Gloo: after "
                   "step 1 max |diff| %.3g, %s; at the end max |diff| %.3g (%s the tolerance; the two summation "
                   "orders' rounding differences grow with training, so this one is reported, not checked)." % (
                       st["gloo"]["step_mean_ms"] / st["blueconnect"]["step_mean_ms"], r0["step1_max_abs_diff"],
                       "agree" if r0["step1_agree"] else "**DISAGREE**", r0["final_max_abs_diff"],
                       "within" if r0["final_agree"] else "beyond")]
            if not r0["step1_agree"]:
                bad.append("layout %s: blueconnect's and Gloo's parameters disagree after step 1" % lay)
        md.append("")
    md += ["## Problems", ""] + (["- " + b for b in bad] or ["None."]) + ["",
           "Summary: `summary.csv` (scripts/bench.d/summarize.py). Raw data: `raw/` (JSON lines, output and "
           "command line per layout), kept only with --keep-raw."]
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
