"""Logits -> probabilities: one transform, shared by the draft and the target.

Exactness needs p_draft and p_target to come from the same transform; greedy (temperature 0) is the one-hot
at the argmax, so the same acceptance code serves both.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specchat.errors import InvalidInputError

# top-p first sorts only the tokens above this probability, and the whole vocabulary only when they do not
# hold the requested mass: a full sort of 151936 logits costs ~10 ms per position.
_TOP_P_FLOOR = 1e-5
# sample() searches its CDF in blocks of this many tokens (sqrt of a 151936-token vocabulary, about).
_SAMPLE_BLOCK = 512


def check_range(name: str, value: object, low: float, high: float = math.inf, whole: bool = False) -> None:
    """Raise InvalidInputError, naming the setting and its allowed range, unless value is a finite number (a whole one
    if `whole`) from low to high."""
    kind = numbers.Integral if whole else numbers.Real
    ok = isinstance(value, kind) and not isinstance(value, bool)
    # A whole number needs no finiteness test (math.isfinite would overflow on a huge int); nan fails every comparison.
    ok = ok and (whole or math.isfinite(value)) and low <= value <= high
    if not ok:
        what = "a whole number" if whole else "a finite number"
        span = f"of at least {low}" if high == math.inf else f"in [{low}, {high}]"
        raise InvalidInputError(f"{name} must be {what} {span}, not {value!r}")


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    min_p: float = 0.0  # 0.0: off

    @property
    def greedy(self) -> bool:
        # The transform runs in float32: a temperature that rounds to 0 there is greedy, the limit it tends to.
        return bool(np.float32(self.temperature) == 0)

    def __post_init__(self) -> None:
        check_range("temperature", self.temperature, 0)
        check_range("top_k", self.top_k, 0, whole=True)
        check_range("top_p", self.top_p, 0, 1)  # 0: the most likely token only, as OpenAI's API takes it
        check_range("min_p", self.min_p, 0, 1)


def one_hot(tokens: Sequence[int], n_vocab: int) -> np.ndarray:
    """(len(tokens), n_vocab) rows, each all zeros but a one at its token: one allocation for a whole draft."""
    rows = np.zeros((len(tokens), n_vocab), dtype=np.float32)
    rows[np.arange(len(tokens)), tokens] = 1.0
    return rows


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """float32 probabilities over the vocabulary for one position."""
    if params.greedy:
        return one_hot([int(np.argmax(logits))], logits.shape[-1])[0]
    p = logits.astype(np.float32)
    # The maximum is taken away before dividing: logits over a tiny temperature would overflow to inf, and inf - inf
    # is nan; this way the top token's exponent is exactly 0 and the others at most 0 (-inf is fine: exp gives 0).
    p -= p.max()
    with np.errstate(over="ignore"):
        p /= np.float32(params.temperature)
    np.exp(p, out=p)  # in place: this runs for every row of every verify step
    p /= p.sum(dtype=np.float64)
    keep = _support(p, params)
    if keep is not None:
        mask = np.zeros_like(p)
        mask[keep] = p[keep]
        p = mask / mask.sum(dtype=np.float64)
    return p


class ProbabilityRows(Sequence[np.ndarray]):
    """probabilities() of each row of (n, V) logits, computed when first read: verification reads the rows only up
    to the first rejection, and each costs 0.3-0.8 ms in the loop (a row of 151936 floats). Computing and stacking all
    of a 32-token batch's rows took 5.5% of auto mode's time on a code edit at temperature 0.7 (two Zen 4 cores)."""

    def __init__(self, logits: np.ndarray, params: SamplingParams):
        """logits: (n, V), which must stay unchanged while rows are read (llama.cpp's buffer until its next decode)."""
        self._logits, self._params = logits, params

    def __len__(self) -> int:
        return len(self._logits)

    def __getitem__(self, i: int) -> np.ndarray:  # rows only, each computed on every read: verify() reads each once
        return probabilities(self._logits[i], self._params)


def _support(p: np.ndarray, params: SamplingParams) -> np.ndarray | None:
    """Indices that survive top-k, top-p and min-p, or None when all do."""
    keep = None
    if params.top_k and params.top_k < p.size:
        keep = np.argpartition(p, -params.top_k)[-params.top_k :]
    if params.top_p < 1.0:
        pool = keep
        if pool is None:
            pool = np.flatnonzero(p >= _TOP_P_FLOOR)
            if p[pool].sum(dtype=np.float64) < params.top_p:
                pool = np.arange(p.size)
        order = pool[np.argsort(-p[pool], kind="stable")]
        mass = np.cumsum(p[order], dtype=np.float64) / (p[keep].sum(dtype=np.float64) if keep is not None else 1.0)
        # Keep the smallest prefix whose mass reaches top_p (the token that crosses it included).
        keep = order[: int(np.searchsorted(mass, params.top_p)) + 1]
    if params.min_p > 0.0:
        floor = params.min_p * p.max()
        keep = np.flatnonzero(p >= floor) if keep is None else keep[p[keep] >= floor]
    return keep


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from a (not necessarily normalized) non-negative vector, by its float64 CDF.

    The CDF is found block by block: first over the blocks' sums, then within the one block the draw falls in.
    A float64 cumsum over all 151936 entries took 0.7-1.9 ms, most of a sampled plain step's Python side.
    """
    starts = np.arange(0, p.size, _SAMPLE_BLOCK)
    block_cdf = np.cumsum(np.add.reduceat(p, starts, dtype=np.float64))
    u = rng.random() * block_cdf[-1]
    b = int(np.searchsorted(block_cdf, u, side="right"))  # u < the total: a block with mass
    block = p[starts[b] : starts[b] + _SAMPLE_BLOCK]
    within = np.cumsum(block, dtype=np.float64)
    i = int(np.searchsorted(within, u - (block_cdf[b - 1] if b else 0.0), side="right"))
    # The block's sum, taken again by its cumsum, may differ in the last bit: u must not spill past its tokens.
    i = min(i, int(np.flatnonzero(block)[-1]))
    return int(starts[b]) + i
