"""One prompt, one seed, through plain decoding and then each speculative mode: what speculation buys.

The runs go one after the other so they never share the CPU. The plain run is the reference: its target
logits (seen through engine.on_verify) tell, for greedy decoding, whether the first token where another run's
text differs was a near-tie that llama.cpp's batch-shape numerics can flip (design.md, "Numerics").
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from specchat.engine import FIXED_K_MODES, Engine, GenerationSettings, Stats, VerifyStep

# Largest top-2 logit margin still called a near-tie: batch-shape differences move margins by less than this. How
# much depends on the CPU and the model: 0.26 for the Qwen 1.5B and 0.42-0.69 for SmolLM2-135M on an AMD EPYC here
# (single decodes against batches of 2-5, over 200-1700 positions of text; 0.25 held on an Intel Xeon).
NEAR_TIE_LOGITS = 0.75


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where the token sequences differ (one ending early counts); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class TopTwo:
    """The target's best and runner-up tokens at one plain step, and how far apart their raw logits are."""

    best: int
    runner_up: int
    margin: float

    @classmethod
    def of(cls, row: np.ndarray) -> TopTwo:
        runner_up, best = np.argpartition(row, -2)[-2:]
        return cls(int(best), int(runner_up), float(row[best] - row[runner_up]))


@dataclass
class Run:
    mode: str
    k: int
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (generation seconds, tokens so far)
    stats: Stats | None = None

    @property
    def done(self) -> bool:
        return self.stats is not None and self.stats.finish_reason is not None


@dataclass(frozen=True)
class Divergence:
    position: int  # token index of the first difference from the plain run
    plain_text: str  # that token's text in each run ('' where a run had already ended)
    other_text: str
    margin: float | None  # the plain run's top-2 logit margin there (greedy only)
    near_tie: bool | None  # greedy: the other run took the runner-up of a margin under NEAR_TIE_LOGITS


@dataclass
class Comparison:
    runs: list[Run]  # runs[0] is plain decoding
    greedy: bool
    plain_top: list[TopTwo] = field(default_factory=list)  # per plain token

    @property
    def plain(self) -> Run:
        return self.runs[0]

    def speedup(self, run: Run) -> float | None:
        plain = self.plain.stats
        if run.stats is None or plain is None or not plain.tokens_per_s:
            return None
        return run.stats.tokens_per_s / plain.tokens_per_s

    def divergence(self, run: Run, engine: Engine) -> Divergence | None:
        """Where run first departs from plain decoding; None while either is running or if the texts agree."""
        if not (run.done and self.plain.done) or run is self.plain:
            return None
        pos = first_difference(self.plain.tokens, run.tokens)
        if pos is None:
            return None

        def token_text(tokens: list[int]) -> str:
            return engine.target.detokenize(tokens[pos : pos + 1])

        margin = near_tie = None
        if self.greedy and pos < len(self.plain_top) and pos < len(run.tokens):
            top = self.plain_top[pos]
            margin = top.margin
            near_tie = top.runner_up == run.tokens[pos] and margin < NEAR_TIE_LOGITS
        return Divergence(pos, token_text(self.plain.tokens), token_text(run.tokens), margin, near_tie)


def compare(
    engine: Engine, messages: Sequence[dict], settings: GenerationSettings, modes: Sequence[str]
) -> Iterator[Comparison]:
    """Run plain decoding, then each of modes, with the same prompt and settings; yield after every token.

    The yielded Comparison is live (the same object throughout). The caller holds engine.lock.
    """
    runs = [Run("plain", 0), *(Run(mode, settings.k if mode in FIXED_K_MODES else 0) for mode in modes)]
    comparison = Comparison(runs=runs, greedy=settings.sampling.greedy)
    previous_hook = engine.on_verify

    def record_plain_step(step: VerifyStep) -> None:
        comparison.plain_top.append(TopTwo.of(step.logits[0]))

    for run in comparison.runs:
        engine.on_verify = record_plain_step if run is comparison.plain else previous_hook
        gen = engine.chat(messages, replace(settings, mode=run.mode))
        try:
            for event in gen:
                stats = run.stats = event.stats
                run.tokens.append(event.token)
                run.text += event.text
                # Same clock as Stats.wall_s: generation only, so prompt caching between runs does not skew it.
                run.timeline.append((time.perf_counter() - stats.started - stats.prompt_s, len(run.tokens)))
                yield comparison
        finally:
            gen.close()
            engine.on_verify = previous_hook
        if run.stats is None:  # nothing was generated; keep the finished stats for the summary
            run.stats = engine.last_stats
    yield comparison
