"""`auto` mode: per verify step, draft with whatever the cost model says is fastest here, or not at all.

Sources: prompt lookup (costs nothing, one-hot drafts), the draft model (costs c per token), or none. Each
source's acceptance is tracked per draft position as it happens; the step's draft length maximizes
E(k) / (k c + r(k+1)) with this machine's calibrated r(n) and c. A source that would lose is not used, and is
probed again now and then (with a doubling interval after each failed probe) in case the text turns
predictable.
"""

from __future__ import annotations

import numpy as np

from specchat.engine.calibration import K_MAX, Calibration
from specchat.engine.costmodel import expected_tokens_by_position, interpolate_r
from specchat.engine.drafters import Drafter, LookupDrafter, ModelDrafter
from specchat.engine.sampling import SamplingParams

# Speculate only for an expected gain of at least 5%: calibration and acceptance estimates are noisy, and a
# wrong bet costs a whole verify batch.
MIN_GAIN = 1.05


class AcceptanceTracker:
    """P(draft i accepted | drafts before it accepted), per position: decayed counts over a prior."""

    def __init__(self, prior: float, weight: float = 2.0, decay: float = 0.9, k_max: int = K_MAX):
        self.hits = np.full(k_max, prior * weight)
        self.tries = np.full(k_max, weight)
        self.decay = decay

    def rates(self, k: int) -> list[float]:
        return (self.hits[:k] / self.tries[:k]).tolist()

    def update(self, n_drafted: int, n_accepted: int) -> None:
        seen = min(n_accepted + 1, n_drafted)  # positions past the first rejection were never judged
        self.hits[:seen] *= self.decay
        self.tries[:seen] *= self.decay
        self.hits[:n_accepted] += 1
        self.tries[:seen] += 1


class Source:
    """One way of drafting, with its acceptance and its cost per draft token in target steps."""

    def __init__(self, name: str, cost: float, prior: float):
        self.name, self.cost = name, cost
        self.tracker = AcceptanceTracker(prior)
        self.probe_every, self.since_probe = 8, 0

    def speedups(self, r, k_max: int) -> list[float]:
        """Expected speedup over plain decoding for draft lengths 1..k_max."""
        rates = self.tracker.rates(k_max)
        return [expected_tokens_by_position(rates[:k]) / (k * self.cost + r(k + 1)) for k in range(1, k_max + 1)]

    def plan(self, r, k_max: int) -> tuple[int, float]:
        """The best draft length and its expected speedup; (0, 1.0) when no length gains MIN_GAIN."""
        s = self.speedups(r, k_max)
        k = int(np.argmax(s)) + 1
        return (k, s[k - 1]) if s[k - 1] >= MIN_GAIN else (0, 1.0)

    def ceiling(self, r, k_max: int) -> float:
        """The speedup even perfect acceptance could give: below 1, this source can never pay here."""
        return max((k + 1) / (k * self.cost + r(k + 1)) for k in range(1, k_max + 1))

    def probe_due(self) -> bool:
        self.since_probe += 1
        return self.since_probe >= self.probe_every

    def observe(self, n_drafted: int, n_accepted: int, probing: bool) -> None:
        self.tracker.update(n_drafted, n_accepted)
        if probing:
            self.since_probe = 0
            self.probe_every = 8 if n_accepted else min(self.probe_every * 2, 512)


class AutoDrafter(Drafter):
    def __init__(self, calibration: Calibration, lookup: LookupDrafter, model: ModelDrafter | None):
        super().__init__(lookup.n_vocab)
        self.r = interpolate_r(calibration.r)
        self.lookup, self.model = lookup, model
        self.lookup_source = Source("prompt lookup", cost=0.0, prior=0.8)
        self.model_source = Source("draft model", cost=calibration.c or 0.0, prior=0.7) if model else None
        self.name = "auto: starting"
        self._last: tuple[Source | None, bool] = (None, False)
        if model is not None:
            model.stop_rule = self._worth_another

    def prefill(self, context: list[int]) -> None:
        if self.model is not None and self.model_source.ceiling(self.r, K_MAX) > MIN_GAIN:
            self.model.prefill(context)

    def propose(self, context, k, params: SamplingParams, rng):
        self._last = (None, False)
        if k <= 0:
            return super().propose(context, k, params, rng)
        found = self.lookup.find(context, k)
        if found:
            step = self._try(self.lookup_source, len(found), lambda n: self.lookup.propose(context, n, params, rng))
            if step is not None:
                return step
        if self.model_source is not None:
            step = self._try(self.model_source, k, lambda n: self.model.propose(context, n, params, rng))
            if step is not None:
                return step
        self.name = self._explain_plain(k)
        return super().propose(context, k, params, rng)

    def _try(self, source: Source, k_max: int, draft):
        k, s = source.plan(self.r, k_max)
        # Probe only a source that could pay at all here, and only now and then.
        probing = k == 0 and source.ceiling(self.r, k_max) > MIN_GAIN and source.probe_due()
        if k == 0 and not probing:
            return None
        self._last = (source, probing)
        self.name = f"{source.name}, k={max(k, 1)}: " + (
            "probing whether drafts pay again" if probing else f"expected {s:.2f}x plain speed here"
        )
        return draft(max(k, 1))

    def _explain_plain(self, k: int) -> str:
        if self.model_source is None:
            return "plain: no prompt text to look up and no draft model"
        ceiling = self.model_source.ceiling(self.r, k)
        if ceiling <= MIN_GAIN:
            return f"plain: even perfectly accepted drafts would run at {ceiling:.2f}x plain speed here"
        s = max(self.model_source.speedups(self.r, k))
        return f"plain: at the acceptance seen so far, drafts would run at {s:.2f}x plain speed"

    def _worth_another(self, n_drafted: int, confidence: float) -> bool:
        """Draft one more token only while the expected speedup still grows.

        confidence: the draft's own probability for its latest token, a better guess of that token's fate
        than the position's average acceptance when the draft is unsure.
        """
        source = self.model_source
        rates = source.tracker.rates(n_drafted + 1)
        rates[n_drafted - 1] = min(rates[n_drafted - 1], confidence)
        now = expected_tokens_by_position(rates[:n_drafted]) / (n_drafted * source.cost + self.r(n_drafted + 1))
        more = expected_tokens_by_position(rates) / ((n_drafted + 1) * source.cost + self.r(n_drafted + 2))
        return more > now

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        source, probing = self._last
        if source is not None and n_drafted:
            source.observe(n_drafted, n_accepted, probing)
