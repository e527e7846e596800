"""How often the draft's greedy token matches the target's, by how sure the target was of the latest tokens.

    python benchmarks/results/tried-target-sureness/acceptance_by_sureness.py

"sure" at position t: the target's top probability was at least 0.9 at each of positions t-4..t-1 (all known
before drafting t). Rates: P(match at t), then P(match at t+i | matches before it), i = 1..3. target_top.json is
the target's top probability at each position of replay-greedy.json's answers (the Xeon's Q4_K_M target), as
policy.diff's record() in benchmarks/replay.py takes it.
"""

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from specchat.engine.llama_backend import common_prefix

HERE = Path(__file__).parent
saved = json.loads((HERE.parent / "replay-greedy.json").read_text())
target_top = json.loads((HERE / "target_top.json").read_text())
runs = defaultdict(list)
for a in saved["answers"]:
    top, tokens, guesses = np.array(target_top[a["id"]]), a["tokens"], a["guesses"]
    for t in range(4, len(tokens)):
        run = common_prefix(guesses[t:], tokens[t:])
        state = "sure" if top[t - 4 : t].min() >= 0.9 else "unsure"
        runs[(state, a["category"])].append(run)
        runs[(state, "all")].append(run)
for category in sorted({c for _, c in runs}):
    line = f"{category:16s}"
    for state in ("sure", "unsure"):
        r = np.array(runs[(state, category)])
        rates = [(r >= i + 1).sum() / max((r >= i).sum(), 1) for i in range(4)]
        line += f"  {state}: {len(r):4d} positions, rates " + " ".join(f"{x:.2f}" for x in rates)
    print(line)
