"""Issue 28, item 3, the part not measured before: several prompt-lookup matches verified side by side in one batch.

Over the recorded greedy suite (replay-greedy-2nd.json, Qwen2.5-Coder 1.5B answers), at every position: the
continuations (up to K_LONG tokens) of every earlier occurrence of the context's last n-gram, for each n from 16 down
to n_min, longest first; continuations that start with a token an earlier candidate starts with are the same branch.
Counts where the candidate auto's lookup takes (the longest match, earliest) is not the best one, and bounds what a
tree of them could give: the hindsight ceiling with the best candidate at a chain's price (a tree costs more),
against the ceiling with the one auto takes (its bands' matches: 2 tokens or more), lookup alone and with the draft
model, at each machine's calibrated prices.

    python benchmarks/results/lookup-tree/matches.py > benchmarks/results/lookup-tree/matches.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(RESULTS.parent))

from replay import Answer, Prices, _cheapest, _right_from  # noqa: E402

from specchat.engine import DEFAULT_POLICY  # noqa: E402
from specchat.engine.calibration import K_LONG, Calibration  # noqa: E402
from specchat.engine.drafters import match_ends  # noqa: E402
from specchat.engine.llama_backend import common_prefix  # noqa: E402

RECORDING = RESULTS / "replay-greedy-2nd.json"
PRICES = {
    "Xeon 7B-cost": "xeon-7bcost-suite-greedy/calibration.json",
    "Zen 4 7B-cost": "zen4-7bcost-suite/calibration.json",
    "Zen 4": "zen4-fresh-cal-greedy/calibration.json",
    "Xeon": None,  # the recording's own
}


def candidates(context: list[int], n_min: int) -> list[list[int]]:
    ids, branches = np.asarray(context)[:-1], []
    for n in range(DEFAULT_POLICY.lookup_bands[-1], n_min - 1, -1):
        ends, _ = match_ends(ids, context, context, n, n)
        for end in ends:
            copy = context[end : end + K_LONG]
            if copy and copy[0] not in [b[0] for b in branches]:
                branches.append(copy)
    return branches


def main() -> None:
    saved = json.loads(RECORDING.read_text())
    answers = [(a.pop("id"), Answer(**a)) for a in saved["answers"]]
    n_vocab = saved["n_vocab"]
    rights = {}
    for n_min in (2, 4):
        positions = matched = several = rescued = gained = 0
        for name, answer in answers:
            best = []
            for t in range(len(answer.tokens)):
                branches = candidates(answer.prompt + answer.tokens[:t], n_min)
                right = [common_prefix(b, answer.tokens[t:]) for b in branches]
                best.append(max(right, default=0))
                positions += 1
                matched += bool(branches)
                several += len(branches) > 1
                rescued += bool(right) and right[0] == 0 and max(right) > 0
                gained += max(right, default=0) - (right[0] if right else 0)
            rights[name, n_min] = best
        print(
            f"matches of {n_min} tokens or more: {positions} positions, {matched} with a match, {several} with "
            f"continuations of two or more first tokens; the longest-first candidate's first token wrong and another's "
            f"right at {rescued}; tokens right beyond the first candidate's, summed: {gained}"
        )
    for label, path in PRICES.items():
        text = json.dumps(saved["calibration"]) if path is None else (RESULTS / path).read_text()
        costs = Prices(Calibration.from_json(text))
        totals = np.zeros(5)
        for name, answer in answers:
            copies, agree = _right_from(answer, n_vocab, DEFAULT_POLICY)
            totals += [
                len(answer.tokens),
                _cheapest(copies, agree, costs, 1, 0),
                _cheapest(rights[name, 2], agree, costs, 1, 0),
                _cheapest(copies, agree, costs, 1, 1),
                _cheapest(rights[name, 2], agree, costs, 1, 1),
            ]
        n, *steps = totals
        print(
            f"{label}: lookup ceiling {n / steps[0]:.3f}x, the best candidate {n / steps[1]:.3f}x; "
            f"both sources {n / steps[2]:.3f}x, the best candidate {n / steps[3]:.3f}x"
        )


if __name__ == "__main__":
    main()
