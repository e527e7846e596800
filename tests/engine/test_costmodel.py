"""The cost model and the adaptive choices it drives, as pure functions."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import DESIGN_R as CPU_R
from specchat.engine.adaptive import AcceptanceTracker, AutoDrafter, LiveCosts, auto_lookup
from specchat.engine.calibration import K_LONG, K_MAX, Calibration
from specchat.engine.costmodel import (
    NOT_MEASURED,
    best_k,
    expected_speedup,
    expected_text,
    expected_tokens,
    expected_tokens_by_length,
    interpolate_r,
    speedup,
    speedups,
)
from specchat.engine.drafters import RESUME_WINDOW, SEPARATOR, EarlierAnswers, LookupDrafter, ModelDrafter
from specchat.engine.llama_backend import BackendConfig, LlamaModel
from specchat.engine.policy import DEFAULT_POLICY, AutoPolicy
from specchat.engine.sampling import SamplingParams

GPU_R = {n: 1.0 + 0.02 * (n - 1) for n in range(2, K_MAX + 2)}
# fmt: off
# Measured on two Xeon cores: llama.cpp takes a batch 4 or 16 tokens at a time, so 16 cost little more than 8.
BLOCKY_R = {2: 1.68, 3: 2.11, 4: 1.73, 5: 2.19, 6: 2.99, 7: 3.35, 8: 3.4, 9: 3.8, 10: 4.44, 11: 4.9, 12: 4.3,
            13: 5.4, 14: 5.4, 15: 5.3, 16: 4.3}

# Calibrated on two AMD EPYC cores (AVX-512): a batch costs nearly a step a token, but for 16 at once.
EPYC_R = {2: 1.99, 3: 2.61, 4: 3.27, 5: 3.81, 6: 4.68, 7: 5.76, 8: 7.41, 9: 8.6, 10: 8.48, 11: 8.99, 12: 9.43,
          13: 9.87, 14: 10.15, 15: 10.22, 16: 8.2}
# Calibrated on two AMD EPYC Zen 5 cores (family 26, AVX-512): the same shape, 16 a little cheaper.
ZEN5_R = {2: 1.95, 3: 2.67, 4: 3.17, 5: 3.92, 6: 4.63, 7: 5.33, 8: 5.92, 9: 6.34, 10: 7.02, 11: 7.28, 12: 7.0,
          13: 7.71, 14: 8.03, 15: 8.36, 16: 6.75}
# The same machine another day, with a batch of 32: 0.30 steps a token against 0.33 for 16.
ZEN5_LONG_R = {2: 1.82, 3: 2.42, 4: 3.04, 5: 3.71, 6: 4.5, 7: 5.13, 8: 5.38, 9: 5.5, 10: 5.8, 11: 5.98, 12: 6.01,
               13: 5.99, 14: 6.75, 15: 6.54, 16: 5.36, 32: 9.58}
# The 7B-cost target (Qwen2.5-Coder 1.5B + 108 identity blocks, benchmarks/cost_shaped.py) with the 0.5B draft's
# CPU copy on two Xeon cores (issue 28): a draft token costs an eighth of a target step.
COST_SHAPED_7B_R = {2: 1.41, 4: 1.71, 8: 3.13}
# fmt: on


def test_expected_tokens_matches_its_series():
    for alpha in (0.0, 0.3, 0.72, 0.9):
        for k in range(6):
            assert expected_tokens(alpha, k) == pytest.approx(sum(alpha**i for i in range(k + 1)))
        assert expected_tokens_by_length([alpha] * 5) == pytest.approx([expected_tokens(alpha, k) for k in range(1, 6)])
    # Per position: the second draft is judged only if the first passed.
    assert expected_tokens_by_length([0.5, 0.2]) == pytest.approx([1.5, 1.6])
    assert expected_tokens(1.0, 4) == 5


def test_speedups_by_position_agree_with_one_acceptance_for_all():
    r = interpolate_r(CPU_R)
    assert speedups([0.7] * 6, 0.3, r) == pytest.approx([speedup(0.7, k, 0.3, r) for k in range(1, 7)])
    # A later position that never passes adds nothing, and the longer batch costs more.
    assert speedups([0.9, 0.0, 0.9], 0.0, r) == pytest.approx([1.9 / r(2), 1.9 / r(3), 1.9 / r(4)])


def test_interpolated_r_hits_measured_points_and_extends_the_last_slope():
    r = interpolate_r(CPU_R)
    assert r(1) == 1.0 and r(2) == 1.61 and r(9) == 6.95
    assert r(6) == pytest.approx(3.14 + (6.95 - 3.14) / 4)
    assert r(11) == pytest.approx(6.95 + 2 * (6.95 - 3.14) / 4)


def test_design_numbers_say_a_half_cost_draft_loses_on_cpu_and_wins_on_gpu():
    """design.md: 4.1 tokens per iteration at k=4 (alpha ~0.9) still ran at 0.75-0.82x on two cores."""
    assert expected_tokens(0.9, 4) == pytest.approx(4.1, abs=0.01)
    assert 0.75 < speedup(0.9, 4, 0.5, interpolate_r(CPU_R)) < 0.82
    k, s = best_k(0.8, 0.5, interpolate_r(CPU_R), k_max=8)
    assert (k, s) == (0, 1.0)
    k, s = best_k(0.8, 0.1, interpolate_r(GPU_R), k_max=8)
    assert k >= 3 and s > 2


def test_tracker_learns_per_position_acceptance():
    t = AcceptanceTracker(prior=0.5, weight=1.0)
    for _ in range(50):
        t.update(4, 2)  # positions 1-2 accepted, 3 rejected, 4 never judged
    rates = t.rates(4)
    assert rates[0] > 0.95 and rates[1] > 0.95 and rates[2] < 0.05
    assert rates[3] == pytest.approx(0.5)


def test_positions_never_drafted_borrow_what_the_later_positions_showed():
    copying = AcceptanceTracker(prior=0.4, later_prior=0.8)
    chance = AcceptanceTracker(prior=0.4, later_prior=0.8)
    for _ in range(30):
        copying.update(3, 3)  # a copy in progress: every 3-token draft passes
        chance.update(3, 1)  # chance repeats: the first token passes, the second never
    assert min(copying.rates(7)[3:]) > 0.9, "a longer draft of the copy looks as good as the short ones were"
    assert max(chance.rates(8)[3:]) < 0.5
    # Not much longer: positions past twice the deepest judged keep their prior until drafts reach further.
    assert copying.rates(15)[7:] == [0.8] * 8
    for _ in range(3):
        copying.update(7, 7)
    assert min(copying.rates(15)[7:]) > 0.9


def test_a_copy_resumes_after_an_edit_from_where_it_left_off():
    drafter = auto_lookup(100)
    # The input holds the pair (50, 51) twice; the output copies the second part, edits one token, goes on.
    prompt = [50, 51, 1, 2, 3] + [10, 11, 12, 13, 14, 50, 51, 15, 16, 17]
    assert drafter.find(prompt + [10, 11], 3) == [12, 13, 14]
    drafter.observe(3, 3)  # accepted; then the target inserted 99 before the copy went on with (50, 51)
    assert drafter.find(prompt + [10, 11, 12, 13, 14, 99, 50, 51], 3) == [15, 16, 17]
    assert drafter.resuming and drafter.match_len == 2
    fresh = auto_lookup(100)  # no copy before it: the earliest occurrence
    assert fresh.find(prompt + [7, 50, 51], 3) == [1, 2, 3] and not fresh.resuming


def lookup_by_definition(context: list[int], k: int, n_min: int, n_max: int, copied_to: int) -> tuple[list[int], int]:
    """Prompt lookup spelled out: the longest earlier match of the context's end (n_min to n_max tokens), the one
    just past the latest accepted copy if any, else the earliest; its continuation and where that begins."""
    size, n_max = len(context), min(n_max, len(context) - 1)
    if n_min > n_max:
        return [], -1
    lengths = {}
    for end in range(n_min, size):
        m = 0
        while m < min(n_max, end) and context[end - m - 1] == context[size - m - 1]:
            m += 1
        if m >= n_min:
            lengths[end] = m
    if not lengths:
        return [], -1
    longest = [end for end, m in lengths.items() if m == max(lengths.values())]
    near = [end for end in longest if copied_to < end <= copied_to + RESUME_WINDOW]
    start = (near or longest)[0]
    return context[start : start + k], start


@settings(max_examples=400, deadline=None)
@given(
    first=st.lists(st.integers(0, 3), min_size=1, max_size=60),
    more=st.lists(st.integers(0, 3), max_size=20),
    n_min=st.integers(1, 3),
    extra=st.integers(0, 4),
    k=st.integers(1, 8),
    accepted=st.integers(0, 8),
)
def test_lookup_finds_what_its_definition_says(first, more, n_min, extra, k, accepted):
    drafter = LookupDrafter(4, ngram_max=n_min + extra, ngram_min=n_min)
    drafts, start = lookup_by_definition(first, k, n_min, n_min + extra, copied_to=-RESUME_WINDOW - 1)
    assert drafter.find(first, k) == drafts
    accepted = min(accepted, len(drafts))
    drafter.observe(len(drafts), accepted)  # the target took the first `accepted`: the copy ends there
    copied_to = start + accepted if drafts and accepted else -RESUME_WINDOW - 1
    drafts, _ = lookup_by_definition(first + more, k, n_min, n_min + extra, copied_to)
    assert drafter.find(first + more, k) == drafts


def earlier_by_definition(answers, asked, context, k, n_min, n_max, max_tokens) -> list[int]:
    """Copying from earlier answers spelled out: the newest answers that fit in max_tokens, less those to the prompt
    asked now; the longest match of the context's end (n_min to n_max tokens, shorter than the context) in any of
    them; of its occurrences that an answer goes on after, the newest; what follows it there, up to k tokens."""
    kept, size = [], 0
    for prompt, answer in reversed([(p, a) for p, a in answers if len(a) <= max_tokens]):
        size += len(answer)
        if size > max_tokens:
            break
        kept.insert(0, (prompt, answer))
    others = [answer for prompt, answer in kept if prompt != asked]
    for n in range(min(n_max, len(context) - 1), n_min - 1, -1):
        ends = [(a, end) for a in others for end in range(n, len(a) + 1) if a[end - n : end] == context[-n:]]
        if ends:
            going_on = [a[end : end + k] for a, end in ends if end < len(a)]
            return going_on[-1] if going_on else []
    return []


@settings(max_examples=400, deadline=None)
@given(
    answers=st.lists(st.tuples(st.integers(0, 2), st.lists(st.integers(0, 3), min_size=1, max_size=30)), max_size=6),
    context=st.lists(st.integers(0, 3), min_size=1, max_size=12),
    n_min=st.integers(1, 3),
    extra=st.integers(0, 3),
    k=st.integers(1, 8),
    max_tokens=st.integers(1, 80),
)
def test_earlier_answers_offer_what_their_definition_says(answers, context, n_min, extra, k, max_tokens):
    with tempfile.TemporaryDirectory() as folder:
        kept = Path(folder) / "answers.json"
        pool = EarlierAnswers(max_tokens)
        pool.keep_in(kept, n_vocab=4)
        for prompt, answer in answers:
            pool.add([prompt], answer)
        # The next process, reading what this one kept, offers the same.
        reread = EarlierAnswers(max_tokens)
        reread.keep_in(kept, n_vocab=4)
        for offered in (pool, reread):
            corpus = offered.for_prompt([0])
            copied, n = corpus.find(context, k, n_min, n_min + extra) if corpus is not None else ([], 0)
            assert copied == earlier_by_definition(answers, 0, context, k, n_min, n_min + extra, max_tokens)
            assert (n >= n_min) == bool(copied)
        pool.clear()
        assert pool.for_prompt([0]) is None
        reread = EarlierAnswers(max_tokens)
        reread.keep_in(kept, n_vocab=4)
        assert reread.for_prompt([0]) is None


@pytest.mark.parametrize(
    "kept",
    [
        "",
        '{"answers": [["a", [1, 2',  # cut short
        '{"answers": [["a", [1, 200]]]}',  # a token past the vocabulary
        '{"answers": [["a", [1, -1]]]}',
        '{"answers": [["a", [1.5]]]}',
        '{"answers": 3}',
        '{"answers": [[1, [1]]]}',
        "[1, 2]",
        "\udcff",
    ],
)
def test_kept_answers_that_cannot_be_read_start_afresh(tmp_path, kept):
    path = tmp_path / "answers.json"
    path.write_text(kept, errors="surrogateescape")
    pool = EarlierAnswers(100)
    pool.keep_in(path, n_vocab=100)
    assert pool.for_prompt([0]) is None
    pool.add([1], [7, 8, 9])
    reread = EarlierAnswers(100)
    reread.keep_in(path, n_vocab=100)
    assert reread.for_prompt([0]).tokens == [SEPARATOR, 7, 8, 9]


def test_answers_kept_where_they_cannot_be_written_still_serve_this_process(tmp_path):
    (tmp_path / "a file").write_text("")
    pool = EarlierAnswers(100)
    pool.keep_in(tmp_path / "a file" / "answers.json", n_vocab=100)
    pool.add([1], [7, 8, 9])
    assert pool.for_prompt([0]).tokens == [SEPARATOR, 7, 8, 9]


def judge(drafter: AutoDrafter, n_drafted: int, n_accepted: int) -> None:
    """The target's verdict, with steps taking exactly what the calibration says."""
    drafter.observe(n_drafted, n_accepted, 0.0, drafter.costs.t1 * drafter.r(n_drafted + 1))


def auto(r, c, policy: AutoPolicy = DEFAULT_POLICY) -> AutoDrafter:
    return AutoDrafter(Calibration(t1=0.07, r=r, c=c, key="test"), auto_lookup(100, policy), None, policy=policy)


def test_auto_uses_lookup_on_repeated_text_and_stops_when_it_fails():
    rng = np.random.default_rng(0)
    drafter = auto(CPU_R, None)
    context = list(range(10, 40)) + list(range(10, 15))  # the output repeats the prompt
    proposal = drafter.propose(context, 8, SamplingParams(), rng)
    tokens = proposal.tokens
    assert tokens and tokens[0] == 15 and proposal.rows is None  # one-hot drafts: verify() needs no rows
    assert proposal.reason.startswith("prompt lookup")
    for _ in range(3):  # the target keeps rejecting: lookup stops paying
        judge(drafter, len(tokens), 0)
    proposal = drafter.propose(context, 8, SamplingParams(), rng)
    assert proposal.tokens == [] and proposal.reason.startswith("plain")


def test_auto_trusts_a_short_match_where_a_copy_resumes_not_elsewhere():
    rng = np.random.default_rng(0)
    drafter = auto(CPU_R, None)
    prompt = [50, 51, 1, 2, 3, 10, 11, 12, 13, 14, 50, 51, 15, 16, 17]
    for _ in range(3):  # pairs repeated by chance: the target rejects them
        tokens = drafter.propose(prompt + [7, 50, 51], 8, SamplingParams(), rng).tokens
        judge(drafter, len(tokens), 0)
    assert drafter.propose(prompt + [7, 50, 51], 8, SamplingParams(), rng).tokens == []
    tokens = drafter.propose(prompt + [10, 11, 12, 13], 8, SamplingParams(), rng).tokens
    assert tokens[0] == 14
    judge(drafter, len(tokens), 1)  # 14 accepted; the target then inserted 99 before going on with (50, 51)
    proposal = drafter.propose(prompt + [10, 11, 12, 13, 14, 99, 50, 51], 8, SamplingParams(), rng)
    assert proposal.tokens[:3] == [15, 16, 17] and "copy resuming" in proposal.reason


def test_a_copy_in_progress_grows_its_drafts_to_the_cheap_long_batch():
    rng = np.random.default_rng(0)
    drafter = auto(BLOCKY_R, None)
    source = list(range(10, 99))
    out = source[:10]  # the answer copies its input
    lengths = []
    while len(out) < 70:
        tokens = drafter.propose(source + out, K_MAX, SamplingParams(), rng).tokens
        assert tokens == source[len(out) : len(out) + len(tokens)]
        judge(drafter, len(tokens), len(tokens))
        lengths.append(len(tokens))
        out = source[: len(out) + len(tokens) + 1]
    # First the cheapest short batch (r(4) = 1.73 for 4 tokens); once the copy has shown it goes on, 15 drafts
    # (a batch of 16 at 4.3 steps) are worth more than 3, and far more than 7 (r(8) = 3.4).
    assert lengths[0] == 3 and lengths[-1] == K_MAX and 7 not in lengths, lengths


def test_where_only_the_long_batch_pays_a_copy_in_progress_drafts_into_it_and_a_shorter_match_does_not():
    rng = np.random.default_rng(0)
    drafter = auto(EPYC_R, None)
    source = list(range(10, 99))
    # 8 tokens repeated: a copy, but its 15 next tokens are too uncertain a bet for a batch costing 8.2 steps.
    assert drafter.propose([*source, *source[:8]], K_MAX, SamplingParams(), rng).tokens == []
    proposal = drafter.propose([*source, *source[:16]], K_MAX, SamplingParams(), rng)
    assert proposal.tokens == source[16 : 16 + K_MAX] and "16-gram or longer" in proposal.reason


def copy_lengths(r: dict[int, float], source_len: int = 200) -> list[int]:
    """The draft lengths auto takes along an answer that copies its input to the end, every draft accepted."""
    rng = np.random.default_rng(0)
    drafter = auto(r, None)
    source = list(range(10, 10 + source_len))
    out = source[:16]  # a copy in progress
    lengths = []
    while len(out) < len(source):
        room = len(source) - len(out) - 1  # as the loop leaves the last token to the target
        tokens = drafter.propose(source + out, min(K_LONG, room), SamplingParams(), rng).tokens
        assert tokens == source[len(out) : len(out) + len(tokens)]
        judge(drafter, len(tokens), len(tokens))
        lengths.append(len(tokens))
        out = source[: len(out) + len(tokens) + 1]
    return lengths


def test_a_copy_in_progress_drafts_the_long_batch_where_it_costs_less_a_token():
    lengths = copy_lengths(ZEN5_LONG_R)
    assert lengths[0] == K_MAX and K_LONG in lengths, lengths
    # Batch sizes between 16 and 32 were never measured (they cost more a token than either): never drafted, even
    # where the answer has room for only 19 more drafts after its first 16 tokens.
    assert all(n <= K_MAX or n == K_LONG for n in lengths), lengths
    assert copy_lengths(ZEN5_LONG_R, source_len=16 + K_MAX + 1 + 20)[:2] == [K_MAX, K_MAX]


def test_a_copy_in_progress_stays_at_16_where_32_cost_twice_as_much_or_were_not_measured():
    assert max(copy_lengths({**BLOCKY_R, 32: 9.0})) == K_MAX  # 0.27 steps a token at 16, 0.28 at 32
    assert max(copy_lengths(ZEN5_R)) == K_MAX  # a calibration from before batches of 32 were measured


def test_plain_steps_teach_lookup_that_a_copy_goes_on():
    rng = np.random.default_rng(0)
    source = list(range(10, 99))
    out = source[:2]  # the answer starts copying its input, decoded plainly while the match is short
    drafter = auto(ZEN5_R, None)
    while not (tokens := drafter.propose(source + out, K_MAX, SamplingParams(), rng).tokens):
        judge(drafter, 0, 0)
        out = source[: len(out) + 1]  # the target's token: the one the undrafted lookup proposal had next
    # Each plain step confirmed the copy's next token, and a copy's match drafts before it reaches 16 tokens,
    assert len(out) < 16 and tokens == source[len(out) : len(out) + len(tokens)]
    # where at the priors alone only the 16-gram band pays at these costs.
    assert auto(ZEN5_R, None).propose(source + out, K_MAX, SamplingParams(), rng).tokens == []


def rate_after_plain_steps_leave_a_match(policy: AutoPolicy) -> float:
    """The 8- to 15-gram band's first-position rate after plain steps where such repeats were not copied on."""
    rng = np.random.default_rng(0)
    source = list(range(10, 99))
    drafter = auto(ZEN5_R, None, policy)
    for n in range(8, 16):  # 8- to 15-token repeats whose next token the target never copies
        assert drafter.propose(source + source[:n], K_MAX, SamplingParams(), rng).tokens == []
        judge(drafter, 0, 0)
        drafter.propose(source + source[:n] + [7], K_MAX, SamplingParams(), rng)
        judge(drafter, 0, 0)
    return drafter.lookup_sources[8].tracker.rates(1)[0]


def test_plain_steps_that_leave_a_match_keep_lookup_from_drafting_it():
    assert rate_after_plain_steps_leave_a_match(DEFAULT_POLICY) < 0.5 < DEFAULT_POLICY.lookup_priors[3][1]
    # A policy without shadow judging learns nothing from plain steps.
    assert rate_after_plain_steps_leave_a_match(replace(DEFAULT_POLICY, judge_shadow=False)) == pytest.approx(0.9)


def test_a_new_turn_does_not_judge_what_lookup_proposed_in_the_last_one():
    rng = np.random.default_rng(0)
    source = list(range(10, 99))
    drafter = auto(ZEN5_R, None)
    assert drafter.propose(source + source[:8], K_MAX, SamplingParams(), rng).tokens == []  # proposed 18, not drafted
    before = drafter.lookup_sources[8].tracker.rates(1)
    turn = [*source, *source[:8], 7, 8, 9]  # the answer ended; the next prompt's text follows, not the proposal
    drafter.prefill(turn)
    drafter.propose(turn, K_MAX, SamplingParams(), rng)
    assert drafter.lookup_sources[8].tracker.rates(1) == before


def test_a_likely_chance_repeat_drafts_short_even_where_batches_are_free():
    rng = np.random.default_rng(0)
    drafter = auto(GPU_R, None)
    prompt = [50, 51, *range(60, 90)]
    tokens = drafter.propose(prompt + [7, 50, 51], K_MAX, SamplingParams(), rng).tokens  # a 2-token match
    assert tokens == list(range(60, 60 + DEFAULT_POLICY.chance_k_max))
    tokens = drafter.propose(prompt + list(range(60, 70)), K_MAX, SamplingParams(), rng).tokens  # a copy
    assert len(tokens) > DEFAULT_POLICY.chance_k_max and tokens == list(range(70, 70 + len(tokens)))


def probes_where_drafts_never_pay(policy: AutoPolicy, n_steps: int) -> tuple[list[int], float, float, AutoDrafter]:
    """The steps that drafted, the time spent and what drafting lost against plain steps, where every draft fails."""
    rng = np.random.default_rng(0)
    drafter = auto(CPU_R, None, policy)
    context = list(range(10, 40)) + list(range(10, 15))  # a match at every step, and the target rejects it all
    spent = lost = 0.0
    probes = []
    for step in range(n_steps):
        tokens = drafter.propose(context, 8, SamplingParams(), rng).tokens
        step_s = drafter.costs.t1 * drafter.r(len(tokens) + 1)
        judge(drafter, len(tokens), 0)
        spent += step_s
        lost += step_s - drafter.costs.t1  # each step gave one token, as a plain step would have
        if tokens:
            probes.append(step)
    return probes, spent, lost, drafter


def test_probes_where_drafts_never_pay_lose_at_most_the_exploration_share():
    probes, spent, lost, drafter = probes_where_drafts_never_pay(DEFAULT_POLICY, 3000)
    assert len(probes) >= 5 and probes[-1] > 2500  # it keeps looking, to the end
    # The priors' first bets (a step or two) plus the budget: a share of the time, split among the sources.
    share = DEFAULT_POLICY.explore_share
    assert lost <= share * spent + 3 * drafter.costs.t1
    assert lost >= share / len(drafter.sources) * spent * 0.5
    # A policy with no probing budget stops at the priors' first bets.
    probes, _, _, _ = probes_where_drafts_never_pay(replace(DEFAULT_POLICY, explore_share=0.0), 3000)
    assert probes and probes[-1] < 5, probes


def test_a_policy_is_data_changed_by_name():
    policy = DEFAULT_POLICY.with_changes('{"explore_share": 0.1, "resume_prior": [0.5, 0.6]}')
    assert policy == replace(DEFAULT_POLICY, explore_share=0.1, resume_prior=(0.5, 0.6))
    assert DEFAULT_POLICY.with_changes("{}") == DEFAULT_POLICY
    with pytest.raises(ValueError, match="no field explore"):
        DEFAULT_POLICY.with_changes('{"explore": 0.1}')
    with pytest.raises(ValueError, match="bands"):
        DEFAULT_POLICY.with_changes('{"lookup_priors": [[4, 0.8, 0.8], [2, 0.4, 0.8]]}')


def test_auto_drafts_by_the_bands_and_lengths_its_policy_gives():
    rng = np.random.default_rng(0)
    policy = replace(DEFAULT_POLICY, lookup_priors=((3, 0.9, 0.9), (6, 0.95, 0.95)), copy_match=6, chance_k_max=3)
    drafter = auto(GPU_R, None, policy)
    prompt = [50, 51, 52, *range(60, 90)]
    assert drafter.propose(prompt + [7, 51, 52], K_MAX, SamplingParams(), rng).tokens == []  # 2 tokens: no band
    proposal = drafter.propose(prompt + [7, 50, 51, 52], K_MAX, SamplingParams(), rng)
    assert proposal.tokens == [60, 61, 62] and "3- to 5-gram" in proposal.reason
    proposal = drafter.propose(prompt + list(range(60, 66)), K_MAX, SamplingParams(), rng)
    assert len(proposal.tokens) > 3 and "6-gram or longer" in proposal.reason


@pytest.fixture(scope="module")
def draft_model(tiny_model):
    model = LlamaModel(tiny_model, BackendConfig(n_ctx=512))
    yield model
    model.close()


@pytest.mark.models
def test_live_costs_follow_the_steps_actually_measured(draft_model):
    drafter = AutoDrafter(Calibration(0.1, CPU_R, 0.5, "k"), auto_lookup(100), ModelDrafter(draft_model, 100))
    assert drafter.r(4) == pytest.approx(2.49) and drafter.costs.c == pytest.approx(0.5)
    for _ in range(40):  # batches of 4 turn out to cost 3 steps, draft tokens a fifth of one
        drafter._last = (drafter.model_source, False)
        drafter.observe(3, 3, 3 * 0.02, 0.3)
    assert drafter.r(4) == pytest.approx(3.0, rel=0.01)
    assert drafter.model_source.cost == pytest.approx(0.2, rel=0.01)
    for _ in range(40):  # then the whole machine slows down threefold: ratios stay, t1 follows
        drafter._last = (None, False)
        drafter.observe(0, 0, 0.0, 0.3)
    assert drafter.costs.t1 == pytest.approx(0.3, rel=0.01)
    # The slowdown leaves the ratios as they were; unmeasured, they only relax toward calibration's.
    relaxed = (1 - DEFAULT_POLICY.cost_relax) ** 40
    assert drafter.r(4) == pytest.approx(2.49 + (3.0 - 2.49) * relaxed, rel=0.01)
    assert drafter.r(2) == pytest.approx(1.61)


@pytest.mark.models
def test_the_draft_models_agreement_outlasts_a_run_of_misses_a_lookup_bands_does_not(draft_model):
    cal = Calibration(0.365, COST_SHAPED_7B_R, 0.118, "7b-cost")
    drafter = AutoDrafter(cal, auto_lookup(100), ModelDrafter(draft_model, 100))
    band = drafter.lookup_sources[4]
    for source in (drafter.model_source, band):
        for _ in range(40):
            source.tracker.update(1, 1)
        for _ in range(5):  # the pair's agreement is the pair's; a band's matches change with the text
            source.tracker.update(1, 0)
    assert drafter.model_source.tracker.rates(1)[0] > 0.8 > band.tracker.rates(1)[0]


@pytest.mark.models
def test_a_draft_that_first_reads_context_it_has_not_seen_leaves_the_draft_cost_alone(draft_model):
    cal = Calibration(0.365, COST_SHAPED_7B_R, 0.118, "7b-cost")
    drafter = AutoDrafter(cal, auto_lookup(100), ModelDrafter(draft_model, 100))
    context = list(range(10, 40)) + [50, 10, 11]  # not prefilled: the first draft reads all of it

    def step(context: list[int]) -> int:
        drafts = drafter.propose(context, 8, SamplingParams(), np.random.default_rng(0)).tokens
        assert drafts and drafter._last[0] is drafter.model_source
        drafter.observe(len(drafts), 0, 10 * cal.t1, cal.t1)  # 10 steps' time: most of it the reading
        return drafts[0]

    token = step(context)
    assert drafter.model.caught_up == len(context)
    assert drafter.costs.c == pytest.approx(0.118)
    step([*context, token + 1])  # a step of its own: its draft time is its tokens'
    assert drafter.model.caught_up <= 2 and drafter.costs.c > 1.0


def test_a_cost_measured_while_other_work_ran_is_forgotten_as_steps_go_without_it():
    cal = Calibration(0.3, COST_SHAPED_7B_R, 0.118, "7b-cost")
    costs = LiveCosts(cal)
    costs.observe(4, 4 * cal.t1, 3, 3 * 3.0 * cal.t1)  # one step in another program's burst: r(4) and c look dear
    assert costs.r(4) > 2.0 and costs.c > 0.6
    for _ in range(200):  # then lookup's steps and plain ones, neither measuring them
        costs.observe(16, 4.4 * cal.t1, 0, 0.0)
        costs.observe(1, cal.t1, 0, 0.0)
    assert costs.r(4) == pytest.approx(1.71, rel=0.02) and costs.c == pytest.approx(0.118, rel=0.1)
    assert costs.r(16) > 4.0  # what the steps measure stays measured


@pytest.mark.models
def test_auto_explains_why_it_decodes_plainly(draft_model):
    decoded = draft_model.n_decoded
    drafter = AutoDrafter(Calibration(0.07, CPU_R, 0.5, "k"), auto_lookup(100), ModelDrafter(draft_model, 100))
    proposal = drafter.propose(list(range(10, 30)), 8, SamplingParams(), np.random.default_rng(0))
    assert proposal.tokens == []
    assert draft_model.n_decoded == decoded, "a draft model that cannot pay was asked for tokens"
    assert proposal.reason.startswith("plain: even perfectly accepted drafts would run at 1.00x plain speed here")


@pytest.mark.models
def test_a_chance_repeat_yields_to_a_draft_model_that_promises_more(draft_model):
    def proposed_by(context: list[int], policy: AutoPolicy = DEFAULT_POLICY) -> str:
        cal = Calibration(0.365, COST_SHAPED_7B_R, 0.118, "7b-cost")
        drafter = AutoDrafter(cal, auto_lookup(100, policy), ModelDrafter(draft_model, 100), policy=policy)
        drafter.prefill(context[:-1])
        return drafter.propose(context, 8, SamplingParams(), np.random.default_rng(0)).reason

    prompt = list(range(10, 40))
    chance = prompt + [50, 10, 11]  # a 2-gram seen before: its next token comes back 40% of the time (the prior)
    # A cheap draft model expected to run at 1.62x (3 drafts at auto's prior of 0.88) outbids it (the model drafts, or
    # declines the step where unsure),
    assert proposed_by(chance).startswith(("draft model, k=3: expected 1.62x", "plain: the draft model is only"))
    assert proposed_by(chance, replace(DEFAULT_POLICY, lookup_yields=False)).startswith("prompt lookup (2-gram")
    # while a long match, a likely copy, keeps the step.
    assert proposed_by(prompt + prompt[:16]).startswith("prompt lookup (16-gram or longer match)")


def test_costs_measured_while_the_machine_was_busy_are_kept_plausible():
    # A calibration disturbed by other work: a batch of 4 "cost" 19 steps, more than 4 single steps would.
    drafter = auto({2: 5.1, 3: 5.5, 4: 19.4, 9: 14.9}, None)
    assert [drafter.r(n) for n in (2, 3, 4, 9)] == [2.0, 3.0, 4.0, 9.0]
    for _ in range(20):  # the steps really taken correct it, less the pull back toward calibration between them
        judge(drafter, 0, 0)
        drafter._last = (drafter.lookup_sources[8], False)
        drafter.observe(3, 3, 0.0, 1.7 * drafter.costs.t1)
    assert drafter.r(4) == pytest.approx(1.7, rel=0.07)


def test_the_expected_speedup_takes_the_best_draft_length_at_the_pairs_usual_agreement():
    cal = Calibration(0.365, COST_SHAPED_7B_R, 0.118, "7b-cost")
    k, gain = expected_speedup(cal)
    # At 80%, 3 drafts give 2.95 tokens for 3 x 0.118 + r(4) = 2.06 steps; 2 and 4 drafts pay less.
    assert k == 3 and gain == pytest.approx(2.952 / 2.064, abs=1e-3)
    assert gain == max(speedup(DEFAULT_POLICY.model_agreement, k, 0.118, interpolate_r(cal.r)) for k in range(1, 16))
    assert expected_text(cal) == "auto: about 1.4x here"
    # The agreement and the lengths allowed are the policy's; auto's own starting belief (above it) is not a promise.
    assert expected_speedup(cal, replace(DEFAULT_POLICY, model_agreement=0.9))[1] > gain
    assert expected_speedup(cal, replace(DEFAULT_POLICY, model_prior=0.95))[1] == gain
    assert expected_speedup(cal, replace(DEFAULT_POLICY, k_max=1))[0] == 1


def test_where_the_draft_costs_too_much_nothing_is_promised():
    # The 0.5B draft file at c = 0.62 on a Xeon, 1.5B target: no length pays even at 80%.
    file_drafting = Calibration(0.06, BLOCKY_R, 0.62, "xeon")
    assert expected_speedup(file_drafting) == (0, 1.0)
    assert expected_text(file_drafting).startswith("auto: about 1.0x here (the draft model costs too much")
    # A gain under the policy's threshold is no gain: auto would not draft with the model for it.
    marginal = Calibration(0.06, BLOCKY_R, 0.4, "xeon-copy")
    assert 1.0 < expected_speedup(marginal)[1] < DEFAULT_POLICY.min_gain
    assert expected_text(marginal) == expected_text(file_drafting)
    target_alone = Calibration(0.06, BLOCKY_R, None, "target alone")
    assert expected_text(target_alone) == "auto: prompt lookup only (no draft model)"
    assert expected_text(None) == NOT_MEASURED == "not measured yet (load the pair once)"
