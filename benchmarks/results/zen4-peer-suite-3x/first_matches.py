"""How often a 4- to 7-token lookup match passes, over the suite's recorded greedy answers: the answer's first such
match against the later ones, by match length and by where the matched text lies (the prompt or the answer).

    python3 benchmarks/results/zen4-peer-suite-3x/first_matches.py > first_matches.txt
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(RESULTS.parent))

from specchat.engine import DEFAULT_POLICY  # noqa: E402
from specchat.engine.adaptive import auto_lookup  # noqa: E402
from specchat.engine.llama_backend import common_prefix  # noqa: E402

saved = json.loads((RESULTS / "replay-greedy-2nd.json").read_text())
counts = defaultdict(lambda: [0, 0, 0])  # matches, first token right, tokens right of the first 3
for answer in saved["answers"]:
    prompt, tokens = answer["prompt"], answer["tokens"]
    finder = auto_lookup(saved["n_vocab"], DEFAULT_POLICY)
    first = True
    for t in range(len(tokens)):
        found = finder.find(prompt + tokens[:t], 15)
        if not found or not 4 <= finder.match_len < 8:
            continue
        right = common_prefix(found, tokens[t:])
        where = "prompt" if finder._copy_from < len(prompt) else "answer"
        count = counts[finder.match_len, "first" if first else "later", where]
        count[0] += 1
        count[1] += right > 0
        count[2] += min(right, 3)
        first = False
for (n, which, where), (matches, passed, right) in sorted(counts.items()):
    print(
        f"{n}-token match, {which} of its answer, from the {where}: {matches}, "
        f"first token right {passed / matches:.2f}, tokens right of 3 {right / matches:.2f}"
    )
