"""Fixed rules, no policy: a lookup copy (a match of MIN_MATCH tokens or more, up to L_MAX tokens) verified as it is
('raw') or first read by the draft model in one batch and cut at its first disagreement, the model's token there
('checked', then EXTRA more model tokens where that one passes); elsewhere the draft model drafts 3. Over the suite's
recorded greedy answers, at a calibration's prices.

    python benchmarks/results/tried-checked-copies/checked.py CALIBRATION.json [L_MAX 15] [MIN_MATCH 4] [EXTRA 0]
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path[:0] = ["app", "benchmarks"]
from replay import Answer, Prices  # noqa: E402

from specchat.engine import DEFAULT_POLICY  # noqa: E402
from specchat.engine.adaptive import auto_lookup  # noqa: E402
from specchat.engine.calibration import Calibration  # noqa: E402
from specchat.engine.llama_backend import common_prefix  # noqa: E402

recording = json.loads(Path("benchmarks/results/replay-greedy-2nd.json").read_text())
prices = Prices(Calibration.from_json(Path(sys.argv[1]).read_text()))
L_MAX, MIN_MATCH, EXTRA = (int(sys.argv[i]) if len(sys.argv) > i else d for i, d in ((2, 15), (3, 4), (4, 0)))
K_MODEL = 3
MODES = ("model", "raw", "checked")


def steps(answer: Answer, mode: str) -> float:
    """Target steps through the answer: 'model' (the model alone), 'raw' or 'checked' copies."""
    tokens, n = answer.tokens, len(answer.tokens)
    finder = auto_lookup(recording["n_vocab"], DEFAULT_POLICY)
    t, held, spent = 0, 0, 0.0  # held: the draft's cache holds the answer's first held - 1 tokens
    while t < n:
        room = n - t - 1
        if room <= 0:
            spent, t = spent + 1.0, t + 1
            continue
        found = finder.find(answer.prompt + tokens[:t], 31)
        if found and finder.match_len >= MIN_MATCH and mode != "model":
            size = min(len(found), L_MAX, room)
            if size > 16:  # only batches up to 16 and of 32 are measured
                size = 31 if size >= 31 else 15
            copy = found[:size]
            right = common_prefix(copy, tokens[t:])
            if mode == "raw":
                spent, t = spent + prices.r(size + 1), t + right + 1
                continue
            # The model reads what it is behind on and the copy; given the true text, its top token is the recorded one.
            agreed = 0
            while agreed < size and agreed <= right and answer.guesses[t + agreed] == copy[agreed]:
                agreed += 1
            spent += prices.catch_up(t + 1 - held + size)
            if agreed > right:  # it agreed with the copy's wrong token: the target rejects it
                drafts, accepted = agreed, right
            elif agreed == size:
                drafts, accepted = size, size
            else:
                drafts = min(agreed + 1, room)
                accepted = agreed + (agreed == right and answer.guesses[t + agreed] == tokens[t + agreed])
                more = min(EXTRA, room - drafts) if accepted == drafts else 0
                if more > 0:
                    spent += more * prices.c
                    accepted += common_prefix(answer.guesses[t + drafts : t + drafts + more], tokens[t + drafts :])
                    drafts += more
            if 15 < drafts < 31:
                drafts, accepted = 15, min(accepted, 15)
            spent += prices.r(drafts + 1)
            t += accepted + 1
            held = t
            continue
        k = min(K_MODEL, room)
        right = common_prefix(answer.guesses[t : t + k], tokens[t:])
        spent += prices.model_step(t + 1 - held, k)
        held = t + 1 + min(right, k - 1)
        t += right + 1
    return spent


totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
for saved in recording["answers"]:
    saved = dict(saved)
    saved.pop("id")
    answer = Answer(**saved)
    for mode in MODES:
        for key in (answer.category, "all"):
            totals[key][mode] += steps(answer, mode)
            totals[key]["tokens"] += len(answer.tokens) / 3
for key, spent in totals.items():
    print(f"{key:16s} " + "  ".join(f"{mode} {spent['tokens'] / spent[mode]:.2f}x" for mode in MODES))
