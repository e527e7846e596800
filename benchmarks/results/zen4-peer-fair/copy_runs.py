"""Over the recorded greedy suite (no model calls): at every position where auto's lookup finds a match, the match's
band and how many of its next tokens are right (the copy's run); output in copy_runs.txt."""

import json
from collections import defaultdict
from pathlib import Path

from specchat.engine.adaptive import auto_lookup
from specchat.engine.policy import DEFAULT_POLICY

d = json.load(open(Path(__file__).resolve().parents[1] / "replay-greedy-2nd.json"))
bands = DEFAULT_POLICY.lookup_bands
runs = defaultdict(list)
for a in d["answers"]:
    lk = auto_lookup(d["n_vocab"])
    prompt, toks = a["prompt"], a["tokens"]
    t = 0
    while t < len(toks):
        ctx = prompt + toks[:t]
        found = lk.find(ctx, 64)
        if not found:
            t += 1
            continue
        band = max(n for n in bands if n <= lk.match_len) if lk.match_len >= bands[0] else bands[0]
        run = 0
        while run < len(found) and t + run < len(toks) and found[run] == toks[t + run]:
            run += 1
        runs[band].append((run, len(found), min(64, len(toks) - t)))
        t += 1
for band, rs in sorted(runs.items()):
    n = len(rs)
    first = sum(r > 0 for r, _, _ in rs) / n
    # among those with the first right: P(run >= j)
    ok = [r for r, _, _ in rs if r > 0]
    line = " ".join(f"P(>={j})={sum(r >= j for r in ok) / len(ok):.2f}" for j in (2, 4, 8, 16, 32)) if ok else ""
    print(f"band {band:2d}: {n:5d} positions, first right {first:.2f}; given first right: {line}")
