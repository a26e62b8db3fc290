#!/usr/bin/env python3
"""The table of scripts/bench-chunks: per layout and size, the time per call of
the cost model's own chunking and of each fixed BC_CHUNK, from one pass (DIR)
or two (DIR DIR2). With two passes each setting counts with the lower of its
two medians, so that a stall of the machine in one pass does not decide; the
last column is the model's time over the best fixed setting's (> 1.05 misses
issue 12's 5 %). '*' marks a fixed setting that ran the very plan the model
chose: their difference is the machine's noise, not the choice."""
import glob
import json
import os
import sys

from report import fmt_size as fmt  # scripts/bench's report, beside this file

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def chunk_bytes(setting):
    v = setting[len("chunk"):]
    return int(v[:-1]) * UNITS[v[-1]] if v and v[-1] in UNITS else int(v)


def load(d, layout, setting):
    """{bytes: (ms, plan)} of one job; None when it did not run."""
    f = os.path.join(d, "%s-%s.jsonl" % (layout, setting))
    if not os.path.exists(f):
        return None
    rows = {}
    for line in open(f):
        r = json.loads(line)
        if r["bc"]["wrong"]:
            raise SystemExit("%s: %d wrong results at %d bytes" % (f, r["bc"]["wrong"], r["bytes"]))
        rows[r["bytes"]] = (r["bc"]["avg_us"] / 1e3, r.get("plan") or "")
    return rows


def main(dirs):
    names = {os.path.basename(f)[:-len(".jsonl")] for f in glob.glob(os.path.join(dirs[0], "*-*.jsonl"))}
    layouts = sorted({n.split("-", 1)[0] for n in names})
    fixed = sorted({n.split("-", 1)[1] for n in names if n.split("-", 1)[1].startswith("chunk")}, key=chunk_bytes)
    settings = ["model"] + fixed
    worst = []
    out = ["# The model's chunking against fixed chunks (scripts/bench-chunks)", "",
           "ms per call, bc_bench back to back through the C API, median of its rounds (slowest rank)"
           + ("; pass 1 / pass 2" if len(dirs) > 1 else "") + ". chunkC = BC_CHUNK=C. "
           "* = that setting ran the plan the model chose. Last column: the model / the best fixed setting"
           + (" (each the lower of its passes)" if len(dirs) > 1 else "") + "; the model's chunk and depth.", ""]
    for layout in layouts:
        runs = {s: [load(d, layout, s) for d in dirs] for s in settings}
        if not runs["model"][0]:
            continue
        out += ["## layout %s" % layout, "",
                "| size | " + " | ".join(settings) + " | model / best fixed | model's chunk, depth |",
                "|---:|" + "---:|" * (len(settings) + 1) + "---|"]
        for b in sorted(runs["model"][0]):
            model_plan = runs["model"][0][b][1]
            cells, low = [], {}
            for s in settings:
                vals = [r[b] for r in runs[s] if r and b in r]
                if not vals:
                    cells.append("-")
                    continue
                low[s] = min(v[0] for v in vals)
                same = s != "model" and vals[0][1] == model_plan
                cells.append(" / ".join("%.1f" % v[0] for v in vals) + ("*" if same else ""))
            ratio = ""
            best = [low[s] for s in fixed if s in low]
            if best and "model" in low:
                r = low["model"] / min(best)
                worst.append((r, layout, b))
                ratio = "%.3f" % r
            parts = dict(kv.split("=", 1) for kv in model_plan.split(",") if "=" in kv)
            cd = "%s, %s" % (fmt(int(parts.get("chunk", "0"))), parts.get("depth", "?"))
            out.append("| %s | %s | %s | %s |" % (fmt(b), " | ".join(cells), ratio, cd))
        out.append("")
    over = [w for w in worst if w[0] > 1.05]
    out.append("Model more than 5 %% slower than the best fixed setting: %s" %
               (", ".join("%s %s %.3f" % (l, fmt(b), r) for r, l, b in sorted(over, reverse=True)) or "nowhere"))
    print("\n".join(out))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: report_chunks.py DIR [DIR2]")
    main(sys.argv[1:])
