#!/usr/bin/env python3
"""Tallies scripts/stress's rounds: per test, in how many rounds it passed,
failed, skipped or timed out, then the last lines of each failure.

Usage: tally.py STRESS_DIR ROUNDS  (reads STRESS_DIR/round-K.json, meson's
test log of round K: one JSON object per test). Exit status 1 when any test
failed or timed out in any round, or a round left no log.
"""
import json
import os
import sys

KINDS = ("OK", "FAIL", "SKIP", "TIMEOUT")


def main():
    out, rounds = sys.argv[1], int(sys.argv[2])
    table, failures, missing = {}, [], []
    for k in range(1, rounds + 1):
        path = os.path.join(out, "round-%d.json" % k)
        if not os.path.exists(path):
            missing.append(k)
            continue
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                t = json.loads(line)
                name = t["name"].split(" / ")[-1]
                result = t["result"]
                kind = result if result in KINDS else ("OK" if result == "EXPECTEDFAIL" else "FAIL")
                row = table.setdefault(name, dict.fromkeys(KINDS, 0))
                row[kind] += 1
                if kind in ("FAIL", "TIMEOUT"):
                    tail = (t.get("stdout") or "").rstrip().splitlines()[-12:]
                    failures.append((name, k, result, tail))
    width = max([len(n) for n in table] + [4])
    print("%-*s %7s %6s %7s %7s" % (width, "test", "passed", "failed", "skipped", "timeout"))
    for name in sorted(table):
        r = table[name]
        runs = sum(r.values())
        mark = "" if r["FAIL"] + r["TIMEOUT"] == 0 else "  <-"
        print("%-*s %3d/%-3d %6d %7d %7d%s" % (width, name, r["OK"], runs, r["FAIL"], r["SKIP"], r["TIMEOUT"], mark))
    for name, k, result, tail in failures:
        print("\n== %s, round %d: %s; its last lines:" % (name, k, result))
        for line in tail:
            print("   " + line)
    for k in missing:
        print("round %d left no test log (%s/round-%d.log says why)" % (k, out, k))
    bad = sum(r["FAIL"] + r["TIMEOUT"] for r in table.values())
    clean = sum(1 for r in table.values() if r["FAIL"] + r["TIMEOUT"] == 0)
    print("\n%d of %d tests passed or skipped in every one of %d round(s); %d failed run(s)" %
          (clean, len(table), rounds, bad))
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
