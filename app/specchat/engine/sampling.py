"""Logits -> probabilities: one transform, shared by the draft and the target.

Exactness needs p_draft and p_target to come from the same transform; greedy (temperature 0) is the one-hot
at the argmax, so the same acceptance code serves both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# top-p first sorts only the tokens above this probability, and the whole vocabulary only when they do not
# hold the requested mass: a full sort of 151936 logits costs ~10 ms per position.
_TOP_P_FLOOR = 1e-5
# sample() searches its CDF in blocks of this many tokens (sqrt of a 151936-token vocabulary, about).
_SAMPLE_BLOCK = 512


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    min_p: float = 0.0  # 0.0: off

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1 or not 0 <= self.min_p <= 1:
            raise ValueError(f"invalid sampling parameters: {self}")


def one_hot(tokens: Sequence[int], n_vocab: int) -> np.ndarray:
    """(len(tokens), n_vocab) rows, each all zeros but a one at its token: one allocation for a whole draft."""
    rows = np.zeros((len(tokens), n_vocab), dtype=np.float32)
    rows[np.arange(len(tokens)), tokens] = 1.0
    return rows


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """float32 probabilities over the vocabulary for one position."""
    if params.greedy:
        return one_hot([int(np.argmax(logits))], logits.shape[-1])[0]
    p = logits.astype(np.float32) / np.float32(params.temperature)
    p -= p.max()
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
