"""Tried and not kept (docs/experiments.md, "Drafting on while sure, verifying the prefix that pays"): the draft model
drafts on past the length auto's plan chose while its scaled sureness stays at least theta (up to k_over), and only
the prefix whose verify batch pays, given every drafted token's sureness and all drafts' cost, is verified. Greedy
only: choosing the verified length from later tokens' sureness, which depends on the tokens drawn before them, would
bias sampled acceptance.

Also tried (`Streak`): the gate asked before each draft token may go up to 15 tokens, not only up to the plan's
length, and the positions not drafted yet are taken at least as sure as the tokens drafted so far (their mean or
their least, where every one of them is at least `floor`); "mode": "none" leaves the rates as they are.

Replays auto and the variants given as JSON objects of the class's attributes ("kind": "streak" for Streak) over the
suite's recorded greedy answers at each machine's prices, costs carried from answer to answer:

    python3 benchmarks/results/tried-overdraft/overdraft.py '{}' '{"theta": 0.9}' '{"kind": "streak", "mode": "mean"}'

'{}' is auto as committed.
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(RESULTS.parent))

import replay  # noqa: E402

from specchat.engine import DEFAULT_POLICY  # noqa: E402
from specchat.engine.adaptive import AutoDrafter, LiveCosts  # noqa: E402
from specchat.engine.calibration import Calibration  # noqa: E402
from specchat.engine.costmodel import expected_tokens_by_length, speedups  # noqa: E402

RECORDING = RESULTS / "replay-greedy-2nd.json"
PRICES = {
    "Xeon 7B-cost": "xeon-7bcost-suite-greedy/calibration.json",
    "Xeon 7B-cost, earlier": "xeon-7bcost-greedy/calibration.json",
    "Zen 4 7B-cost": "zen4-7bcost-suite/calibration.json",
    "Zen 4": "zen4-fresh-cal-greedy/calibration.json",
    "Zen 3": "zen3-calibration/calibration.json",
    "Zen 5": "zen5-long-copy/calibration.json",
}


class Wide(AutoDrafter):
    """Where the draft model's plan drafts at all, its gate may go on up to k_over tokens, past the plan's length."""

    k_over = 15

    def _try(self, source, k_max, min_gain, draft, rival=1.0):
        if source is self.model_source and source.plan(self.r, min(k_max, source.k_max), min_gain)[0]:
            wide = min(k_max, self.k_over)
            return super()._try(source, k_max, min_gain, lambda n: draft(max(n, wide)), rival)
        return super()._try(source, k_max, min_gain, draft, rival)


class Overdraft(Wide):
    theta = 0.9  # draft on past what the plan chose while the scaled sureness is at least this
    cap = True  # whether the verified prefix's acceptance is capped by the tracker's rates, as the gate's is

    def _worth_drafting(self, n_drafted, k, sureness, token):
        go = super()._worth_drafting(n_drafted, k, sureness, token)
        if go or n_drafted == 0:
            return go
        return n_drafted < self.k_over and self.scale.acceptance(sureness) >= self.theta

    def propose(self, context, k, params, rng):
        proposal = super().propose(context, k, params, rng)
        self.n_drafted = n = len(proposal.tokens)
        if self._last[0] is not self.model_source or n < 2 or proposal.rows is not None:
            return proposal
        rates = [min(1.0, self.scale.acceptance(x)) for x in self._sureness[:n]]
        if self.cap:
            rates = [min(a, b) for a, b in zip(rates, self.model_source.tracker.rates(n))]
        paid = n * self.model_source.cost  # every drafted token is paid for, verified or not
        gains = [e / (paid + self.r(m + 1)) for m, e in enumerate(expected_tokens_by_length(rates), 1)]
        del proposal.tokens[max(range(n), key=gains.__getitem__) + 1 :]
        return proposal

    def observe(self, n_drafted, n_accepted, draft_s, verify_s):
        if self._last[0] is self.model_source and self.n_drafted > n_drafted:
            draft_s *= n_drafted / self.n_drafted  # c from every drafted token, not only the verified ones
        super().observe(n_drafted, n_accepted, draft_s, verify_s)


class Streak(Wide):
    mode = "mean"  # how sure the positions not drafted yet are taken to be: "mean", "min" or "none"
    floor = 0.0  # only where every drafted token's scaled sureness is at least this

    def _worth_drafting(self, n_drafted, k, sureness, token):
        if n_drafted == 0:
            return super()._worth_drafting(n_drafted, k, sureness, token)
        self._sureness.append(sureness)
        seen = [min(1.0, self.scale.acceptance(x)) for x in self._sureness]
        rates = self.model_source.tracker.rates(k)
        rates[: len(seen)] = [min(r, x) for r, x in zip(rates, seen)]
        if self.mode != "none" and min(seen) >= self.floor:
            sure = sum(seen) / len(seen) if self.mode == "mean" else min(seen)
            rates[len(seen) :] = [max(r, sure) for r in rates[len(seen) :]]
        s = speedups(rates, self.model_source.cost, self.r)
        return max(s[n_drafted:], default=0.0) > s[n_drafted - 1]


def replay_suite(variant: dict) -> dict[str, dict[str, float]]:
    saved = json.loads(RECORDING.read_text())
    answers = [replay.Answer(**{k: v for k, v in a.items() if k != "id"}) for a in saved["answers"]]
    settings = dict(variant)
    base = Streak if settings.pop("kind", None) == "streak" else Overdraft
    # A class of its own for each variant: a setting must not carry over to the next variant of the same run.
    replay.AutoDrafter = type("Variant", (base,), settings) if variant else AutoDrafter
    out = {}
    for machine, path in PRICES.items():
        cal = Calibration.from_json((RESULTS / path).read_text())
        costs, live = replay.Prices(cal), LiveCosts(cal, DEFAULT_POLICY.cost_weight, DEFAULT_POLICY.cost_relax)
        totals = defaultdict(lambda: [0, 0.0])
        for answer in answers:
            steps = replay.replayed_cost(answer, cal, saved["n_vocab"], costs, DEFAULT_POLICY, live)
            for key in (answer.category, "all"):
                totals[key][0] += len(answer.tokens)
                totals[key][1] += steps
        out[machine] = {key: n / steps for key, (n, steps) in totals.items()}
    return out


if __name__ == "__main__":
    for text in sys.argv[1:] or ["{}"]:
        print(text)
        for machine, ratios in replay_suite(json.loads(text)).items():
            categories = sorted((k, v) for k, v in ratios.items() if k != "all")
            middle = sorted(v for _, v in categories)
            median = (middle[3] + middle[4]) / 2
            line = " ".join(f"{k} {v:.2f}" for k, v in categories)
            print(f"  {machine}: all {ratios['all']:.2f}, median of categories {median:.2f} | {line}")
