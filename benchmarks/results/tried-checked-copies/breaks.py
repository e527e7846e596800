"""Where auto's prompt lookup finds a match of 4 tokens or more, does the draft model's own top token tell whether the
copy's first token is right? Counted over the suite's recorded greedy answers, per category.

    python benchmarks/results/tried-checked-copies/breaks.py
"""

import json
import sys
from collections import Counter
from pathlib import Path

sys.path[:0] = ["app", "benchmarks"]
from replay import Answer  # noqa: E402

from specchat.engine import DEFAULT_POLICY  # noqa: E402
from specchat.engine.adaptive import auto_lookup  # noqa: E402
from specchat.engine.calibration import K_LONG  # noqa: E402

recording = json.loads(Path("benchmarks/results/replay-greedy-2nd.json").read_text())
counts: dict[str, Counter] = {}
for saved in recording["answers"]:
    saved = dict(saved)
    saved.pop("id")
    answer = Answer(**saved)
    finder = auto_lookup(recording["n_vocab"], DEFAULT_POLICY)
    tally = counts.setdefault(answer.category, Counter())
    for t, token in enumerate(answer.tokens):
        found = finder.find(answer.prompt + answer.tokens[:t], K_LONG)
        if not found or finder.match_len < DEFAULT_POLICY.copy_match:
            continue
        copy_right, model_agrees = found[0] == token, answer.guesses[t] == found[0]
        tally[("copy right" if copy_right else "copy wrong", "model agrees" if model_agrees else "model differs")] += 1
        if not copy_right and not model_agrees and answer.guesses[t] == token:
            tally["copy wrong, the model's token right"] += 1
for category, tally in counts.items():
    print(category, dict(tally))
