"""The acceptance rule, statistically: whatever the draft, emitted tokens follow p_target exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specchat.engine.sampling import _SAMPLE_BLOCK, ProbabilityRows, SamplingParams, probabilities, sample
from specchat.engine.verify import verify, verify_greedy

V = 12
# Enough draws for each mutant of verify() tried (rejection drawing from the target instead of the residual, the
# ratio inverted, acceptance ignoring the draft's probability, an unclipped residual, the bonus from the wrong row)
# to fail at least one test below, most of them five to eight of the nine.
DRAWS = 10_000


def chi_square_p(counts: np.ndarray, probs: np.ndarray) -> float:
    """p-value of Pearson's chi-square test (Wilson-Hilferty normal approximation, no scipy needed)."""
    support = probs > 0
    assert counts[~support].sum() == 0, f"tokens outside the target's support were emitted: {counts[~support]}"
    n = counts.sum()
    expected = probs[support] * n
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    dof = int(support.sum()) - 1
    if dof == 0:
        return 1.0
    z = ((chi2 / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / np.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


def first_token_distribution(p_draft_row, p_target_rows, k, rng, draws=DRAWS) -> np.ndarray:
    """Histogram of the first emitted token when drafts are drawn from p_draft_row at every position."""
    counts = np.zeros(V, dtype=np.int64)
    p_draft = np.tile(p_draft_row, (k, 1))
    for drafts in rng.choice(V, size=(draws, k), p=p_draft_row).tolist():  # the drafter is not under test here
        n, nxt = verify(drafts, p_draft, p_target_rows, rng)
        counts[drafts[0] if n >= 1 else nxt] += 1
    return counts


def dist(rng, sparsity=0.0) -> np.ndarray:
    p = rng.dirichlet(np.ones(V) * 0.7)
    p[rng.random(V) < sparsity] = 0
    if p.sum() == 0:
        p[rng.integers(V)] = 1
    return p / p.sum()


@pytest.mark.parametrize("case", ["random", "far", "disjoint", "draft_one_hot", "equal"])
def test_first_token_follows_target(case):
    rng = np.random.default_rng(1234)
    p_target = dist(rng)
    p_draft = {
        "random": dist(rng),
        "far": np.roll(p_target, V // 2) ** 4 / (np.roll(p_target, V // 2) ** 4).sum(),
        "disjoint": np.where(p_target < np.median(p_target), 1.0, 0.0),
        "draft_one_hot": np.eye(V)[int(np.argmin(p_target))],
        "equal": p_target.copy(),
    }[case]
    p_draft = p_draft / p_draft.sum()
    if case == "disjoint":
        p_target = np.where(p_draft > 0, 0.0, p_target)
        p_target /= p_target.sum()
    counts = first_token_distribution(p_draft, np.tile(p_target, (3, 1)), k=2, rng=rng)
    assert chi_square_p(counts, p_target) > 1e-3


def test_joint_distribution_of_two_tokens_with_position_dependent_targets():
    """Both emitted positions, the bonus token included, follow the target's conditional laws."""
    rng = np.random.default_rng(7)
    p_target = np.stack([dist(rng), dist(rng)])  # row 1 is the target after any first token (context-free)
    p_draft_row = dist(rng)
    counts = np.zeros((V, V), dtype=np.int64)
    drafts = rng.choice(V, size=DRAWS, p=p_draft_row).tolist()
    following = rng.choice(V, size=DRAWS, p=p_target[1]).tolist()  # what the next iteration would sample
    for d, after in zip(drafts, following):
        n, nxt = verify([d], p_draft_row[None], p_target, rng)
        if n == 1:
            counts[d, nxt] += 1
        else:
            counts[nxt, after] += 1
    joint = np.outer(p_target[0], p_target[1]).ravel()
    # Merge rare cells so every expected count is large enough for the chi-square approximation.
    order = np.argsort(joint)
    rare = order[np.cumsum(joint[order]) < 0.02]
    keep = np.setdiff1d(np.arange(V * V), rare)
    c, p = counts.ravel(), joint
    merged_c = np.append(c[keep], c[rare].sum())
    merged_p = np.append(p[keep], p[rare].sum())
    assert chi_square_p(merged_c, merged_p) > 1e-3


@pytest.mark.parametrize(
    "params",
    [SamplingParams(0.8, top_k=4), SamplingParams(1.3, top_p=0.7), SamplingParams(1.0, min_p=0.2)],
)
def test_with_truncating_transforms(params):
    """Both models through the same transform: the output follows the transformed target, never outside its support."""
    rng = np.random.default_rng(99)
    logits_t, logits_d = rng.normal(size=V) * 2, rng.normal(size=V) * 2
    p_target, p_draft = probabilities(logits_t, params), probabilities(logits_d, params)
    counts = first_token_distribution(p_draft, np.tile(p_target, (2, 1)), k=1, rng=rng)
    assert chi_square_p(counts, p_target.astype(np.float64)) > 1e-3


def test_transforms_keep_what_they_promise():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05]))
    assert np.count_nonzero(probabilities(logits, SamplingParams(1.0, top_k=2))) == 2
    # top-p: the smallest prefix whose mass reaches it (0.5 + 0.2 reaches 0.69, not 0.71).
    assert np.count_nonzero(probabilities(logits, SamplingParams(1.0, top_p=0.69))) == 2
    assert np.count_nonzero(probabilities(logits, SamplingParams(1.0, top_p=0.71))) == 3
    # top-p 0 (OpenAI's API takes it): the most likely token only, at any temperature.
    assert probabilities(logits[::-1], SamplingParams(1.5, top_p=0.0)).tolist() == [0, 0, 0, 0, 1]
    # min-p 0.29: keep p >= 0.145.
    assert np.count_nonzero(probabilities(logits, SamplingParams(1.0, min_p=0.29))) == 3
    p = probabilities(logits, SamplingParams(0.0))
    assert p.tolist() == [1, 0, 0, 0, 0]
    big = np.random.default_rng(0).normal(size=151936).astype(np.float32)
    q = probabilities(big, SamplingParams(0.7, top_p=0.9))
    assert abs(q.sum() - 1) < 1e-4 and np.isfinite(q).all()


@settings(max_examples=200, deadline=None)
@given(
    k=st.integers(0, 5),
    seed=st.integers(0, 2**32 - 1),
    draft_zero=st.booleans(),
)
def test_corners_never_nan_and_stay_in_range(k, seed, draft_zero):
    rng = np.random.default_rng(seed)
    p_target = np.stack([dist(rng, sparsity=0.6) for _ in range(k + 1)])
    p_draft = np.stack([dist(rng, sparsity=0.6) for _ in range(k)]) if k else np.empty((0, V))
    drafts = [int(rng.integers(V)) for _ in range(k)]
    if draft_zero and k:
        p_draft[0, drafts[0]] = 0.0  # a proposal its own distribution gives probability 0
    n, nxt = verify(drafts, p_draft, p_target, rng)
    assert 0 <= n <= k and 0 <= nxt < V
    assert p_target[n, nxt] > 0


def test_sampling_a_vocabulary_sized_vector_follows_it():
    """sample() searches its CDF block by block: tokens sharing blocks, tokens far apart, whole blocks empty."""
    rng = np.random.default_rng(7)
    p = np.zeros(151936, dtype=np.float32)
    picks = np.concatenate([rng.choice(1500, size=V - 3, replace=False), [40_000, 90_001, 151_935 - 7]])
    p[picks] = dist(rng)
    counts = np.bincount([sample(p, rng) for _ in range(DRAWS)], minlength=p.size)[picks]
    assert counts.sum() == DRAWS
    assert chi_square_p(counts, p[picks] / p[picks].sum()) > 1e-3


class FixedDraw:
    def __init__(self, u: float):
        self.u = u

    def random(self) -> float:
        return self.u


@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 3000), seed=st.integers(0, 2**32 - 1))
def test_sample_never_picks_a_token_without_mass(n, seed):
    """Draws at the bottom, at the top of each block sample() searches, and at random: no rounding may land on a
    token without mass (each block's first token has none: where a draw spilling past the block before lands)."""
    rng = np.random.default_rng(seed)
    p = np.where(rng.random(n) < 0.5, rng.random(n) ** 8, 0.0).astype(np.float32)
    p[1 + rng.integers(n - 1)] = 1e-30  # some token has mass, maybe hardly any
    p[::_SAMPLE_BLOCK] = 0.0
    block_cdf = np.cumsum(np.add.reduceat(p, np.arange(0, n, _SAMPLE_BLOCK), dtype=np.float64))
    tops = [np.nextafter(c, 0.0) / block_cdf[-1] for c in block_cdf]
    for draw in (FixedDraw(0.0), FixedDraw(1.0 - 2**-53), *map(FixedDraw, tops), rng):
        assert p[sample(p, draw)] > 0


@settings(max_examples=200, deadline=None)
@given(k=st.integers(0, 5), seed=st.integers(0, 2**32 - 1))
def test_no_draft_rows_reads_as_one_hot_rows(k, seed):
    """Prompt lookup passes no rows: verify must decide exactly as with explicit one-hot rows, draw for draw."""
    rng = np.random.default_rng(seed)
    p_target = np.stack([dist(rng, sparsity=0.6) for _ in range(k + 1)])
    drafts = [int(rng.integers(V)) for _ in range(k)]
    one_hot_rows = np.eye(V)[drafts] if k else np.empty((0, V))
    assert verify(drafts, None, p_target, np.random.default_rng(seed)) == verify(
        drafts, one_hot_rows, p_target, np.random.default_rng(seed)
    )


class ReadRows(ProbabilityRows):
    """ProbabilityRows that records which rows were read, in order."""

    def __init__(self, logits, params):
        super().__init__(logits, params)
        self.read: list[int] = []

    def __getitem__(self, i):
        self.read.append(i)
        return super().__getitem__(i)


@settings(max_examples=200, deadline=None)
@given(k=st.integers(0, 8), seed=st.integers(0, 2**32 - 1), top_p=st.sampled_from([1.0, 0.8]), lookup=st.booleans())
def test_target_rows_computed_as_read_decide_as_all_rows_and_only_up_to_the_decision(k, seed, top_p, lookup):
    """The loop passes ProbabilityRows: verify must decide as with every row computed, draw for draw, having computed
    only the rows up to the first rejection (or the bonus row) -- a 32-token batch's rows cost tens of ms."""
    rng = np.random.default_rng(seed)
    params = SamplingParams(0.7, top_p=top_p)
    logits = (rng.normal(size=(k + 1, V)) * 2).astype(np.float32)
    p_draft = np.stack([probabilities(row, params) for row in rng.normal(size=(k, V)) * 2]) if k else None
    drafts = [sample(row, rng) for row in p_draft] if k else []
    if lookup:  # one-hot drafts, as prompt lookup passes them
        p_draft = None
    rows = ReadRows(logits, params)
    n, nxt = verify(drafts, p_draft, rows, np.random.default_rng(seed))
    p_target = np.stack([probabilities(row, params) for row in logits])
    assert (n, nxt) == verify(drafts, p_draft, p_target, np.random.default_rng(seed))
    assert rows.read == list(range(n + 1))  # each row up to the decision, once
    assert all(np.array_equal(rows[i], p_target[i]) for i in range(k + 1))


@settings(max_examples=100, deadline=None)
@given(k=st.integers(0, 5), seed=st.integers(0, 2**32 - 1))
def test_greedy_on_logits_decides_as_the_exact_rule_on_greedy_probabilities(k, seed):
    """The shortcut on raw logits against the acceptance rule itself, fed temperature 0's one-hot rows."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(k + 1, V)).astype(np.float32)
    p_target = np.stack([probabilities(row, SamplingParams()) for row in logits])
    # Drafts that follow the argmax for a while, then may stray: both outcomes get exercised.
    drafts = [int(row.argmax()) if rng.random() < 0.7 else int(rng.integers(V)) for row in logits[:k]]
    assert verify_greedy(drafts, logits) == verify(drafts, None, p_target, rng)


def test_residual_of_identical_rows_falls_back_to_target():
    p = np.array([0.5, 0.5, 0.0])
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, nxt = verify([0], p[None], np.stack([p, p]), rng)
        assert n == 1  # p_target >= p_draft always accepts
    assert nxt in (0, 1)


def test_greedy_accepts_exactly_the_argmax_prefix():
    p_target = np.stack([np.eye(V)[t] * 0.6 + 0.4 / V for t in (3, 5, 7, 9)])
    assert verify_greedy([3, 5, 7], p_target) == (3, 9)
    assert verify_greedy([3, 6, 7], p_target) == (1, 5)
    assert verify_greedy([4, 5, 7], p_target) == (0, 3)
    assert verify_greedy([], p_target[:1]) == (0, 3)


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError):
        verify([1, 2], np.ones((2, V)) / V, np.ones((2, V)) / V, np.random.default_rng(0))
