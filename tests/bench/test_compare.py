"""The engine-level comparison on a real model: SmolLM2-135M drafting for itself (fast, every greedy draft kept)."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.bench.compare import NEAR_TIE_LOGITS, Comparison, Run, TopTwo, compare, first_difference
from specchat.engine import Engine, GenerationSettings, SamplingParams

PROMPT = [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}]
GREEDY = GenerationSettings(k=4, sampling=SamplingParams(0.0), seed=0, max_tokens=40)


@pytest.fixture(scope="module")
def tiny(tiny_model):
    engine = Engine.load(tiny_model, tiny_model)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def greedy(tiny) -> tuple[Comparison, int]:
    updates = list(compare(tiny, PROMPT, GREEDY, ["speculative", "lookup"]))  # the same live object each time
    return updates[-1], len(updates)


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2  # one run ended early
    assert first_difference([], []) is None


def test_top_two_of_a_logits_row():
    top = TopTwo.of(np.array([0.5, 3.0, -1.0, 2.75], dtype=np.float32))
    assert (top.best, top.runner_up, top.margin) == (1, 3, pytest.approx(0.25))


@pytest.mark.models
def test_runs_go_plain_first_and_each_streams_to_the_end(tiny, greedy):
    comparison, yields = greedy
    assert [(run.mode, run.k) for run in comparison.runs] == [("plain", 0), ("speculative", 4), ("lookup", 4)]
    assert yields == sum(len(run.tokens) for run in comparison.runs) + 1  # one per token, one at the end
    for run in comparison.runs:
        assert run.done and run.stats.mode == run.mode and run.stats.tokens == len(run.tokens) == 40
        assert run.text == tiny.target.detokenize(run.tokens)
        times = [t for t, _ in run.timeline]
        assert [n for _, n in run.timeline] == list(range(1, 41))
        assert times == sorted(times) and times[0] >= 0 and times[-1] <= run.stats.wall_s
    assert tiny.on_verify is None  # the plain run's logits hook is taken off again


@pytest.mark.models
def test_plain_logits_are_captured_per_token_and_speculation_is_measured(greedy):
    comparison, _ = greedy
    plain, spec, lookup = comparison.runs
    # Greedy plain decoding emits the argmax of the logits the hook saw, step by step.
    assert [top.best for top in comparison.plain_top] == plain.tokens
    assert all(top.margin >= 0 for top in comparison.plain_top)
    # A self-draft fails only at a near-tie that batch shapes flip (test_cli.py says more).
    assert spec.stats.drafted > 0 and spec.stats.acceptance_rate >= 0.7
    for run in (spec, lookup):
        assert comparison.speedup(run) == pytest.approx(run.stats.tokens_per_s / plain.stats.tokens_per_s)


@pytest.mark.models
def test_greedy_runs_agree_with_plain_or_part_at_a_near_tie(tiny, greedy):
    comparison, _ = greedy
    for run in comparison.runs[1:]:
        div = comparison.divergence(run, tiny)
        assert div is None or div.near_tie, (run.mode, div)


@pytest.mark.models
def test_divergence_classifies_a_flip_by_the_plain_runs_own_margin(tiny, greedy):
    comparison, _ = greedy
    plain = comparison.plain
    pos = 7
    top = comparison.plain_top[pos]

    def other(token: int) -> Run:
        return Run("speculative", 4, plain.tokens[:pos] + [token], stats=plain.stats)

    runner_up = comparison.divergence(other(top.runner_up), tiny)
    assert runner_up.position == pos and runner_up.margin == top.margin
    assert runner_up.near_tie == (top.margin < NEAR_TIE_LOGITS)
    assert runner_up.plain_text == tiny.target.detokenize([plain.tokens[pos]])
    assert runner_up.other_text == tiny.target.detokenize([top.runner_up])
    third = next(t for t in range(10) if t not in (top.best, top.runner_up))
    assert comparison.divergence(other(third), tiny).near_tie is False


@pytest.mark.models
def test_sampling_divergence_has_no_near_tie_verdict(tiny):
    settings = GenerationSettings(k=3, sampling=SamplingParams(1.0), seed=5, max_tokens=32)
    *_, comparison = compare(tiny, PROMPT, settings, ["speculative"])
    assert not comparison.greedy and comparison.plain.tokens and comparison.runs[1].tokens
    div = comparison.divergence(comparison.runs[1], tiny)
    if div is not None:
        assert div.margin is None and div.near_tie is None


@pytest.mark.models
def test_closing_a_comparison_midway_leaves_the_engine_usable(tiny):
    gen = compare(tiny, PROMPT, GREEDY, ["speculative"])
    for _ in range(50):  # into the speculative run
        comparison = next(gen)
    assert comparison.runs[1].tokens
    gen.close()
    assert tiny.last_stats.finish_reason == "closed" and tiny.on_verify is None
    *_, again = compare(tiny, PROMPT, GREEDY, ["speculative"])
    assert again.runs[0].tokens == comparison.runs[0].tokens
