"""Per variant: BlueConnect's stall events (calls over the loop's threshold, grouped by round and call) by their
longest call, and the time per call of the bc rounds (rank 0)."""
import sys, re, collections, glob
for pat in sys.argv[1:]:
    buckets = collections.Counter(); per = []; secs = 0
    for f in glob.glob(pat):
        ev = collections.defaultdict(dict)
        for l in open(f):
            m = re.match(r'bc round (\d+) rank (\d+) call (\d+) at \d+ us took (\d+) us', l)
            if m and m[3] != '0':
                r, c, t = int(m[1]), int(m[3]), int(m[4])
                ev[r][c] = max(ev[r].get(c, 0), t)
            m = re.match(r'bc round (\d+) rank 0: (\d+) calls ([\d.]+) us/call', l)
            if m: per.append(float(m[3])); secs += int(m[2]) * float(m[3]) / 1e6
        for r, calls in ev.items():
            last, cur = -10, 0
            for c in sorted(calls):
                if c > last + 2 and last >= 0:
                    buckets[cur] += 1; cur = 0
                cur = max(cur, calls[c]); last = c
            if cur: buckets[cur] += 1
    b = collections.Counter()
    for d, n in buckets.items():
        b['2-5 ms' if d < 5000 else '5-20 ms' if d < 20000 else '20-100 ms' if d < 100000 else '>100 ms'] += n
    per.sort()
    print(pat, '%.1f s of bc calls;' % secs, ', '.join('%s: %d' % (k, b[k]) for k in ('2-5 ms', '5-20 ms', '20-100 ms', '>100 ms')),
          '; us/call per round median %.0f, max %.0f' % (per[len(per)//2], per[-1]))
