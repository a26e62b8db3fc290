"""Stall events in loop3 output: calls over the threshold grouped by (library, round, call +-2); time per library."""
import sys, re, collections
for f in sys.argv[1:]:
    ev = collections.defaultdict(list); secs = collections.Counter(); starved = collections.Counter()
    for l in open(f):
        m = re.match(r'(\w+) round (\d+) rank (\d+) call (\d+) at \d+ us took (\d+) us: on cpu (\d+) us, runqueue wait (\d+) us, slices (\d+)', l)
        if m and m[4] != '0':
            ev[(m[1], int(m[2]))].append((int(m[4]), int(m[5]), int(m[3]), int(m[6]), int(m[7]), int(m[8])))
        m = re.match(r'(\w+) round (\d+) rank 0: (\d+) calls ([\d.]+) us/call', l)
        if m: secs[m[1]] += int(m[3]) * float(m[4]) / 1e6
    n = collections.Counter(); worst = collections.Counter()
    for (lib, rnd), calls in ev.items():
        calls.sort(); last = -10
        for c in calls:
            if c[0] > last + 2:
                n[lib] += 1
                # the starved rank: the least cpu time, a handful of slices
            last = c[0]; worst[lib] = max(worst[lib], c[1])
        for c in calls:
            if c[5] <= 20 and c[4] > 0.5 * c[1]: starved[lib] += 1
    print(f, ' '.join('%s: %d stall(s) in %.1f s of calls, worst %.0f ms, %d call(s) of a rank that sat runnable on <=20 slices for over half the call;' % (k, n[k], secs[k], worst[k] / 1e3, starved[k]) for k in ('bc', 'mpi')))
